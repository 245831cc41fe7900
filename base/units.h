// Parsing of human-written quantities shared by every front end (flags,
// the JSON config, requests), so that "256M" means the same everywhere.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle {

// "1048576", "64K", "256M", "1G", "2T" (binary multiples; k/m/g/t too).
// Errors name `what` and the value: "--memory '12Q': expected a size like
// 1048576, 64K, 256M or 1G".
absl::StatusOr<uint64_t> ParseSize(absl::string_view what, absl::string_view value);

// RLIMIT_* for "as", "core", "cpu", "data", "fsize", "locks", "memlock",
// "msgqueue", "nice", "nofile", "nproc", "rss", "rtprio", "rttime",
// "sigpending", "stack"; nullopt for anything else. Shared by the CLI's
// --rlimit and the daemon's config.
std::optional<int> RlimitByName(absl::string_view name);

}  // namespace cubicle

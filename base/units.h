// Parsing of human-written quantities shared by every front end (flags,
// the JSON config, requests), so that "256M" means the same everywhere.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle {

// "1048576", "64K", "256M", "1G", "2T" (binary multiples; k/m/g/t too).
// Errors name `what` and the value: "--memory '12Q': expected a size like
// 1048576, 64K, 256M or 1G".
absl::StatusOr<uint64_t> ParseSize(absl::string_view what, absl::string_view value);

}  // namespace cubicle

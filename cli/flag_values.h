// Parsing of flag values shared by the subcommands. Each error names the
// flag and the value: "--memory '12Q': expected a size like 256M".
#pragma once

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/spec.h"

namespace cubicle::cli {

// "1048576", "64K", "256M", "1G" (binary multiples; k/m/g too).
absl::StatusOr<uint64_t> ParseSize(absl::string_view flag, absl::string_view value);

// Seconds, fractional allowed ("2", "0.5"); must be positive and finite.
absl::StatusOr<absl::Duration> ParseSeconds(absl::string_view flag, absl::string_view value);

// A decimal id in [0, 2^32-2].
absl::StatusOr<uint32_t> ParseId(absl::string_view flag, absl::string_view value);

// "nofile=256", "nofile=256:512", "core=0", "as=unlimited".
absl::StatusOr<runtime::RlimitSpec> ParseRlimit(absl::string_view flag, absl::string_view value);

}  // namespace cubicle::cli

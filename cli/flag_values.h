// Parsing of flag values shared by the subcommands. Each error names the
// flag and the value: "--memory '12Q': expected a size like 256M".
#pragma once

#include <cstdint>
#include <optional>
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

// "8:0=1048576": a block device (major:minor) and a value, for the
// --io-* flags. Sizes take the suffixes ParseSize does.
struct DeviceValue {
  uint32_t major = 0;
  uint32_t minor = 0;
  uint64_t value = 0;
};
absl::StatusOr<DeviceValue> ParseDeviceValue(absl::string_view flag, absl::string_view value);

// A size, or "unlimited" (nullopt).
absl::StatusOr<std::optional<uint64_t>> ParseLimitSize(absl::string_view flag, absl::string_view value);

// A positive count, or "unlimited" (nullopt).
absl::StatusOr<std::optional<uint64_t>> ParseLimitCount(absl::string_view flag, absl::string_view value);

// CPUs as a positive decimal ("0.5", "2").
absl::StatusOr<double> ParseCpus(absl::string_view flag, absl::string_view value);

}  // namespace cubicle::cli

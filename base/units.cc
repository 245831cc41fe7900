#include "base/units.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cubicle {

absl::StatusOr<uint64_t> ParseSize(absl::string_view what, absl::string_view value) {
  absl::string_view digits = value;
  uint64_t mult = 1;
  if (!digits.empty()) {
    switch (absl::ascii_tolower(static_cast<unsigned char>(digits.back()))) {
      case 'k': mult = 1ull << 10; break;
      case 'm': mult = 1ull << 20; break;
      case 'g': mult = 1ull << 30; break;
      case 't': mult = 1ull << 40; break;
      default: break;
    }
    if (mult != 1) digits.remove_suffix(1);
  }
  uint64_t n;
  if (digits.empty() || !absl::SimpleAtoi(digits, &n) || digits.front() == '-' || digits.front() == '+') {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", value, "': expected a size like 1048576, 64K, 256M or 1G"));
  }
  if (n > UINT64_MAX / mult) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", value, "': expected a size that fits in 64 bits"));
  }
  return n * mult;
}

}  // namespace cubicle

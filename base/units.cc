#include "base/units.h"

#include <sys/resource.h>

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

std::optional<int> RlimitByName(absl::string_view name) {
  struct Entry {
    const char* name;
    int resource;
  };
  static constexpr Entry kRlimits[] = {
      {"as", RLIMIT_AS},           {"core", RLIMIT_CORE},         {"cpu", RLIMIT_CPU},
      {"data", RLIMIT_DATA},       {"fsize", RLIMIT_FSIZE},       {"locks", RLIMIT_LOCKS},
      {"memlock", RLIMIT_MEMLOCK}, {"msgqueue", RLIMIT_MSGQUEUE}, {"nice", RLIMIT_NICE},
      {"nofile", RLIMIT_NOFILE},   {"nproc", RLIMIT_NPROC},       {"rss", RLIMIT_RSS},
      {"rtprio", RLIMIT_RTPRIO},   {"rttime", RLIMIT_RTTIME},     {"sigpending", RLIMIT_SIGPENDING},
      {"stack", RLIMIT_STACK},
  };
  for (const Entry& e : kRlimits) {
    if (name == e.name) return e.resource;
  }
  return std::nullopt;
}

}  // namespace cubicle

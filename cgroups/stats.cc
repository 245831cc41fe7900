#include "cgroups/stats.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cubicle::cgroups {

absl::StatusOr<uint64_t> KeyedValue(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(absl::StripAsciiWhitespace(line), absl::MaxSplits(' ', 1));
    if (kv.first != key) continue;
    uint64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), &value)) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": not a number: '", kv.second, "'"));
    }
    return value;
  }
  return absl::NotFoundError(absl::StrCat("no '", key, "' line"));
}

absl::StatusOr<uint64_t> SingleValue(absl::string_view text) {
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a number: '", absl::StripAsciiWhitespace(text), "'"));
  }
  return value;
}

}  // namespace cubicle::cgroups

#include "skills/r_version.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cubicle::skills {
namespace {

absl::Status NotAnRVersion(absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 64), "' is not an R version"));
}

bool MeetsOne(const VersionConstraint& c, const RVersion& installed) {
  absl::StatusOr<RVersion> wanted = ParseRVersion(c.version);
  if (!wanted.ok()) return false;
  const int order = CompareRVersions(installed, *wanted);
  if (c.op == "==") return order == 0;
  if (c.op == "!=") return order != 0;
  if (c.op == "<") return order < 0;
  if (c.op == "<=") return order <= 0;
  if (c.op == ">") return order > 0;
  if (c.op == ">=") return order >= 0;
  return false;  // "~=" and anything else has no meaning for R
}

}  // namespace

absl::StatusOr<RVersion> ParseRVersion(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  RVersion out;
  for (;;) {
    size_t n = 0;
    uint64_t number = 0;
    while (n < s.size() && absl::ascii_isdigit(s[n])) {
      const uint64_t digit = static_cast<uint64_t>(s[n] - '0');
      if (number > (std::numeric_limits<uint64_t>::max() - digit) / 10) return NotAnRVersion(text);
      number = number * 10 + digit;
      ++n;
    }
    if (n == 0) return NotAnRVersion(text);
    out.push_back(number);
    s.remove_prefix(n);
    if (s.empty()) return out;
    if (s[0] != '.' && s[0] != '-') return NotAnRVersion(text);
    s.remove_prefix(1);
  }
}

int CompareRVersions(const RVersion& a, const RVersion& b) {
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const uint64_t x = i < a.size() ? a[i] : 0;
    const uint64_t y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

bool SatisfiesR(const Requirement& requirement, absl::string_view installed) {
  if (requirement.constraints.empty()) return true;
  absl::StatusOr<RVersion> v = ParseRVersion(installed);
  if (!v.ok()) return false;
  return std::all_of(requirement.constraints.begin(), requirement.constraints.end(),
                     [&](const VersionConstraint& c) { return MeetsOne(c, *v); });
}

}  // namespace cubicle::skills

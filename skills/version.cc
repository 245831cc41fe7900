#include "skills/version.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cubicle::skills {
namespace {

// Semver sets no bound; a version this long is a mistake, and an error
// echoing it should not grow with it.
constexpr size_t kMaxVersionBytes = 128;

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// A semver number: digits, no leading zero, within 64 bits.
std::optional<uint64_t> Number(absl::string_view s) {
  if (!AllDigits(s) || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

// [0-9A-Za-z-]+, and a numeric one without a leading zero.
bool PrereleaseIdentifier(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '-') return false;
  }
  return !AllDigits(s) || Number(s).has_value();
}

std::strong_ordering CompareIdentifiers(const std::string& a, const std::string& b) {
  const bool a_numeric = AllDigits(a);
  const bool b_numeric = AllDigits(b);
  if (a_numeric && b_numeric) {
    // No leading zeros: the longer is the larger.
    if (a.size() != b.size()) return a.size() <=> b.size();
    return a.compare(b) <=> 0;
  }
  if (a_numeric != b_numeric) return a_numeric ? std::strong_ordering::less : std::strong_ordering::greater;
  return a.compare(b) <=> 0;
}

absl::Status NotAVersion(absl::string_view text, absl::string_view why = "") {
  return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 64), "' is not a semantic version",
                                                 why.empty() ? " (expected MAJOR.MINOR.PATCH, e.g. 1.2.0)" : why));
}

// "1", "1.2" or "1.2.3": the numbers given (1 to 3 of them).
absl::StatusOr<std::vector<uint64_t>> PartialVersion(absl::string_view text, absl::string_view whole) {
  std::vector<uint64_t> numbers;
  for (absl::string_view part : absl::StrSplit(text, '.')) {
    std::optional<uint64_t> n = Number(part);
    if (!n.has_value() || numbers.size() == 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", whole.substr(0, 64), "' is not a version selector (expected 1.2.0, 1.2, 1, ^1.2 or ~1.2)"));
    }
    numbers.push_back(*n);
  }
  return numbers;
}

}  // namespace

std::string Version::ToString() const {
  std::string s = absl::StrCat(major, ".", minor, ".", patch);
  if (!prerelease.empty()) absl::StrAppend(&s, "-", absl::StrJoin(prerelease, "."));
  return s;
}

std::strong_ordering operator<=>(const Version& a, const Version& b) {
  if (auto c = a.major <=> b.major; c != 0) return c;
  if (auto c = a.minor <=> b.minor; c != 0) return c;
  if (auto c = a.patch <=> b.patch; c != 0) return c;
  // A release is above its prereleases.
  if (a.prerelease.empty() && b.prerelease.empty()) return std::strong_ordering::equal;
  if (a.prerelease.empty()) return std::strong_ordering::greater;
  if (b.prerelease.empty()) return std::strong_ordering::less;
  for (size_t i = 0; i < a.prerelease.size() && i < b.prerelease.size(); ++i) {
    if (auto c = CompareIdentifiers(a.prerelease[i], b.prerelease[i]); c != 0) return c;
  }
  return a.prerelease.size() <=> b.prerelease.size();
}

absl::StatusOr<Version> ParseVersion(absl::string_view text) {
  if (text.size() > kMaxVersionBytes) {
    return NotAVersion(text, absl::StrCat(" (longer than ", kMaxVersionBytes, " bytes)"));
  }
  if (text.find('+') != absl::string_view::npos) {
    return NotAVersion(text, " (build metadata, '+...', is not accepted: it does not order versions)");
  }
  absl::string_view core = text;
  absl::string_view pre;
  if (size_t dash = text.find('-'); dash != absl::string_view::npos) {
    core = text.substr(0, dash);
    pre = text.substr(dash + 1);
  }
  std::vector<absl::string_view> parts = absl::StrSplit(core, '.');
  if (parts.size() != 3) return NotAVersion(text);
  Version v;
  uint64_t* fields[] = {&v.major, &v.minor, &v.patch};
  for (size_t i = 0; i < 3; ++i) {
    std::optional<uint64_t> n = Number(parts[i]);
    if (!n.has_value()) return NotAVersion(text, " (each of MAJOR.MINOR.PATCH is a number without leading zeros)");
    *fields[i] = *n;
  }
  if (core.size() != text.size()) {
    for (absl::string_view id : absl::StrSplit(pre, '.')) {
      if (!PrereleaseIdentifier(id)) {
        return NotAVersion(text, " (a prerelease is dot-separated [0-9A-Za-z-] identifiers, numbers without "
                                 "leading zeros, e.g. 1.2.0-rc.1)");
      }
      v.prerelease.emplace_back(id);
    }
  }
  return v;
}

absl::StatusOr<VersionSelector> VersionSelector::Parse(absl::string_view text) {
  VersionSelector s;
  s.text_ = std::string(text);
  if (text.empty()) return s;
  const char op = text[0] == '^' || text[0] == '~' ? text[0] : '\0';
  absl::string_view rest = op != '\0' ? text.substr(1) : text;
  if (op == '\0' && (text.find('-') != absl::string_view::npos || std::count(text.begin(), text.end(), '.') == 2)) {
    absl::StatusOr<Version> exact = ParseVersion(text);
    if (!exact.ok()) return exact.status();
    s.kind_ = Kind::kExact;
    s.low_ = *std::move(exact);
    return s;
  }
  absl::StatusOr<std::vector<uint64_t>> n = PartialVersion(rest, text);
  if (!n.ok()) return n.status();
  s.kind_ = Kind::kRange;
  s.low_ = Version{(*n)[0], n->size() > 1 ? (*n)[1] : 0, n->size() > 2 ? (*n)[2] : 0, {}};
  Version high = s.low_;
  high.patch = 0;
  // Which number the range may not pass: "~" and a plain prefix keep what
  // was given but the last (major alone: the major); "^" keeps the first
  // non-zero one given.
  size_t keep = op == '^' ? 0 : (n->size() == 1 ? 0 : 1);
  if (op == '^') {
    while (keep + 1 < n->size() && (*n)[keep] == 0) ++keep;
  }
  if (op == '\0') keep = n->size() - 1;
  switch (keep) {
    case 0:
      high = Version{high.major + 1, 0, 0, {}};
      break;
    case 1:
      high = Version{high.major, high.minor + 1, 0, {}};
      break;
    default:
      high = Version{s.low_.major, s.low_.minor, s.low_.patch + 1, {}};
      break;
  }
  s.high_ = high;
  return s;
}

bool VersionSelector::Matches(const Version& v) const {
  switch (kind_) {
    case Kind::kHighest:
      return !v.is_prerelease();
    case Kind::kExact:
      return v == low_;
    case Kind::kRange:
      return !v.is_prerelease() && v >= low_ && (!high_.has_value() || v < *high_);
  }
  return false;
}

}  // namespace cubicle::skills

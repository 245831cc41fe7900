#include "skills/package_version.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "skills/r_version.h"

namespace cubicle::skills {
namespace {

constexpr size_t kMaxVersionBytes = 128;

// A reader of one lower-cased version text.
class Reader {
 public:
  explicit Reader(absl::string_view s) : s_(s) {}
  bool done() const { return s_.empty(); }
  bool Consume(absl::string_view prefix) { return absl::ConsumePrefix(&s_, prefix); }
  // A separator PEP 440 lets stand between parts: '.', '-' or '_'.
  bool Separator() { return Consume(".") || Consume("-") || Consume("_"); }
  std::optional<uint64_t> Number() {
    size_t n = 0;
    while (n < s_.size() && absl::ascii_isdigit(s_[n])) ++n;
    uint64_t value = 0;
    if (n == 0 || n > 19 || !absl::SimpleAtoi(s_.substr(0, n), &value)) return std::nullopt;
    s_.remove_prefix(n);
    return value;
  }
  // A number after an optional separator; 0 when there is none (PEP 440:
  // "1.0a" is "1.0a0", "1.0.post" is "1.0.post0").
  std::optional<uint64_t> ImplicitNumber() {
    Reader ahead = *this;
    ahead.Separator();
    if (ahead.done() || !absl::ascii_isdigit(ahead.s_[0])) return 0;
    *this = ahead;
    return Number();
  }
  // One of `words`, after an optional separator; the index, or -1.
  int Word(std::initializer_list<absl::string_view> words) {
    Reader ahead = *this;
    ahead.Separator();
    int i = 0;
    for (absl::string_view w : words) {
      if (ahead.Consume(w)) {
        *this = ahead;
        return i;
      }
      ++i;
    }
    return -1;
  }
  absl::string_view rest() const { return s_; }
  void SkipRest() { s_ = {}; }

 private:
  absl::string_view s_;
};

bool ReadPre(Reader& r, PackageVersion* v) {
  // Longer spellings first: "rc" before "c", "alpha" before "a".
  static const std::pair<absl::string_view, int> kPre[] = {{"alpha", 0}, {"a", 0},  {"beta", 1},   {"b", 1},
                                                           {"preview", 2}, {"pre", 2}, {"rc", 2}, {"c", 2}};
  for (const auto& [word, kind] : kPre) {
    if (r.Word({word}) == 0) {
      std::optional<uint64_t> n = r.ImplicitNumber();
      if (!n) return false;
      v->pre = std::make_pair(kind, *n);
      return true;
    }
  }
  return true;
}

bool ReadPost(Reader& r, PackageVersion* v) {
  Reader ahead = r;
  if (ahead.Consume("-") && !ahead.done() && absl::ascii_isdigit(ahead.rest()[0])) {  // "1.0-1"
    v->post = ahead.Number();
    r = ahead;
    return v->post.has_value();
  }
  if (r.Word({"post", "rev", "r"}) >= 0) {
    v->post = r.ImplicitNumber();
    return v->post.has_value();
  }
  return true;
}

bool ReadLocal(Reader& r, PackageVersion* v) {
  if (!r.Consume("+")) return true;
  std::string part;
  for (char c : r.rest()) {
    if (absl::ascii_isalnum(c)) {
      part.push_back(c);
      continue;
    }
    if ((c != '.' && c != '-' && c != '_') || part.empty()) return false;
    v->local.push_back(std::move(part));
    part.clear();
  }
  if (part.empty()) return false;
  v->local.push_back(std::move(part));
  r.SkipRest();
  return true;
}

// PEP 440's sort keys for the parts after the release.
int CompareOptional(const std::optional<uint64_t>& a, const std::optional<uint64_t>& b, bool absent_is_low) {
  if (a.has_value() != b.has_value()) return a.has_value() == absent_is_low ? 1 : -1;
  if (!a.has_value() || *a == *b) return 0;
  return *a < *b ? -1 : 1;
}

int CompareLocal(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    uint64_t x = 0, y = 0;
    const bool xn = absl::SimpleAtoi(a[i], &x) && absl::ascii_isdigit(a[i][0]);
    const bool yn = absl::SimpleAtoi(b[i], &y) && absl::ascii_isdigit(b[i][0]);
    if (xn != yn) return xn ? 1 : -1;  // a number sorts above a word
    if (xn && x != y) return x < y ? -1 : 1;
    if (!xn && a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  }
  if (a.size() == b.size()) return 0;
  return a.size() < b.size() ? -1 : 1;
}

// The release, zero-padded to at least `n` numbers.
std::vector<uint64_t> Padded(const std::vector<uint64_t>& release, size_t n) {
  std::vector<uint64_t> out = release;
  if (out.size() < n) out.resize(n, 0);
  return out;
}

bool SameBase(const PackageVersion& a, const PackageVersion& b) {
  const size_t n = std::max(a.release.size(), b.release.size());
  return a.epoch == b.epoch && Padded(a.release, n) == Padded(b.release, n);
}

// ==V.* : the epoch, and the release begins with V's numbers.
bool MatchesPrefix(const PackageVersion& v, const PackageVersion& prefix) {
  if (v.epoch != prefix.epoch) return false;
  const std::vector<uint64_t> padded = Padded(v.release, prefix.release.size());
  return std::equal(prefix.release.begin(), prefix.release.end(), padded.begin());
}

bool MeetsOne(const VersionConstraint& c, const PackageVersion& v) {
  const bool wildcard = absl::EndsWith(c.version, ".*");
  absl::StatusOr<PackageVersion> spec =
      ParsePackageVersion(wildcard ? absl::string_view(c.version).substr(0, c.version.size() - 2) : c.version);
  if (!spec.ok()) return false;
  if (c.op == "==" || c.op == "!=") {
    bool equal = wildcard ? MatchesPrefix(v, *spec) : ComparePackageVersions(v, *spec, !spec->local.empty()) == 0;
    return (c.op == "==") == equal;
  }
  const int cmp = ComparePackageVersions(v, *spec, /*local=*/false);
  if (c.op == "<=") return cmp <= 0;
  if (c.op == ">=") return cmp >= 0;
  if (c.op == "<") {
    // "<2" does not admit 2.0rc1, unless it names a prerelease itself.
    return cmp < 0 && !(v.is_prerelease() && !spec->is_prerelease() && SameBase(v, *spec));
  }
  if (c.op == ">") {
    // ">1.0" admits neither 1.0.post1 (unless it names a post-release) nor 1.0+local.
    if (cmp <= 0) return false;
    if (v.is_postrelease() && !spec->is_postrelease() && SameBase(v, *spec)) return false;
    return !(!v.local.empty() && SameBase(v, *spec));
  }
  if (c.op == "~=") {
    // ~=1.4.2 is >=1.4.2, ==1.4.*.
    PackageVersion prefix;
    prefix.epoch = spec->epoch;
    prefix.release.assign(spec->release.begin(), spec->release.end() - 1);
    return cmp >= 0 && MatchesPrefix(v, prefix);
  }
  return false;
}

// Where a constraint is said in a message: lower bounds, then pins, then
// upper bounds.
int OperatorRank(const std::string& op) {
  static const char* kOrder[] = {">=", ">", "~=", "==", "!=", "<=", "<"};
  for (int i = 0; i < 7; ++i) {
    if (op == kOrder[i]) return i;
  }
  return 7;
}

}  // namespace

absl::StatusOr<PackageVersion> ParsePackageVersion(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 64), "' is not a PEP 440 version"));
  };
  if (lower.empty() || lower.size() > kMaxVersionBytes) return bad();
  Reader r(lower);
  r.Consume("v");
  PackageVersion v;
  std::optional<uint64_t> first = r.Number();
  if (!first) return bad();
  if (r.Consume("!")) {
    v.epoch = *first;
    first = r.Number();
    if (!first) return bad();
  }
  v.release.push_back(*first);
  for (;;) {
    Reader ahead = r;
    if (!ahead.Consume(".")) break;
    std::optional<uint64_t> n = ahead.Number();
    if (!n) break;
    v.release.push_back(*n);
    r = ahead;
  }
  if (!ReadPre(r, &v) || !ReadPost(r, &v)) return bad();
  if (r.Word({"dev"}) == 0) {
    v.dev = r.ImplicitNumber();
    if (!v.dev) return bad();
  }
  if (!ReadLocal(r, &v) || !r.done()) return bad();
  return v;
}

int ComparePackageVersions(const PackageVersion& a, const PackageVersion& b, bool local) {
  if (a.epoch != b.epoch) return a.epoch < b.epoch ? -1 : 1;
  const size_t n = std::max(a.release.size(), b.release.size());
  const std::vector<uint64_t> ra = Padded(a.release, n), rb = Padded(b.release, n);
  if (ra != rb) return ra < rb ? -1 : 1;
  // A dev release of the release itself ("1.0.dev1") comes before its
  // prereleases; a release without a prerelease after them.
  auto pre_key = [](const PackageVersion& v) -> std::pair<int, uint64_t> {
    if (v.pre) return *v.pre;
    if (!v.post && v.dev) return {-1, 0};
    return {3, 0};
  };
  if (pre_key(a) != pre_key(b)) return pre_key(a) < pre_key(b) ? -1 : 1;
  if (int c = CompareOptional(a.post, b.post, /*absent_is_low=*/true); c != 0) return c;
  if (int c = CompareOptional(a.dev, b.dev, /*absent_is_low=*/false); c != 0) return c;
  return local ? CompareLocal(a.local, b.local) : 0;
}

bool Satisfies(const Requirement& requirement, absl::string_view installed, PackageKind kind) {
  if (kind == PackageKind::kR) return SatisfiesR(requirement, installed);
  if (requirement.constraints.empty()) return true;
  absl::StatusOr<PackageVersion> v = ParsePackageVersion(installed);
  if (!v.ok()) return false;
  return std::all_of(requirement.constraints.begin(), requirement.constraints.end(),
                     [&](const VersionConstraint& c) { return MeetsOne(c, *v); });
}

std::string UnmetMessage(const Requirement& requirement, const std::optional<std::string>& installed,
                         PackageKind kind) {
  std::vector<VersionConstraint> shown = requirement.constraints;
  std::stable_sort(shown.begin(), shown.end(), [](const VersionConstraint& a, const VersionConstraint& b) {
    return OperatorRank(a.op) < OperatorRank(b.op);
  });
  std::vector<std::string> parts;
  if (!shown.empty()) {
    parts.push_back(absl::StrCat(
        "need ", absl::StrJoin(shown, ", ", [](std::string* out, const VersionConstraint& c) {
          absl::StrAppend(out, c.op, " ", c.version);
        })));
  }
  if (!installed.has_value()) {
    parts.push_back("not installed");
  } else if (kind == PackageKind::kR && !ParseRVersion(*installed).ok()) {
    parts.push_back(absl::StrCat("have '", installed->substr(0, 64), "', not an R version"));
  } else if (kind == PackageKind::kPython && !ParsePackageVersion(*installed).ok()) {
    parts.push_back(absl::StrCat("have '", installed->substr(0, 64), "', not a PEP 440 version"));
  } else {
    parts.push_back(absl::StrCat("have ", *installed));
  }
  return absl::StrCat("package ", requirement.name, " not available (", absl::StrJoin(parts, ", "), ")");
}

}  // namespace cubicle::skills

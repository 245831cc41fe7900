#include "skills/requirement.h"

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cubicle::skills {
namespace {

constexpr size_t kMaxRequirementBytes = 256;

absl::Status NotAConstraint(absl::string_view text, PackageKind kind) {
  if (kind == PackageKind::kR) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text.substr(0, 64),
        "' is not an R package constraint (expected an R package name, alone or followed by ==, !=, <, <=, > or >= "
        "and a version of numbers joined by '.' or '-', several joined by ',': 'jsonlite', 'jsonlite>=1.8', "
        "'data.table>=1.14.8-1')"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text.substr(0, 64),
                   "' is not a version constraint (expected a package name, alone or followed by ==, !=, <, <=, "
                   ">, >= or ~= and a version, several joined by ',': 'numpy', 'numpy>=1.10', 'pandas>=1.5,<3')"));
}

bool NameChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.'; }

}  // namespace

// PEP 508: [A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?, normalized (PEP 503).
std::optional<std::string> NormalizePackageName(absl::string_view name) {
  if (name.empty() || !absl::ascii_isalnum(name.front()) || !absl::ascii_isalnum(name.back())) return std::nullopt;
  std::string out;
  for (char c : name) {
    if (!NameChar(c)) return std::nullopt;
    if (absl::ascii_isalnum(c)) {
      out.push_back(absl::ascii_tolower(c));
    } else if (out.back() != '-') {
      out.push_back('-');
    }
  }
  return out;
}

namespace {

// Consumes digits at the front of `s`; whether there were any.
bool Digits(absl::string_view& s) {
  size_t n = 0;
  while (n < s.size() && absl::ascii_isdigit(s[n])) ++n;
  s.remove_prefix(n);
  return n > 0;
}

// A PEP 440 public version, the forms a constraint needs: a release
// N(.N)*, then optionally aN / bN / rcN, .postN, .devN — or, where
// `wildcard` allows, a release followed by ".*". `release_parts` receives
// how many numbers the release has.
bool VersionText(absl::string_view s, bool wildcard, size_t* release_parts) {
  *release_parts = 0;
  for (;;) {
    if (!Digits(s)) return false;
    ++*release_parts;
    if (s.size() < 2 || s[0] != '.' || !absl::ascii_isdigit(s[1])) break;
    s.remove_prefix(1);
  }
  if (s == ".*") return wildcard;
  for (absl::string_view pre : {"rc", "a", "b"}) {
    if (absl::ConsumePrefix(&s, pre)) {
      if (!Digits(s)) return false;
      break;
    }
  }
  if (absl::ConsumePrefix(&s, ".post") && !Digits(s)) return false;
  if (absl::ConsumePrefix(&s, ".dev") && !Digits(s)) return false;
  return s.empty();
}

// R's version text (R's valid_numeric_version): numbers joined by '.' or
// '-'. A single number is allowed here, as numeric_version allows it.
bool RVersionText(absl::string_view s) {
  for (;;) {
    if (!Digits(s)) return false;
    if (s.empty()) return true;
    if (s[0] != '.' && s[0] != '-') return false;
    s.remove_prefix(1);
  }
}

// The name at the front of `rest` (consumed), as `kind` reads names.
std::optional<std::string> ReadName(absl::string_view& rest, PackageKind kind) {
  size_t end = 0;
  while (end < rest.size() && NameChar(rest[end])) ++end;
  absl::string_view name = rest.substr(0, end);
  rest.remove_prefix(end);
  if (kind == PackageKind::kR) {
    if (!IsRPackageName(name)) return std::nullopt;
    return std::string(name);
  }
  return NormalizePackageName(name);
}

}  // namespace

bool IsRPackageName(absl::string_view name) {
  if (name.size() < 2 || !absl::ascii_isalpha(name.front()) || name.back() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isalnum(c) || c == '.'; });
}

std::string Requirement::Canonical() const {
  std::string out = name;
  std::vector<std::string> parts;
  for (const VersionConstraint& c : constraints) parts.push_back(c.op + c.version);
  if (!parts.empty()) absl::StrAppend(&out, absl::StrJoin(parts, ","));
  return out;
}

absl::StatusOr<Requirement> ParseRequirement(absl::string_view text, PackageKind kind) {
  if (text.size() > kMaxRequirementBytes) {
    return absl::InvalidArgumentError(absl::StrCat("is ", text.size(), " bytes, over ", kMaxRequirementBytes));
  }
  if (text.find(';') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text.substr(0, 64), "': environment markers (';') are not supported"));
  }
  if (text.find('[') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 64), "': extras ('[...]') are not supported"));
  }
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  std::optional<std::string> name = ReadName(rest, kind);
  if (!name.has_value()) return NotAConstraint(text, kind);
  Requirement r;
  r.name = *std::move(name);
  rest = absl::StripAsciiWhitespace(rest);
  if (rest.empty()) return r;
  for (absl::string_view spec : absl::StrSplit(rest, ',')) {
    spec = absl::StripAsciiWhitespace(spec);
    if (absl::StartsWith(spec, "===")) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text.substr(0, 64), "': arbitrary equality ('===') is not supported"));
    }
    if (kind == PackageKind::kR && absl::StartsWith(spec, "~=")) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text.substr(0, 64), "': '~=' is Python's; R's versions take ==, !=, <, <=, > and >="));
    }
    VersionConstraint c;
    // Two-character operators first: "<=" is not "<" and "=...".
    for (absl::string_view op : {"==", "!=", "<=", ">=", "~=", "<", ">"}) {
      if (absl::ConsumePrefix(&spec, op)) {
        c.op = std::string(op);
        break;
      }
    }
    if (c.op.empty()) return NotAConstraint(text, kind);
    if (kind == PackageKind::kR) {
      c.version = std::string(absl::StripAsciiWhitespace(spec));
      if (!RVersionText(c.version)) return NotAConstraint(text, kind);
      r.constraints.push_back(std::move(c));
      continue;
    }
    c.version = absl::AsciiStrToLower(absl::StripAsciiWhitespace(spec));
    size_t release_parts = 0;
    const bool wildcard = c.op == "==" || c.op == "!=";
    if (!VersionText(c.version, wildcard, &release_parts)) return NotAConstraint(text, kind);
    if (c.op == "~=" && release_parts < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text.substr(0, 64), "': '~=' needs a version of at least two numbers ('~=1.4')"));
    }
    r.constraints.push_back(std::move(c));
  }
  auto text_of = [](const VersionConstraint& c) { return c.op + c.version; };
  std::sort(r.constraints.begin(), r.constraints.end(),
            [&](const VersionConstraint& a, const VersionConstraint& b) { return text_of(a) < text_of(b); });
  r.constraints.erase(std::unique(r.constraints.begin(), r.constraints.end()), r.constraints.end());
  return r;
}

}  // namespace cubicle::skills

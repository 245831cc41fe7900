// A skill's version (docs/skills.md, "Versions"): a semantic version,
// MAJOR.MINOR.PATCH with an optional -PRERELEASE (semver.org 2.0.0; build
// metadata, "+...", is refused rather than ignored, since two versions
// differing only there would have the same precedence), and the selectors
// a skill.call names one by.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::skills {

struct Version {
  uint64_t major = 0;
  uint64_t minor = 0;
  uint64_t patch = 0;
  // The dot-separated identifiers after '-'; empty for a release.
  std::vector<std::string> prerelease;

  bool is_prerelease() const { return !prerelease.empty(); }
  // "1.2.0", "2.0.0-rc.1": the text it was read from.
  std::string ToString() const;

  // Semver precedence: by major, minor, patch; a prerelease below its
  // release; prerelease identifiers compared in turn, numeric ones as
  // numbers and below alphanumeric ones, a shorter list below a longer one
  // it begins.
  friend std::strong_ordering operator<=>(const Version& a, const Version& b);
  friend bool operator==(const Version& a, const Version& b) { return (a <=> b) == 0; }
};

// "1.2.0", "0.1.0-alpha.2". InvalidArgument saying what is wrong otherwise
// ("'1.2' is not a semantic version (expected MAJOR.MINOR.PATCH, e.g.
// 1.2.0)"). Numbers have no leading zeros and fit 64 bits; the whole is
// at most 128 bytes.
absl::StatusOr<Version> ParseVersion(absl::string_view text);

// Which version a call asks for (the part after '@' in "word-stats@^1.2"):
//   ""              the highest release (never a prerelease)
//   "1.2.0"         exactly that version, a prerelease too ("1.2.0-rc.1")
//   "1.2", "1"      the highest release beginning so (>= 1.2.0, < 1.3.0)
//   "^1.2.3", "^1.2" the highest compatible release: < 2.0.0; for 0.y,
//                   < 0.(y+1).0; for 0.0.z, 0.0.z exactly
//   "~1.2.3", "~1.2" the highest release with the same minor (< 1.3.0)
// Only an exact version selects a prerelease.
class VersionSelector {
 public:
  static absl::StatusOr<VersionSelector> Parse(absl::string_view text);

  bool Matches(const Version& v) const;
  // What it was read from ("" for the highest release).
  const std::string& text() const { return text_; }

 private:
  enum class Kind { kHighest, kExact, kRange };
  Kind kind_ = Kind::kHighest;
  Version low_;                 // kExact: the version; kRange: the lowest, included
  std::optional<Version> high_;  // kRange: the first version excluded
  std::string text_;
};

}  // namespace cubicle::skills

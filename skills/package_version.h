// Whether an installed package satisfies a skill's requirement
// (docs/skills.md, "requires"): the version a package's metadata states,
// read as PEP 440 reads it, and the constraints of skills/requirement.h
// applied to it as pip's `packaging` does for an installed package
// (prereleases count: what is installed is what runs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "skills/requirement.h"

namespace cubicle::skills {

// A PEP 440 version: [N!]N(.N)*[{a|b|rc}N][.postN][.devN][+local], read
// leniently as PEP 440's normalization allows ("1.0-RC1", "v2", "1.0.post",
// "1.0-1", "1.0_alpha.2").
struct PackageVersion {
  uint64_t epoch = 0;
  std::vector<uint64_t> release;
  // Pre-release: 0 a, 1 b, 2 rc, and its number.
  std::optional<std::pair<int, uint64_t>> pre;
  std::optional<uint64_t> post;
  std::optional<uint64_t> dev;
  // The local label's parts, lower case ("ubuntu", "1").
  std::vector<std::string> local;

  bool is_prerelease() const { return pre.has_value() || dev.has_value(); }
  bool is_postrelease() const { return post.has_value(); }
};

// InvalidArgument for text that is not a PEP 440 version.
absl::StatusOr<PackageVersion> ParsePackageVersion(absl::string_view text);

// PEP 440's order: <0 when a comes before b, 0 when equal ("1.0" ==
// "1.0.0"), >0 after. Local labels count only when `local` is set.
int ComparePackageVersions(const PackageVersion& a, const PackageVersion& b, bool local = true);

// Whether `installed` meets every constraint of `requirement`. A version
// that is not PEP 440 meets no constraint (and any requirement without one).
// For R (`kind`), R's versions and order (skills/r_version.h SatisfiesR).
bool Satisfies(const Requirement& requirement, absl::string_view installed, PackageKind kind = PackageKind::kPython);

// Why `requirement` is not met by `installed` (nullopt: not installed):
// "package numpy not available (need >= 1.10, < 2, have 1.9)", "package
// numpy not available (need >= 1.10, not installed)", "package numpy not
// available (not installed)". Lower bounds are said before upper ones. An
// installed version that does not read as `kind`'s is said to be so.
std::string UnmetMessage(const Requirement& requirement, const std::optional<std::string>& installed,
                         PackageKind kind = PackageKind::kPython);

}  // namespace cubicle::skills

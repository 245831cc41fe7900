// Whether an installed R package satisfies an R skill's requirement
// (docs/skills.md, "R"): the version its DESCRIPTION states, read and
// ordered as R's package_version reads and orders it, and the constraints
// of skills/requirement.h (PackageKind::kR) applied to it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "skills/requirement.h"

namespace cubicle::skills {

// Its numbers, in order: "1.14.8-1" is {1, 14, 8, 1}. R's separators '.'
// and '-' weigh the same.
using RVersion = std::vector<uint64_t>;

// InvalidArgument for text that R's numeric_version refuses: anything but
// numbers joined by single '.' or '-' (surrounding spaces allowed, as R
// strips them).
absl::StatusOr<RVersion> ParseRVersion(absl::string_view text);

// R's order: number by number, a missing number counting as 0 ("1.0" ==
// "1.0.0", "1.10.0" > "1.9.2"). <0 when a comes before b, 0 when equal,
// >0 after.
int CompareRVersions(const RVersion& a, const RVersion& b);

// Whether `installed` meets every constraint of `requirement`. A version
// that is not R's meets no constraint (and any requirement without one).
bool SatisfiesR(const Requirement& requirement, absl::string_view installed);

}  // namespace cubicle::skills

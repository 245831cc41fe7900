// A skill's requirements (docs/skills.md, "requires"): the packages its
// script needs, each "numpy", "numpy>=1.10" or "pandas>=1.5,<3" — a
// Python-style (PEP 440/508) name and version constraints — or, for an R
// skill, an R package and R versions ("data.table>=1.14.8-1"). Read,
// checked and kept in a canonical form, which the skill's id covers;
// whether an environment satisfies them is not decided here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::skills {

// Whose packages a requirement names, which decides how names and
// versions read and compare: Python's (PEP 503 names, PEP 440 versions)
// or R's (names as written, case and dots kept; package_version order).
enum class PackageKind { kPython, kR };

struct VersionConstraint {
  std::string op;  // "==", "!=", "<", "<=", ">", ">=", "~=" (Python only)
  // Python: "1.10", "2.0rc1", "1.4.*" (after == and != only); lower case.
  // R: numbers joined by '.' or '-', "1.14.8-1", "99", as written.
  std::string version;
  bool operator==(const VersionConstraint&) const = default;
};

struct Requirement {
  // Python: normalized as PEP 503 does: lower case, each run of '-', '_'
  // and '.' one '-' ("Py_YAML" and "py-yaml" are one package). R: as
  // written, since R's own names are case-sensitive ("Matrix", "data.table").
  std::string name;
  // Sorted by their canonical text; no two alike. Empty: any version.
  std::vector<VersionConstraint> constraints;

  // "numpy", "pandas<3,>=1.5": the name, then each constraint (op and
  // version, no spaces) joined by ',' in sorted order.
  std::string Canonical() const;
  bool operator==(const Requirement&) const = default;
};

// "numpy" from "NumPy", "py-yaml" from "Py_YAML" (PEP 503); nullopt for a
// name that is not a PEP 508 name.
std::optional<std::string> NormalizePackageName(absl::string_view name);

// Whether `name` is an R package's name as R allows one: ASCII letters,
// digits and '.', at least two characters, starting with a letter and not
// ending in '.'.
bool IsRPackageName(absl::string_view name);

// One entry of "requires". Spaces around names, operators and commas are
// allowed. Extras ("pkg[x]"), environment markers ("; python_version...")
// and "===" are refused, saying so; anything else that does not read is
// InvalidArgument "'numpy>>1' is not a version constraint (...)". For R
// (`kind`), the name is an R package's and each constraint an operator
// other than "~=" and an R version (numbers joined by '.' or '-').
absl::StatusOr<Requirement> ParseRequirement(absl::string_view text, PackageKind kind = PackageKind::kPython);

}  // namespace cubicle::skills

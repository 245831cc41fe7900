// A skill's requirements (docs/skills.md, "requires"): the packages its
// script needs, each "numpy", "numpy>=1.10" or "pandas>=1.5,<3" — a
// Python-style (PEP 440/508) name and version constraints. Read, checked
// and kept in a canonical form, which the skill's id covers; whether an
// environment satisfies them is not decided here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::skills {

struct VersionConstraint {
  std::string op;       // "==", "!=", "<", "<=", ">", ">=", "~="
  std::string version;  // "1.10", "2.0rc1", "1.4.*" (after == and != only); lower case
  bool operator==(const VersionConstraint&) const = default;
};

struct Requirement {
  // Normalized as PEP 503 does: lower case, each run of '-', '_' and '.'
  // one '-' ("Py_YAML" and "py-yaml" are one package).
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

// One entry of "requires". Spaces around names, operators and commas are
// allowed. Extras ("pkg[x]"), environment markers ("; python_version...")
// and "===" are refused, saying so; anything else that does not read is
// InvalidArgument "'numpy>>1' is not a version constraint (...)".
absl::StatusOr<Requirement> ParseRequirement(absl::string_view text);

}  // namespace cubicle::skills

// A skill's manifest (docs/skills.md, "The manifest"): skill.yaml or
// skill.json in the skill's folder, read by base/json_reader.h's rules
// whichever the format — unknown keys, wrong types and bad values are
// InvalidArgument naming the field ("requires[1]: 'numpy>>1' is not a
// version constraint ..."). Only what the manifest says by itself is
// checked here; whether its profile exists and its limits fit that
// profile is the daemon's to say (rpc/skill_catalog.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "skills/requirement.h"
#include "skills/version.h"

namespace cubicle::skills {

// How the script is run: "python" (python3 -c SCRIPT, or the profile's
// warm interpreter), "shell" (/bin/sh -c SCRIPT) or "r" (Rscript, the
// script handed over as rpc/environment_catalog.h's SkillArgv says).
enum class Interpreter { kPython, kShell, kR };
absl::string_view InterpreterName(Interpreter interpreter);

// The limits a skill runs with by default: a request's "limits" keys
// (docs/protocol.md), never "unlimited". Whether they fit the profile is
// checked by the daemon, as for a request.
struct SkillLimits {
  std::optional<uint64_t> memory;       // bytes
  std::optional<uint64_t> memory_high;  // bytes
  std::optional<uint64_t> pids;
  std::optional<double> cpus;
  std::optional<uint32_t> cpu_weight;
  // `limits: auto` or `memory: auto`: the memory limit is sized from the
  // skill's past calls by the daemon (docs/skills.md, "Limits from
  // history"); `memory` is then unset.
  bool memory_auto = false;
  // `limits: auto` (the string): every limit the daemon can size from
  // history, the timeout too unless the manifest gives `timeout_ms`.
  bool all_auto = false;
  bool empty() const { return !memory && !memory_high && !pids && !cpus && !cpu_weight && !memory_auto; }
};

// A reference to a skill: "word-stats", "word-stats@1.2.0",
// "word-stats@^1.2" (docs/skills.md, "Calling a skill").
struct SkillReference {
  std::string name;
  VersionSelector selector;
  std::string text;  // as written
};
// InvalidArgument for one that does not read.
absl::StatusOr<SkillReference> ParseSkillReference(absl::string_view text);
// An environment a run names (docs/skills.md, "Environments"): "sci" (its
// highest revision) or "sci@3" (exactly revision 3).
struct EnvironmentRef {
  std::string name;
  std::optional<uint64_t> revision;
  std::string ToString() const;  // as it reads: "sci", "sci@3"
  bool operator==(const EnvironmentRef&) const = default;
};

// The name is a skill name's form; the revision a positive whole number
// without leading zeros. InvalidArgument saying what is wrong otherwise
// ("'sci@x': the revision after '@' must be a positive whole number, as
// in sci@3").
absl::StatusOr<EnvironmentRef> ParseEnvironmentRef(absl::string_view text);

struct Manifest {
  std::string name;
  Version version;
  std::string description;
  std::string entry;  // the script, relative to the skill's folder, as written
  Interpreter interpreter = Interpreter::kPython;
  std::string profile;  // as written, else "python", "shell" or "r" by the interpreter
  std::vector<Requirement> requirements;  // "requires", in the order written
  SkillLimits limits;
  std::vector<std::pair<std::string, std::string>> env;  // in the order written
  std::optional<boost::json::value> network;  // a network policy, checked for form only
  std::optional<absl::Duration> timeout;      // timeout_ms
  // `timeout_ms: auto` (or `limits: auto` without a timeout_ms): the
  // wall-clock limit is sized from the skill's past calls; `timeout` is
  // then unset.
  bool timeout_auto = false;
  // "calls": the skills it may call (docs/skills.md, "Calling other
  // skills"), by reference: a call is allowed when its name is one of
  // these and the version it resolves to matches that entry's selector.
  std::vector<SkillReference> calls;
  std::optional<EnvironmentRef> environment;  // where it runs; whether it exists is checked at load
  // "seccomp: strict": the skill runs under the strict policy
  // (docs/security.md) whatever its profile's. The only value a manifest
  // may name: a manifest may tighten its profile's policy, never loosen it.
  bool strict_seccomp = false;
  boost::json::value document;                // the manifest as read
};

// [a-z0-9][a-z0-9._-]{0,63}
bool IsSkillName(absl::string_view name);

// The manifest `document` (a parsed skill.json or skill.yaml).
absl::StatusOr<Manifest> ParseManifest(const boost::json::value& document);

}  // namespace cubicle::skills

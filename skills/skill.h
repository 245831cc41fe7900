// One skill version as the daemon holds it (docs/skills.md): its manifest,
// its script — read once, when its folder is loaded, and never again from
// a path — and its id.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "skills/manifest.h"
#include "skills/static_policy.h"

namespace cubicle::skills {

inline constexpr size_t kMaxManifestBytes = 64 << 10;
// The script reaches the sandbox as one argument (`python3 -c SCRIPT`),
// inside an execution request of at most 128 KiB with the environment
// (namespaces/exec_request.h), and an exec'd argument may not pass 128 KiB
// either (MAX_ARG_STRLEN): 96 KiB leaves room for the rest.
inline constexpr size_t kMaxScriptBytes = 96 << 10;

// The manifest file names, looked for in this order; a folder holds one.
inline constexpr const char* kManifestNames[] = {"skill.yaml", "skill.json"};

struct Skill {
  Manifest manifest;
  std::string script;  // the entry's bytes
  std::string id;      // SkillId(script, requirements)
  std::string folder;  // its folder, as messages name it ("DIR/word-stats/1.2.0")
  std::string manifest_path;  // folder + "/skill.yaml" (or .json)
  // Its script's verdict under its profile's static policy, reached when
  // the catalog was loaded; none for a shell skill or a profile without
  // one (docs/skills.md, "Static policy").
  std::optional<StaticVerdict> static_policy;

  // "word-stats@1.2.0".
  std::string Reference() const { return manifest.name + "@" + manifest.version.ToString(); }
};

// The bytes a skill's id is the SHA-256 of (docs/skills.md, "Identity"):
//   "cubicle-skill-id-v1\n"
//   "script " LENGTH "\n" SCRIPT "\n"
//   "requires " COUNT "\n"
//   then each requirement's canonical text and "\n", sorted bytewise.
// LENGTH and COUNT in decimal.
std::string SkillIdInput(absl::string_view script, const std::vector<Requirement>& requirements);

// SHA-256 of SkillIdInput, 64 lowercase hex digits; "" when libcrypto
// could not be used (sessions/digest.h).
std::string SkillId(absl::string_view script, const std::vector<Requirement>& requirements);

// The skill whose folder is `folder_fd` (a directory opened beneath the
// skills directory), `folder` its path for messages. Reads its manifest
// and then its entry, each beneath the folder with no symlink followed
// (sessions/paths.h OpenBeneath), each a regular file within its bound.
// InvalidArgument (or NotFound, for a folder without a manifest) whose
// message begins with the file at fault: "DIR/x/1.0.0/skill.yaml:
// entry: 'main.py' does not exist in the skill's folder". `at` receives
// that file's path.
absl::StatusOr<Skill> LoadSkill(int folder_fd, const std::string& folder, std::string* at);

}  // namespace cubicle::skills

// A skills directory, loaded (docs/skills.md, "Layout"): every skill
// version in it that reads, and what was wrong with each that did not.
//
//   SKILLS_DIR/word-stats/1.2.0/skill.yaml     a skill's folder per version
//   SKILLS_DIR/word-stats/1.2.0/main.py
//   SKILLS_DIR/hello/skill.json                or a folder holding a manifest
//                                              itself: one version
//
// A folder right under the directory that holds skill.yaml or skill.json
// is a skill version; any other folder there holds one version per
// subfolder, each of which must hold a manifest. Names starting with '.'
// are passed over, and so are files beside the folders (a README). Folder
// names are for people: the manifest says the name and version. Nothing
// below the directory is reached through a symlink.
//
// A load never fails as a whole: a manifest with an error is reported
// (its file and field) and left out, the rest are served; two manifests
// of the same name and version are both left out. The catalog is a value
// that never changes once made: a reload makes a new one.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "skills/skill.h"
#include "skills/version.h"

namespace cubicle::skills {

struct LoadError {
  std::string path;     // the manifest, or the folder, at fault
  std::string message;  // the whole message, beginning with `path`
};

struct LoadOptions {
  // A check of each skill that read (the daemon's: its profile exists and
  // its limits fit it); an error leaves the skill out, reported like a
  // manifest's, prefixed with the manifest's path.
  std::function<absl::Status(const Skill&)> check;
  // Then one check of all the skills that passed `check` together, for a
  // check that costs too much to make one skill at a time (the daemon's
  // static policy, run in a sandbox). It may annotate each skill
  // (Skill::static_policy) and returns a status per skill, in order: an
  // error leaves that one out, reported as `check`'s are.
  std::function<std::vector<absl::Status>(const std::vector<Skill*>&)> check_all;
  // Skill folders looked at, at most (a bound on one load's work).
  size_t max_folders = 10000;
};

class Catalog {
 public:
  using Versions = std::map<Version, std::shared_ptr<const Skill>>;

  Catalog() = default;
  // Loads `dir` (see above). A directory that cannot be read gives an
  // empty catalog with that error.
  static Catalog Load(const std::string& dir, const LoadOptions& options = {});

  const std::string& dir() const { return dir_; }
  // By name, each one's versions in ascending precedence.
  const std::map<std::string, Versions>& skills() const { return skills_; }
  // Sorted by path.
  const std::vector<LoadError>& errors() const { return errors_; }
  size_t versions() const;  // in all

  // The version of `name` that `selector` picks: the highest that matches.
  // NotFound naming what there is otherwise.
  absl::StatusOr<std::shared_ptr<const Skill>> Find(absl::string_view name, const VersionSelector& selector) const;
  // The same for a reference: "word-stats", "word-stats@1.2.0",
  // "word-stats@^1.2". InvalidArgument for one that does not read.
  absl::StatusOr<std::shared_ptr<const Skill>> Find(absl::string_view reference) const;

 private:
  std::string dir_;
  std::map<std::string, Versions> skills_;
  std::vector<LoadError> errors_;
};

}  // namespace cubicle::skills

// An environments directory, loaded (docs/skills.md, "Environments"): the
// operator's catalog of prefixes a run may name, each a revision of an
// environment, and what was wrong with each folder that did not load.
//
//   ENVIRONMENTS_DIR/sci/1/                   a prefix (conda- or venv-like)
//   ENVIRONMENTS_DIR/sci/1/environment.json   optional: description, python_path
//   ENVIRONMENTS_DIR/sci/1/bin/python3        optional: its own interpreter
//   ENVIRONMENTS_DIR/sci/1/lib/python3.11/site-packages/...
//   ENVIRONMENTS_DIR/sci/2/
//
// NAME has a skill name's form; REVISION is a positive whole number. A run
// names "sci" (the highest revision) or "sci@2"; the revision's folder is
// mounted read-only at /env in the run's sandbox. Names starting with '.'
// are passed over, and so are files beside the folders. Nothing down to
// the revision folders, nor environment.json, nor a folder the index
// reads, is reached through a symlink (symlinks inside a prefix are the
// prefix's own business: its interpreter resolves them in the sandbox).
//
// A load never fails as a whole: a folder with an error is reported (its
// path and what is wrong) and left out, the rest are served. The catalog
// is a value that never changes once made: a reload makes a new one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "environments/packages.h"
#include "skills/manifest.h"

namespace cubicle::environments {

// Where a run's environment is in its sandbox.
inline constexpr char kMountPoint[] = "/env";
// The file in a revision's folder that describes it (optional).
inline constexpr char kDescriptionFile[] = "environment.json";
inline constexpr size_t kMaxDescriptionFileBytes = 64 << 10;
inline constexpr size_t kMaxPythonPath = 64;

struct Environment {
  std::string name;
  uint64_t revision = 0;
  std::string prefix;  // the revision's folder on the host: DIR/NAME/REVISION
  std::string description;
  // Folders made by `pip install --target`, relative to the prefix, as
  // environment.json lists them: on sys.path ahead of site-packages.
  std::vector<std::string> python_path;
  // The prefix's lib/pythonX.Y/site-packages folders, relative, sorted.
  std::vector<std::string> site_packages;
  // bin/python3 is a regular, executable file reached beneath the prefix
  // (a symlink to one inside the prefix counts; one that leaves it does
  // not, and the environment is then a package set for the host's python).
  bool own_interpreter = false;
  bool has_bin = false;  // bin/ is a folder: /env/bin goes first on PATH
  // pyvenv.cfg says include-system-site-packages = true: its interpreter
  // also imports the host's site folders.
  bool system_site_packages = false;
  // python_path's packages, then site_packages', each found in its
  // folder as the sandbox sees it ("/env/lib/python3.11/site-packages").
  PackageIndex packages;
  // What a reader should know that is not an error ("bin/python3 leaves
  // the environment's folder: ...").
  std::vector<std::string> notes;

  std::string Reference() const;  // "sci@3"
  // The folders a python run in it gets on sys.path, as the sandbox sees
  // them: python_path, then (without an interpreter of its own, for the
  // host's) site_packages.
  std::vector<std::string> SandboxPythonPath() const;
};

struct LoadError {
  std::string path;     // the folder or file at fault
  std::string message;  // the whole message, beginning with `path`
};

struct LoadOptions {
  // Folders looked at, at most (a bound on one load's work).
  size_t max_folders = 10000;
};

class Catalog {
 public:
  using Revisions = std::map<uint64_t, std::shared_ptr<const Environment>>;

  Catalog() = default;
  // Loads `dir` (see above). A directory that cannot be read gives an
  // empty catalog with that error.
  static Catalog Load(const std::string& dir, const LoadOptions& options = {});

  const std::string& dir() const { return dir_; }
  // By name, each one's revisions in ascending order.
  const std::map<std::string, Revisions>& environments() const { return environments_; }
  // Sorted by path.
  const std::vector<LoadError>& errors() const { return errors_; }
  size_t revisions() const;  // in all

  // The revision `ref` names: its highest, or exactly the one it names.
  // NotFound naming what there is otherwise ("no environment named 'ml'
  // (there are: sci, stats)", "environment 'sci' has no revision 7 (it
  // has 1, 2)").
  absl::StatusOr<std::shared_ptr<const Environment>> Find(const skills::EnvironmentRef& ref) const;
  // The same for a reference's text: InvalidArgument for one that does
  // not read (skills::ParseEnvironmentRef).
  absl::StatusOr<std::shared_ptr<const Environment>> Find(absl::string_view reference) const;

 private:
  std::string dir_;
  std::map<std::string, Revisions> environments_;
  std::vector<LoadError> errors_;
};

// One revision's folder, open as `prefix_fd`, named `prefix` in messages:
// its environment.json, interpreter, site-packages and package index.
// InvalidArgument whose message begins with the file at fault.
absl::StatusOr<Environment> LoadEnvironment(int prefix_fd, const std::string& prefix, const std::string& name,
                                            uint64_t revision);

}  // namespace cubicle::environments

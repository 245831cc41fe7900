// The environments the daemon serves (docs/skills.md, "Environments"): the
// environments directory ("environments.dir", docs/config.md) loaded by
// environments/catalog.h, what the host's own Python looks like to each
// profile, and how a run in an environment becomes a sandbox: the
// revision's prefix read-only at /env, the host's interpreters masked
// where the environment brings its own, its folders on sys.path, and a
// skill's `requires` checked before anything runs.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "environments/catalog.h"
#include "environments/host_python.h"
#include "environments/packages.h"
#include "rpc/config.h"
#include "runtime/spec.h"
#include "skills/skill.h"

namespace cubicle::rpc {

// What a profile's own interpreter sees of the host's Python, and its R
// of the host's R libraries.
struct ProfilePython {
  // Where its binds show the host's interpreter files (sandbox paths):
  // masked in a run whose environment has an interpreter of its own.
  std::vector<std::string> masks;
  // The packages in its python_path folders, and in the host's site
  // folders its binds show, each as the sandbox sees it.
  environments::PackageIndex python_path;
  environments::PackageIndex site;
  // The R packages in the host's R library folders its binds show
  // (environments::HostRLibraryFolders), each as the sandbox sees it.
  environments::PackageIndex r_library{skills::PackageKind::kR};
};

// One load: swapped whole at every reload, as the skill catalog is; a
// request keeps the one it found.
struct EnvironmentSet {
  std::shared_ptr<const environments::Catalog> catalog = std::make_shared<const environments::Catalog>();
  environments::HostPython host;
  std::map<std::string, ProfilePython> profiles;  // by profile name

  // The profile's, or an empty one for a profile not served at the load.
  const ProfilePython& Of(const std::string& profile) const;
};

// `dir` loaded (an empty `dir`: no environments), and the host's Python
// as each of `profiles` sees it.
std::shared_ptr<const EnvironmentSet> LoadEnvironmentSet(const std::string& dir,
                                                         const std::vector<const Profile*>& profiles);

ProfilePython ProfilePythonOf(const Profile& profile, const environments::HostPython& host);

// The R packages of the host library `folders` (in R's search order) that
// the profile's binds show, each as the sandbox sees it.
environments::PackageIndex ProfileRLibraryOf(const Profile& profile, const std::vector<std::string>& folders);

// The spec of a run in `env`: `base` with the prefix bound read-only at
// /env and, when the environment has an interpreter of its own, /dev/null
// bound over each of `masks`.
runtime::SandboxSpec EnvironmentSpec(runtime::SandboxSpec base, const environments::Environment& env,
                                     const std::vector<std::string>& masks);

// The folders a python run gets on sys.path, as the sandbox sees them:
// the environment's (environments::Environment::SandboxPythonPath), then
// the profile's python_path.
std::vector<std::string> PythonPathOf(const Profile& profile, const environments::Environment* env);

// What a run in `env` (null: none) finds in its environment besides the
// profile's: CUBICLE_ENVIRONMENT (its reference), PATH with /env/bin
// first (when it has a bin/), and for a non-empty python path
// CUBICLE_PYTHON_PATH and PYTHONPATH (ahead of the profile's), each
// colon-separated. Replaces those names in `vars`.
void SetEnvironmentVariables(const Profile& profile, const environments::Environment* env,
                             std::vector<std::string>* vars);

// The variable the warm bootstrap and the cold prelude read the python
// path from (-I ignores PYTHONPATH).
inline constexpr char kPythonPathVariable[] = "CUBICLE_PYTHON_PATH";

// The code a cold `python3 -I -c PRELUDE SCRIPT` runs first: it puts
// CUBICLE_PYTHON_PATH's folders on sys.path where PYTHONPATH's would go,
// takes SCRIPT from sys.argv, and runs it as `-c` would, as "<string>":
// its line numbers stay the script's own, sys.argv is ["-c"], and an
// uncaught exception's traceback starts at the script's frame.
const char* PythonPathPrelude();

// How a skill runs (docs/skills.md, "Calling a skill").
struct SkillRoute {
  const environments::Environment* environment = nullptr;  // none
  // In a sandbox made for the run (an environment, a narrowed network):
  // the profile's warm interpreter does not serve it.
  bool own_sandbox = false;
};

// The command a skill runs as: its script after `-c`, so that it is never
// read from a path again. Python: /env/bin/python3 -I in an environment
// with its own interpreter; the profile's warm Python interpreter's argv
// (served without starting an interpreter) when it serves the run; else
// `python3 -I` (or the profile's Python interpreter argv) — then, with a python path,
// `-c PRELUDE SCRIPT`. Shell: `/bin/sh -c SCRIPT NAME`. R: `/bin/sh -c
// LAUNCHER NAME SCRIPT` (runtime/warm_r.h RSkillLauncher), which a profile's warm R interpreter
// {"argv": ["Rscript", "--vanilla"]} serves itself.
std::vector<std::string> SkillArgv(const skills::Skill& skill, const Profile& profile, const SkillRoute& route = {});

// The skill's requirements that the packages its interpreter imports do
// not meet: the environment's, then the profile's python_path, then the
// host's site folders — unless the environment's own interpreter leaves
// them out (a venv without include-system-site-packages). An R skill's
// are R packages, looked for in the host's R libraries the profile shows
// (an environment brings none), compared as R compares versions.
std::vector<environments::UnmetRequirement> UnmetSkillRequirements(const skills::Skill& skill,
                                                                   const environments::Environment* env,
                                                                   const ProfilePython& profile);

}  // namespace cubicle::rpc

#include "rpc/environment_catalog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "environments/r_library.h"
#include "rootfs/plan_paths.h"
#include "runtime/warm_r.h"

namespace cubicle::rpc {
namespace {

// Python, as one line each where it can be: the prelude of a cold run with
// a python path (PythonPathPrelude). Everything it defines lives in one
// function, which it takes out of __main__'s namespace before the script
// runs; the script's code is compiled as "<string>", as -c compiles it.
constexpr char kPrelude[] = R"py(def _cubicle_prelude():
    import os, sys
    folders = [f for f in os.environ.get("CUBICLE_PYTHON_PATH", "").split(":") if f]
    at = 0 if sys.flags.isolated or getattr(sys.flags, "safe_path", False) else 1
    sys.path[at:at] = folders
    own, hook = (sys._getframe(0).f_code, sys._getframe(1).f_code), sys.excepthook
    def excepthook(kind, value, tb):
        while tb is not None and tb.tb_frame.f_code in own:
            tb = tb.tb_next
        if value is not None:
            value = value.with_traceback(tb)
        hook(kind, value, tb)
    sys.excepthook = excepthook
    return compile(sys.argv.pop(1), "<string>", "exec")
exec(globals().pop("_cubicle_prelude")())
)py";

// NAME=value in `vars` replaced, or added.
void SetVariable(std::vector<std::string>* vars, absl::string_view name, const std::string& value) {
  const std::string prefix = absl::StrCat(name, "=");
  auto it = std::find_if(vars->begin(), vars->end(), [&](const std::string& v) { return absl::StartsWith(v, prefix); });
  if (it != vars->end()) {
    *it = prefix + value;
  } else {
    vars->push_back(prefix + value);
  }
}

std::optional<std::string> Variable(const std::vector<std::string>& vars, absl::string_view name) {
  const std::string prefix = absl::StrCat(name, "=");
  for (const std::string& v : vars) {
    if (absl::StartsWith(v, prefix)) return v.substr(prefix.size());
  }
  return std::nullopt;
}

}  // namespace

const ProfilePython& EnvironmentSet::Of(const std::string& profile) const {
  static const ProfilePython* const kNone = new ProfilePython();
  auto it = profiles.find(profile);
  return it == profiles.end() ? *kNone : it->second;
}

ProfilePython ProfilePythonOf(const Profile& profile, const environments::HostPython& host) {
  ProfilePython out;
  const rootfs::MountPlan& plan = profile.spec.mounts;
  for (const std::string& file : host.interpreter_files) {
    if (std::optional<std::string> shown = rootfs::SandboxPathOf(plan, file)) out.masks.push_back(*shown);
  }
  // A folder that cannot be read adds nothing: its packages are not there.
  for (const std::string& folder : profile.python_path) {
    if (std::optional<std::string> source = rootfs::HostPathOf(plan, folder)) {
      (void)environments::ScanPackageFolder(*source, folder, &out.python_path);
    }
  }
  for (const std::string& folder : host.site_folders) {
    if (std::optional<std::string> shown = rootfs::SandboxPathOf(plan, folder)) {
      (void)environments::ScanPackageFolder(folder, *shown, &out.site);
    }
  }
  return out;
}

environments::PackageIndex ProfileRLibraryOf(const Profile& profile, const std::vector<std::string>& folders) {
  environments::PackageIndex out(skills::PackageKind::kR);
  // A folder that cannot be read adds nothing: its packages are not there.
  for (const std::string& folder : folders) {
    if (std::optional<std::string> shown = rootfs::SandboxPathOf(profile.spec.mounts, folder)) {
      (void)environments::ScanRLibrary(folder, *shown, &out);
    }
  }
  return out;
}

std::shared_ptr<const EnvironmentSet> LoadEnvironmentSet(const std::string& dir,
                                                         const std::vector<const Profile*>& profiles) {
  auto set = std::make_shared<EnvironmentSet>();
  if (!dir.empty()) set->catalog = std::make_shared<const environments::Catalog>(environments::Catalog::Load(dir));
  set->host = environments::FindHostPython();
  const std::vector<std::string> r_folders = environments::HostRLibraryFolders();
  for (const Profile* profile : profiles) {
    ProfilePython& of = set->profiles[profile->name] = ProfilePythonOf(*profile, set->host);
    of.r_library = ProfileRLibraryOf(*profile, r_folders);
  }
  return set;
}

runtime::SandboxSpec EnvironmentSpec(runtime::SandboxSpec base, const environments::Environment& env,
                                     const std::vector<std::string>& masks) {
  rootfs::MountOp prefix;
  prefix.kind = rootfs::MountKind::kBind;
  prefix.source = env.prefix;
  prefix.dest = environments::kMountPoint;
  prefix.readonly = true;
  base.mounts.push_back(std::move(prefix));
  // An environment without an interpreter of its own is a package set for
  // the host's, which must then stay usable.
  if (!env.own_interpreter) return base;
  for (const std::string& path : masks) {
    rootfs::MountOp mask;
    mask.kind = rootfs::MountKind::kBind;
    mask.source = "/dev/null";
    mask.dest = path;
    mask.readonly = true;
    base.mounts.push_back(std::move(mask));
  }
  return base;
}

std::vector<std::string> PythonPathOf(const Profile& profile, const environments::Environment* env) {
  std::vector<std::string> out;
  if (env != nullptr) out = env->SandboxPythonPath();
  for (const std::string& folder : profile.python_path) {
    if (std::find(out.begin(), out.end(), folder) == out.end()) out.push_back(folder);
  }
  return out;
}

void SetEnvironmentVariables(const Profile& profile, const environments::Environment* env,
                             std::vector<std::string>* vars) {
  if (env != nullptr) {
    SetVariable(vars, "CUBICLE_ENVIRONMENT", env->Reference());
    if (env->has_bin) {
      std::optional<std::string> path = Variable(*vars, "PATH");
      SetVariable(vars, "PATH",
                  absl::StrCat(environments::kMountPoint, "/bin:", path.value_or("/usr/local/bin:/usr/bin:/bin")));
    }
  }
  const std::vector<std::string> folders = PythonPathOf(profile, env);
  if (folders.empty()) return;
  const std::string joined = absl::StrJoin(folders, ":");
  SetVariable(vars, kPythonPathVariable, joined);
  std::optional<std::string> pythonpath = Variable(*vars, "PYTHONPATH");
  SetVariable(vars, "PYTHONPATH", pythonpath.has_value() && !pythonpath->empty() ? joined + ":" + *pythonpath : joined);
}

const char* PythonPathPrelude() { return kPrelude; }

std::vector<std::string> SkillArgv(const skills::Skill& skill, const Profile& profile, const SkillRoute& route) {
  if (skill.manifest.interpreter == skills::Interpreter::kShell) {
    return {"/bin/sh", "-c", skill.script, skill.manifest.name};  // $0 is the skill's name
  }
  if (skill.manifest.interpreter == skills::Interpreter::kR) {
    return {"/bin/sh", "-c", runtime::RSkillLauncher(), skill.manifest.name, skill.script};
  }
  const environments::Environment* env = route.environment;
  std::vector<std::string> argv;
  bool warm = false;
  if (env != nullptr && env->own_interpreter) {
    argv = {absl::StrCat(environments::kMountPoint, "/bin/python3"), "-I"};
  } else if (profile.interpreter.has_value() && !runtime::IsRInterpreter(*profile.interpreter)) {
    argv = profile.interpreter->argv;
    warm = !route.own_sandbox;
  } else {
    argv = {"python3", "-I"};
  }
  argv.push_back("-c");
  // The warm bootstrap puts the python path on sys.path itself
  // (runtime/warm_bootstrap.py); a cold interpreter needs the prelude.
  if (!warm && !PythonPathOf(profile, env).empty()) argv.push_back(kPrelude);
  argv.push_back(skill.script);
  return argv;
}

std::vector<environments::UnmetRequirement> UnmetSkillRequirements(const skills::Skill& skill,
                                                                   const environments::Environment* env,
                                                                   const ProfilePython& profile) {
  const std::vector<skills::Requirement>& requirements = skill.manifest.requirements;
  if (requirements.empty()) return {};
  if (skill.manifest.interpreter == skills::Interpreter::kR) {
    return environments::UnmetRequirements(requirements, {&profile.r_library}, skills::PackageKind::kR);
  }
  std::vector<const environments::PackageIndex*> indexes;
  if (env != nullptr) indexes.push_back(&env->packages);
  indexes.push_back(&profile.python_path);
  if (env == nullptr || !env->own_interpreter || env->system_site_packages) indexes.push_back(&profile.site);
  return environments::UnmetRequirements(requirements, indexes);
}

}  // namespace cubicle::rpc

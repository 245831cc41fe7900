// rpc/environment_catalog.h and the configuration's "environments" and
// profiles' "python_path": a run's spec in an environment (the prefix at
// /env, the host's interpreters masked only where the environment brings
// its own), the variables it gets, the command a skill runs as on each
// route, a skill's environment checked at load, and a skill's requires
// checked against the right packages.
#include "rpc/environment_catalog.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "rpc/config.h"
#include "rpc/config_reload.h"
#include "rpc/skill_catalog.h"
#include "tests/support/temp_dir.h"

namespace cubicle::rpc {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// `profiles` (the text of "profiles") parsed; its error's message otherwise.
absl::StatusOr<DaemonConfig> Parse(const std::string& more, const std::string& profiles) {
  return ParseConfig(absl::StrCat("{", more, R"("profiles": )", profiles, "}"));
}

std::string ProfileError(const std::string& profile) {
  absl::StatusOr<DaemonConfig> c = Parse("", absl::StrCat(R"({"p": )", profile, "}"));
  return c.ok() ? "ok" : std::string(c.status().message());
}

class EnvironmentsRpc : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.Join("lib/tinypkg-0.3.dist-info"));
    std::ofstream(dir_.Join("lib/tinypkg-0.3.dist-info/METADATA")) << "Name: tinypkg\nVersion: 0.3\n";
    std::ofstream(dir_.Join("file")) << "";
    absl::StatusOr<DaemonConfig> c = Parse("", absl::StrCat(R"({
      "warm": {"binds": [{"source": ")", dir_.path(), R"(", "dest": "/opt/py"}], "python_path": ["/opt/py/lib"],
               "env": {"PYTHONPATH": "/profile"}, "interpreter": {"argv": ["python3", "-I"]}},
      "plain": {}})"));
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *std::move(c);
  }
  const Profile& warm() const { return config_.profiles.at("warm"); }
  const Profile& plain() const { return config_.profiles.at("plain"); }

  // An environment as the catalog makes one.
  static environments::Environment Env(bool own_interpreter) {
    environments::Environment env;
    env.name = "sci";
    env.revision = 3;
    env.prefix = "/srv/envs/sci/3";
    env.own_interpreter = own_interpreter;
    env.has_bin = true;
    env.python_path = {"extra"};
    env.site_packages = {"lib/python3.11/site-packages"};
    env.packages.Add({"sciprobe", "1.2", "/env/extra"});
    return env;
  }

  test_support::TempDir dir_;
  DaemonConfig config_;
};

TEST_F(EnvironmentsRpc, ConfigNamesAnExistingDirectory) {
  auto error = [&](const std::string& environments) {
    absl::StatusOr<DaemonConfig> c = Parse(absl::StrCat(R"("environments": )", environments, ","), R"({"x": {}})");
    return c.ok() ? "dir " + c->environments_dir : std::string(c.status().message());
  };
  EXPECT_EQ(error(absl::StrCat(R"({"dir": ")", dir_.path(), R"("})")), "dir " + dir_.path());
  EXPECT_EQ(error(R"({"dir": "envs"})"), "environments.dir: 'envs' is not an existing absolute directory");
  EXPECT_EQ(error("{}"), "environments: dir is required");
  EXPECT_THAT(error(R"({"dir": "/", "revision": 1})"), HasSubstr("environments.revision: unknown key"));
}

TEST_F(EnvironmentsRpc, AProfilesPythonPathIsShownByItsBinds) {
  EXPECT_THAT(warm().python_path, ElementsAre("/opt/py/lib"));
  const std::string binds = absl::StrCat(R"("binds": [{"source": ")", dir_.path(), R"(", "dest": "/opt/py"}])");
  EXPECT_EQ(ProfileError(absl::StrCat("{", binds, R"(, "python_path": ["/opt/py/lib/", "/opt/py/./lib"]})")), "ok");
  EXPECT_THAT(ProfileError(absl::StrCat("{", binds, R"(, "python_path": ["opt/py"]})")),
              HasSubstr("profiles.p.python_path[0]"));
  EXPECT_EQ(ProfileError(absl::StrCat("{", binds, R"(, "python_path": ["/tmp/x"]})")),
            "profiles.p.python_path[0]: '/tmp/x' is shown by none of the profile's binds");
  EXPECT_EQ(ProfileError(absl::StrCat("{", binds, R"(, "python_path": ["/opt/py/file"]})")),
            absl::StrCat("profiles.p.python_path[0]: '/opt/py/file' shows ", dir_.path(),
                         "/file of the host, which is not a directory"));
  EXPECT_THAT(ProfileError(absl::StrCat("{", binds, R"(, "python_path": ["/opt/py/a:b"]})")),
              HasSubstr("holds ':'"));
  EXPECT_THAT(ProfileError(R"({"python_path": "/opt"})"), HasSubstr("python_path: expected an array"));
  // A reload that changes only the python path updates the profile in place.
  Profile changed = warm();
  changed.python_path.clear();
  EXPECT_EQ(CompareProfiles(warm(), changed), ProfileChange::kUpdated);
}

TEST_F(EnvironmentsRpc, TheSpecBindsThePrefixAndMasksOnlyForItsOwnInterpreter) {
  const std::vector<std::string> masks = {"/usr/bin/python3.11", "/usr/bin/pip3"};
  runtime::SandboxSpec own = EnvironmentSpec(plain().spec, Env(true), masks);
  ASSERT_EQ(own.mounts.size(), plain().spec.mounts.size() + 3);
  const rootfs::MountOp& prefix = own.mounts[plain().spec.mounts.size()];
  EXPECT_EQ(prefix.kind, rootfs::MountKind::kBind);
  EXPECT_EQ(prefix.source, "/srv/envs/sci/3");
  EXPECT_EQ(prefix.dest, "/env");
  EXPECT_TRUE(prefix.readonly);
  EXPECT_EQ(own.mounts.back().source, "/dev/null");
  EXPECT_EQ(own.mounts.back().dest, "/usr/bin/pip3");
  EXPECT_TRUE(own.mounts.back().readonly);
  // A package set for the host's interpreter leaves it usable.
  runtime::SandboxSpec host = EnvironmentSpec(plain().spec, Env(false), masks);
  EXPECT_EQ(host.mounts.size(), plain().spec.mounts.size() + 1);
}

TEST_F(EnvironmentsRpc, TheHostsInterpretersAreMaskedWhereTheProfileShowsThem) {
  environments::HostPython host = environments::FindHostPython();
  if (host.interpreter_files.empty()) GTEST_SKIP() << "the host has no python3 or pip in /usr/local/bin, /usr/bin, /bin";
  ProfilePython python = ProfilePythonOf(plain(), host);
  EXPECT_EQ(python.masks.size(), host.interpreter_files.size());  // the default spec binds /usr
  EXPECT_NE(ProfilePythonOf(warm(), host).python_path.Find("tinypkg"), nullptr);
}

TEST_F(EnvironmentsRpc, VariablesPutTheEnvironmentFirst) {
  environments::Environment env = Env(false);
  std::vector<std::string> vars = warm().spec.env;
  SetEnvironmentVariables(warm(), &env, &vars);
  auto value = [&](const std::string& name) -> std::string {
    for (const std::string& v : vars) {
      if (v.rfind(name + "=", 0) == 0) return v.substr(name.size() + 1);
    }
    return "(unset)";
  };
  EXPECT_EQ(value("CUBICLE_ENVIRONMENT"), "sci@3");
  EXPECT_EQ(value("PATH"), "/env/bin:/usr/local/bin:/usr/bin:/bin");
  EXPECT_EQ(value("CUBICLE_PYTHON_PATH"), "/env/extra:/env/lib/python3.11/site-packages:/opt/py/lib");
  EXPECT_EQ(value("PYTHONPATH"), "/env/extra:/env/lib/python3.11/site-packages:/opt/py/lib:/profile");
  std::vector<std::string> none = plain().spec.env;
  SetEnvironmentVariables(plain(), nullptr, &none);
  EXPECT_EQ(none, plain().spec.env);
}

TEST_F(EnvironmentsRpc, ASkillRunsAsItsRouteNeeds) {
  skills::Skill s;
  s.manifest.name = "probe";
  s.script = "print(1)\n";
  const std::string prelude = PythonPathPrelude();
  // Warm, from the pool: the bootstrap puts the python path on sys.path.
  EXPECT_THAT(SkillArgv(s, warm()), ElementsAre("python3", "-I", "-c", "print(1)\n"));
  // Cold with a python path: the prelude does.
  EXPECT_THAT(SkillArgv(s, warm(), {nullptr, /*own_sandbox=*/true}),
              ElementsAre("python3", "-I", "-c", prelude, "print(1)\n"));
  EXPECT_THAT(SkillArgv(s, plain()), ElementsAre("python3", "-I", "-c", "print(1)\n"));
  environments::Environment own = Env(true);
  EXPECT_THAT(SkillArgv(s, plain(), {&own, true}), ElementsAre("/env/bin/python3", "-I", "-c", prelude, "print(1)\n"));
  own.python_path.clear();
  EXPECT_THAT(SkillArgv(s, plain(), {&own, true}), ElementsAre("/env/bin/python3", "-I", "-c", "print(1)\n"));
  environments::Environment packages = Env(false);
  EXPECT_THAT(SkillArgv(s, plain(), {&packages, true}), ElementsAre("python3", "-I", "-c", prelude, "print(1)\n"));
}

// `argv` run directly (no sandbox) with `env`: its exit status and stdout
// and stderr together.
std::pair<int, std::string> RunDirectly(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> args, vars;  // made before fork: the child only execs
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& v : env) vars.push_back(const_cast<char*>(v.c_str()));
  args.push_back(nullptr);
  vars.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {-1, "pipe2"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execve(args[0], args.data(), vars.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

TEST_F(EnvironmentsRpc, ThePreludeRunsTheScriptAsDashCWould) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "the host has no /usr/bin/python3";
  const std::vector<std::string> env = {"CUBICLE_PYTHON_PATH=/first:/second"};
  auto both = [&](const std::string& script) {
    return std::pair{RunDirectly({"/usr/bin/python3", "-I", "-c", PythonPathPrelude(), script}, env),
                     RunDirectly({"/usr/bin/python3", "-I", "-c", script}, env)};
  };
  auto [seen, plain] = both("import sys\nprint(sys.argv, sys.path[:2], '_cubicle_prelude' in globals())\n");
  EXPECT_EQ(seen.second, "['-c'] ['/first', '/second'] False\n");
  // Tracebacks, syntax errors and exit statuses are the script's own.
  for (const char* script : {"x = 1\n\nraise ValueError('boom')\n", "def f(:\n  pass\n", "import sys; sys.exit(3)",
                             "from __future__ import annotations\nprint('first statement')\n"}) {
    auto [prelude, dash_c] = both(script);
    EXPECT_EQ(prelude, dash_c) << script;
  }
  EXPECT_EQ(both("raise ValueError('boom')").first.second,
            "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nValueError: boom\n");
}

TEST_F(EnvironmentsRpc, RequirementsAreCheckedAgainstWhatTheInterpreterImports) {
  skills::Skill s;
  for (const char* r : {"sciprobe>=1", "hostpkg"}) s.manifest.requirements.push_back(*skills::ParseRequirement(r));
  ProfilePython profile;
  profile.site.Add({"hostpkg", "1.0", "/usr/lib/python3/dist-packages"});
  profile.python_path.Add({"sciprobe", "0.1", "/opt/py/lib"});
  environments::Environment own = Env(true);
  environments::Environment packages = Env(false);
  // The environment's own interpreter does not import the host's site folders...
  std::vector<environments::UnmetRequirement> unmet = UnmetSkillRequirements(s, &own, profile);
  ASSERT_EQ(unmet.size(), 1u);
  EXPECT_EQ(unmet[0].message, "package hostpkg not available (not installed)");
  // ...unless its pyvenv.cfg says so; the host's interpreter does.
  own.system_site_packages = true;
  EXPECT_THAT(UnmetSkillRequirements(s, &own, profile), IsEmpty());
  EXPECT_THAT(UnmetSkillRequirements(s, &packages, profile), IsEmpty());
  // Without an environment, the profile's python_path comes first.
  unmet = UnmetSkillRequirements(s, nullptr, profile);
  ASSERT_EQ(unmet.size(), 1u);
  EXPECT_EQ(unmet[0].message, "package sciprobe not available (need >= 1, have 0.1)");
}

TEST_F(EnvironmentsRpc, AnRSkillsRequirementsAreRPackagesTheProfileShows) {
  fs::create_directories(dir_.Join("rlib/jsonlite"));
  std::ofstream(dir_.Join("rlib/jsonlite/DESCRIPTION")) << "Package: jsonlite\nVersion: 1.8.4\n";
  fs::create_directories(dir_.Join("rlib/data.table"));
  std::ofstream(dir_.Join("rlib/data.table/DESCRIPTION")) << "Package: data.table\nVersion: 1.14.8-1\n";
  // Seen through the profile's binds, where they show the folder at all.
  environments::PackageIndex shown = ProfileRLibraryOf(warm(), {dir_.Join("absent"), dir_.Join("rlib")});
  ASSERT_NE(shown.Find("jsonlite"), nullptr);
  EXPECT_EQ(shown.Find("jsonlite")->folder, "/opt/py/rlib");
  EXPECT_EQ(ProfileRLibraryOf(plain(), {dir_.Join("rlib")}).size(), 0u);

  skills::Skill s;
  s.manifest.interpreter = skills::Interpreter::kR;
  for (const char* r : {"jsonlite>=99", "data.table>=1.10.0", "cubicleNoSuchPackage", "tinypkg"}) {
    s.manifest.requirements.push_back(*skills::ParseRequirement(r, skills::PackageKind::kR));
  }
  ProfilePython profile;
  profile.r_library = shown;
  profile.site.Add({"tinypkg", "0.3", "/usr/lib/python3/dist-packages"});  // Python's: no R package
  environments::Environment env = Env(false);
  std::vector<std::string> messages;
  for (const environments::UnmetRequirement& u : UnmetSkillRequirements(s, &env, profile)) {
    messages.push_back(u.message);
  }
  EXPECT_THAT(messages, ElementsAre("package jsonlite not available (need >= 99, have 1.8.4)",
                                    "package cubicleNoSuchPackage not available (not installed)",
                                    "package tinypkg not available (not installed)"));
  // A Python skill's are not looked for among R's.
  skills::Skill py;
  py.manifest.requirements.push_back(*skills::ParseRequirement("jsonlite"));
  EXPECT_EQ(UnmetSkillRequirements(py, nullptr, profile).size(), 1u);
}

TEST_F(EnvironmentsRpc, ASkillsEnvironmentMustBeServed) {
  skills::Skill s;
  s.manifest.name = "probe";
  s.manifest.profile = "plain";
  s.script = "print(1)\n";
  s.manifest.environment = skills::EnvironmentRef{"sci", std::nullopt};
  EXPECT_EQ(CheckSkillFits(s, &plain()).message(), "environment: no environment named 'sci' (there are none)");
  fs::create_directories(dir_.Join("envs/sci/3"));
  environments::Catalog catalog = environments::Catalog::Load(dir_.Join("envs"));
  EXPECT_TRUE(CheckSkillFits(s, &plain(), &catalog).ok());
  s.manifest.environment->revision = 2;
  EXPECT_EQ(CheckSkillFits(s, &plain(), &catalog).message(),
            "environment: environment 'sci' has no revision 2 (it has 3)");
}

}  // namespace
}  // namespace cubicle::rpc

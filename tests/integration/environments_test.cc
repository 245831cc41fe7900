// Environments through `cubicle serve` (docs/skills.md, "Environments"):
// an environments directory listed and described, bad folders reported
// while the good ones serve, and reloaded; a skill run in an environment
// with an interpreter of its own (a copy of the host's python3 with a
// pyvenv.cfg) that sees /env read-only, imports the environment's package
// and finds the host's python3 masked; one run on the host's interpreter
// with an environment's package set; requires checked before anything
// runs; pip --target folders importable under the warm interpreter and on
// the cold route; bad references refused, leaving nothing behind. Waits
// are bounds for failures; nothing asserts how long anything took.
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

// A skill that answers with what it sees of its environment. It first
// leaves a mark in /mark (so a test can tell whether it ran at all).
constexpr char kProbe[] = R"py(import json, os, sys
open("/mark/" + os.environ.get("MARK", "ran"), "w").close()
request = json.loads(sys.stdin.readline())
seen = {"prefix": sys.prefix, "executable": sys.executable, "warm": "socket" in sys.modules,
        "environment": os.environ.get("CUBICLE_ENVIRONMENT"), "path": os.environ.get("PATH"),
        "env_writable": os.access("/env", os.W_OK), "argv": sys.argv,
        "prelude_gone": "_cubicle_prelude" not in globals()}
try:
    open("/env/new-file", "w")
    seen["env_write"] = "written"
except OSError as e:
    seen["env_write"] = e.strerror
for name in ("sciprobe", "tinypkg"):
    try:
        module = __import__(name)
        seen[name] = [module.VALUE, module.__file__]
    except ImportError:
        seen[name] = None
st = os.stat("/usr/bin/python3")
seen["host_python"] = {"size": st.st_size, "regular": os.path.isfile("/usr/bin/python3")}
try:
    import subprocess
    seen["host_python"]["exec"] = subprocess.run(["/usr/bin/python3", "-c", "pass"]).returncode
except OSError as e:
    seen["host_python"]["exec"] = e.strerror
print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": seen}), flush=True)
)py";

class Environments : public DaemonFixture {
 protected:
  void SetUp() override {
    DaemonFixture::SetUp();
    char real[PATH_MAX];
    if (::realpath("/usr/bin/python3", real) == nullptr) GTEST_SKIP() << "the host has no /usr/bin/python3";
    host_python_ = real;
    const std::string base = host_python_.substr(host_python_.rfind('/') + 1);  // python3.11
    if (!absl::StartsWith(base, "python3.")) GTEST_SKIP() << "/usr/bin/python3 is " << host_python_;
    site_ = absl::StrCat("lib/", base, "/site-packages");
    for (const TempDir* d : {&gate_, &mark_}) ASSERT_EQ(::chmod(d->path().c_str(), 0755), 0);
    ASSERT_EQ(::chmod(mark_.path().c_str(), 0777), 0);  // the sandbox user writes its mark there
    ASSERT_EQ(::mkdir(gate_.Join("pylib").c_str(), 0755), 0);  // the profiles' python_path
    skills_ = dir_.Join("skills");
    envs_ = dir_.Join("environments");
    for (const std::string& d : {skills_, envs_}) ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
  }

  // A file under `root`, the folders missing on its way made (each 0755:
  // the sandbox user reads them).
  static void Put(const std::string& root, const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(root, "/", name);
    for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
      ::mkdir(path.substr(0, slash).c_str(), 0755);
    }
    ASSERT_TRUE(WriteFile(path, text)) << path;
    ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  }
  // A package as `pip install --target` leaves it in `folder`: the module
  // and its NAME-VERSION.dist-info/METADATA.
  static void Package(const std::string& folder, const std::string& name, const std::string& version,
                      const std::string& value) {
    Put(folder, absl::StrCat(name, "/__init__.py"), absl::StrCat("VALUE = ", Quoted(value), "\n"));
    Put(folder, absl::StrCat(name, "-", version, ".dist-info/METADATA"),
        absl::StrCat("Metadata-Version: 2.1\nName: ", name, "\nVersion: ", version, "\n"));
  }
  void Skill(const std::string& name, const std::string& more, const std::string& script = kProbe) {
    Put(skills_, name + "/skill.yaml", absl::StrCat("name: ", name, "\nversion: 1.0.0\nentry: main.py\n", more));
    Put(skills_, name + "/main.py", script);
  }

  // sci@1: a package set for the host's python3 (sciprobe 1.0 in its
  // site-packages, tinypkg in a pip --target folder); sci@2: its own
  // interpreter, a copy of the host's, with sciprobe 1.2.
  void PutSci() {
    const std::string one = envs_ + "/sci/1";
    Package(absl::StrCat(one, "/", site_), "sciprobe", "1.0", "sci@1");
    Package(one + "/extra", "tinypkg", "0.3", "sci@1 extra");
    Put(one, "environment.json", R"({"description": "a package set", "python_path": ["extra"]})");
    const std::string two = envs_ + "/sci/2";
    Package(absl::StrCat(two, "/", site_), "sciprobe", "1.2", "sci@2");
    Put(two, "environment.json", R"({"description": "its own python"})");
    Put(two, "pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n");
    ASSERT_EQ(::mkdir((two + "/bin").c_str(), 0755), 0);
    fs::copy_file(host_python_, two + "/bin/python3");
    ASSERT_EQ(::chmod((two + "/bin/python3").c_str(), 0755), 0);
  }

  std::string Config(const std::string& more_profiles = "") const {
    return absl::StrCat(R"({"skills": {"dir": )", Quoted(skills_), R"(}, "environments": {"dir": )", Quoted(envs_),
                        R"(}, "profiles": {
      "python": {"limits": {"memory": "256M", "pids": 64}, "timeout_ms": 20000,
                 "binds": [{"source": )", Quoted(gate_.path()), R"(, "dest": "/gate"},
                           {"source": )", Quoted(mark_.path()), R"(, "dest": "/mark", "readonly": false}],
                 "python_path": ["/gate/pylib"],
                 "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8},
                 "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}},
      "cold": {"limits": {"memory": "256M", "pids": 64}, "timeout_ms": 20000,
               "binds": [{"source": )", Quoted(gate_.path()), R"(, "dest": "/gate"},
                         {"source": )", Quoted(mark_.path()), R"(, "dest": "/mark", "readonly": false}],
               "python_path": ["/gate/pylib"], "pool": {"min_idle": 0, "max_idle": 1, "max_total": 8}})",
                        more_profiles, "}}");
  }

  SocketDaemon& Start() {
    const std::string config = WriteConfig(dir_, Config());
    daemon_ = std::make_unique<SocketDaemon>(
        SocketDaemon::Options{{"--config", config}, std::nullopt, {"CUBICLE_LOG_LEVEL=info"}});
    return *daemon_;
  }

  // skill.call by name; the skill's own result.
  json::value CallSkill(const std::string& skill, const std::string& more = "") {
    json::value r = Result("skill.call", absl::StrCat(R"({"skill": )", Quoted(skill), R"(, "method": "m")", more, "}"));
    return r.is_object() && r.as_object().contains("result") ? r.at("result") : r;
  }
  bool Marked(const std::string& name = "ran") const { return ::access(mark_.Join(name).c_str(), F_OK) == 0; }


  TempDir dir_;
  TempDir gate_;
  TempDir mark_;
  std::string host_python_;  // the real path of the host's python3
  std::string site_;         // lib/python3.X/site-packages, for the host's X
  std::string skills_, envs_;
};

TEST_F(Environments, ListedDescribedReportedAndReloaded) {
  PutSci();
  Put(envs_, "broken/1/environment.json", R"({"python_path": ["missing"]})");
  Put(envs_, "sci/latest/README", "not a revision");
  ASSERT_TRUE(Start().up()) << Log();

  json::value list = Result("environment.list", "");
  ASSERT_TRUE(list.is_object());
  EXPECT_EQ(Str(list.at("dir")), envs_);
  EXPECT_EQ(Str(list.at("path")), "/env");
  const json::array& envs = list.at("environments").as_array();
  ASSERT_EQ(envs.size(), 1u) << json::serialize(list);
  EXPECT_EQ(Str(envs[0].at("name")), "sci");
  EXPECT_EQ(envs[0].at("latest"), 2);
  EXPECT_EQ(Str(envs[0].at("description")), "its own python");
  const json::array& revisions = envs[0].at("revisions").as_array();
  ASSERT_EQ(revisions.size(), 2u);
  EXPECT_EQ(revisions[0].at("packages"), 2);
  EXPECT_EQ(revisions[0].at("interpreter"), false);
  EXPECT_EQ(revisions[1].at("interpreter"), true);
  const json::array& errors = list.at("errors").as_array();
  ASSERT_EQ(errors.size(), 2u) << json::serialize(errors);
  EXPECT_TRUE(absl::StrContains(Str(errors[0].at("error")),
                                absl::StrCat(envs_, "/broken/1/environment.json: python_path[0]: 'missing' does not")))
      << json::serialize(errors);
  EXPECT_TRUE(absl::StrContains(Str(errors[1].at("error")), "sci/latest: is not a revision"));
  EXPECT_TRUE(absl::StrContains(Log(), absl::StrCat("environment left out: ", envs_, "/broken/1"))) << Log();
  EXPECT_TRUE(absl::StrContains(Log(), "environments: 2 revision(s) of 1 environment(s)")) << Log();
  json::value health = Result("health", "");
  EXPECT_EQ(health.at("environments").at("revisions"), 2);
  EXPECT_EQ(health.at("environments").at("errors"), 2);

  json::value latest = Result("environment.describe", R"({"name": "sci"})");
  ASSERT_TRUE(latest.is_object());
  EXPECT_EQ(Str(latest.at("reference")), "sci@2");
  EXPECT_EQ(Str(latest.at("path")), "/env");
  EXPECT_EQ(Str(latest.at("interpreter")), "/env/bin/python3");
  EXPECT_EQ(latest.at("masks_host_interpreters"), true);
  EXPECT_EQ(json::serialize(latest.at("packages")),
            absl::StrCat(R"([{"name":"sciprobe","version":"1.2","folder":"/env/)", site_, R"("}])"));
  json::value first = Result("environment.describe", R"({"name": "sci", "revision": 1})");
  EXPECT_EQ(first.at("interpreter"), nullptr);
  EXPECT_EQ(json::serialize(first.at("python_path")), R"(["extra"])");
  EXPECT_EQ(json::serialize(first.at("sys_path")), absl::StrCat(R"(["/env/extra","/env/)", site_, R"("])"));
  EXPECT_EQ(first.at("packages").as_array().size(), 2u);
  EXPECT_EQ(ErrorCode(Call("environment.describe", R"({"name": "sci", "revision": 9})")), -32004);
  EXPECT_EQ(ErrorCode(Call("environment.describe", R"({"name": "nope"})")), -32004);
  EXPECT_EQ(ErrorCode(Call("environment.describe", R"({"name": "Not A Name"})")), -32602);
  EXPECT_EQ(ErrorCode(Call("environment.describe", R"({"name": "sci", "revision": 0})")), -32602);

  // A new revision, installed and announced by SIGHUP, is what "sci" names.
  const std::string three = envs_ + "/sci/3";
  Package(absl::StrCat(three, "/", site_), "sciprobe", "1.3", "sci@3");
  ASSERT_TRUE(Reload()) << Log();
  EXPECT_EQ(Str(Result("environment.describe", R"({"name": "sci"})").at("reference")), "sci@3");
  EXPECT_TRUE(absl::StrContains(Log(), "environments: 3 revision(s) of 1 environment(s)")) << Log();
}

TEST_F(Environments, ASkillRunsWithTheEnvironmentsOwnInterpreter) {
  PutSci();
  Skill("own", "environment: sci\nrequires: [sciprobe>=1.1]\n");
  ASSERT_TRUE(Start().up()) << Log();
  ASSERT_EQ(Result("skill.list", "").at("errors").as_array().size(), 0u);
  json::value described = Result("skill.describe", R"({"name": "own"})");
  EXPECT_EQ(Str(described.at("environment")), "sci");
  EXPECT_EQ(described.at("warm"), false);
  json::value seen = CallSkill("own");
  ASSERT_TRUE(seen.is_object()) << json::serialize(seen);
  EXPECT_EQ(Str(seen.at("prefix")), "/env") << json::serialize(seen);
  EXPECT_EQ(Str(seen.at("executable")), "/env/bin/python3");
  EXPECT_EQ(Str(seen.at("environment")), "sci@2");
  EXPECT_TRUE(absl::StartsWith(Str(seen.at("path")), "/env/bin:")) << Str(seen.at("path"));
  EXPECT_EQ(seen.at("warm"), false);  // a sandbox of its own: cold
  EXPECT_EQ(seen.at("env_writable"), false);
  EXPECT_EQ(Str(seen.at("env_write")), "Read-only file system");
  EXPECT_EQ(Str(seen.at("sciprobe").at(0)), "sci@2");
  EXPECT_EQ(Str(seen.at("sciprobe").at(1)), absl::StrCat("/env/", site_, "/sciprobe/__init__.py"));
  // The host's interpreter is masked: an empty, unexecutable file.
  EXPECT_EQ(seen.at("host_python").at("size"), 0);
  EXPECT_EQ(seen.at("host_python").at("regular"), false);
  EXPECT_EQ(Str(seen.at("host_python").at("exec")), "Permission denied");
  EXPECT_FALSE(::access(absl::StrCat(envs_, "/sci/2/new-file").c_str(), F_OK) == 0);

  // The same probe called with the environment in the request, by a skill
  // that names none: sci@1 is a package set for the host's interpreter,
  // which stays usable; its folders come by the prelude (cold, -I).
  Skill("plain", "");
  ASSERT_TRUE(Reload()) << Log();
  json::value host = CallSkill("plain", R"(, "environment": "sci@1")");
  ASSERT_TRUE(host.is_object()) << json::serialize(host);
  EXPECT_EQ(Str(host.at("prefix")), "/usr");
  EXPECT_EQ(Str(host.at("environment")), "sci@1");
  EXPECT_EQ(Str(host.at("sciprobe").at(0)), "sci@1");
  EXPECT_EQ(Str(host.at("tinypkg").at(0)), "sci@1 extra");  // its pip --target folder, ahead of the profile's
  EXPECT_EQ(host.at("host_python").at("regular"), true);
  EXPECT_EQ(json::serialize(host.at("argv")), R"(["-c"])");
  EXPECT_EQ(host.at("prelude_gone"), true);
}

TEST_F(Environments, UnmetRequirementsFailBeforeAnythingRuns) {
  PutSci();
  Skill("too-old", "environment: sci\nrequires: [sciprobe>=2]\n");
  Skill("absent", "environment: sci@2\nrequires: [numpy>=1.10, sciprobe]\n");
  Skill("host-absent", "requires: [cubicle-not-installed-anywhere>=1.10]\n");
  Skill("fits", "environment: sci@1\nrequires: [\"sciprobe>=1.0,<2\", tinypkg==0.3]\n");
  ASSERT_TRUE(Start().up()) << Log();
  ASSERT_TRUE(Quiet("python", 1)) << Log();
  const json::value before = PoolStats("python");

  json::value reply = Call("skill.call", R"({"skill": "too-old", "method": "m"})");
  EXPECT_EQ(ErrorCode(reply), -32009) << json::serialize(reply);
  EXPECT_EQ(Str(reply.at("error").at("message")), "package sciprobe not available (need >= 2, have 1.2)");
  const json::value& data = reply.at("error").at("data");
  EXPECT_EQ(Str(data.at("environment")), "sci@2");
  ASSERT_EQ(data.at("unmet").as_array().size(), 1u);
  EXPECT_EQ(Str(data.at("unmet").at(0).at("package")), "sciprobe");
  EXPECT_EQ(Str(data.at("unmet").at(0).at("installed")), "1.2");

  reply = Call("skill.call", R"({"skill": "absent", "method": "m"})");
  EXPECT_EQ(ErrorCode(reply), -32009);
  EXPECT_EQ(Str(reply.at("error").at("message")), "package numpy not available (need >= 1.10, not installed)");
  reply = Call("skill.call", R"({"skill": "host-absent", "method": "m"})");
  EXPECT_EQ(ErrorCode(reply), -32009);
  EXPECT_EQ(Str(reply.at("error").at("message")),
            "package cubicle-not-installed-anywhere not available (need >= 1.10, not installed)");
  EXPECT_EQ(reply.at("error").at("data").at("environment"), nullptr);

  // Nothing ran: no mark, and the pool served nothing.
  EXPECT_FALSE(Marked());
  const json::value after = PoolStats("python");
  EXPECT_EQ(after.at("hits"), before.at("hits"));
  EXPECT_EQ(after.at("misses"), before.at("misses"));

  json::value fits = CallSkill("fits", R"(, "env": {"MARK": "fits"})");
  EXPECT_EQ(Str(fits.at("sciprobe").at(0)), "sci@1") << json::serialize(fits);
  EXPECT_TRUE(Marked("fits"));
}

TEST_F(Environments, PipTargetFoldersAreImportableWarmAndCold) {
  // The profiles' python_path folder, as `pip install --target /gate/pylib tinypkg` leaves it.
  Package(gate_.Join("pylib"), "tinypkg", "0.3", "pylib");
  Skill("warm", "requires: [tinypkg>=0.3]\n");
  Skill("cold", "profile: cold\nrequires: [tinypkg>=0.3]\n");
  // An uncaught exception's traceback on the cold route: the script's own
  // frame and line, not the prelude's.
  Skill("raises", "profile: cold\n", "import json, sys\nimport tinypkg\n\nraise ValueError(tinypkg.VALUE)\n");
  ASSERT_TRUE(Start().up()) << Log();
  ASSERT_TRUE(Quiet("python", 1)) << Log();
  const int64_t hits = PoolStats("python").at("hits").as_int64();

  json::value warm = CallSkill("warm");
  ASSERT_TRUE(warm.is_object()) << json::serialize(warm);
  EXPECT_EQ(warm.at("warm"), true) << "served by the pool's warm interpreter";
  EXPECT_EQ(PoolStats("python").at("hits").as_int64(), hits + 1);
  EXPECT_EQ(Str(warm.at("tinypkg").at(0)), "pylib");
  EXPECT_EQ(Str(warm.at("tinypkg").at(1)), "/gate/pylib/tinypkg/__init__.py");

  json::value cold = CallSkill("cold");
  ASSERT_TRUE(cold.is_object()) << json::serialize(cold);
  EXPECT_EQ(cold.at("warm"), false);
  EXPECT_EQ(Str(cold.at("tinypkg").at(0)), "pylib");
  EXPECT_EQ(json::serialize(cold.at("argv")), R"(["-c"])");
  EXPECT_EQ(cold.at("prelude_gone"), true);

  json::value raised = Call("skill.call", R"({"skill": "raises", "method": "m"})");
  ASSERT_EQ(ErrorCode(raised), -32007) << json::serialize(raised);
  const std::string tail = Str(raised.at("error").at("data").at("stderr_tail"));
  EXPECT_TRUE(absl::StrContains(tail, "File \"<string>\", line 4, in <module>\nValueError: pylib")) << tail;
  EXPECT_EQ(tail.find("File \"<string>\""), tail.rfind("File \"<string>\"")) << "one frame only:\n" << tail;

  // A command gets the folders too, through PYTHONPATH (no -I).
  json::value run = Result("sandbox.run", absl::StrCat(R"({"profile": "cold", "argv": ["python3", "-c", )",
                                                      Quoted("import tinypkg, os; print(tinypkg.VALUE, "
                                                             "os.environ['CUBICLE_PYTHON_PATH'])"),
                                                      "]}"));
  EXPECT_EQ(Str(run.at("stdout")), "pylib /gate/pylib\n") << json::serialize(run);
}

TEST_F(Environments, BadReferencesAreRefusedAndLeaveNothing) {
  PutSci();
  Skill("named", "environment: sci@1\n");
  Skill("unknown", "environment: nope\n");
  ASSERT_TRUE(Start().up()) << Log();
  json::value list = Result("skill.list", "");
  ASSERT_EQ(list.at("errors").as_array().size(), 1u) << json::serialize(list);
  EXPECT_TRUE(absl::StrContains(Str(list.at("errors").at(0).at("error")),
                                "unknown/skill.yaml: environment: no environment named 'nope' (there are: sci)"))
      << json::serialize(list);

  const std::string run = R"({"profile": "cold", "argv": ["touch", "/mark/ran"], "environment": )";
  json::value unknown = Call("sandbox.run", run + R"("nope"})");
  EXPECT_EQ(ErrorCode(unknown), -32004);
  EXPECT_EQ(Str(unknown.at("error").at("message")), "no environment named 'nope' (there are: sci)");
  json::value revision = Call("sandbox.run", run + R"("sci@9"})");
  EXPECT_EQ(ErrorCode(revision), -32004);
  EXPECT_EQ(Str(revision.at("error").at("message")), "environment 'sci' has no revision 9 (it has 1, 2)");
  json::value bad = Call("sandbox.run", run + R"("sci@x"})");
  EXPECT_EQ(ErrorCode(bad), -32602);
  EXPECT_TRUE(absl::StrContains(Str(bad.at("error").at("message")), "the revision after '@' must be a positive"))
      << json::serialize(bad);
  EXPECT_EQ(ErrorCode(Call("sandbox.run", run + "3}")), -32602);
  EXPECT_EQ(ErrorCode(Call("exec.start", run + R"("nope"})")), -32004);
  json::value both = Call("skill.call", R"({"skill": "named", "method": "m", "environment": "sci@2"})");
  EXPECT_EQ(ErrorCode(both), -32602);
  EXPECT_TRUE(absl::StrContains(Str(both.at("error").at("message")), "whose manifest names its environment (sci@1)"))
      << json::serialize(both);
  EXPECT_FALSE(Marked());

  // The good references run, sandbox.run and exec.start alike.
  json::value ran = Result("sandbox.run", run + R"("sci", "env": {}})");
  EXPECT_EQ(ran.at("exit_code"), 0) << json::serialize(ran);
  EXPECT_EQ(Str(ran.at("environment")), "sci@2");
  EXPECT_TRUE(Marked());
  json::value started = Result("exec.start", R"({"profile": "cold", "environment": "sci@1", )"
                                             R"("argv": ["sh", "-c", "echo $CUBICLE_ENVIRONMENT; ls /env"]})");
  ASSERT_TRUE(started.is_object());
  json::value waited = Result("exec.wait", absl::StrCat(R"({"exec_id": )", Quoted(Str(started.at("exec_id"))),
                                                        R"(, "timeout_ms": 30000})"));
  EXPECT_EQ(Str(waited.at("result").at("stdout")), "sci@1\nenvironment.json\nextra\nlib\n") << json::serialize(waited);
}

}  // namespace
}  // namespace cubicle::test_support

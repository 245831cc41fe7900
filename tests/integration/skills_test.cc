// Skills by name through `cubicle serve` (docs/skills.md): a skills
// directory of three skills, one in several versions, listed, described
// and called by name and by version; bad manifests reported while the good
// ones serve; a reload that adds a version while a call on the old one is
// running; the warm pool serving a call by name; the script held from the
// load, whatever happens to its file; and a caller's profile scope
// applied to the skill's profile. Waits are bounds for failures; nothing
// asserts how long anything took.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// A Python skill answering with its version, whether it ran in a warm
// interpreter (which has `socket` imported already: docs/config.md), its
// MODE variable and its params.
std::string PythonSkill(const std::string& version, const std::string& before = "") {
  return absl::StrCat("import json, os, sys, time\n", before,
                      "request = json.loads(sys.stdin.readline())\n"
                      "print(json.dumps({'jsonrpc': '2.0', 'id': request['id'], 'result': {'version': '",
                      version,
                      "', 'warm': 'socket' in sys.modules, 'mode': os.environ.get('MODE'), "
                      "'params': request.get('params')}}), flush=True)\n");
}

// Waits, inside the sandbox, for /gate/go: running until the test says.
constexpr char kWaitForGate[] = "while not os.path.exists('/gate/go'): time.sleep(0.02)\n";

constexpr char kShellSkill[] =
    "read -r line\n"
    "printf '{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"greeting\":\"hello from %s\"}}\\n' \"$0\"\n";

class Skills : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    ASSERT_EQ(::chmod(gate_.path().c_str(), 0755), 0);  // the sandbox user looks in it
    // word-stats requires numpy>=1.10: the python profile's python_path
    // holds its metadata (the module itself is not needed: the skill does
    // not import it).
    ASSERT_EQ(::mkdir(gate_.Join("pylib").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(gate_.Join("pylib/numpy-1.26.0.dist-info").c_str(), 0755), 0);
    ASSERT_TRUE(WriteFile(gate_.Join("pylib/numpy-1.26.0.dist-info/METADATA"), "Name: numpy\nVersion: 1.26.0\n"));
    skills_ = dir_.Join("skills");
    ASSERT_EQ(::mkdir(skills_.c_str(), 0755), 0);
  }

  void TearDown() override {
    if (daemon_ != nullptr && daemon_->process().started()) daemon_->Stop();
    daemon_.reset();
    HostHygieneTest::TearDown();
  }

  // A file under the skills directory, its folders made.
  void Put(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(skills_, "/", name);
    for (size_t slash = path.find('/', skills_.size() + 1); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      ::mkdir(path.substr(0, slash).c_str(), 0755);
    }
    ASSERT_TRUE(WriteFile(path, text)) << path;
  }

  // word-stats 1.0.0, 1.1.0 and 2.0.0-rc.1 (YAML), checked-divide 1.0.0
  // (JSON), greet 0.1.0 (shell, a folder that is itself the version).
  void PutThreeSkills() {
    for (const char* v : {"1.0.0", "1.1.0", "2.0.0-rc.1"}) {
      Put(absl::StrCat("word-stats/", v, "/skill.yaml"),
          absl::StrCat("name: word-stats\nversion: ", v, "\ndescription: counts words ", v,
                       "\nentry: main.py\nrequires: [numpy>=1.10]\nenv: {MODE: manifest}\n"
                       "limits: {memory: 128M}\ntimeout_ms: 20000\n"));
      Put(absl::StrCat("word-stats/", v, "/main.py"), PythonSkill(v));
    }
    Put("checked-divide/1.0.0/skill.json",
        R"({"name": "checked-divide", "version": "1.0.0", "entry": "divide.py", "profile": "python"})");
    Put("checked-divide/1.0.0/divide.py",
        "import json, sys\nr = json.loads(sys.stdin.readline())\n"
        "print(json.dumps({'jsonrpc': '2.0', 'id': r['id'], 'error': {'code': 1, 'message': 'division by zero'}}))\n");
    Put("greet/skill.yaml", "name: greet\nversion: 0.1.0\nentry: greet.sh\n");
    Put("greet/greet.sh", kShellSkill);
  }

  std::string Config(const std::string& top = "", const std::string& more_profiles = "") const {
    return absl::StrCat(R"({"skills": {"dir": )", Quoted(skills_), skills_more_, "}, ", top, R"( "profiles": {
      "python": {"limits": {"memory": "256M", "pids": 64}, "timeout_ms": 20000, "max_timeout_ms": 60000,
                 "binds": [{"source": )", Quoted(gate_.path()), R"(, "dest": "/gate"}], "python_path": ["/gate/pylib"],
                 "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8},
                 "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}},
      "shell": {"limits": {"memory": "128M", "pids": 32}, "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}})",
                        more_profiles, "}}");
  }

  SocketDaemon& Start(const std::vector<std::string>& more_flags = {}, const std::string& top = "",
                      const std::string& more_profiles = "") {
    config_ = WriteConfig(dir_, Config(top, more_profiles));
    std::vector<std::string> flags = {"--config", config_};
    flags.insert(flags.end(), more_flags.begin(), more_flags.end());
    daemon_ = std::make_unique<SocketDaemon>(SocketDaemon::Options{flags, std::nullopt, {"CUBICLE_LOG_LEVEL=info"}});
    return *daemon_;
  }

  json::value Call(const std::string& method, const std::string& params) {
    return daemon_->Call(RequestLine(++id_, method, params));
  }
  json::value Result(const std::string& method, const std::string& params) {
    json::value reply = Call(method, params);
    EXPECT_TRUE(HasResult(reply)) << method << " " << params << ": " << json::serialize(reply);
    return HasResult(reply) ? reply.at("result") : json::value(nullptr);
  }
  // skill.call {"skill": REFERENCE, ...}: the skill's own result, with
  // "skill" (name, version, id) beside it.
  json::value CallSkill(const std::string& reference, const std::string& more = "") {
    return Result("skill.call", absl::StrCat(R"({"skill": )", Quoted(reference),
                                             R"(, "method": "count", "params": {"text": "a b"})", more, "}"));
  }
  static std::string VersionRun(const json::value& result) {
    return result.is_object() && result.as_object().contains("result") ? Str(result.at("result").at("version"))
                                                                        : json::serialize(result);
  }

  // SIGHUP, then the daemon's "reloads" once it has counted this one.
  bool Reload() {
    auto count = [&] {
      json::value h = Result("health", "");
      return h.is_object() ? h.at("reloads").at("ok").as_int64() + h.at("reloads").at("refused").as_int64() : -1;
    };
    const int64_t before = count();
    daemon_->process().Signal(SIGHUP);
    for (int i = 0; i < 3000; ++i) {  // at most 30 s
      if (count() > before) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // Polls (at most 30 s) until `pool` holds `idle` zygotes and builds none.
  bool Quiet(const std::string& pool, int64_t idle) {
    for (int i = 0; i < 3000; ++i) {
      json::value p = PoolStats(pool);
      if (p.is_object() && p.at("idle").as_int64() >= idle && p.at("building").as_int64() == 0) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  json::value PoolStats(const std::string& pool) {
    json::value stats = Result("pool.stats", "");
    return stats.is_object() ? stats.at("pools").at(pool) : json::value(nullptr);
  }

  std::string Log() { return daemon_->process().StderrSoFar(); }

  TempDir dir_;
  TempDir gate_;
  std::string skills_;
  std::string skills_more_;  // more members of "skills", after its dir
  std::string config_;
  std::unique_ptr<SocketDaemon> daemon_;
  int64_t id_ = 0;
};

TEST_F(Skills, ListDescribeAndCallByNameAndVersion) {
  PutThreeSkills();
  ASSERT_TRUE(Start().up());

  json::value list = Result("skill.list", "");
  ASSERT_TRUE(list.is_object());
  EXPECT_EQ(Str(list.at("dir")), skills_);
  EXPECT_TRUE(list.at("errors").as_array().empty()) << json::serialize(list);
  const json::array& skills = list.at("skills").as_array();
  ASSERT_EQ(skills.size(), 3u) << json::serialize(list);
  EXPECT_EQ(Str(skills[0].at("name")), "checked-divide");
  EXPECT_EQ(Str(skills[1].at("name")), "greet");
  const json::value& word_stats = skills[2];
  EXPECT_EQ(Str(word_stats.at("name")), "word-stats");
  EXPECT_EQ(Str(word_stats.at("latest")), "1.1.0");  // never the prerelease by default
  EXPECT_EQ(Str(word_stats.at("description")), "counts words 1.1.0");
  const json::array& versions = word_stats.at("versions").as_array();
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_EQ(Str(versions[0].at("version")), "1.0.0");
  EXPECT_EQ(Str(versions[2].at("version")), "2.0.0-rc.1");
  EXPECT_EQ(versions[2].at("prerelease"), true);

  // The id, recomputed from the script's bytes (docs/skills.md, "Identity").
  const std::string script = PythonSkill("1.1.0");
  const std::string id = Sha256Hex(absl::StrCat("cubicle-skill-id-v1\nscript ", script.size(), "\n", script,
                                                "\nrequires 1\nnumpy>=1.10\n"));
  EXPECT_EQ(Str(versions[1].at("id")), id);

  json::value described = Result("skill.describe", R"({"name": "word-stats"})");
  ASSERT_TRUE(described.is_object());
  EXPECT_EQ(Str(described.at("version")), "1.1.0");
  EXPECT_EQ(Str(described.at("id")), id);
  EXPECT_EQ(Str(described.at("profile")), "python");
  EXPECT_EQ(described.at("warm"), true);
  EXPECT_EQ(described.at("limits").at("memory"), 128 << 20);  // the manifest's, within the profile's
  EXPECT_EQ(described.at("limits").at("pids"), 64);           // the profile's
  EXPECT_EQ(described.at("timeout_ms"), 20000);
  EXPECT_EQ(json::serialize(described.at("requires")), R"(["numpy>=1.10"])");
  EXPECT_EQ(Str(described.at("manifest").at("name")), "word-stats");
  EXPECT_EQ(Str(Result("skill.describe", R"({"name": "word-stats", "version": "1.0.0"})").at("version")), "1.0.0");
  EXPECT_EQ(ErrorCode(Call("skill.describe", R"({"name": "nope"})")), -32004);

  json::value by_name = CallSkill("word-stats");
  EXPECT_EQ(VersionRun(by_name), "1.1.0");
  EXPECT_EQ(Str(by_name.at("skill").at("name")), "word-stats");
  EXPECT_EQ(Str(by_name.at("skill").at("version")), "1.1.0");
  EXPECT_EQ(Str(by_name.at("skill").at("id")), id);
  EXPECT_EQ(Str(by_name.at("profile")), "python");
  EXPECT_EQ(Str(by_name.at("result").at("mode")), "manifest");  // the manifest's env
  EXPECT_EQ(json::serialize(by_name.at("result").at("params")), R"({"text":"a b"})");
  EXPECT_EQ(VersionRun(CallSkill("word-stats@1.0.0")), "1.0.0");
  EXPECT_EQ(VersionRun(CallSkill("word-stats@~1.0")), "1.0.0");
  EXPECT_EQ(VersionRun(CallSkill("word-stats@2.0.0-rc.1")), "2.0.0-rc.1");
  // The request's env goes over the manifest's; its limits and timeout
  // replace the manifest's, within the profile's.
  EXPECT_EQ(Str(CallSkill("word-stats", R"(, "env": {"MODE": "request"})").at("result").at("mode")), "request");
  EXPECT_EQ(VersionRun(CallSkill("word-stats", R"(, "limits": {"memory": "200M"}, "timeout_ms": 30000)")), "1.1.0");

  json::value divided = CallSkill("checked-divide");
  EXPECT_EQ(Str(divided.at("error").at("message")), "division by zero");
  json::value greeted = CallSkill("greet");
  EXPECT_EQ(Str(greeted.at("result").at("greeting")), "hello from greet");
  EXPECT_EQ(Str(greeted.at("profile")), "shell");

  // Refused before anything runs.
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "word-stats", "argv": ["python3"], "method": "m"})")), -32602);
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "word-stats", "profile": "shell", "method": "m"})")), -32602);
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "word-stats@3", "method": "m"})")), -32004);
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "Word Stats", "method": "m"})")), -32602);
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "word-stats", "method": "m", "limits": {"memory": "1G"}})")),
            -32002);
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "word-stats", "method": "m", "timeout_ms": 60001})")), -32002);
  // An argv still works as before.
  json::value by_argv = Result("skill.call", absl::StrCat(R"({"profile": "python", "argv": ["python3", "-I", "-c", )",
                                                          Quoted(PythonSkill("argv")), R"(], "method": "count"})"));
  EXPECT_EQ(VersionRun(by_argv), "argv");
  EXPECT_FALSE(by_argv.as_object().contains("skill"));

  json::value health = Result("health", "");
  EXPECT_EQ(health.at("skills").at("versions"), 5);
  EXPECT_EQ(health.at("skills").at("errors"), 0);
}

TEST_F(Skills, BadManifestsAreReportedAndTheGoodOnesServe) {
  PutThreeSkills();
  struct Bad {
    std::string folder, manifest, says;
  };
  const std::string base = "version: 1.0.0\nentry: main.py\n";
  const std::vector<Bad> bad = {
      {"b-name", "name: Bad Name\n" + base, "name: 'Bad Name' is not a skill name"},
      {"b-version", "name: b-version\nversion: 1.0\nentry: main.py\n", "version: expected a string"},
      {"b-entry-parent", "name: b-entry-parent\nversion: 1.0.0\nentry: ../greet/greet.sh\n", "entry: path '../greet"},
      {"b-entry-link", "name: b-entry-link\nversion: 1.0.0\nentry: link.py\n", "entry: 'link.py' is a symlink"},
      {"b-entry-missing", "name: b-entry-missing\nversion: 1.0.0\nentry: gone.py\n", "entry: 'gone.py' does not exist"},
      {"b-profile", "name: b-profile\nprofile: gpu\n" + base, "profile: no profile named 'gpu' is configured"},
      {"b-requires", "name: b-requires\nrequires: [pandas, numpy>>1]\n" + base,
       "requires[1]: 'numpy>>1' is not a version constraint"},
      {"b-limits", "name: b-limits\nlimits: {memory: 1G}\n" + base, "limits: memory: 1073741824 (1 GiB) exceeds"},
      {"b-env", "name: b-env\nenv: [A]\n" + base, "env: expected"},
      {"b-network", "name: b-network\nnetwork: {mode: allowlist, allow_domains: [pypi.org]}\n" + base, "network: "},
      {"b-timeout", "name: b-timeout\ntimeout_ms: 60001\n" + base, "timeout_ms: 60001 exceeds the profile's ceiling"},
      {"b-unknown", "name: b-unknown\nentrypoint: main.py\n" + base, "entrypoint: unknown key"},
      {"b-yaml", "name: b-yaml\n  version: [\n", "invalid YAML at line 2"},
  };
  for (const Bad& b : bad) {
    Put(b.folder + "/skill.yaml", b.manifest);
    Put(b.folder + "/main.py", PythonSkill("bad"));
  }
  ASSERT_EQ(::symlink(dir_.Join("outside.py").c_str(), absl::StrCat(skills_, "/b-entry-link/link.py").c_str()), 0);
  ASSERT_TRUE(WriteFile(dir_.Join("outside.py"), PythonSkill("outside")));
  ASSERT_TRUE(Start().up());

  json::value list = Result("skill.list", "");
  ASSERT_TRUE(list.is_object());
  const json::array& errors = list.at("errors").as_array();
  EXPECT_EQ(errors.size(), bad.size()) << json::serialize(errors);
  for (const Bad& b : bad) {
    const std::string path = absl::StrCat(skills_, "/", b.folder, "/skill.yaml");
    bool found = false;
    for (const json::value& e : errors) {
      found = found || (Str(e.at("path")) == path && absl::StrContains(Str(e.at("error")), path + ": " + b.says));
    }
    EXPECT_TRUE(found) << b.folder << ": no error saying '" << b.says << "' in " << json::serialize(errors);
    // ...and in the log, as a warning.
    EXPECT_TRUE(absl::StrContains(Log(), absl::StrCat("skill left out: ", path))) << b.folder;
  }
  EXPECT_EQ(list.at("skills").as_array().size(), 3u);
  EXPECT_EQ(Result("health", "").at("skills").at("errors"), static_cast<int64_t>(bad.size()));
  EXPECT_EQ(VersionRun(CallSkill("word-stats")), "1.1.0");
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "b-limits", "method": "m"})")), -32004);
}

TEST_F(Skills, ACallByNameIsServedWarmFromThePool) {
  PutThreeSkills();
  ASSERT_TRUE(Start().up());
  ASSERT_TRUE(Quiet("python", 1)) << Log();
  const int64_t hits = PoolStats("python").at("hits").as_int64();
  json::value result = CallSkill("word-stats");
  EXPECT_EQ(result.at("result").at("warm"), true) << json::serialize(result);
  EXPECT_EQ(PoolStats("python").at("hits").as_int64(), hits + 1);
  // What tells: the same script exec'd (another argv[0]) runs cold.
  json::value exec = Result("skill.call", absl::StrCat(R"({"profile": "python", "argv": ["/usr/bin/python3", "-I", )",
                                                       R"("-c", )", Quoted(PythonSkill("x")), R"(], "method": "m"})"));
  EXPECT_EQ(exec.at("result").at("warm"), false) << json::serialize(exec);
}

TEST_F(Skills, TheScriptRunsAsLoadedUntilAReload) {
  PutThreeSkills();
  ASSERT_TRUE(Start().up());
  json::value first = CallSkill("word-stats@1.0.0");
  EXPECT_EQ(VersionRun(first), "1.0.0");
  // Rewritten on disk: what runs is the script the load read, until a
  // reload reads it again.
  Put("word-stats/1.0.0/main.py", PythonSkill("edited"));
  json::value second = CallSkill("word-stats@1.0.0");
  EXPECT_EQ(VersionRun(second), "1.0.0");
  EXPECT_EQ(second.at("skill").at("id"), first.at("skill").at("id"));
  ASSERT_TRUE(Reload()) << Log();
  json::value third = CallSkill("word-stats@1.0.0");
  EXPECT_EQ(VersionRun(third), "edited");
  EXPECT_NE(third.at("skill").at("id"), first.at("skill").at("id"));
  EXPECT_TRUE(absl::StrContains(Log(), "skills: 5 version(s) of 3 skill(s)")) << Log();
}

TEST_F(Skills, AReloadAddsAVersionWhileACallOnTheOldOneRuns) {
  PutThreeSkills();
  Put("slow/1.0.0/skill.yaml", "name: slow\nversion: 1.0.0\nentry: main.py\n");
  Put("slow/1.0.0/main.py", PythonSkill("1.0.0", kWaitForGate));
  ASSERT_TRUE(Start().up());
  DaemonClient running(daemon_->socket());
  ASSERT_TRUE(running.Send(RequestLine(1, "skill.call", R"({"skill": "slow", "method": "m"})")));
  bool started = false;
  for (int i = 0; i < 3000 && !started; ++i) {  // at most 30 s
    json::value stats = PoolStats("python");
    started = stats.is_object() && stats.at("in_use").as_int64() == 1;
    if (!started) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(started) << "the call never started\n" << Log();

  // A new version, and a broken one beside it: the good one is served.
  Put("slow/1.1.0/skill.yaml", "name: slow\nversion: 1.1.0\nentry: main.py\n");
  Put("slow/1.1.0/main.py", PythonSkill("1.1.0"));
  Put("slow/1.2.0/skill.yaml", "name: slow\nversion: 1.2.0\nentry: absent.py\n");
  ASSERT_TRUE(Reload()) << Log();
  EXPECT_EQ(VersionRun(CallSkill("slow")), "1.1.0");
  json::value list = Result("skill.list", "");
  ASSERT_EQ(list.at("errors").as_array().size(), 1u) << json::serialize(list);
  EXPECT_TRUE(absl::StrContains(Str(list.at("errors").at(0).at("error")), "slow/1.2.0/skill.yaml: entry: 'absent.py'"));
  EXPECT_TRUE(absl::StrContains(Log(), "skill left out: ")) << Log();

  // The call read before the reload ends as the version it found.
  ASSERT_TRUE(WriteFile(gate_.Join("go"), ""));
  std::optional<std::string> line = running.ReadLine();
  ASSERT_TRUE(line.has_value());
  json::value reply = ParseJson(*line);
  ASSERT_TRUE(HasResult(reply)) << *line;
  EXPECT_EQ(VersionRun(reply.at("result")), "1.0.0");
  EXPECT_EQ(Str(reply.at("result").at("skill").at("version")), "1.0.0");
}

// A profile with an egress allowlist lets its sandboxes open AF_INET
// sockets (to reach the gateway's bridge); a skill whose manifest says
// "network: none" runs without, in a sandbox of its own.
TEST_F(Skills, ASkillFindsTheEnvironmentDefaultsItsAuthorExpects) {
  const std::string probe =
      "import json, os, sys\n"
      "r = json.loads(sys.stdin.readline())\n"
      "keys = ['OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS', 'MPLBACKEND', 'PYTHONUNBUFFERED', 'TZ']\n"
      "seen = [os.environ.get(k, '-') for k in keys]\n"
      "seen.append('home-writable' if os.access(os.environ.get('HOME', '/'), os.W_OK) else 'home-read-only')\n"
      "print(json.dumps({'jsonrpc': '2.0', 'id': r['id'], 'result': {'version': ' '.join(seen)}}), flush=True)\n";
  Put("env/skill.yaml", "name: env\nversion: 1.0.0\nentry: main.py\n");
  Put("env/main.py", probe);
  Put("env4/skill.yaml", "name: env4\nversion: 1.0.0\nentry: main.py\nenv:\n  OMP_NUM_THREADS: \"4\"\n");
  Put("env4/main.py", probe);
  skills_more_ = R"(, "tz": "Europe/Paris")";
  ASSERT_TRUE(Start().up());
  EXPECT_EQ(VersionRun(CallSkill("env")), "1 1 1 Agg 1 Europe/Paris home-writable");
  EXPECT_EQ(VersionRun(CallSkill("env4")), "4 1 1 Agg 1 Europe/Paris home-writable") << "the manifest's env wins";
  EXPECT_EQ(VersionRun(CallSkill("env", R"(, "env": {"TZ": "UTC", "MPLBACKEND": "svg"})")),
            "1 1 1 svg 1 UTC home-writable")
      << "the request's env wins";
  // A skill by argv is a command like any other: no skill defaults.
  json::value by_argv = Result("skill.call", absl::StrCat(R"({"profile": "python", "argv": ["python3", "-I", "-c", )",
                                                          Quoted(probe), R"(], "method": "m"})"));
  EXPECT_EQ(VersionRun(by_argv), "- - - - - - home-writable");
}

TEST_F(Skills, AManifestsNetworkNarrowsItsProfiles) {
  const std::string probe =
      "import json, socket, sys\n"
      "r = json.loads(sys.stdin.readline())\n"
      "try:\n"
      "    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()\n"
      "    net = 'allowed'\n"
      "except OSError:\n"
      "    net = 'refused'\n"
      "print(json.dumps({'jsonrpc': '2.0', 'id': r['id'], 'result': {'version': net}}), flush=True)\n";
  Put("online/skill.yaml", "name: online\nversion: 1.0.0\nentry: main.py\nprofile: web\n");
  Put("online/main.py", probe);
  Put("offline/skill.yaml", "name: offline\nversion: 1.0.0\nentry: main.py\nprofile: web\nnetwork: none\n");
  Put("offline/main.py", probe);
  ASSERT_TRUE(Start({}, "", R"(, "web": {"network": {"allow_domains": ["example.org"]}, "limits": {"memory": "256M"},
                                       "pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}})")
                  .up());
  EXPECT_EQ(Result("skill.list", "").at("errors").as_array().size(), 0u);
  EXPECT_EQ(VersionRun(CallSkill("online")), "allowed");
  EXPECT_EQ(VersionRun(CallSkill("offline")), "refused");
}

TEST_F(Skills, AScopedCallerIsCheckedAgainstTheSkillsProfile) {
  if (!IsRoot()) GTEST_SKIP() << "the test switches to another user: root only";
  PutThreeSkills();
  const std::string keys = dir_.Join("keys.json");
  ASSERT_TRUE(WriteFile(keys, R"({"keys": [{"name": "agent", "uid": 65534, "methods": ["skill.call", "skill.list"],
                                             "profiles": ["shell"]}]})"));
  ASSERT_EQ(::chmod(keys.c_str(), 0600), 0);
  ASSERT_TRUE(Start({"--keys-file", keys}, R"("socket": {"mode": "0666"},)").up());
  const std::string socket_dir = daemon_->socket().substr(0, daemon_->socket().rfind('/'));
  ASSERT_EQ(::chmod(socket_dir.c_str(), 0755), 0);
  const std::string replies = AsUser(daemon_->socket(), 65534,
                                     {RequestLine(1, "skill.call", R"({"skill": "greet", "method": "m"})"),
                                      RequestLine(2, "skill.call", R"({"skill": "word-stats", "method": "m"})")});
  std::vector<std::string> lines = absl::StrSplit(replies, '\n');
  ASSERT_GE(lines.size(), 2u) << replies;
  EXPECT_TRUE(HasResult(ParseJson(lines[0]))) << lines[0];
  EXPECT_EQ(ErrorCode(ParseJson(lines[1])), -32008) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[1], "profile python")) << lines[1];
}

}  // namespace
}  // namespace cubicle::test_support

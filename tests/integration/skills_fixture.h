// The fixture of the skills-by-name tests (skills_test.cc,
// static_policy_test.cc): a daemon over a skills directory the test
// writes, with profiles "python" (warm) and "shell", and the calls the
// tests share. In an anonymous namespace: each test file has its own copy.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/integration/daemon_fixture.h"
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
inline std::string PythonSkill(const std::string& version, const std::string& before = "") {
  return absl::StrCat("import json, os, sys, time\n", before,
                      "request = json.loads(sys.stdin.readline())\n"
                      "print(json.dumps({'jsonrpc': '2.0', 'id': request['id'], 'result': {'version': '",
                      version,
                      "', 'warm': 'socket' in sys.modules, 'mode': os.environ.get('MODE'), "
                      "'params': request.get('params')}}), flush=True)\n");
}

constexpr char kShellSkill[] =
    "read -r line\n"
    "printf '{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"greeting\":\"hello from %s\"}}\\n' \"$0\"\n";

class Skills : public DaemonFixture {
 protected:
  void SetUp() override {
    DaemonFixture::SetUp();
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
                 "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]})", python_more_, R"(},
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


  TempDir dir_;
  TempDir gate_;
  std::string skills_;
  std::string skills_more_;  // more members of "skills", after its dir
  std::string python_more_;  // more members of profile "python", each after a comma
  std::string config_;
};

}  // namespace
}  // namespace cubicle::test_support

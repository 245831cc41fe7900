// skill.call by name against skill.call by argv, in the same run (issue 32):
// one in-process daemon (Daemon::HandleLine, as cubicle_pool_bench's
// skill.call) whose skills directory holds a trivial Python skill, called
// as {"skill": "inc"}, {"skill": "inc@^1"} and as the argv that runs the
// same script on the same warm python profile; then the same with the
// script padded to 64 KiB, where the argv call carries (and parses) the
// script in every request and the call by name does not; then the call by
// name in an environment (docs/skills.md, "Environments"), which gets a
// sandbox of its own: "pkgs", a package set for the host's python3, and
// "own", whose bin/python3 (a copy of the host's) runs it with the host's
// interpreters masked. Each repetition starts on a quiet pool (4 idle,
// nothing building or tearing down): it times the round trip, not the
// refill.
//
// Conversational calls (docs/skills.md, "Skill sessions"): the same
// increment as a line loop, "inc-loop", called in a skill session opened
// once per benchmark (skill.call {skill_session}), against a fresh
// skill.call by name of the same script. One client, and four at once
// (each its own session), for the sustained case.
#include <limits.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"
#include "rpc/config.h"
#include "rpc/daemon.h"

namespace cubicle::bench {
namespace {

const char kSkill[] =
    "import json, sys\n"
    "req = json.loads(sys.stdin.readline())\n"
    "print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': req['params']['a'] + 1}), flush=True)\n";

// The increment as a conversation: one answer per request line.
const char kLoopSkill[] =
    "import json, sys\n"
    "for line in sys.stdin:\n"
    "    req = json.loads(line)\n"
    "    print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': req['params']['a'] + 1}), flush=True)\n";

std::string LargeSkill() { return absl::StrCat(kSkill, "#", std::string(64 << 10, 'x'), "\n"); }

// A skills directory for this process's life (inc and inc-large, 1.0.0)
// and an environments directory (pkgs@1, own@1 where the host has a
// /usr/bin/python3 to copy).
class SkillsDir {
 public:
  SkillsDir() {
    char tmpl[] = "/tmp/cubicle-skill-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::perror("skill_bench: mkdtemp");
      std::exit(1);
    }
    path_ = tmpl;
    std::filesystem::permissions(path_, std::filesystem::perms(0755));  // the sandbox user reads /env
    Put("inc", kSkill);
    Put("inc-large", LargeSkill());
    Put("inc-loop", kLoopSkill);
    PutEnvironments();
  }
  ~SkillsDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string skills() const { return path_ + "/skills"; }
  std::string environments() const { return path_ + "/environments"; }
  bool own_interpreter() const { return own_interpreter_; }

 private:
  void PutEnvironments() {
    char real[PATH_MAX];
    std::error_code ec;
    std::filesystem::create_directories(environments() + "/pkgs/1", ec);
    if (::realpath("/usr/bin/python3", real) == nullptr) return;
    const std::string python = real;
    // Its site-packages go on sys.path by the cold route's prelude.
    const std::string site = absl::StrCat("/lib/", python.substr(python.rfind('/') + 1), "/site-packages");
    std::filesystem::create_directories(environments() + "/pkgs/1" + site, ec);
    const std::string own = environments() + "/own/1";
    std::filesystem::create_directories(own + "/bin", ec);
    std::filesystem::create_directories(own + site, ec);
    std::ofstream(own + "/pyvenv.cfg") << "home = /usr/bin\n";
    own_interpreter_ = std::filesystem::copy_file(python, own + "/bin/python3", ec);
  }
  void Put(const std::string& name, const std::string& script) {
    const std::string folder = absl::StrCat(skills(), "/", name, "/1.0.0");
    std::filesystem::create_directories(folder);
    std::ofstream(folder + "/skill.yaml") << "name: " << name << "\nversion: 1.0.0\nentry: main.py\n";
    std::ofstream(folder + "/main.py") << script;
  }
  std::string path_;
  bool own_interpreter_ = false;
};

SkillsDir& Skills() {
  static SkillsDir dir;
  return dir;
}

rpc::Daemon& SharedDaemon() {
  static std::unique_ptr<rpc::Daemon> daemon = [] {
    absl::StatusOr<rpc::DaemonConfig> made = rpc::DefaultConfig();
    if (!made.ok()) {
      std::fprintf(stderr, "skill_bench: %s\n", std::string(made.status().message()).c_str());
      std::exit(1);
    }
    rpc::DaemonConfig config = *std::move(made);
    config.skills_dir = Skills().skills();
    config.environments_dir = Skills().environments();
    for (auto& [name, profile] : config.profiles) {
      profile.pool.min_idle = 4;
      profile.pool.max_idle = 4;
      profile.pool.max_total = 8;
      profile.pool.zygote.interpreter = profile.interpreter;
    }
    absl::StatusOr<std::unique_ptr<rpc::Daemon>> d = rpc::Daemon::Create(std::move(config));
    if (!d.ok()) {
      std::fprintf(stderr, "skill_bench: %s\n", std::string(d.status().message()).c_str());
      std::exit(1);
    }
    return *std::move(d);
  }();
  return *daemon;
}

std::string Answer(rpc::Daemon& daemon, const std::string& line) {
  std::promise<std::string> reply;
  daemon.HandleLine(line, [&](std::string r) { reply.set_value(std::move(r)); });
  return reply.get_future().get();
}

// The python pool holds 4 idle zygotes and nothing builds or tears down.
void WaitQuiet(rpc::Daemon& daemon) {
  Answer(daemon,
         R"({"jsonrpc":"2.0","id":0,"method":"pool.warm","params":{"profile":"python","count":4,"timeout_ms":30000}})");
  for (int i = 0; i < 3000; ++i) {
    boost::json::value v = boost::json::parse(Answer(daemon, R"({"jsonrpc":"2.0","id":0,"method":"pool.stats"})"));
    const boost::json::object& python = v.at("result").at("pools").at("python").as_object();
    if (python.at("building").as_int64() == 0 && python.at("tearing_down").as_int64() == 0 &&
        python.at("idle").as_int64() >= 4) {
      return;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// `call` is skill.call's params but for "method" and "params".
void SkillCall(benchmark::State& state, const std::string& call) {
  rpc::Daemon& daemon = SharedDaemon();
  const std::string line =
      absl::StrCat(R"({"jsonrpc":"2.0","id":1,"method":"skill.call","params":{)", call,
                   R"(,"method":"inc","params":{"a":41}}})");
  WaitQuiet(daemon);
  for (auto _ : state) {
    std::string r = Answer(daemon, line);
    if (r.find("\"result\":42") == std::string::npos) {
      state.SkipWithError(r.substr(0, 300).c_str());
      break;
    }
  }
}

std::string ArgvCall(const std::string& script) {
  return absl::StrCat(R"("profile":"python","argv":)",
                      boost::json::serialize(boost::json::array{"python3", "-I", "-c", script}));
}

void BM_SkillCallArgv(benchmark::State& s) { SkillCall(s, ArgvCall(kSkill)); }
void BM_SkillCallByName(benchmark::State& s) { SkillCall(s, R"("skill":"inc")"); }
void BM_SkillCallByRange(benchmark::State& s) { SkillCall(s, R"("skill":"inc@^1")"); }
void BM_SkillCallArgvLarge(benchmark::State& s) { SkillCall(s, ArgvCall(LargeSkill())); }
void BM_SkillCallByNameLarge(benchmark::State& s) { SkillCall(s, R"("skill":"inc-large")"); }

// Calls in one skill session per benchmark thread, opened before timing.
// No quiet wait: the threads open their sessions at once, and a refill
// running meanwhile only slows the sessions' side of the ratio.
void BM_SkillSessionCall(benchmark::State& state) {
  rpc::Daemon& daemon = SharedDaemon();
  boost::json::value opened = boost::json::parse(Answer(
      daemon, R"({"jsonrpc":"2.0","id":1,"method":"skill.session.open","params":{"skill":"inc-loop"}})"));
  if (!opened.as_object().contains("result")) {
    state.SkipWithError(boost::json::serialize(opened).substr(0, 300).c_str());
    return;
  }
  const std::string key(opened.at("result").at("skill_session").as_string());
  const std::string line = absl::StrCat(R"({"jsonrpc":"2.0","id":1,"method":"skill.call","params":{"skill_session":")",
                                        key, R"(","method":"inc","params":{"a":41}}})");
  if (Answer(daemon, line).find("\"result\":42") == std::string::npos) {  // started, before timing
    state.SkipWithError("the session's first call failed");
  }
  for (auto _ : state) {
    std::string r = Answer(daemon, line);
    if (r.find("\"result\":42") == std::string::npos) {
      state.SkipWithError(r.substr(0, 300).c_str());
      break;
    }
  }
  Answer(daemon, absl::StrCat(R"({"jsonrpc":"2.0","id":1,"method":"skill.session.close","params":{"skill_session":")",
                              key, R"("}})"));
}
void BM_SkillCallByNameLoop(benchmark::State& s) { SkillCall(s, R"("skill":"inc-loop")"); }

// The conversational pair, one client and four: the sessions' calls are
// timed many to a repetition (each is a fraction of a millisecond), the
// fresh calls one to a repetition, as above.
void Conversation(benchmark::internal::Benchmark* b) {
  WithPercentiles(b->Iterations(50)->Repetitions(Repetitions())->UseRealTime()->Unit(benchmark::kMillisecond));
}

BENCHMARK(BM_SkillSessionCall)->Apply(Conversation);
BENCHMARK(BM_SkillSessionCall)->Apply(Conversation)->Threads(4);
BENCHMARK(BM_SkillCallByNameLoop)->Apply(PerExecution);
BENCHMARK(BM_SkillCallByNameLoop)->Apply(PerExecution)->Threads(4);
// In an environment: a sandbox made for the call, cold.
void BM_SkillCallInEnvironment(benchmark::State& s) { SkillCall(s, R"("skill":"inc","environment":"pkgs")"); }
void BM_SkillCallInEnvironmentOwnPython(benchmark::State& s) {
  if (!Skills().own_interpreter()) {
    s.SkipWithError("the host has no /usr/bin/python3 to copy");
    return;
  }
  SkillCall(s, R"("skill":"inc","environment":"own")");
}

BENCHMARK(BM_SkillCallArgv)->Apply(PerExecution);
BENCHMARK(BM_SkillCallByName)->Apply(PerExecution);
BENCHMARK(BM_SkillCallByRange)->Apply(PerExecution);
BENCHMARK(BM_SkillCallArgvLarge)->Apply(PerExecution);
BENCHMARK(BM_SkillCallByNameLarge)->Apply(PerExecution);
BENCHMARK(BM_SkillCallInEnvironment)->Apply(PerExecution);
BENCHMARK(BM_SkillCallInEnvironmentOwnPython)->Apply(PerExecution);

}  // namespace
}  // namespace cubicle::bench

BENCHMARK_MAIN();

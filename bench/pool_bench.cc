// Pooled hand-off against the cold path, in the same run (DESIGN §5, §9):
// `/bin/true` and `python3 -I -c pass` from a warm pool (Pool::Run: take an
// idle zygote, hand the request over, wait for the end), the same from a
// zygote built on the spot (the cold path), plain posix_spawn and bwrap;
// Python from a pool of warm interpreters; the daemon's skill.call round
// trip of a trivial Python skill, warm and exec'd; executions per second
// with two clients; the memory an idle zygote holds (PSS); and the whole
// round trip of a pooled sandbox.run through the `cubicle serve` binary.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"
#include "runtime/defaults.h"
#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rpc/config.h"
#include "rpc/daemon.h"
#include "runtime/pool.h"

extern char** environ;

namespace cubicle::bench {
namespace {

int DevNull() {
  static const int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  return fd;
}

runtime::ExecRequest Request(std::vector<std::string> argv) {
  runtime::ExecRequest r;
  r.argv = std::move(argv);
  r.env = {"PATH=/usr/bin:/bin"};
  r.stdin_fd = r.stdout_fd = r.stderr_fd = DevNull();
  return r;
}

runtime::SandboxSpec Profile() {
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec({});
  return *spec;  // no limits: the cgroup costs are bench/cgroup_bench's subject
}

const std::vector<std::string> kTrue = {"/bin/true"};

// The cubicle binary the process benchmarks spawn: $CUBICLE_BINARY, default
// the one built with this program.
std::string CubicleBinary() {
  const char* env = std::getenv("CUBICLE_BINARY");
  return env != nullptr && *env != '\0' ? env : CUBICLE_BINARY_PATH;
}
// /usr/bin/python3: the host PATH may put a shim first (pyenv), the sandbox has none.
const std::vector<std::string> kPython = {"/usr/bin/python3", "-I", "-c", "pass"};

void Report(benchmark::State& state, const runtime::ExecResult& r) {
  if (r.reason != runtime::ExitReason::kExited || r.exit_code != 0) {
    state.SkipWithError("the execution did not exit 0");
  }
}

// Waits (bounded) until the pool is quiet: min_idle ready, nothing being
// built or torn down. A timed hand-off then measures the hand-off, not the
// previous repetition's refill competing for the 2 CPUs (the throughput
// benchmark measures them together).
void WaitQuiet(runtime::Pool& pool) {
  pool.WaitWarm(absl::Seconds(30));
  for (int i = 0; i < 3000; ++i) {
    runtime::PoolStats s = pool.Stats();
    if (s.building == 0 && s.tearing_down == 0 && s.idle >= pool.config().min_idle) return;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

runtime::PoolConfig BenchPool(std::optional<runtime::WarmInterpreter> interpreter = std::nullopt) {
  runtime::PoolConfig config;
  config.min_idle = 4;
  config.max_idle = 4;
  config.max_total = 8;
  config.zygote.interpreter = std::move(interpreter);
  return config;
}

const runtime::WarmInterpreter kWarmPython{{"python3", "-I"}, {"json"}};

const runtime::WarmInterpreter kWarmNumpy{{"python3", "-I"}, {"json", "numpy"}};

runtime::Pool& SharedPool(bool warm, bool numpy = false) {
  static std::unique_ptr<runtime::Pool> plain, python, with_numpy;
  std::unique_ptr<runtime::Pool>& pool = numpy ? with_numpy : warm ? python : plain;
  if (pool == nullptr) {
    std::optional<runtime::WarmInterpreter> interpreter;
    if (warm) interpreter = numpy ? kWarmNumpy : kWarmPython;
    pool = *runtime::Pool::Create(warm ? "warm" : "bench", Profile(), BenchPool(interpreter));
  }
  return *pool;
}

void PooledRun(benchmark::State& state, const std::vector<std::string>& argv, bool warm = false,
               bool numpy = false) {
  if (numpy && std::system("/usr/bin/python3 -I -c 'import numpy' >/dev/null 2>&1") != 0) {
    state.SkipWithError("numpy is not installed on this host");
    for (auto _ : state) {
    }
    return;
  }
  runtime::Pool& pool = SharedPool(warm, numpy);
  WaitQuiet(pool);
  for (auto _ : state) {
    absl::StatusOr<runtime::ExecResult> r = pool.Run(Request(argv));
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
    if (warm && !r->warm) state.SkipWithError("not served warm");
    Report(state, *r);
  }
}

void ColdRun(benchmark::State& state, const std::vector<std::string>& argv) {
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(Profile());
    if (!z.ok()) {
      state.SkipWithError(std::string(z.status().message()).c_str());
      break;
    }
    absl::StatusOr<runtime::ExecResult> r = (*z)->Run(Request(argv));
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
    Report(state, *r);
  }
}

void Spawn(benchmark::State& state, const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd < 3; ++fd) posix_spawn_file_actions_adddup2(&actions, DevNull(), fd);
  for (auto _ : state) {
    pid_t pid;
    if (posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) {
      state.SkipWithError("posix_spawn failed");
      break;
    }
    int status;
    waitpid(pid, &status, 0);
  }
  posix_spawn_file_actions_destroy(&actions);
}

constexpr char kBwrap[] = "/usr/bin/bwrap";

void Bwrap(benchmark::State& state, const std::vector<std::string>& payload) {
  if (::access(kBwrap, X_OK) != 0) {
    state.SkipWithError("bubblewrap is not installed");
    for (auto _ : state) {
    }
    return;
  }
  Spawn(state, BwrapArgs(payload));
}

// The daemon's skill.call, in process: one JSON-RPC line in, the reply out.
const char kSkill[] =
    "import json, sys\n"
    "req = json.loads(sys.stdin.readline())\n"
    "print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': req['params']['a'] + 1}), flush=True)\n";

rpc::Daemon& SharedDaemon() {
  static std::unique_ptr<rpc::Daemon> daemon = [] {
    absl::StatusOr<rpc::DaemonConfig> made = rpc::DefaultConfig();
    if (!made.ok()) {
      std::fprintf(stderr, "pool_bench: %s\n", std::string(made.status().message()).c_str());
      std::exit(1);
    }
    rpc::DaemonConfig config = *std::move(made);
    for (auto& [name, profile] : config.profiles) {
      profile.pool.min_idle = 4;
      profile.pool.max_idle = 4;
      profile.pool.max_total = 8;
      profile.pool.zygote.interpreter = profile.interpreter;
    }
    return *rpc::Daemon::Create(std::move(config));
  }();
  return *daemon;
}

void SkillCall(benchmark::State& state, const std::string& argv_json) {
  rpc::Daemon& daemon = SharedDaemon();
  const std::string line = absl::StrCat(
      R"({"jsonrpc":"2.0","id":1,"method":"skill.call","params":{"profile":"python","argv":)", argv_json,
      R"(,"method":"inc","params":{"a":41}}})");
  // Warm and quiet first (pool.warm, then no refill running).
  std::promise<std::string> warmed;
  daemon.HandleLine(R"({"jsonrpc":"2.0","id":0,"method":"pool.warm","params":{"profile":"python","count":4,"timeout_ms":30000}})",
                    [&](std::string reply) { warmed.set_value(std::move(reply)); });
  warmed.get_future().get();
  // Quiet: no refill build or teardown of the previous repetition running.
  for (int i = 0; i < 3000; ++i) {
    std::promise<std::string> stats;
    daemon.HandleLine(R"({"jsonrpc":"2.0","id":0,"method":"pool.stats"})",
                      [&](std::string reply) { stats.set_value(std::move(reply)); });
    boost::json::value v = boost::json::parse(stats.get_future().get());
    const boost::json::object& python = v.at("result").at("pools").at("python").as_object();
    if (python.at("building").as_int64() == 0 && python.at("tearing_down").as_int64() == 0 &&
        python.at("idle").as_int64() >= 4) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  for (auto _ : state) {
    std::promise<std::string> reply;
    daemon.HandleLine(line, [&](std::string r) { reply.set_value(std::move(r)); });
    std::string r = reply.get_future().get();
    if (r.find("\"result\":42") == std::string::npos) {
      state.SkipWithError(r.c_str());
      break;
    }
  }
}

// Executions per second: two clients back to back on one pool (refill,
// teardown and the requests share the 2 CPUs; misses take the cold path).
void Throughput(benchmark::State& state, const std::vector<std::string>& argv, bool warm) {
  runtime::Pool& pool = SharedPool(warm);
  WaitQuiet(pool);
  constexpr int kPerClient = 100;
  for (auto _ : state) {
    std::atomic<int> failed{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < 2; ++c) {
      clients.emplace_back([&] {
        for (int i = 0; i < kPerClient; ++i) {
          absl::StatusOr<runtime::ExecResult> r = pool.Run(Request(argv));
          if (!r.ok() || r->exit_code != 0) ++failed;
        }
      });
    }
    for (std::thread& t : clients) t.join();
    if (failed.load() > 0) state.SkipWithError("an execution failed");
  }
  state.SetItemsProcessed(state.iterations() * 2 * kPerClient);
  runtime::PoolStats s = pool.Stats();
  state.counters["hit_ratio"] = static_cast<double>(s.hits) / static_cast<double>(std::max<uint64_t>(1, s.hits + s.misses));
}

// Proportional set size of a process and its descendants, in KiB.
uint64_t PssKib(pid_t pid) {
  uint64_t total = 0;
  std::ifstream rollup(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  std::string key;
  uint64_t value;
  while (rollup >> key) {
    if (key == "Pss:" && rollup >> value) total += value;
    rollup.ignore(1 << 10, '\n');
  }
  std::ifstream children(absl::StrCat("/proc/", pid, "/task/", pid, "/children"));
  pid_t child;
  while (children >> child) total += PssKib(child);
  return total;
}

// What one idle zygote holds: its init (and, warm, the interpreter with
// its preloaded modules), PSS.
void IdlePss(benchmark::State& state, bool warm) {
  std::optional<runtime::WarmInterpreter> interpreter;
  if (warm) interpreter = kWarmPython;
  runtime::ZygoteOptions options;
  options.interpreter = interpreter;
  uint64_t pss = 0;
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(Profile(), options);
    if (!z.ok()) {
      state.SkipWithError(std::string(z.status().message()).c_str());
      break;
    }
    pss = PssKib((*z)->init_pid());
  }
  state.counters["pss_kib"] = static_cast<double>(pss);
}

// `cubicle serve` as an orchestrator runs it (DESIGN §1): the binary,
// spawned with its stdin and stdout on pipes, the built-in configuration,
// one JSON-RPC request line written, one reply line read. Stderr (its JSON
// log) goes to /dev/null. Binary: $CUBICLE_BINARY, default the `cubicle`
// target of the same build.
class ServeProcess {
 public:
  static ServeProcess& Shared() {
    static ServeProcess* serve = new ServeProcess();  // ended by ~Daemon at exit: see Stop
    return *serve;
  }
  bool ok() const { return pid_ > 0; }

  // One request line out, one reply line back ("" if the daemon is gone).
  std::string Call(const std::string& line) {
    std::string out = line + "\n";
    for (size_t off = 0; off < out.size();) {
      ssize_t n = ::write(to_, out.data() + off, out.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return "";
      off += static_cast<size_t>(n);
    }
    for (;;) {
      size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        std::string reply = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return reply;
      }
      char buf[65536];
      ssize_t n = ::read(from_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return "";
      pending_.append(buf, static_cast<size_t>(n));
    }
  }

  // Every pool warm (min_idle ready) and quiet: nothing being built or torn
  // down. Bounded: 30 s.
  void WaitQuiet() {
    Call(R"({"jsonrpc":"2.0","id":0,"method":"pool.warm","params":{"profile":"shell","timeout_ms":30000}})");
    for (int i = 0; i < 30000; ++i) {
      boost::json::value v = boost::json::parse(Call(R"({"jsonrpc":"2.0","id":0,"method":"pool.stats"})"));
      bool quiet = true;
      for (const auto& [name, p] : v.at("result").at("pools").as_object()) {
        const boost::json::object& o = p.as_object();
        quiet = quiet && o.at("building").as_int64() == 0 && o.at("tearing_down").as_int64() == 0 &&
                o.at("idle").as_int64() >= o.at("min_idle").as_int64();
      }
      if (quiet) return;
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

 private:
  ServeProcess() {
    const std::string binary = CubicleBinary();
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, DevNull(), 2);
    const char* argv[] = {binary.c_str(), "serve", nullptr};
    if (::posix_spawn(&pid_, argv[0], &actions, nullptr, const_cast<char**>(argv), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    // At exit: EOF on its stdin, the daemon drains and removes every
    // sandbox and cgroup before it exits; wait for that.
    std::atexit([] {
      ServeProcess& s = Shared();
      ::close(s.to_);
      int status;
      if (s.pid_ > 0) ::waitpid(s.pid_, &status, 0);
    });
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string pending_;
};

// A pooled sandbox.run of /bin/true through `cubicle serve`, request line
// written to reply line read. `quiet`: each request waits (untimed) until
// the previous one's teardown and refill are done — the latency of
// requests spaced further apart than a refill. Otherwise back to back: the
// previous request's teardown and refill share the 2 CPUs with this one,
// and a request that finds the pool empty takes the cold path (counter
// `miss`, the share of repetitions that did).
void DaemonRun(benchmark::State& state, bool quiet) {
  ServeProcess& serve = ServeProcess::Shared();
  if (!serve.ok()) {
    state.SkipWithError("cubicle serve did not start");
    for (auto _ : state) {
    }
    return;
  }
  static bool warmed = false;
  if (quiet || !warmed) serve.WaitQuiet();
  warmed = true;
  const std::string line =
      R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"profile":"shell","argv":["/bin/true"]}})";
  std::string reply;
  for (auto _ : state) {
    reply = serve.Call(line);
  }
  if (!absl::StrContains(reply, R"("reason":"exited","exit_code":0)")) {
    state.SkipWithError(reply.empty() ? "cubicle serve ended" : reply.c_str());
  }
  // A miss is built on the spot: its steps include the sandbox's own.
  state.counters["miss"] = absl::StrContains(reply, R"("step":"rootfs")") ? 1 : 0;
}

const std::vector<std::string> kWarmPythonArgv = {"python3", "-I", "-c", "pass"};

void BM_PooledTrue(benchmark::State& s) { PooledRun(s, kTrue); }
void BM_BwrapTrue(benchmark::State& s) { Bwrap(s, kTrue); }
// The cold start as a launcher sees it: `cubicle run` with its default
// limits, spawned and reaped like BM_SpawnTrue and BM_BwrapTrue.
void BM_CubicleRunTrue(benchmark::State& s) { Spawn(s, {CubicleBinary(), "run", "--", "/bin/true"}); }
void BM_BwrapPython(benchmark::State& s) { Bwrap(s, kPython); }
void BM_WarmPython(benchmark::State& s) { PooledRun(s, kWarmPythonArgv, /*warm=*/true); }
// numpy preloaded, and used by the request.
void BM_WarmPythonNumpy(benchmark::State& s) {
  PooledRun(s, {"python3", "-I", "-c", "import numpy; numpy.arange(10).sum()"}, /*warm=*/true, /*numpy=*/true);
}
std::string ArgvJson(const char* python) {
  return boost::json::serialize(boost::json::array{python, "-I", "-c", kSkill});
}
void BM_SkillCallWarm(benchmark::State& s) { SkillCall(s, ArgvJson("python3")); }
// Another argv[0]: the bootstrap execs it (the interpreter starts per request).
void BM_SkillCallExec(benchmark::State& s) { SkillCall(s, ArgvJson("/usr/bin/python3")); }
void BM_ThroughputPooledTrue(benchmark::State& s) { Throughput(s, kTrue, false); }
void BM_ThroughputWarmPython(benchmark::State& s) { Throughput(s, kWarmPythonArgv, true); }
void BM_DaemonTrue(benchmark::State& s) { DaemonRun(s, /*quiet=*/true); }
void BM_DaemonTrueBackToBack(benchmark::State& s) { DaemonRun(s, /*quiet=*/false); }
void BM_IdlePssShell(benchmark::State& s) { IdlePss(s, false); }
void BM_IdlePssWarmPython(benchmark::State& s) { IdlePss(s, true); }
void BM_ColdTrue(benchmark::State& s) { ColdRun(s, kTrue); }
void BM_SpawnTrue(benchmark::State& s) { Spawn(s, kTrue); }
void BM_PooledPython(benchmark::State& s) { PooledRun(s, kPython); }
void BM_ColdPython(benchmark::State& s) { ColdRun(s, kPython); }
void BM_SpawnPython(benchmark::State& s) { Spawn(s, kPython); }

BENCHMARK(BM_SpawnTrue)->Apply(PerExecution);
BENCHMARK(BM_BwrapTrue)->Apply(PerExecution);
BENCHMARK(BM_CubicleRunTrue)->Apply(PerExecution);
BENCHMARK(BM_ColdTrue)->Apply(PerExecution);
BENCHMARK(BM_PooledTrue)->Apply(PerExecution);
BENCHMARK(BM_DaemonTrue)->Apply(PerExecution);
BENCHMARK(BM_DaemonTrueBackToBack)->Apply(PerExecution);
BENCHMARK(BM_SpawnPython)->Apply(PerExecution);
BENCHMARK(BM_BwrapPython)->Apply(PerExecution);
BENCHMARK(BM_ColdPython)->Apply(PerExecution);
BENCHMARK(BM_PooledPython)->Apply(PerExecution);
BENCHMARK(BM_WarmPython)->Apply(PerExecution);
BENCHMARK(BM_WarmPythonNumpy)->Apply(PerExecution);
BENCHMARK(BM_SkillCallExec)->Apply(PerExecution);
BENCHMARK(BM_SkillCallWarm)->Apply(PerExecution);
BENCHMARK(BM_ThroughputPooledTrue)->Iterations(1)->Repetitions(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ThroughputWarmPython)->Iterations(1)->Repetitions(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IdlePssShell)->Iterations(1)->Repetitions(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IdlePssWarmPython)->Iterations(1)->Repetitions(3)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cubicle::bench

BENCHMARK_MAIN();

// Per-execution latency of `/bin/true` (and of a cold `python3 -I -c
// pass`): cubicle's cold path, with and without cgroup limits, in process
// and as the `cubicle run` binary, side by side with its baselines
// (posix_spawn, bubblewrap) in the same run (DESIGN §9).
//
// Each repetition times exactly one execution (Iterations(1)), so the
// repetitions are the latency samples and the p50/p90/p99 statistics below
// are per-execution percentiles. CUBICLE_BENCH_REPS sets how many (default
// 200; the *AfterIdle benchmarks take a tenth); CUBICLE_BINARY points the
// *RunBinary benchmarks at another build. The *Limits benchmarks need root
// (or a delegated cgroup subtree) and fail rather than degrade without one.
#include <fcntl.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"
#include "cgroups/limits.h"
#include "runtime/defaults.h"
#include "runtime/launcher.h"
#include "runtime/result.h"

extern char** environ;

namespace cubicle::bench {
namespace {

constexpr char kBwrap[] = "/usr/bin/bwrap";

std::string CubicleBinary() {
  const char* env = std::getenv("CUBICLE_BINARY");
  return env != nullptr && *env != '\0' ? env : CUBICLE_BINARY_PATH;
}

// /dev/null, opened once: every contender gets it as stdio, so none pays
// for a terminal or a pipe and none pays an extra open().
int DevNull() {
  static const int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  return fd;
}

// posix_spawn + waitpid. Returns the wait status, or an error message.
struct SpawnOutcome {
  int status = 0;
  std::string error;
};

SpawnOutcome SpawnAndWait(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  SpawnOutcome out;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const std::string& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd < 3; ++fd) posix_spawn_file_actions_adddup2(&actions, DevNull(), fd);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    out.error = absl::StrCat("posix_spawn(", args[0], "): ", std::strerror(rc));
    return out;
  }
  while (::waitpid(pid, &out.status, 0) < 0) {
    if (errno != EINTR) {
      out.error = absl::StrCat("waitpid: ", std::strerror(errno));
      return out;
    }
  }
  if (!WIFEXITED(out.status) || WEXITSTATUS(out.status) != 0) {
    out.error = WIFEXITED(out.status)
                    ? absl::StrCat(args[0], " exited ", WEXITSTATUS(out.status))
                    : absl::StrCat(args[0], " killed by signal ", WTERMSIG(out.status));
  }
  return out;
}

// Times one spawn of `args`. The first call of each benchmark first runs
// it once untimed, so that page cache and dentries are warm for everyone.
void TimeSpawn(benchmark::State& state, const std::vector<std::string>& args, bool* warmed,
               const std::vector<std::string>& extra_env = {}) {
  if (!*warmed) {
    *warmed = true;
    if (SpawnOutcome w = SpawnAndWait(args, extra_env); !w.error.empty()) {
      state.SkipWithError(w.error.c_str());
      return;
    }
  }
  for (auto _ : state) {
    SpawnOutcome out = SpawnAndWait(args, extra_env);
    if (!out.error.empty()) {
      state.SkipWithError(out.error.c_str());
      break;
    }
  }
}

// The payloads: the smallest possible one, and a cold interpreter (the
// Debian python3 in /usr, not a pyenv shim; -I: no user site, no PYTHON*).
const std::vector<std::string>& TrueArgv() {
  static const std::vector<std::string> argv = {"/bin/true"};
  return argv;
}
const std::vector<std::string>& PythonArgv() {
  static const std::vector<std::string> argv = {"/usr/bin/python3", "-I", "-c", "pass"};
  return argv;
}

// The limits of the *Limits benchmarks: memory and pids, the two that
// `cubicle run` sets by default (1G, 1024), smaller here.
cgroups::Limits BenchLimits() {
  cgroups::Limits limits;
  limits.memory_max = uint64_t{256} << 20;
  limits.pids_max = 64;
  return limits;
}

// What the daemon pays per cold execution: build the default spec, launch.
// `call`, when given, receives how long the Launch call itself took.
absl::StatusOr<runtime::ExecResult> LaunchOnce(const std::vector<std::string>& argv, bool limits,
                                               absl::Duration* call = nullptr) {
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec({});
  if (!spec.ok()) return spec.status();
  spec->argv = argv;
  if (limits) spec->limits = BenchLimits();
  runtime::LaunchOptions options;
  options.stdin_fd = DevNull();
  options.stdout_fd = DevNull();
  options.stderr_fd = DevNull();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<runtime::ExecResult> result = runtime::Launch(*spec, options);
  if (call != nullptr) *call = absl::Now() - t0;
  return result;
}

// Empty when `result` is exited/0 (and, when `limits`, ran in a cgroup:
// the launcher degrades to rlimits with a warning where it cannot make
// one, which would make the *Limits figures meaningless); else why not.
std::string LaunchError(const absl::StatusOr<runtime::ExecResult>& result, bool limits) {
  if (!result.ok()) return result.status().ToString();
  if (result->reason != runtime::ExitReason::kExited || result->exit_code != 0) {
    return absl::StrCat("sandbox ended ", runtime::ExitReasonName(result->reason), " ",
                        result->ShellStatus(), " ", result->setup_error.ToString());
  }
  if (limits && !result->cgroup.has_value()) {
    return absl::StrCat("no cgroup: ", absl::StrJoin(result->warnings, "; "));
  }
  return "";
}

// Sums of ExecResult::steps (and setup, wall) as counters "<step>_ms";
// kAvgIterations turns the sums into per-execution values, so the
// aggregates give each step the same p50/p90/p99 as the total.
class StepCounters {
 public:
  void Add(const runtime::ExecResult& result) {
    for (const auto& [name, duration] : result.steps) Add(absl::StrCat(name, "_ms"), duration);
    Add("setup_ms", result.setup);
    Add("wall_ms", result.wall);
  }
  void Add(const std::string& name, absl::Duration d) { Add(name, absl::ToDoubleMilliseconds(d)); }
  void Add(const std::string& name, double ms) {
    auto it = std::find_if(totals_ms_.begin(), totals_ms_.end(),
                           [&](const auto& t) { return t.first == name; });
    if (it == totals_ms_.end()) it = totals_ms_.insert(totals_ms_.end(), {name, 0.0});
    it->second += ms;
  }
  // Outside the timed loop.
  void Report(benchmark::State& state) const {
    for (const auto& [name, total] : totals_ms_) {
      state.counters[name] = benchmark::Counter(total, benchmark::Counter::kAvgIterations);
    }
  }

 private:
  std::vector<std::pair<std::string, double>> totals_ms_;  // in step order
};

struct LaunchBench {
  const std::vector<std::string>& argv;
  bool limits = false;
  bool steps = false;  // record ExecResult::steps as counters
  int idle_ms = 0;     // sleep (untimed) before each execution
};

// One in-process Launch per repetition. The first call of each benchmark
// first launches once untimed: the cgroup layout is discovered (and stale
// groups swept) once per process, as in the daemon, and should not land in
// one sample.
void TimeLaunch(benchmark::State& state, const LaunchBench& b, bool* warmed) {
  if (!*warmed) {
    *warmed = true;
    if (std::string error = LaunchError(LaunchOnce(b.argv, b.limits), b.limits); !error.empty()) {
      state.SkipWithError(error.c_str());
      return;
    }
  }
  StepCounters steps;
  for (auto _ : state) {
    if (b.idle_ms > 0) {
      state.PauseTiming();
      ::usleep(static_cast<useconds_t>(b.idle_ms) * 1000);
      state.ResumeTiming();
    }
    absl::Duration call;
    absl::StatusOr<runtime::ExecResult> result = LaunchOnce(b.argv, b.limits, &call);
    if (std::string error = LaunchError(result, b.limits); !error.empty()) {
      state.SkipWithError(error.c_str());
      break;
    }
    if (b.steps) {
      steps.Add(*result);
      // After `wall` ends, before Launch returns: the cgroup's stats,
      // kill and removal, and the zygote's destruction.
      steps.Add("cleanup_ms", call - result->wall);
      steps.Add("launch_ms", call);
    }
  }
  if (b.steps) steps.Report(state);
}

void TimeBwrap(benchmark::State& state, const std::vector<std::string>& payload, bool* warmed) {
  if (::access(kBwrap, X_OK) != 0) {
    state.SkipWithError("bubblewrap not installed");
    return;
  }
  TimeSpawn(state, BwrapArgs(payload), warmed);
}

// `cubicle run [flags] -- payload` as argv.
std::vector<std::string> RunArgs(std::vector<std::string> flags,
                                 const std::vector<std::string>& payload) {
  std::vector<std::string> args = {CubicleBinary(), "run"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.insert(args.end(), payload.begin(), payload.end());
  return args;
}
const std::vector<std::string> kNoLimits = {"--memory", "unlimited", "--pids", "unlimited"};

// `cubicle run --json-status FILE` per repetition, with the steps of FILE
// as counters (as StepCounters), plus "outside_ms": the spawn-to-reap time
// less cubicle's own `wall`, i.e. the process start (exec, CLI parsing,
// cgroup discovery and stale-group sweep, the first DefaultSpec), the
// cgroup's cleanup, writing FILE and the exit. The extra flag and the file
// write make it slightly slower than the plain *RunBinary benchmark.
void TimeRunBinarySteps(benchmark::State& state, std::vector<std::string> flags, bool limits,
                        bool* warmed) {
  const std::string path = absl::StrCat("/tmp/cubicle-launch-bench-", ::getpid(), ".json");
  flags.insert(flags.end(), {"--json-status", path});
  const std::vector<std::string> args = RunArgs(flags, TrueArgv());
  if (!*warmed) {
    *warmed = true;
    if (SpawnOutcome w = SpawnAndWait(args); !w.error.empty()) {
      state.SkipWithError(w.error.c_str());
      return;
    }
  }
  StepCounters steps;
  for (auto _ : state) {
    const absl::Time t0 = absl::Now();
    SpawnOutcome out = SpawnAndWait(args);
    const absl::Duration total = absl::Now() - t0;
    if (!out.error.empty()) {
      state.SkipWithError(out.error.c_str());
      break;
    }
    state.PauseTiming();
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(text.str(), ec);
    if (ec || !v.is_object() || !v.as_object().contains("steps")) {
      state.SkipWithError(absl::StrCat("--json-status: cannot parse ", path).c_str());
      break;
    }
    const boost::json::object& o = v.as_object();
    if (limits && o.at("cgroup").is_null()) {
      state.SkipWithError("cubicle run made no cgroup");
      break;
    }
    for (const boost::json::value& step : o.at("steps").as_array()) {
      const boost::json::string& name = step.at("step").as_string();
      steps.Add(std::string(name.data(), name.size()) + "_ms",
                step.at("ms").to_number<double>());
    }
    const double wall = o.at("wall_ms").to_number<double>();
    steps.Add("setup_ms", o.at("setup_ms").to_number<double>());
    steps.Add("wall_ms", wall);
    steps.Add("outside_ms", absl::ToDoubleMilliseconds(total) - wall);
    state.ResumeTiming();
  }
  steps.Report(state);
  ::unlink(path.c_str());
}

// ---- /bin/true ----

void BM_PosixSpawn(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, TrueArgv(), &warmed);
}

void BM_CubicleLaunch(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = TrueArgv()}, &warmed);
}

void BM_CubicleLaunchLimits(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = TrueArgv(), .limits = true}, &warmed);
}

// `cubicle run` applies default limits (memory 1G, pids 1024) where cgroups
// are usable, as here.
void BM_CubicleRunBinary(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, RunArgs({}, TrueArgv()), &warmed);
}

void BM_CubicleRunBinaryNoLimits(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, RunArgs(kNoLimits, TrueArgv()), &warmed);
}

// As BM_CubicleRunBinary, but every run discovers the cgroup layout itself
// (libcgroup, mountinfo, the parents), as before the host cache.
void BM_CubicleRunBinaryNoHostCache(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, RunArgs({}, TrueArgv()), &warmed, {"CUBICLE_HOST_CACHE=off"});
}

// The binaries' own start and exit, no sandbox: what a cold run pays before
// and after its sandbox (exec, the dynamic loader, static initialisers,
// command-line parsing, exit).
void BM_CubicleVersion(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, {CubicleBinary(), "--version"}, &warmed);
}

void BM_BwrapVersion(benchmark::State& state) {
  static bool warmed = false;
  if (::access(kBwrap, X_OK) != 0) {
    state.SkipWithError("bubblewrap not installed");
    return;
  }
  TimeSpawn(state, {kBwrap, "--version"}, &warmed);
}

void BM_Bwrap(benchmark::State& state) {
  static bool warmed = false;
  TimeBwrap(state, TrueArgv(), &warmed);
}

// BM_CubicleLaunch(Limits) plus ExecResult::steps as counters. Parent
// steps (validate, cgroup, prepare, clone, cgroup_attach, id_maps) and child
// steps (child_ids ... payload_setup) overlap: child_ids includes waiting
// for the parent's cgroup_attach and id_maps.
void BM_CubicleLaunchSteps(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = TrueArgv(), .steps = true}, &warmed);
}

void BM_CubicleLaunchLimitsSteps(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = TrueArgv(), .limits = true, .steps = true}, &warmed);
}

// The same after 200 ms of idleness each (a tenth of the repetitions): the
// first v1 cgroup migration after an idle spell waits for an RCU grace
// period. The run without limits is the control (idle CPUs, cold caches).
void BM_CubicleLaunchStepsAfterIdle(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = TrueArgv(), .steps = true, .idle_ms = 200}, &warmed);
}

void BM_CubicleLaunchLimitsStepsAfterIdle(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = TrueArgv(), .limits = true, .steps = true, .idle_ms = 200}, &warmed);
}

// Where a cold `cubicle run` spends its time, from its own --json-status.
void BM_CubicleRunBinarySteps(benchmark::State& state) {
  static bool warmed = false;
  TimeRunBinarySteps(state, {}, true, &warmed);
}

void BM_CubicleRunBinaryNoLimitsSteps(benchmark::State& state) {
  static bool warmed = false;
  TimeRunBinarySteps(state, kNoLimits, false, &warmed);
}

// ---- python3 -I -c pass: a cold interpreter ----

void BM_PythonPosixSpawn(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, PythonArgv(), &warmed);
}

void BM_PythonCubicleLaunch(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = PythonArgv()}, &warmed);
}

void BM_PythonCubicleLaunchLimits(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = PythonArgv(), .limits = true}, &warmed);
}

// With steps: where the limits' extra time goes when each execution takes
// longer than the gap after which a v1 attach waits again.
void BM_PythonCubicleLaunchSteps(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = PythonArgv(), .steps = true}, &warmed);
}

void BM_PythonCubicleLaunchLimitsSteps(benchmark::State& state) {
  static bool warmed = false;
  TimeLaunch(state, {.argv = PythonArgv(), .limits = true, .steps = true}, &warmed);
}

void BM_PythonCubicleRunBinary(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, RunArgs({}, PythonArgv()), &warmed);
}

void BM_PythonBwrap(benchmark::State& state) {
  static bool warmed = false;
  TimeBwrap(state, PythonArgv(), &warmed);
}

// A tenth of the repetitions (at least 10): each waits 200 ms first.
void AfterIdle(benchmark::internal::Benchmark* b) {
  PerExecution(b, std::max(10, Repetitions() / 10));
}

BENCHMARK(BM_PosixSpawn)->Apply(PerExecution);
BENCHMARK(BM_CubicleLaunch)->Apply(PerExecution);
BENCHMARK(BM_CubicleLaunchLimits)->Apply(PerExecution);
BENCHMARK(BM_CubicleRunBinary)->Apply(PerExecution);
BENCHMARK(BM_CubicleRunBinaryNoLimits)->Apply(PerExecution);
BENCHMARK(BM_CubicleRunBinaryNoHostCache)->Apply(PerExecution);
BENCHMARK(BM_Bwrap)->Apply(PerExecution);
BENCHMARK(BM_CubicleVersion)->Apply(PerExecution);
BENCHMARK(BM_BwrapVersion)->Apply(PerExecution);
BENCHMARK(BM_CubicleLaunchSteps)->Apply(PerExecution);
BENCHMARK(BM_CubicleLaunchLimitsSteps)->Apply(PerExecution);
BENCHMARK(BM_CubicleRunBinarySteps)->Apply(PerExecution);
BENCHMARK(BM_CubicleRunBinaryNoLimitsSteps)->Apply(PerExecution);
BENCHMARK(BM_CubicleLaunchStepsAfterIdle)->Apply(AfterIdle);
BENCHMARK(BM_CubicleLaunchLimitsStepsAfterIdle)->Apply(AfterIdle);
BENCHMARK(BM_PythonPosixSpawn)->Apply(PerExecution);
BENCHMARK(BM_PythonCubicleLaunch)->Apply(PerExecution);
BENCHMARK(BM_PythonCubicleLaunchLimits)->Apply(PerExecution);
BENCHMARK(BM_PythonCubicleRunBinary)->Apply(PerExecution);
BENCHMARK(BM_PythonBwrap)->Apply(PerExecution);
BENCHMARK(BM_PythonCubicleLaunchSteps)->Apply(PerExecution);
BENCHMARK(BM_PythonCubicleLaunchLimitsSteps)->Apply(PerExecution);

}  // namespace
}  // namespace cubicle::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  struct utsname uts;
  if (::uname(&uts) == 0) benchmark::AddCustomContext("kernel", uts.release);
  benchmark::AddCustomContext("cubicle_binary", cubicle::bench::CubicleBinary());
  benchmark::AddCustomContext("repetitions", std::to_string(cubicle::bench::Repetitions()));
  benchmark::AddCustomContext("euid", std::to_string(::geteuid()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Per-execution latency of `/bin/true`: cubicle's cold path side by side
// with its baselines in the same run (DESIGN §9).
//
// Each repetition times exactly one execution (Iterations(1)), so the
// repetitions are the latency samples and the p50/p90/p99 statistics below
// are per-execution percentiles. CUBICLE_BENCH_REPS sets how many (default
// 200); CUBICLE_BINARY points BM_CubicleRunBinary at another build.
#include <fcntl.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "runtime/defaults.h"
#include "runtime/launcher.h"
#include "runtime/result.h"

extern char** environ;

namespace cubicle::bench {
namespace {

constexpr char kBwrap[] = "/usr/bin/bwrap";
constexpr int kDefaultReps = 200;

// Linear interpolation between closest ranks (numpy's default): with 200
// samples P99 sits between the 198th and 199th smallest, so one outlier
// (the maximum) does not decide it.
template <int kPercent>
double Percentile(const std::vector<double>& samples) {
  if (samples.empty()) return 0;
  std::vector<double> sorted(samples);
  std::sort(sorted.begin(), sorted.end());
  double rank = kPercent / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(rank);
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

int Repetitions() {
  const char* env = std::getenv("CUBICLE_BENCH_REPS");
  if (env == nullptr || *env == '\0') return kDefaultReps;
  int reps = std::atoi(env);
  return reps > 0 ? reps : kDefaultReps;
}

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

SpawnOutcome SpawnAndWait(const std::vector<std::string>& args) {
  SpawnOutcome out;
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd < 3; ++fd) posix_spawn_file_actions_adddup2(&actions, DevNull(), fd);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
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
void TimeSpawn(benchmark::State& state, const std::vector<std::string>& args, bool* warmed) {
  if (!*warmed) {
    *warmed = true;
    if (SpawnOutcome w = SpawnAndWait(args); !w.error.empty()) {
      state.SkipWithError(w.error.c_str());
      return;
    }
  }
  for (auto _ : state) {
    SpawnOutcome out = SpawnAndWait(args);
    if (!out.error.empty()) {
      state.SkipWithError(out.error.c_str());
      break;
    }
  }
}

// What the daemon pays per cold execution: build the default spec, launch.
absl::StatusOr<runtime::ExecResult> LaunchTrue() {
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec({});
  if (!spec.ok()) return spec.status();
  spec->argv = {"/bin/true"};
  runtime::LaunchOptions options;
  options.stdin_fd = DevNull();
  options.stdout_fd = DevNull();
  options.stderr_fd = DevNull();
  return runtime::Launch(*spec, options);
}

// Empty when `result` is exited/0; else why not.
std::string LaunchError(const absl::StatusOr<runtime::ExecResult>& result) {
  if (!result.ok()) return result.status().ToString();
  if (result->reason == runtime::ExitReason::kExited && result->exit_code == 0) return "";
  return absl::StrCat("sandbox ended ", runtime::ExitReasonName(result->reason), " ",
                      result->ShellStatus(), " ", result->setup_error.ToString());
}

// Warms up once per benchmark: the seccomp program is compiled once per
// process, as in the daemon, and should not land in one sample.
bool WarmLaunch(benchmark::State& state, bool* warmed) {
  if (*warmed) return true;
  *warmed = true;
  std::string error = LaunchError(LaunchTrue());
  if (error.empty()) return true;
  state.SkipWithError(error.c_str());
  return false;
}

void BM_PosixSpawn(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, {"/bin/true"}, &warmed);
}

void BM_CubicleLaunch(benchmark::State& state) {
  static bool warmed = false;
  if (!WarmLaunch(state, &warmed)) return;
  for (auto _ : state) {
    absl::StatusOr<runtime::ExecResult> result = LaunchTrue();
    if (std::string error = LaunchError(result); !error.empty()) {
      state.SkipWithError(error.c_str());
      break;
    }
  }
}

void BM_CubicleRunBinary(benchmark::State& state) {
  static bool warmed = false;
  TimeSpawn(state, {CubicleBinary(), "run", "--", "/bin/true"}, &warmed);
}

void BM_Bwrap(benchmark::State& state) {
  if (::access(kBwrap, X_OK) != 0) {
    state.SkipWithError("bubblewrap not installed");
    return;
  }
  // cubicle's default sandbox as bubblewrap spells it, minus what bwrap
  // cannot do: no seccomp filter, no generated /etc files, no rlimits.
  static const std::vector<std::string> args = {
      kBwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
      "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
      "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--dev", "/dev",
      "--proc", "/proc", "--tmpfs", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
      "--uid", "1000", "--gid", "1000", "--hostname", "cubicle",
      "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache", "--", "/bin/true"};
  static bool warmed = false;
  TimeSpawn(state, args, &warmed);
}

// BM_CubicleLaunch plus ExecResult::steps as counters "<step>_ms", so the
// aggregates show each step's p50/p90/p99. Parent steps (validate, prepare,
// clone, id_maps) and child steps (child_ids ... payload_setup) overlap:
// child_ids includes waiting for the parent's id_maps.
void BM_CubicleLaunchSteps(benchmark::State& state) {
  static bool warmed = false;
  if (!WarmLaunch(state, &warmed)) return;
  std::vector<std::pair<std::string, double>> totals_ms;  // in step order
  auto add = [&](const std::string& name, absl::Duration d) {
    auto it = std::find_if(totals_ms.begin(), totals_ms.end(),
                           [&](const auto& t) { return t.first == name; });
    if (it == totals_ms.end()) it = totals_ms.insert(totals_ms.end(), {name, 0.0});
    it->second += absl::ToDoubleMilliseconds(d);
  };
  for (auto _ : state) {
    absl::StatusOr<runtime::ExecResult> result = LaunchTrue();
    if (std::string error = LaunchError(result); !error.empty()) {
      state.SkipWithError(error.c_str());
      break;
    }
    for (const auto& [name, duration] : result->steps) add(absl::StrCat(name, "_ms"), duration);
    add("setup_ms", result->setup);
    add("wall_ms", result->wall);
  }
  // Outside the timed loop; kAvgIterations turns the sums into averages.
  for (const auto& [name, total] : totals_ms) {
    state.counters[name] = benchmark::Counter(total, benchmark::Counter::kAvgIterations);
  }
}

void PerExecution(benchmark::internal::Benchmark* b) {
  b->Iterations(1)
      ->Repetitions(Repetitions())
      ->ComputeStatistics("p50", Percentile<50>)
      ->ComputeStatistics("p90", Percentile<90>)
      ->ComputeStatistics("p99", Percentile<99>)
      ->ReportAggregatesOnly(true)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_PosixSpawn)->Apply(PerExecution);
BENCHMARK(BM_CubicleLaunch)->Apply(PerExecution);
BENCHMARK(BM_CubicleRunBinary)->Apply(PerExecution);
BENCHMARK(BM_Bwrap)->Apply(PerExecution);
BENCHMARK(BM_CubicleLaunchSteps)->Apply(PerExecution);

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

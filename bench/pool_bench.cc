// Pooled hand-off against the cold path, in the same run (DESIGN §5, §9):
// `/bin/true` and `python3 -I -c pass` from a warm pool (Pool::Run: take an
// idle zygote, hand the request over, wait for the end), the same from a
// zygote built on the spot (the cold path), and plain posix_spawn.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"
#include "runtime/defaults.h"
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
// /usr/bin/python3: the host PATH may put a shim first (pyenv), the sandbox has none.
const std::vector<std::string> kPython = {"/usr/bin/python3", "-I", "-c", "pass"};

void Report(benchmark::State& state, const runtime::ExecResult& r) {
  if (r.reason != runtime::ExitReason::kExited || r.exit_code != 0) {
    state.SkipWithError("the execution did not exit 0");
  }
}

void PooledRun(benchmark::State& state, const std::vector<std::string>& argv) {
  // A pool deep enough that every timed request is a hit: refill runs
  // between repetitions, never inside the timed region of a hit.
  static std::unique_ptr<runtime::Pool> pool;
  if (pool == nullptr) {
    runtime::PoolConfig config;
    config.min_idle = 4;
    config.max_idle = 4;
    config.max_total = 8;
    pool = *runtime::Pool::Create("bench", Profile(), config);
  }
  pool->WaitWarm(absl::Seconds(30));
  for (auto _ : state) {
    absl::StatusOr<runtime::ExecResult> r = pool->Run(Request(argv));
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
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

void BM_PooledTrue(benchmark::State& s) { PooledRun(s, kTrue); }
void BM_ColdTrue(benchmark::State& s) { ColdRun(s, kTrue); }
void BM_SpawnTrue(benchmark::State& s) { Spawn(s, kTrue); }
void BM_PooledPython(benchmark::State& s) { PooledRun(s, kPython); }
void BM_ColdPython(benchmark::State& s) { ColdRun(s, kPython); }
void BM_SpawnPython(benchmark::State& s) { Spawn(s, kPython); }

void Configure(benchmark::internal::Benchmark* b) {
  b->Iterations(1)
      ->Repetitions(Repetitions())
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->ComputeStatistics("p50", Percentile<50>)
      ->ComputeStatistics("p90", Percentile<90>)
      ->ComputeStatistics("p99", Percentile<99>)
      ->ReportAggregatesOnly(true);
}

BENCHMARK(BM_SpawnTrue)->Apply(Configure);
BENCHMARK(BM_ColdTrue)->Apply(Configure);
BENCHMARK(BM_PooledTrue)->Apply(Configure);
BENCHMARK(BM_SpawnPython)->Apply(Configure);
BENCHMARK(BM_ColdPython)->Apply(Configure);
BENCHMARK(BM_PooledPython)->Apply(Configure);

}  // namespace
}  // namespace cubicle::bench

BENCHMARK_MAIN();

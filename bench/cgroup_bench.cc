// Per-sandbox cgroup costs on this host: create + attach + kill + remove,
// each step alone, cubicle's direct cgroupfs I/O (cgroups/) side by side
// with libcgroup doing the same work, in the same run (DESIGN §9).
//
// Each repetition times exactly one operation (Iterations(1), manual time:
// forking and reaping helpers is outside the timed region), so p50/p90/p99
// are per-operation percentiles. CUBICLE_BENCH_REPS sets the samples
// (default 200; the after-idle cases take a tenth, each waits 200 ms).
// Needs root. Groups live under "cubicle-bench-<pid>", removed at exit.
//
// Variants: "direct" is SandboxCgroup on the host's layout as cubicle uses
// it (on a hybrid host: the cgroup2 group too); "direct_v1" the same on the
// v1 hierarchies only, the set libcgroup is given ("libcgroup": one
// struct cgroup per hierarchy, cgroup_create_cgroup / cgroup_attach_task_pid
// / cgroup_delete_cgroup, reads with cgroup_read_value_*).
#include <fcntl.h>
#include <libcgroup.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"
#include "cgroups/cgroup.h"
#include "cgroups/cgroupfs.h"
#include "cgroups/layout.h"

namespace cubicle::bench {
namespace {

using cgroups::Controller;
using cgroups::Layout;
using cgroups::Limits;
using cgroups::SandboxCgroup;

double Now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void Idle(int ms) {
  timespec ts{0, ms * 1'000'000L};
  ::nanosleep(&ts, nullptr);
}

// The limits every variant writes: memory (and swap), pids, CPU quota.
Limits BenchLimits() { return Limits{.memory_max = 64 << 20, .pids_max = 64, .cpus = 0.5}; }

struct Env {
  Layout layout;   // as cubicle uses it
  Layout v1_only;  // the hierarchies libcgroup is given
  bool ready = false;
};
Env& env() {
  static Env e;
  return e;
}

Layout WithoutUnified(Layout l) {
  if (l.unified < 0) return l;
  int u = l.unified;
  l.hierarchies.erase(l.hierarchies.begin() + u);
  for (int& p : l.placement) p = p == u ? -1 : p > u ? p - 1 : p;
  l.unified = -1;
  l.version = cgroups::Version::kV1;
  return l;
}

// A helper process that sits in read(2) until released or killed.
struct Helper {
  pid_t pid = -1;
  int release = -1;
  static Helper Start() {
    Helper h;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return h;
    h.pid = ::fork();
    if (h.pid == 0) {
      ::close(fds[1]);
      char c;
      (void)!::read(fds[0], &c, 1);
      ::_exit(0);
    }
    ::close(fds[0]);
    h.release = fds[1];
    return h;
  }
  void Stop() {
    if (release >= 0) ::close(release);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    pid = -1;
    release = -1;
  }
};

// Moves `pid` back to our own cgroup in every hierarchy of `layout`, so the
// next attach is a real migration.
void MoveHome(const Layout& layout, pid_t pid) {
  for (const cgroups::Hierarchy& h : layout.hierarchies) {
    (void)cgroups::cgroupfs::Write(AT_FDCWD, "", (h.own_dir + "/cgroup.procs").c_str(),
                                   absl::StrCat(pid));
  }
}

// ---- libcgroup doing cubicle's work ----

// One struct cgroup per v1 hierarchy: libcgroup names a group by one path
// for all its controllers, and our memory cgroup is not where the others are.
class LibcgroupSandbox {
 public:
  static std::unique_ptr<LibcgroupSandbox> Create(const Layout& v1, const std::string& name,
                                                  bool with_limits) {
    auto sb = std::make_unique<LibcgroupSandbox>();
    for (const cgroups::Hierarchy& h : v1.hierarchies) {
      std::string rel = h.parent.substr(h.mount_point.size() + 1) + "/" + name;
      cgroup* cg = cgroup_new_cgroup(rel.c_str());
      for (const std::string& c : h.controllers) {
        cgroup_controller* ctl = cgroup_add_controller(cg, c.c_str());
        if (!with_limits) continue;
        if (c == "memory") {
          cgroup_add_value_string(ctl, "memory.limit_in_bytes", "67108864");
          if (v1.v1_swap_accounting)
            cgroup_add_value_string(ctl, "memory.memsw.limit_in_bytes", "67108864");
        } else if (c == "pids") {
          cgroup_add_value_string(ctl, "pids.max", "64");
        } else if (c == "cpu") {
          cgroup_add_value_string(ctl, "cpu.cfs_period_us", "100000");
          cgroup_add_value_string(ctl, "cpu.cfs_quota_us", "50000");
        }
      }
      int rc = cgroup_create_cgroup(cg, 0);
      sb->groups_.push_back(cg);
      if (rc != 0) {
        std::fprintf(stderr, "cgroup_create_cgroup(%s): %s\n", rel.c_str(), cgroup_strerror(rc));
        return nullptr;
      }
    }
    return sb;
  }
  ~LibcgroupSandbox() {
    for (cgroup* cg : groups_) {
      cgroup_delete_cgroup(cg, 1);
      cgroup_free(&cg);
    }
  }
  bool Attach(pid_t pid) {
    for (cgroup* cg : groups_) {
      if (cgroup_attach_task_pid(cg, pid) != 0) return false;
    }
    return true;
  }
  bool Delete() {
    bool ok = true;
    for (cgroup*& cg : groups_) {
      ok = cgroup_delete_cgroup(cg, 0) == 0 && ok;
      cgroup_free(&cg);
    }
    groups_.clear();
    return ok;
  }

 private:
  std::vector<cgroup*> groups_;
};

std::string BenchName(const char* what, int i) {
  return absl::StrCat("bench-", ::getpid(), "-", what, "-", i);
}

// Runs `body` once per repetition; `body` returns the seconds it timed.
template <typename Body>
void Repeat(benchmark::State& state, Body body) {
  if (!env().ready) {
    state.SkipWithError("needs root and cgroups");
    return;
  }
  for (auto _ : state) {
    double seconds = body();
    if (seconds < 0) {
      state.SkipWithError("operation failed (see stderr)");
      return;
    }
    state.SetIterationTime(seconds);
  }
}

// ---- create + remove ----

void BM_CreateRemove_Direct(benchmark::State& state, bool v1_only) {
  const Layout& layout = v1_only ? env().v1_only : env().layout;
  Repeat(state, [&] {
    double t0 = Now();
    auto cg = SandboxCgroup::Create(layout, BenchLimits());
    if (!cg.ok() || !(*cg)->Remove().ok()) return -1.0;
    return Now() - t0;
  });
}

void BM_CreateRemove_Libcgroup(benchmark::State& state) {
  static int n = 0;
  Repeat(state, [&] {
    double t0 = Now();
    auto sb = LibcgroupSandbox::Create(env().v1_only, BenchName("cr", n++), true);
    if (sb == nullptr || !sb->Delete()) return -1.0;
    return Now() - t0;
  });
}

// ---- attach one process (moved home again, untimed, after each) ----

void BM_Attach_Direct(benchmark::State& state, bool v1_only, int idle_ms) {
  const Layout& layout = v1_only ? env().v1_only : env().layout;
  auto cg = SandboxCgroup::Create(layout, BenchLimits());
  Helper helper = Helper::Start();
  Repeat(state, [&] {
    if (!cg.ok()) return -1.0;
    if (idle_ms > 0) Idle(idle_ms);
    double t0 = Now();
    if (!(*cg)->Attach(helper.pid).ok()) return -1.0;
    double t = Now() - t0;
    MoveHome(layout, helper.pid);
    return t;
  });
  helper.Stop();
}

void BM_Attach_Libcgroup(benchmark::State& state, int idle_ms) {
  auto sb = LibcgroupSandbox::Create(env().v1_only, BenchName("attach", 0), true);
  Helper helper = Helper::Start();
  Repeat(state, [&] {
    if (sb == nullptr) return -1.0;
    if (idle_ms > 0) Idle(idle_ms);
    double t0 = Now();
    if (!sb->Attach(helper.pid)) return -1.0;
    double t = Now() - t0;
    MoveHome(env().v1_only, helper.pid);
    return t;
  });
  helper.Stop();
  if (sb != nullptr) sb->Delete();
}

// ---- the whole per-sandbox cycle: create, attach, kill, remove ----

void BM_Cycle_Direct(benchmark::State& state, bool v1_only) {
  const Layout& layout = v1_only ? env().v1_only : env().layout;
  Repeat(state, [&] {
    Helper helper = Helper::Start();
    double t0 = Now();
    auto cg = SandboxCgroup::Create(layout, BenchLimits());
    bool ok = cg.ok() && (*cg)->Attach(helper.pid).ok() && (*cg)->Kill().ok();
    ::waitpid(helper.pid, nullptr, 0);  // the launcher reaps its child
    ok = ok && (*cg)->Remove().ok();
    double t = Now() - t0;
    helper.pid = -1;
    helper.Stop();
    return ok ? t : -1.0;
  });
}

void BM_Cycle_Libcgroup(benchmark::State& state) {
  static int n = 0;
  Repeat(state, [&] {
    Helper helper = Helper::Start();
    double t0 = Now();
    auto sb = LibcgroupSandbox::Create(env().v1_only, BenchName("cycle", n++), true);
    bool ok = sb != nullptr && sb->Attach(helper.pid);
    ::kill(helper.pid, SIGKILL);  // libcgroup has no kill: the one process we know
    ::waitpid(helper.pid, nullptr, 0);
    ok = ok && sb->Delete();
    double t = Now() - t0;
    helper.pid = -1;
    helper.Stop();
    return ok ? t : -1.0;
  });
}

// ---- reading the outcome ----

void BM_ReadStats_Direct(benchmark::State& state) {
  auto cg = SandboxCgroup::Create(env().layout, BenchLimits());
  Repeat(state, [&] {
    if (!cg.ok()) return -1.0;
    double t0 = Now();
    auto stats = (*cg)->ReadStats();
    double t = Now() - t0;
    benchmark::DoNotOptimize(stats);
    return stats.ok() ? t : -1.0;
  });
}

// The same files through libcgroup's value reader.
void BM_ReadStats_Libcgroup(benchmark::State& state) {
  auto sb = LibcgroupSandbox::Create(env().v1_only, BenchName("stats", 0), true);
  struct File {
    const char* controller;
    const char* name;
  };
  const File files[] = {{"memory", "memory.max_usage_in_bytes"},
                        {"memory", "memory.oom_control"},
                        {"memory", "memory.failcnt"},
                        {"memory", "memory.memsw.failcnt"},
                        {"cpuacct", "cpuacct.usage"},
                        {"pids", "pids.peak"}};
  std::vector<std::string> rels;
  for (const File& f : files) {
    for (const cgroups::Hierarchy& h : env().v1_only.hierarchies) {
      if (std::find(h.controllers.begin(), h.controllers.end(), f.controller) !=
          h.controllers.end()) {
        rels.push_back(h.parent.substr(h.mount_point.size() + 1) + "/" + BenchName("stats", 0));
      }
    }
  }
  Repeat(state, [&] {
    if (sb == nullptr || rels.size() != std::size(files)) return -1.0;
    double t0 = Now();
    char buf[4096];
    for (size_t i = 0; i < rels.size(); ++i) {
      void* handle = nullptr;
      // libcgroup's prototype takes the names as char*.
      int rc = cgroup_read_value_begin(files[i].controller, rels[i].c_str(),
                                       const_cast<char*>(files[i].name), &handle, buf, sizeof(buf));
      while (rc == 0) rc = cgroup_read_value_next(&handle, buf, sizeof(buf));
      cgroup_read_value_end(&handle);
      if (rc != ECGEOF) return -1.0;
    }
    return Now() - t0;
  });
  if (sb != nullptr) sb->Delete();
}

// ---- placing a new process on v2: CLONE_INTO_CGROUP vs fork + attach ----

void BM_PlaceV2_CloneIntoCgroup(benchmark::State& state) {
  auto cg = SandboxCgroup::Create(env().layout, Limits{});
  Repeat(state, [&] {
    if (!cg.ok() || (*cg)->v2_dir_fd() < 0) return -1.0;
    double t0 = Now();
    clone_args args;
    std::memset(&args, 0, sizeof(args));
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<uint64_t>((*cg)->v2_dir_fd());
    long pid = ::syscall(SYS_clone3, &args, sizeof(args));
    if (pid == 0) ::_exit(0);
    if (pid < 0) return -1.0;
    ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
    return Now() - t0;
  });
}

void BM_PlaceV2_ForkThenAttach(benchmark::State& state) {
  auto cg = SandboxCgroup::Create(env().layout, Limits{});
  Repeat(state, [&] {
    if (!cg.ok() || (*cg)->v2_dir_fd() < 0) return -1.0;
    double t0 = Now();
    Helper helper = Helper::Start();
    std::string v2 = cgroups::cgroupfs::Join(env().layout.Unified()->parent, (*cg)->name());
    bool ok =
        cgroups::cgroupfs::Write((*cg)->v2_dir_fd(), v2, "cgroup.procs", absl::StrCat(helper.pid))
            .ok();
    ::close(helper.release);  // released: it exits
    ::waitpid(helper.pid, nullptr, 0);
    return ok ? Now() - t0 : -1.0;
  });
}

void BM_PlainFork(benchmark::State& state) {
  Repeat(state, [&] {
    double t0 = Now();
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return Now() - t0;
  });
}

void PerOperation(benchmark::internal::Benchmark* b, int reps) {
  WithPercentiles(b->Iterations(1)->Repetitions(reps)->UseManualTime()->Unit(benchmark::kMicrosecond));
}
void Often(benchmark::internal::Benchmark* b) { PerOperation(b, Repetitions()); }
void AfterIdle(benchmark::internal::Benchmark* b) {
  PerOperation(b, std::max(5, Repetitions() / 10));
}

BENCHMARK_CAPTURE(BM_CreateRemove_Direct, direct, false)->Apply(Often);
BENCHMARK_CAPTURE(BM_CreateRemove_Direct, direct_v1, true)->Apply(Often);
BENCHMARK(BM_CreateRemove_Libcgroup)->Apply(Often);
BENCHMARK_CAPTURE(BM_Attach_Direct, direct, false, 0)->Apply(Often);
BENCHMARK_CAPTURE(BM_Attach_Direct, direct_v1, true, 0)->Apply(Often);
BENCHMARK_CAPTURE(BM_Attach_Libcgroup, libcgroup, 0)->Apply(Often);
BENCHMARK_CAPTURE(BM_Attach_Direct, direct_v1_after_idle, true, 200)->Apply(AfterIdle);
BENCHMARK_CAPTURE(BM_Attach_Libcgroup, libcgroup_after_idle, 200)->Apply(AfterIdle);
BENCHMARK_CAPTURE(BM_Cycle_Direct, direct, false)->Apply(Often);
BENCHMARK_CAPTURE(BM_Cycle_Direct, direct_v1, true)->Apply(Often);
BENCHMARK(BM_Cycle_Libcgroup)->Apply(Often);
BENCHMARK(BM_ReadStats_Direct)->Apply(Often);
BENCHMARK(BM_ReadStats_Libcgroup)->Apply(Often);
BENCHMARK(BM_PlainFork)->Apply(Often);
BENCHMARK(BM_PlaceV2_CloneIntoCgroup)->Apply(Often);
BENCHMARK(BM_PlaceV2_ForkThenAttach)->Apply(Often);

}  // namespace
}  // namespace cubicle::bench

int main(int argc, char** argv) {
  using namespace cubicle;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  cgroups::LayoutOptions options;
  options.parent = absl::StrCat("cubicle-bench-", ::getpid());
  auto layout = cgroups::DiscoverLayout(options);
  bench::Env& env = bench::env();
  if (::geteuid() != 0) {
    std::fprintf(stderr, "cubicle_cgroup_bench: needs root (it creates cgroups)\n");
  } else if (!layout.ok()) {
    std::fprintf(stderr, "cubicle_cgroup_bench: %s\n",
                 std::string(layout.status().message()).c_str());
  } else if (absl::Status st = cgroups::PrepareParents(&*layout); !st.ok()) {
    std::fprintf(stderr, "cubicle_cgroup_bench: %s\n", std::string(st.message()).c_str());
  } else {
    env.layout = *layout;
    env.v1_only = bench::WithoutUnified(*layout);
    env.ready = true;
    benchmark::AddCustomContext("cgroups", env.layout.Describe());
  }
  benchmark::AddCustomContext("repetitions", std::to_string(bench::Repetitions()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (env.ready) (void)cgroups::RemoveParents(env.layout);
  return 0;
}

// Shared by the bench programs: per-execution percentiles over repetitions.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"

namespace cubicle::bench {

// Linear interpolation between closest ranks (numpy's default).
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

// CUBICLE_BENCH_REPS, or `fallback`.
inline int Repetitions(int fallback = 200) {
  const char* env = std::getenv("CUBICLE_BENCH_REPS");
  int reps = env != nullptr ? std::atoi(env) : 0;
  return reps > 0 ? reps : fallback;
}

// P50, P90 and P99 over the repetitions, reported instead of each one.
inline benchmark::internal::Benchmark* WithPercentiles(benchmark::internal::Benchmark* b) {
  return b->ComputeStatistics("p50", Percentile<50>)
      ->ComputeStatistics("p90", Percentile<90>)
      ->ComputeStatistics("p99", Percentile<99>)
      ->ReportAggregatesOnly(true);
}

// One execution per repetition, wall-clock time in milliseconds.
inline void PerExecution(benchmark::internal::Benchmark* b, int reps) {
  WithPercentiles(b->Iterations(1)->Repetitions(reps)->UseRealTime()->Unit(benchmark::kMillisecond));
}
inline void PerExecution(benchmark::internal::Benchmark* b) { PerExecution(b, Repetitions()); }

// cubicle's default sandbox as bubblewrap spells it, minus what bwrap
// cannot do: no seccomp filter, no generated /etc files, no rlimits, no
// cgroup. The baseline of the launch and pool benches.
inline std::vector<std::string> BwrapArgs(const std::vector<std::string>& payload) {
  std::vector<std::string> args = {
      "/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
      "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
      "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--dev", "/dev",
      "--proc", "/proc", "--tmpfs", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
      "--uid", "1000", "--gid", "1000", "--hostname", "cubicle",
      "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache", "--"};
  args.insert(args.end(), payload.begin(), payload.end());
  return args;
}

}  // namespace cubicle::bench

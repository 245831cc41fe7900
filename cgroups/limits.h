// The resource limits of one sandbox, as a plain value, and their validation.
// No syscalls here: cgroup.h turns a Limits into cgroupfs writes for the
// hierarchy each controller lives in (v2 or v1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace cubicle::cgroups {

// Bandwidth and IOPS caps on one block device. An unset field leaves that
// direction unlimited; at least one must be set.
struct IoLimit {
  uint32_t major = 0;
  uint32_t minor = 0;
  std::optional<uint64_t> read_bps;
  std::optional<uint64_t> write_bps;
  std::optional<uint64_t> read_iops;
  std::optional<uint64_t> write_iops;

  bool operator==(const IoLimit&) const = default;
};

// Every field is optional: unset means "no limit" (or, with a ceiling, see
// FillFromCeiling). Values use cgroup v2 semantics; the v1 backend maps them.
struct Limits {
  std::optional<uint64_t> memory_max;   // bytes; swap is always held at 0
  std::optional<uint64_t> memory_high;  // bytes; v2 throttles above it, v1 soft limit
  std::optional<uint64_t> pids_max;     // tasks (threads count)
  std::optional<double> cpus;           // CPU time per period: 0.5 = half of one CPU
  uint64_t cpu_period_us = 100000;      // the CFS period the cpus quota applies to
  std::optional<uint32_t> cpu_weight;   // 1..10000, 100 = the default share (v1: cpu.shares)
  std::vector<IoLimit> io;              // at most one entry per device

  // True when no field asks for a limit (cpu_period_us alone limits nothing).
  bool empty() const;
  bool operator==(const Limits&) const = default;
};

// Bounds that hold whatever the ceiling says. The memory floor keeps a typo
// ("--memory 64" meaning 64 MiB) from producing a sandbox that cannot start.
inline constexpr uint64_t kMinMemoryBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxMemoryBytes = uint64_t{1} << 60;  // keeps writes below LLONG_MAX
inline constexpr uint64_t kMaxPids = 4194304;                   // the kernel's PID_MAX_LIMIT
inline constexpr uint64_t kMinCpuPeriodUs = 1000;               // the kernel's CFS bounds
inline constexpr uint64_t kMaxCpuPeriodUs = 1000000;
inline constexpr uint64_t kMinCpuQuotaUs = 1000;
inline constexpr uint32_t kMinCpuWeight = 1;
inline constexpr uint32_t kMaxCpuWeight = 10000;

// Checks `limits` on its own and against `ceiling` (may be null). Every
// problem is reported, not just the first, as one InvalidArgument whose
// parts ("; "-separated) each name the field, the value and the bound:
//   "memory_max: 2147483648 (2 GiB) exceeds the ceiling 1073741824 (1 GiB)".
// A field the ceiling limits but `limits` leaves unset is unlimited, and so
// above the ceiling; callers that mean "as much as allowed" call
// FillFromCeiling first. `host_cpus` bounds `cpus` (as `docker --cpus`
// does); the overload without it uses the CPUs online now.
absl::Status ValidateLimits(const Limits& limits, const Limits* ceiling);
absl::Status ValidateLimits(const Limits& limits, const Limits* ceiling, unsigned host_cpus);

// Sets every field `limits` leaves unset to the ceiling's value (an io
// device the ceiling caps and `limits` does not is added, a capped
// direction left unset is filled). A filled memory_high is kept at or below
// memory_max.
void FillFromCeiling(Limits* limits, const Limits& ceiling);

// The CFS quota for `limits.cpus` over `limits.cpu_period_us`, rounded to
// the nearest microsecond. Requires `limits.cpus`.
uint64_t CpuQuotaUs(const Limits& limits);

// cgroup v2 cpu.weight to v1 cpu.shares, as systemd maps them: the defaults
// correspond (100 -> 1024), clamped to the kernel's [2, 262144].
uint64_t CpuWeightToShares(uint32_t weight);

// "268435456 (256 MiB)": the exact value and a readable one, for messages.
std::string DescribeBytes(uint64_t bytes);

}  // namespace cubicle::cgroups

// What a sandbox's cgroups report about it, and the parsers of the kernel's
// files (pure functions, tested on text).
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::cgroups {

// Every field is what the kernel offers on this host, unset where it offers
// nothing (a controller that is not there, a file an older kernel lacks).
struct Stats {
  std::optional<uint64_t> memory_peak_bytes;  // v2 memory.peak; v1 memory.max_usage_in_bytes
  std::optional<uint64_t> cpu_usage_ns;       // v2 cpu.stat usage_usec; v1 cpuacct.usage
  std::optional<uint64_t> pids_peak;          // pids.peak (v2, and v1 on recent kernels)
  std::optional<uint64_t> oom_kills;          // v2 memory.events oom_kill; v1 memory.oom_control
  // How often the memory limit was hit: v2 memory.events "max", v1
  // memory.failcnt + memory.memsw.failcnt. A hit is not an OOM kill
  // (reclaim may have sufficed).
  std::optional<uint64_t> memory_limit_hits;

  // The kernel OOM-killed a process of the sandbox.
  bool oom_killed() const { return oom_kills.value_or(0) > 0; }
  bool operator==(const Stats&) const = default;
};

// The value of `key` in a flat-keyed file ("key value" lines: memory.events,
// cpu.stat, memory.oom_control). NotFound when the key is absent,
// InvalidArgument when its value is not a number.
absl::StatusOr<uint64_t> KeyedValue(absl::string_view text, absl::string_view key);

// A single-number file ("123\n": memory.peak, cpuacct.usage, pids.peak).
absl::StatusOr<uint64_t> SingleValue(absl::string_view text);

}  // namespace cubicle::cgroups

// The daemon's file descriptors, sized from its configuration
// (docs/config.md, "File descriptors"): what the executions and the pools
// may hold at most, and the connections the rest of RLIMIT_NOFILE leaves,
// so that running out of descriptors is refused up front rather than met
// by a request.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/pool.h"

namespace cubicle::rpc {

// Measured upper bounds, with room: an execution's own (its zygote's
// control socket, pidfd and group fds, the capture pipes, the cancel
// eventfd, the breakers' timer, its connection) and a zygote's waiting
// idle, being built or torn down.
inline constexpr uint64_t kFdsPerExecution = 32;
inline constexpr uint64_t kFdsPerZygote = 16;
inline constexpr uint64_t kFdsForTheDaemon = 64;  // stdio, logs, epoll, listeners, metrics, probes
inline constexpr uint64_t kMinConnectionFds = 16;

// The zygotes one pool may hold outside executions at once: idle ones,
// those being built, and ended ones waiting for their teardown (at most
// max_idle, at least 1: runtime/pool.h, HoldBackground).
uint64_t PoolFds(const runtime::PoolConfig& pool);

struct FdBudget {
  uint64_t limit = 0;        // RLIMIT_NOFILE (soft, raised to the hard limit)
  uint64_t executions = 0;   // max_concurrent × kFdsPerExecution
  uint64_t pools = 0;        // Σ PoolFds
  uint64_t connections = 0;  // what is left: the most clients connected at once

  uint64_t reserved() const { return kFdsForTheDaemon + executions + pools; }
};

// The budget of `max_concurrent` executions and these pools under `limit`;
// FailedPrecondition, saying what needs how many and what to change, when
// fewer than kMinConnectionFds are left for connections.
absl::StatusOr<FdBudget> PlanFds(uint64_t limit, size_t max_concurrent,
                                 const std::map<std::string, runtime::PoolConfig>& pools);

// Raises this process's soft RLIMIT_NOFILE to its hard limit (every fd
// the daemon opens is close-on-exec, and a sandbox's own nofile comes from
// its profile's rlimits). Returns the soft limit now in force; a raise the
// kernel refuses leaves it as it was.
absl::StatusOr<uint64_t> RaiseFileLimit();

}  // namespace cubicle::rpc

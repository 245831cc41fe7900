#include "rpc/fd_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace cubicle::rpc {

uint64_t PoolFds(const runtime::PoolConfig& pool) {
  const uint64_t zygotes = pool.max_idle + pool.refill_parallelism + std::max<uint64_t>(1, pool.max_idle);
  return zygotes * kFdsPerZygote;
}

absl::StatusOr<FdBudget> PlanFds(uint64_t limit, size_t max_concurrent,
                                 const std::map<std::string, runtime::PoolConfig>& pools) {
  FdBudget budget;
  budget.limit = limit;
  budget.executions = max_concurrent * kFdsPerExecution;
  for (const auto& [name, pool] : pools) budget.pools += PoolFds(pool);
  const uint64_t needed = budget.reserved() + kMinConnectionFds;
  if (needed > limit) {
    return absl::FailedPreconditionError(absl::StrCat(
        "too few file descriptors: concurrency.max_concurrent ", max_concurrent, " needs up to ", budget.executions,
        ", the pools' zygotes up to ", budget.pools, ", the daemon ", kFdsForTheDaemon, " and its clients at least ",
        kMinConnectionFds, " (", needed, " in all), but RLIMIT_NOFILE is ", limit,
        ": raise its hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower max_concurrent or the pools' "
        "max_idle"));
  }
  budget.connections = limit - budget.reserved();
  return budget;
}

absl::StatusOr<uint64_t> RaiseFileLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return ErrnoStatus(errno, "getrlimit(RLIMIT_NOFILE)");
  if (rl.rlim_cur < rl.rlim_max) {
    // An infinite hard limit is not a count the kernel takes for files: it
    // stops at fs.nr_open (1048576 unless raised).
    const rlim_t target = rl.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : rl.rlim_max;
    struct rlimit raised = {std::max(rl.rlim_cur, target), rl.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;  // else the soft limit stands
  }
  return rl.rlim_cur == RLIM_INFINITY ? uint64_t{1} << 20 : static_cast<uint64_t>(rl.rlim_cur);
}

}  // namespace cubicle::rpc

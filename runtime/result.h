// The outcome of one execution.
#pragma once

#include <sys/resource.h>

#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cgroups/stats.h"

namespace cubicle::runtime {

enum class ExitReason {
  kExited,       // the payload called exit; exit_code is set
  kSignaled,     // the payload died of a signal; signal is set
  kTimeout,      // the wall-clock limit ran out; every process was killed
  kSetupFailed,  // something before execve failed; setup_error says what
  kOom,          // the kernel's OOM killer killed the payload (cgroup memory limit)
  kBreakerCpu,     // a runtime breaker ended it (see breakers.h): signal or
  kBreakerMemory,  // exit_code says how it ended
  kBreakerIo,
  kKilled,         // the caller cancelled the execution (ExecRequest::cancel_fd)
};

absl::string_view ExitReasonName(ExitReason reason);

struct ExecResult {
  ExitReason reason = ExitReason::kSetupFailed;
  int exit_code = -1;
  int signal = 0;
  absl::Status setup_error;  // kSetupFailed only: "pivot_root(/newroot): EINVAL: ..."

  absl::Duration wall;   // launch call to sandbox gone
  absl::Duration setup;  // launch call to the payload's execve
  struct rusage rusage {};
  // Per-step durations, in order ("validate", "clone", "id_maps", "rootfs", ...).
  std::vector<std::pair<std::string, absl::Duration>> steps;
  std::vector<std::string> warnings;  // degradations, e.g. the /proc fallback
  // What the sandbox's cgroup accounted (peak memory, CPU time, peak pids,
  // OOM kills), when it had one; fields the host does not offer stay unset.
  std::optional<cgroups::Stats> cgroup;
  // Served by a warm interpreter without exec'ing argv (runtime/warm.h).
  bool warm = false;

  // The shell's convention: exit code, or 128+N for signal N.
  int ShellStatus() const;
};

}  // namespace cubicle::runtime

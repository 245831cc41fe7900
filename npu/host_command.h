// Runs one program on the host — a fixed argv, no shell — with a timeout
// and a budget on what it may write: how cubicle asks the driver's own
// tools (`npu-smi info`, `nvidia-smi -L`) on the host, and how the host
// broker runs an operator's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cubicle::npu {

struct HostCommandOptions {
  std::vector<std::string> env;  // "NAME=value"; nothing is inherited
  absl::Duration timeout = absl::Seconds(30);
  uint64_t output_budget = 1 << 20;  // bytes kept per stream; the rest is read and dropped
};

struct HostCommandResult {
  int exit_code = -1;  // WEXITSTATUS, or -1 when it died of a signal
  int signal = 0;
  bool timed_out = false;  // killed (its whole process group) at the deadline
  std::string out;
  std::string err;
  bool out_truncated = false;
  bool err_truncated = false;
  bool ok() const { return exit_code == 0 && !timed_out; }
};

// argv[0] must be an absolute path. The program runs in its own process
// group with stdin from /dev/null; at the deadline the group is killed with
// SIGKILL. Errors are for what kept it from starting (a missing program is
// an error naming it); its own failure is in the result.
absl::StatusOr<HostCommandResult> RunHostCommand(const std::vector<std::string>& argv,
                                                 const HostCommandOptions& options);

}  // namespace cubicle::npu

#include "cli/parent_death.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>

#include "base/status.h"

namespace cubicle::cli {

absl::Status DieWithParent() {
  const pid_t parent = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return ErrnoStatus(errno, "prctl(PR_SET_PDEATHSIG)");
  // A parent that died before the prctl left us reparented, and no signal
  // will come.
  if (::getppid() != parent) return absl::FailedPreconditionError("the parent process exited before the launch");
  return absl::OkStatus();
}

}  // namespace cubicle::cli

// A launcher that dies with its parent (bwrap's --die-with-parent, and
// `cubicle run`'s default): an orchestrator that is SIGKILLed takes the
// launcher with it, and the launcher's death ends its sandbox (the
// sandbox's init has the same signal bound to the launcher; the payload to
// init).
#pragma once

#include "absl/status/status.h"

namespace cubicle::cli {

// PR_SET_PDEATHSIG(SIGKILL) on the calling (main) thread. The kernel sends
// it when the thread that forked this process exits, which is the
// orchestrator's death unless it spawned us from a thread that ends before
// it does (bwrap's behaviour too). FailedPrecondition when the parent died
// already, before the signal could take effect: the caller should exit.
absl::Status DieWithParent();

}  // namespace cubicle::cli

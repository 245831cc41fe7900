// The launcher's side of the control socket it shares with a sandbox's
// init (namespaces/control.h): reading reports with a deadline, turning a
// child's serialized error into a Status, and the cgroup-join exchange
// (JoinOwnGroups / JoinGroupsSentLater in child_main.cc). Internal to
// runtime/.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/child_error.h"
#include "cgroups/cgroup.h"
#include "namespaces/control.h"

namespace cubicle::runtime {

// "step(detail): ENAME: text", or FailedPrecondition without an errno.
absl::Status ChildErrorStatus(const ChildError& error);

// The next message the sandbox sends on `control` before `deadline` (a
// ControlMessage, or the one byte of a cgroup join): its size, 0 when the
// sandbox hung up, -1 for a failed recv. `step` names the wait in a poll
// error; DeadlineExceeded with `late` when the deadline passes first.
absl::StatusOr<ssize_t> ReceiveBy(int control, absl::Time deadline, namespaces::ControlMessage* msg,
                                  const char* step, const std::string& late);

// A setup error the sandbox has sent and nobody has read yet (a child that
// failed while the launcher was busy is gone: its report is the error to
// give), or OK.
absl::Status PendingSetupError(int control);

// Waits for the child's 'A': it has joined its v1 groups.
absl::Status WaitUntilJoined(int control, absl::Duration timeout);

// 'J' with the v1 groups' tasks files, for JoinGroupsSentLater.
absl::Status SendGroups(int control, const std::vector<cgroups::SandboxCgroup::TaskFile>& files);

}  // namespace cubicle::runtime

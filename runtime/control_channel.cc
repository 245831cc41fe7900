#include "runtime/control_channel.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/fd_passing.h"
#include "base/status.h"
#include "runtime/child_plan.h"

namespace cubicle::runtime {

using namespaces::ControlMessage;
using namespaces::ControlType;

absl::Status ChildErrorStatus(const ChildError& error) {
  std::string step = error.detail[0] != '\0' ? absl::StrCat(error.step, "(", error.detail, ")")
                                              : std::string(error.step);
  if (error.err == 0) return absl::FailedPreconditionError(step);
  return ErrnoStatus(error.err, step);
}

absl::StatusOr<ssize_t> ReceiveBy(int control, absl::Time deadline, ControlMessage* msg, const char* step,
                                  const std::string& late) {
  for (;;) {
    struct pollfd p = {control, POLLIN, 0};
    const absl::Duration left = deadline - absl::Now();
    const int n = ::poll(&p, 1, left <= absl::ZeroDuration() ? 0 : static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("poll(", step, ")"));
    if (n == 0) return absl::DeadlineExceededError(late);
    const ssize_t got = ::recv(control, msg, sizeof(*msg), 0);
    if (got < 0 && errno == EINTR) continue;
    return got;
  }
}

absl::Status PendingSetupError(int control) {
  ControlMessage msg;
  if (::recv(control, &msg, sizeof(msg), MSG_DONTWAIT | MSG_PEEK) == sizeof(msg) &&
      msg.type == ControlType::kSetupError) {
    return ChildErrorStatus(msg.error);
  }
  return absl::OkStatus();
}

absl::Status WaitUntilJoined(int control, absl::Duration timeout) {
  ControlMessage msg;
  CUBICLE_ASSIGN_OR_RETURN(ssize_t got, ReceiveBy(control, absl::Now() + timeout, &msg, "joined",
                                                  "the sandbox did not join its cgroups in time"));
  if (got == 1 && reinterpret_cast<const char*>(&msg)[0] == 'A') return absl::OkStatus();
  if (got == static_cast<ssize_t>(sizeof(msg)) && msg.type == ControlType::kSetupError) {
    return ChildErrorStatus(msg.error);
  }
  return absl::InternalError("the sandbox ended before it joined its cgroups");
}

absl::Status SendGroups(int control, const std::vector<cgroups::SandboxCgroup::TaskFile>& files) {
  std::string text = "J";
  int fds[kMaxPassedFds];
  if (files.size() > kMaxPassedFds) return absl::InternalError("more v1 groups than one message carries");
  for (size_t i = 0; i < files.size(); ++i) {
    fds[i] = files[i].fd.get();
    absl::StrAppend(&text, files[i].path, "\n");
  }
  if (text.size() > kGroupsMessageBytes) text.resize(1);  // paths only name errors
  if (SendWithFds(control, text.data(), text.size(), fds, files.size(), MSG_NOSIGNAL) >= 0) return absl::OkStatus();
  const int err = errno;
  CUBICLE_RETURN_IF_ERROR(PendingSetupError(control));
  return ErrnoStatus(err, "send(control, cgroups)");
}

}  // namespace cubicle::runtime

// The payload routes (ChildPlan::route), on the sandbox side: init's part
// of each, and the code the payload process runs up to its execve. All of
// it runs between clone and execve: it reads the ChildPlan, makes raw
// syscalls and allocates nothing. Internal to runtime/.
#pragma once

#include <cstdint>

#include "base/child_error.h"
#include "namespaces/control.h"
#include "namespaces/exec_request.h"
#include "runtime/child_plan.h"

namespace cubicle::runtime {

// The end of a failed setup on the sandbox side: `msg`, its error filled
// in, goes to the launcher as a kSetupError on `control_fd`; then _exit.
[[noreturn]] void ExitWithSetupError(int control_fd, namespaces::ControlMessage& msg, int code);

// bwrap --as-pid-1: the sandbox's first process becomes the payload itself
// (no cubicle init); its exit status is the first process's, which the
// launcher reaps.
[[noreturn]] void BecomePayload(const ChildPlan& plan, namespaces::ExecRequestView& request,
                                namespaces::ControlMessage msg);

// An armed payload's state, shared with it: it runs in init's memory
// (CLONE_VM), on its own stack, and never at the same time as init.
struct ArmedPayload {
  const ChildPlan* plan = nullptr;
  const namespaces::ExecRequestView* request = nullptr;  // init's; filled in before the hand-off
  namespaces::ControlMessage report{};  // init's report when the payload started
  long init_pid = -1;
  int payload_sock = -1;  // the payload's end of its pair with init
  int init_sock = -1;     // init's end: the request's stdio goes out on it
  long pid = -1;
  int32_t in_init_memory = 0;
  int64_t* exec_stamp = nullptr;  // the exec stamp page, mapped by init (or none)
  // A request that came on the direct channel, and its linger flag: for
  // init, which reads them once the payload has left its memory.
  bool direct_received = false;
  bool direct_linger = false;
};

// Init's handle on its payload, whatever the route. The route decides, in
// StartAhead and HandOff, what happens; ChildMain only calls them in order.
class InitPayload {
 public:
  explicit InitPayload(const ChildPlan& plan) : plan_(plan) {}
  InitPayload(const InitPayload&) = delete;
  InitPayload& operator=(const InitPayload&) = delete;

  // Before "ready": starts what the route starts ahead of its request — a
  // warm interpreter (and waits for its bootstrap's "R"), an armed payload
  // (and waits for its "armed"). `request` is where init will receive the
  // request (an armed payload reads it there). Nothing for other routes.
  bool StartAhead(namespaces::ExecRequestView* request, const namespaces::ControlMessage& report,
                  int64_t* exec_stamp, ChildError* e);

  // An armed payload with a direct channel may take its request there.
  enum class DirectWait {
    kOnControl,  // the request comes to init, on the control socket
    kTaken,      // the payload took it and has left init's memory: supervise it
    kDied,       // the payload died waiting (killed): nothing to supervise
    kFailed,     // waiting failed; `e` says why
  };
  // Waits until one of the two is known. kOnControl at once for a payload
  // without a direct channel.
  DirectWait AwaitDirectRequest(ChildError* e);
  bool direct_linger() const { return armed_.direct_linger; }

  // The hand-off of a request init received: forward it to the warm
  // interpreter (and say "executing"), pass its stdio to the armed payload
  // and wait until it has exec'd, or spawn the payload. Not for kAsPid1.
  bool HandOff(namespaces::ExecRequestView& request, namespaces::ControlMessage& report, ChildError* e);

  // The payload's pid once started, else -1.
  long pid() const { return pid_; }
  // An adopted payload's pidfd (it is not init's child), else -1.
  int adopted_pidfd() const { return adopted_pidfd_; }

 private:
  const ChildPlan& plan_;
  ArmedPayload armed_;
  int warm_socket_ = -1;
  long pid_ = -1;
  int adopted_pidfd_ = -1;
};

}  // namespace cubicle::runtime

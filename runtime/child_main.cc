// The sandbox's first process, from clone to its hand-off (DESIGN §4.3–4.4):
// it reads the ChildPlan, makes raw syscalls and allocates nothing. Each
// step is a function returning false with the step and errno in a
// ChildError, which goes to the launcher as a kSetupError.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/fd_passing.h"
#include "egress/bridge.h"
#include "namespaces/control.h"
#include "namespaces/init.h"
#include "namespaces/prefault.h"
#include "namespaces/process.h"
#include "rootfs/builder.h"
#include "runtime/child_plan.h"
#include "runtime/defaults.h"
#include "runtime/payload_start.h"

namespace cubicle::runtime {
namespace {

using namespaces::ControlMessage;
using namespaces::ExecRequestView;

// What the setup steps leave for init.
struct ChildSetup {
  ControlMessage report;
  // Egress: init passes each connection to the bridge's port on to the
  // host gateway over the egress channel.
  namespaces::InitService bridge{-1, -1, egress::bridge::PassPending};
  rootfs::BuildReport build;
  // The nested user namespace (--disable-userns, a setup as root) needs a
  // procfs after the pivot, when the sandbox may have none: the host's,
  // opened while it is still mounted.
  int proc_fd = -1;
  // The exec stamp page (an armed payload's): mapped before its fd goes
  // with the rest. None (a failed map) means "executing" is a message.
  int64_t* exec_stamp = nullptr;
};

void Stamp(ChildSetup& s, namespaces::ChildStep step) { s.report.step_ns[step] = namespaces::MonotonicNanos(); }

// The pages a hand-off touches, mapped before "ready" (namespaces/prefault.h):
// the text (the hand-off is the first time a forked process runs most of
// it), the pages a request is received into (a typical request fits in the
// first two), the stack and errno.
void PrefaultForHandOff(const ChildPlan& plan) {
  const HandOffMemory& m = plan.memory;
  namespaces::PrefaultText(m.text.data(), m.text.size());
  namespaces::PrefaultWritable(m.request_buffer.get(), 2 * 4096);
  namespaces::PrefaultWritable(m.request_pointers.get(), sizeof(char*) * 64);
  namespaces::PrefaultStack(32 * 1024);
  if (m.payload_stack != nullptr) {
    namespaces::PrefaultWritable(m.payload_stack.get() + kPayloadStackBytes - 32 * 1024, 32 * 1024);
  }
  __atomic_fetch_or(&errno, 0, __ATOMIC_RELAXED);
}

bool SayJoined(const ChildPlan& plan, ChildError* e) {
  const char joined = 'A';
  return ::send(plan.fds.control, &joined, 1, MSG_NOSIGNAL) == 1 || child::Fail(e, "send", "joined", errno);
}

// The child's first step: it joins its v1 groups itself
// (SandboxCgroup::V1TaskFiles), then says 'A' on the control socket. Every
// process of the sandbox is made after, so all start in the groups.
bool JoinOwnGroups(const ChildPlan& plan, ChildError* e) {
  const ChildGroups& groups = plan.groups;
  for (size_t i = 0; i < groups.task_fds.size(); ++i) {
    if (::write(groups.task_fds[i], "0", 1) != 1) return child::Fail(e, "join cgroup", groups.task_paths[i], errno);
    ::close(groups.task_fds[i]);
  }
  return groups.task_fds.empty() || SayJoined(plan, e);
}

// JoinOwnGroups at the end of the setup, for v1 groups the launcher made
// meanwhile: its message 'J', the groups' paths one per line, carries their
// tasks files (none: it attached this process itself). Before any process
// of the sandbox but init exists, so all start in the groups.
bool JoinGroupsSentLater(const ChildPlan& plan, ChildError* e) {
  if (!plan.groups.join_later) return true;
  char text[kGroupsMessageBytes + 1];
  int fds[kMaxPassedFds];
  size_t nfds = 0;
  int flags = 0;
  const ssize_t n = ReceiveWithFds(plan.fds.control, text, kGroupsMessageBytes, fds, kMaxPassedFds, &nfds, 0, &flags);
  if (n <= 0) return child::Fail(e, "wait for cgroups", n == 0 ? "launcher exited" : "recvmsg", n == 0 ? EPIPE : errno);
  if (text[0] != 'J' || (flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    for (size_t i = 0; i < nfds; ++i) ::close(fds[i]);
    return child::Fail(e, "wait for cgroups", "unexpected message", EPROTO);
  }
  text[n] = '\0';
  char* path = text + 1;
  bool ok = true;
  for (size_t i = 0; i < nfds; ++i) {
    char* end = std::strchr(path, '\n');
    if (end != nullptr) *end = '\0';
    if (ok && ::write(fds[i], "0", 1) != 1) ok = child::Fail(e, "join cgroup", path, errno);
    ::close(fds[i]);
    if (end != nullptr) path = end + 1;
  }
  return !ok || nfds == 0 ? ok : SayJoined(plan, e);
}

// Waits for "go", then takes the sandbox's ids. The parent-death signal is
// set after the id switch: the kernel clears it whenever the credentials
// change (as root, kuid 0 becomes 1000000+), and a launcher that died in
// between is caught by the check after it.
bool BecomeSandboxUser(const ChildPlan& plan, ChildError* e) {
  const ChildIds& ids = plan.ids;
  return namespaces::WaitForLauncher(plan.fds.control, e) &&
         (ids.joined_userns ? namespaces::SwitchJoinedIds(ids.switch_uid, ids.uid, ids.switch_gid, ids.gid, e)
          : ids.set_up_as_root ? namespaces::BecomeSandboxIds(0, 0, e)
                               : namespaces::BecomeSandboxIds(ids.uid, ids.gid, e)) &&
         (!plan.hygiene.die_with_parent ||
          (namespaces::DieWithParent(e) && namespaces::LauncherStillThere(plan.fds.control, e)));
}

bool OpenHostProcForUserns(const ChildPlan& plan, ChildSetup& s, ChildError* e) {
  if (!plan.ids.disable_userns && !plan.ids.set_up_as_root) return true;
  s.proc_fd = ::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  return s.proc_fd >= 0 || child::Fail(e, "open", "/proc", errno);
}

void MapExecStamp(const ChildPlan& plan, ChildSetup& s) {
  if (plan.fds.exec_stamp < 0) return;
  void* page = ::mmap(nullptr, kStampBytes, PROT_READ | PROT_WRITE, MAP_SHARED, plan.fds.exec_stamp, 0);
  if (page != MAP_FAILED) s.exec_stamp = static_cast<int64_t*>(page);
}

// Everything but the fds the sandbox goes on with: the launcher's other
// fds (and the host-side mount trees, now attached). Stdio comes with the
// request.
bool CloseLauncherFds(const ChildPlan& plan, const ChildSetup& s, ChildError* e) {
  int keep[7 + kMaxInheritedFds];
  size_t kept = 0;
  keep[kept++] = plan.fds.control;
  if (plan.fds.egress >= 0) keep[kept++] = plan.fds.egress;
  if (s.proc_fd >= 0) keep[kept++] = s.proc_fd;
  if (plan.ids.userns_after_setup_fd >= 0) keep[kept++] = plan.ids.userns_after_setup_fd;
  if (plan.fds.direct >= 0) keep[kept++] = plan.fds.direct;
  if (plan.fds.warm >= 0) keep[kept++] = plan.fds.warm;
  if (plan.fds.template_owner >= 0) keep[kept++] = plan.fds.template_owner;
  for (int fd : plan.hygiene.inherited_fds) keep[kept++] = fd;
  return namespaces::CloseAllFdsExcept(keep, kept, e);
}

// hostname, `lo` up, the egress bridge's socket, and a subreaper where
// there is no pid namespace to reap orphans.
bool SetUpSystem(const ChildPlan& plan, ChildSetup& s, ChildError* e) {
  const ChildSystem& sys = plan.system;
  s.bridge.partner_fd = plan.fds.egress;
  return (!sys.uts_namespace || !sys.set_hostname || namespaces::SetHostname(sys.hostname.c_str(), e)) &&
         (!sys.net_namespace || namespaces::BringUpLoopback(e)) &&
         (plan.fds.egress < 0 || egress::bridge::Listen(plan.fds.bridge_port, &s.bridge.fd, e)) &&
         (sys.pid_namespace || ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ||
          child::Fail(e, "prctl(PR_SET_CHILD_SUBREAPER)", "", errno));
}

// The user namespace to run in once set up (bwrap --userns2): the setup
// before needed the privileges of the one it was made in.
bool EnterUsernsAfterSetup(const ChildPlan& plan, ChildError* e) {
  const int fd = plan.ids.userns_after_setup_fd;
  if (fd < 0) return true;
  char fd_text[32];
  const bool ok = ::setns(fd, CLONE_NEWUSER) == 0 ||
                  child::Fail(e, "join user namespace after setup",
                              child::FormatWithNumber(fd_text, sizeof(fd_text), "fd ", fd), errno);
  const std::vector<int>& inherited = plan.hygiene.inherited_fds;
  if (std::find(inherited.begin(), inherited.end(), fd) == inherited.end()) ::close(fd);
  return ok;
}

// The nested user namespace, last: from here on the sandbox's own
// capabilities are gone. One namespace for both reasons, as bwrap's
// second: --disable-userns (nothing below may make another), and the
// sandbox's own ids after a setup as root. Then the probe of
// --assert-userns-disabled: a user namespace made here means the
// assertion is false, and this sandbox goes no further.
bool NestUserNamespace(const ChildPlan& plan, ChildSetup& s, ChildError* e) {
  const ChildIds& ids = plan.ids;
  bool ok = s.proc_fd < 0 ||
            namespaces::EnterNestedUserNamespace(s.proc_fd, ids.disable_userns, ids.uid, ids.gid, e);
  if (s.proc_fd >= 0) ::close(s.proc_fd);
  s.proc_fd = -1;
  if (ok && plan.ids.assert_userns_disabled && ::syscall(SYS_unshare, CLONE_NEWUSER) == 0) {
    ok = child::Fail(e, "creation of new user namespaces was not disabled as requested", "", 0);
  }
  return ok;
}

// bwrap --new-session with a PID 1 of bwrap's: the session is init's, and
// the payload forked later joins it.
bool InitSession(const ChildPlan& plan, ChildError* e) {
  return !plan.system.init_new_session || ::setsid() >= 0 || child::Fail(e, "setsid", "init", errno);
}

// The setup, in order: groups, ids, root, system, late groups, user
// namespaces, session. Each step stamps where the launcher reports steps.
bool SetUpSandbox(const ChildPlan& plan, ChildSetup& s) {
  ChildError* e = &s.report.error;
  if (!JoinOwnGroups(plan, e)) return false;
  const bool user = BecomeSandboxUser(plan, e);
  Stamp(s, namespaces::kStepIdsReady);
  bool ok = user && OpenHostProcForUserns(plan, s, e) && rootfs::BuildRoot(plan.rootfs, &s.build, e);
  if (ok) MapExecStamp(plan, s);
  ok = ok && CloseLauncherFds(plan, s, e);
  Stamp(s, namespaces::kStepRootfsReady);
  return ok && SetUpSystem(plan, s, e) && JoinGroupsSentLater(plan, e) && EnterUsernsAfterSetup(plan, e) &&
         NestUserNamespace(plan, s, e) && InitSession(plan, e);
}

// The hand-off's request, from the launcher, then the workspace (a detached
// mount made on the host) moved in while init still holds its
// capabilities.
bool ReceiveRequest(const ChildPlan& plan, ChildSetup& s, ExecRequestView* request) {
  ChildError* e = &s.report.error;
  bool ok = namespaces::ReceiveExecRequest(plan.fds.control, plan.memory.request_buffer.get(),
                                           plan.memory.request_pointers.get(), request, e);
  Stamp(s, namespaces::kStepRequestReceived);
  if (ok && request->workspace_fd >= 0) {
    ok = ::move_mount(request->workspace_fd, "", AT_FDCWD, kWorkspaceDir, MOVE_MOUNT_F_EMPTY_PATH) == 0 ||
         child::Fail(e, "move_mount", kWorkspaceDir, errno);
    ::close(request->workspace_fd);
  }
  return ok;
}

[[noreturn]] void Supervise(const ChildPlan& plan, ChildSetup& s, const InitPayload& payload, bool linger) {
  namespaces::Supervise(plan.fds.control, &s.report, payload.pid(), s.bridge.fd >= 0 ? &s.bridge : nullptr,
                        {.linger = linger,
                         .own_pid_namespace = plan.system.pid_namespace,
                         .adopted_pidfd = payload.adopted_pidfd()});
}

}  // namespace

void ChildMain(const ChildPlan& plan) {
  ChildSetup s;
  std::memset(&s.report, 0, sizeof(s.report));
  Stamp(s, namespaces::kStepChildStart);
  ChildError* e = &s.report.error;
  ::close(plan.fds.launcher_control);
  if (!SetUpSandbox(plan, s)) ExitWithSetupError(plan.fds.control, s.report, 1);
  if (s.build.proc_fallback) s.report.flags |= namespaces::kFlagProcFallback;

  // Init from here on (bwrap --as-pid-1: this process will be the payload,
  // no init). The route starts what it starts ahead of the request.
  ExecRequestView request;
  InitPayload payload(plan);
  const bool init = plan.route == PayloadRoute::kAsPid1 || namespaces::BecomeInit(plan.system.init_dumpable, e);
  if (!init || !payload.StartAhead(&request, s.report, s.exec_stamp, e)) {
    ExitWithSetupError(plan.fds.control, s.report, 1);
  }
  if (plan.memory.prefault) PrefaultForHandOff(plan);
  Stamp(s, namespaces::kStepInitReady);
  s.report.type = namespaces::ControlType::kReady;
  namespaces::SendControl(plan.fds.control, s.report);
  // A warm template's interpreter takes no request: its own requests come
  // from its owner. Init only watches it; its end is the template's.
  if (plan.route == PayloadRoute::kTemplate) Supervise(plan, s, payload, /*linger=*/false);

  switch (payload.AwaitDirectRequest(e)) {
    case InitPayload::DirectWait::kTaken:
      Supervise(plan, s, payload, payload.direct_linger());
    case InitPayload::DirectWait::kDied:
      child::Fail(e, "payload", "ended before its request", 0);
      ExitWithSetupError(plan.fds.control, s.report, 1);
    case InitPayload::DirectWait::kFailed:
      ExitWithSetupError(plan.fds.control, s.report, 1);
    case InitPayload::DirectWait::kOnControl:
      break;
  }
  if (!ReceiveRequest(plan, s, &request)) ExitWithSetupError(plan.fds.control, s.report, 1);
  if (plan.route == PayloadRoute::kAsPid1) BecomePayload(plan, request, s.report);
  // A plain payload reports "executing" itself, just before its execve.
  Stamp(s, namespaces::kStepPayloadForked);
  if (s.exec_stamp != nullptr) {
    __atomic_store_n(&s.exec_stamp[kStampHandOff], s.report.step_ns[namespaces::kStepPayloadForked],
                     __ATOMIC_RELEASE);
  }
  if (!payload.HandOff(request, s.report, e)) ExitWithSetupError(plan.fds.control, s.report, 1);
  Supervise(plan, s, payload, request.linger);
}

}  // namespace cubicle::runtime

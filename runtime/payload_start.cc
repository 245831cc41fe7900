#include "runtime/payload_start.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fd_passing.h"
#include "namespaces/capabilities.h"
#include "namespaces/init.h"
#include "namespaces/process.h"
#include "runtime/warm_r.h"
#include "seccomp/policy.h"

namespace cubicle::runtime {
namespace {

using namespaces::ControlMessage;
using namespaces::ControlType;
using namespaces::ExecRequestView;

// Puts the three stdio fds in place even when they overlap 0..2.
bool InstallStdio(const int (&stdio)[3], ChildError* error) {
  int moved[3];
  for (int i = 0; i < 3; ++i) {
    moved[i] = ::fcntl(stdio[i], F_DUPFD_CLOEXEC, 10);
    if (moved[i] < 0) return child::Fail(error, "dup(stdio)", i == 0 ? "stdin" : i == 1 ? "stdout" : "stderr", errno);
  }
  for (int i = 0; i < 3; ++i) {
    if (::dup2(moved[i], i) < 0) return child::Fail(error, "dup2(stdio)", "", errno);
    ::close(moved[i]);
  }
  return true;
}

// poll that retries only when interrupted.
bool PollRetrying(struct pollfd* fds, nfds_t n, const char* what, ChildError* e) {
  while (::poll(fds, n, -1) < 0) {
    if (errno != EINTR) return child::Fail(e, "poll", what, errno);
  }
  return true;
}

// chdir to the request's cwd, else to the first fallback that works, and
// point PWD at it (the entry was made before clone).
bool EnterCwd(const PayloadHygienePlan& hygiene, const ExecRequestView& request, ChildError* e) {
  if (::chdir(request.cwd) == 0) return true;
  const int first_errno = errno;
  for (size_t i = 0; i < hygiene.cwd_fallbacks.size(); ++i) {
    if (::chdir(hygiene.cwd_fallbacks[i].c_str()) != 0) continue;
    for (char** env = request.envp; *env != nullptr; ++env) {
      if (std::strncmp(*env, "PWD=", 4) == 0) *env = const_cast<char*>(hygiene.pwd_entries[i].c_str());
    }
    return true;
  }
  return child::Fail(e, "chdir", request.cwd, first_errno);
}

// The process-hygiene steps of DESIGN §4.5 that do not depend on the
// request: session, rlimits, capabilities, no_new_privs, the policy's
// seccomp filter.
bool PayloadHygiene(const PayloadHygienePlan& hygiene, ChildError* e) {
  bool ok = (!hygiene.new_session || ::setsid() >= 0 || child::Fail(e, "setsid", "", errno)) &&
            namespaces::ApplyRlimits(hygiene.rlimits.data(), hygiene.rlimits.size(), e) &&
            (hygiene.keep_capabilities ? namespaces::KeepCapabilities(hygiene.capabilities, e)
                                       : namespaces::DropAllCapabilities(e)) &&
            namespaces::SetNoNewPrivs(e);
  if (ok && hygiene.load_seccomp) {
    int rc = seccomp::Load(hygiene.seccomp);
    if (rc != 0) ok = child::Fail(e, "seccomp(SECCOMP_SET_MODE_FILTER)", "", -rc);
  }
  return ok;
}

// Closes every fd but stdio, `control`, `sock` (unless -1) and the fds the
// spec passes on (bwrap's inherited fds). No allocation.
bool CloseAllButStdio(const PayloadHygienePlan& hygiene, int control, int sock, ChildError* e) {
  int keep[5 + kMaxInheritedFds];
  size_t n = 0;
  for (int fd = 0; fd < 3; ++fd) keep[n++] = fd;
  keep[n++] = control;
  if (sock >= 0) keep[n++] = sock;
  for (int fd : hygiene.inherited_fds) keep[n++] = fd;
  return namespaces::CloseAllFdsExcept(keep, n, e);
}

// The SELinux exec label (bwrap's setexeccon, before its seccomp
// programs): only this thread may write its own attr/exec.
bool LabelExec(const PayloadHygienePlan& hygiene, const char* file, ChildError* e) {
  if (hygiene.exec_label.empty()) return true;
  const int attr = ::open("/proc/thread-self/attr/exec", O_WRONLY | O_CLOEXEC);
  const bool labelled = attr >= 0 && ::write(attr, hygiene.exec_label.c_str(), hygiene.exec_label.size()) ==
                                         static_cast<ssize_t>(hygiene.exec_label.size());
  const int saved = errno;
  if (attr >= 0) ::close(attr);
  return labelled || child::Fail(e, "label_exec", file, saved);
}

// A failure once a supplied seccomp program is in place: it goes into the
// launcher's shared page first (LateReport), since that program may refuse
// the send of the report that follows.
void LeaveLateReport(const PayloadHygienePlan& hygiene, const ChildError& error) {
  if (hygiene.late_report == nullptr) return;
  hygiene.late_report->error = error;
  __atomic_store_n(&hygiene.late_report->written, 1, __ATOMIC_RELEASE);
}

// The request's part, once the hygiene and the stdio are done: cwd,
// "executing", the supplied seccomp programs (last: they may forbid what
// this needs; loaded as bwrap loads them), execve. Returns only on
// failure. With `exec_stamp` (an armed payload's: a page the launcher
// reads, kStamp*), "executing" is its timestamp written there, not a
// message: the launcher is not woken while the payload execs.
void ExecTheRequest(const PayloadHygienePlan& hygiene, ExecRequestView& request, int control, ControlMessage& msg,
                    int64_t* exec_stamp) {
  ChildError* e = &msg.error;
  if (!EnterCwd(hygiene, request, e) || !LabelExec(hygiene, request.argv[0], e)) return;
  msg.type = ControlType::kExecuting;
  msg.step_ns[namespaces::kStepExecReady] = namespaces::MonotonicNanos();
  if (exec_stamp != nullptr) {
    __atomic_store_n(&exec_stamp[kStampExecReady], msg.step_ns[namespaces::kStepExecReady], __ATOMIC_RELEASE);
  } else {
    namespaces::SendControl(control, msg);
  }
  for (const sock_fprog& extra : hygiene.extra_seccomp) {
    if (int rc = seccomp::LoadWithPrctl(extra); rc != 0) {
      child::Fail(e, "prctl(PR_SET_SECCOMP)", "", -rc);
      LeaveLateReport(hygiene, *e);
      return;
    }
  }
  const char* file = request.argv[0];
  if (!hygiene.argv0.empty()) request.argv[0] = const_cast<char*>(hygiene.argv0.c_str());
  // Under the strict policy, the one exec its filter lets through.
  namespaces::ExecSearchingPath(file, request.argv, request.envp, request.search_path, hygiene.exec_token);
  child::Fail(e, hygiene.exec_token != 0 ? "execveat" : "execve", file, errno);
  LeaveLateReport(hygiene, *e);
}

// Dies with init, as bwrap's command dies with its parent
// (--die-with-parent): without a pid namespace nothing else would end a
// payload when the launcher, and with it init, is killed (init is only a
// subreaper there). Set before the capability drop, which keeps it; an
// init gone before it took effect is seen in the parent's pid.
bool DieWithInit(const PayloadHygienePlan& hygiene, long init_pid, ChildError* e) {
  if (!hygiene.die_with_parent) return true;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    return child::Fail(e, "prctl(PR_SET_PDEATHSIG)", "payload", errno);
  }
  if (::syscall(SYS_getppid) != init_pid) ::_exit(127);
  return true;
}

// The request's part of a payload's start, its PayloadHygiene done: the
// request's stdio, every other fd closed but `control` (and bwrap's
// inherited fds, and `keep_until_exec`), the signals, umask, then
// ExecTheRequest. Returns only on failure, with the error in `msg`.
void ExecAfterHygiene(const PayloadHygienePlan& hygiene, ExecRequestView& request, int control,
                      ControlMessage& msg, void (*reset_signals)(), int64_t* exec_stamp = nullptr,
                      int keep_until_exec = -1) {
  ChildError* e = &msg.error;
  if (!InstallStdio(request.stdio, e) || !CloseAllButStdio(hygiene, control, keep_until_exec, e)) return;
  reset_signals();
  ::umask(022);
  ExecTheRequest(hygiene, request, control, msg, exec_stamp);
}

// The payload's own steps, all at once, in the process that execs it.
void PrepareAndExec(const PayloadHygienePlan& hygiene, ExecRequestView& request, int control, ControlMessage& msg,
                    void (*reset_signals)()) {
  if (PayloadHygiene(hygiene, &msg.error)) ExecAfterHygiene(hygiene, request, control, msg, reset_signals);
}

// ---- kSpawned ----------------------------------------------------------

// What init hands the payload process it spawns (SpawnPayload).
struct PayloadStart {
  const ChildPlan* plan;
  ExecRequestView* request;
  const ControlMessage* report;
  long init_pid;
};

// The payload process, spawned by init at hand-off with CLONE_VM |
// CLONE_VFORK: it runs on its own stack in init's memory while init waits,
// until its execve (or its exit) gives init back its memory. So it writes
// only its stack, the request's strings and errno, and its execve tears
// down no copy of an address space (a payload forked ahead of time paid a
// copy of a fork of the launcher, and its teardown, on the request path).
// A failure is reported on a copy of the control socket above the stdio
// fds (the control socket's number is the launcher's: with the launcher's
// stdio closed it may be 0..2); it is close-on-exec, so the payload never
// holds it.
int SpawnedPayloadMain(void* arg) {
  const PayloadStart& start = *static_cast<const PayloadStart*>(arg);
  const ChildPlan& plan = *start.plan;
  ControlMessage msg = *start.report;  // its own: init's report stays init's
  ChildError* e = &msg.error;
  const int control = ::fcntl(plan.fds.control, F_DUPFD_CLOEXEC, 10);
  if (control < 0) {
    child::Fail(e, "dup(control)", "", errno);
  } else if (DieWithInit(plan.hygiene, start.init_pid, e)) {
    PrepareAndExec(plan.hygiene, *start.request, control, msg, namespaces::RestoreSignalsForPayload);
  }
  ExitWithSetupError(control >= 0 ? control : plan.fds.control, msg, 127);
}

// Init's side of the spawn: returns the payload's pid once it has exec'd
// (or failed, and said why on the control socket), or -1 with errno.
long SpawnPayload(const ChildPlan& plan, ExecRequestView& request, const ControlMessage& report) {
  PayloadStart start{&plan, &request, &report, ::syscall(SYS_getpid)};
  // new[] gives 16-byte alignment and the size is a multiple of it: the
  // top is a valid initial stack pointer.
  char* stack_top = plan.memory.payload_stack.get() + kPayloadStackBytes;
  return ::clone(SpawnedPayloadMain, stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
}

// ---- kArmed ------------------------------------------------------------
//
// A plain payload started ahead of its request, so that the hand-off pays
// for none of its start: the clone, the parent-death signal, the session,
// rlimits and capabilities, and the policy's seccomp filter (its JIT
// compile is a good part of a hand-off) are done before "ready". It is
// made with CLONE_VM, as SpawnPayload's is, and for the same reason: its
// execve then tears down no copy of an address space. It runs on its own
// stack in init's memory, and the two never run at once, because they
// share errno (one TLS): init waits for "armed", and at hand-off waits
// until the payload's execve or exit gives back the memory (the kernel
// clears `in_init_memory` then and wakes its futex: CLONE_CHILD_CLEARTID).
// In between, the payload only waits in poll, with every signal blocked.
// A request without a workspace comes to it directly from the launcher, on
// its direct channel: init then only waits in poll until the payload's end
// of their pair hangs up (close-on-exec, so after the payload has left its
// memory). It waits under its seccomp filter: every sandbox policy allows
// send, poll and recvmsg (seccomp_test says so).

// The request, whole, on the direct channel: read into init's request
// buffers (init is waiting in poll, away from them), then the exec.
// Returns only on failure.
void ExecFromDirectChannel(ArmedPayload& armed, int sock, int control, ControlMessage& msg) {
  const ChildPlan& plan = *armed.plan;
  ChildError* e = &msg.error;
  ExecRequestView request;
  if (!namespaces::ReceiveExecRequest(plan.fds.direct, plan.memory.request_buffer.get(),
                                      plan.memory.request_pointers.get(), &request, e)) {
    return;
  }
  if (armed.exec_stamp != nullptr) {
    __atomic_store_n(&armed.exec_stamp[kStampHandOff], namespaces::MonotonicNanos(), __ATOMIC_RELEASE);
  }
  // Init's memory, which init reads once this process has left it.
  armed.direct_received = true;
  armed.direct_linger = request.linger;
  if (request.workspace_fd >= 0) {
    child::Fail(e, "hand-off", "a workspace comes through init", EINVAL);
    return;
  }
  // The pair with init stays open until the execve (close-on-exec): its
  // hang-up tells init this process has left init's memory.
  ExecAfterHygiene(plan.hygiene, request, control, msg, namespaces::RestoreSignalsForPayload, armed.exec_stamp,
                   sock);
}

// The request's stdio from init, which read the request (it brought a
// workspace, which init moved in), then the exec. Returns only on failure.
void ExecFromInit(const ArmedPayload& armed, int sock, int control, ControlMessage& msg) {
  char go;
  int fds[3];
  size_t nfds = 0;
  int msg_flags = 0;
  const ssize_t got = ReceiveWithFds(sock, &go, 1, fds, 3, &nfds, 0, &msg_flags);
  if (got == 0) ::_exit(127);  // init ended before a request: nothing to report
  if (got != 1 || nfds != 3) {
    child::Fail(&msg.error, "recvmsg", "the request's stdio",
                got < 0 ? errno : (msg_flags & MSG_CTRUNC) ? EMFILE : EPROTO);
    return;
  }
  ExecRequestView request = *armed.request;
  for (int i = 0; i < 3; ++i) request.stdio[i] = fds[i];
  ExecAfterHygiene(armed.plan->hygiene, request, control, msg, namespaces::RestoreSignalsForPayload,
                   armed.exec_stamp);
}

int ArmedPayloadMain(void* arg) {
  ArmedPayload& armed = *static_cast<ArmedPayload*>(arg);
  const ChildPlan& plan = *armed.plan;
  ControlMessage msg = armed.report;  // its own: init's report stays init's
  ChildError* e = &msg.error;
  ::close(armed.init_sock);
  const int control = ::fcntl(plan.fds.control, F_DUPFD_CLOEXEC, 10);
  // Its end of the pair, away from the stdio numbers: init (which may have
  // no stdio) can get 0 and 1 from socketpair, and the dup2 of the
  // request's stdout over a pair on fd 1 would hang it up before the
  // execve, waking init to supervise while this process still runs in its
  // memory (one errno for both). The copy is close-on-exec, as the pair is.
  const int sock = ::fcntl(armed.payload_sock, F_DUPFD_CLOEXEC, 10);
  ::close(armed.payload_sock);
  if ((control >= 0 || child::Fail(e, "dup(control)", "", errno)) &&
      (sock >= 0 || child::Fail(e, "dup(payload socket)", "", errno)) &&
      DieWithInit(plan.hygiene, armed.init_pid, e) && PayloadHygiene(plan.hygiene, e)) {
    const char word = 'A';
    if (::send(sock, &word, 1, MSG_NOSIGNAL) != 1) ::_exit(127);  // init is gone
    // The request comes on the direct channel (the launcher's, without a
    // workspace), or its stdio from init (with one: init moves it in).
    // Signals are blocked: poll returns only for the sockets.
    struct pollfd wait[2] = {{sock, POLLIN, 0}, {plan.fds.direct, POLLIN, 0}};
    if (PollRetrying(wait, plan.fds.direct >= 0 ? 2 : 1, "request", e)) {
      if (!(wait[0].revents & (POLLIN | POLLHUP)) && (wait[1].revents & POLLIN)) {
        ExecFromDirectChannel(armed, sock, control, msg);
      } else {
        ExecFromInit(armed, sock, control, msg);
      }
    }
  }
  ExitWithSetupError(control >= 0 ? control : plan.fds.control, msg, 127);
}

// Init's side, before "ready": starts the payload and waits until it is
// armed. On failure the payload has said why on the control socket
// (`e` gets init's own account, sent after it).
bool StartArmedPayload(const ChildPlan& plan, const ExecRequestView* request, const ControlMessage& report,
                       int64_t* exec_stamp, ArmedPayload* armed, ChildError* e) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return child::Fail(e, "socketpair", "payload", errno);
  }
  armed->plan = &plan;
  armed->request = request;
  armed->report = report;
  armed->init_pid = ::syscall(SYS_getpid);
  armed->init_sock = sv[0];
  armed->payload_sock = sv[1];
  armed->in_init_memory = 1;
  armed->exec_stamp = exec_stamp;
  char* stack_top = plan.memory.payload_stack.get() + kPayloadStackBytes;
  armed->pid = ::clone(ArmedPayloadMain, stack_top, CLONE_VM | CLONE_CHILD_CLEARTID | SIGCHLD, armed, nullptr,
                       nullptr, &armed->in_init_memory);
  const int clone_errno = errno;
  ::close(sv[1]);
  // The direct channel is the payload's alone: if it dies, the launcher's
  // send fails instead of waiting on init.
  if (plan.fds.direct >= 0) ::close(plan.fds.direct);
  if (armed->pid < 0) {
    ::close(sv[0]);
    return child::Fail(e, "clone", "payload", clone_errno);
  }
  char word = 0;
  ssize_t n;
  do {
    n = ::recv(sv[0], &word, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n != 1 || word != 'A') return child::Fail(e, "payload", "ended before it was armed", n < 0 ? errno : 0);
  return true;
}

// Init's side of the hand-off: the request's stdio to the armed payload,
// then init waits (as for a vfork child) until its execve or exit.
bool HandOffToArmedPayload(ArmedPayload& armed, const ExecRequestView& request, ChildError* e) {
  const char go = 'G';
  if (SendWithFds(armed.init_sock, &go, 1, request.stdio, 3, MSG_NOSIGNAL) != 1) {
    return child::Fail(e, "sendmsg", "the request's stdio to the payload", errno);
  }
  // From the send on the payload runs: no errno of init's is read until the
  // word says it has left init's memory (a futex wait returns EAGAIN, or 0
  // once woken, only then).
  for (;;) {
    const int32_t v = __atomic_load_n(&armed.in_init_memory, __ATOMIC_ACQUIRE);
    if (v == 0) break;
    ::syscall(SYS_futex, &armed.in_init_memory, FUTEX_WAIT, v, nullptr, nullptr, 0);
  }
  return true;
}

// ---- kWarm, kTemplate ----------------------------------------------------

// The hygiene of a template interpreter: its session and rlimits, but its
// capabilities in the sandbox's user namespace stay, and no filter: it
// makes its children join other sandboxes' namespaces. It runs only the
// bootstrap and the profile's preloads; each child it forks does the
// payload's whole hygiene before it takes a request (warm_template.h).
//
// Of its capabilities it keeps, across its execve (ambient), only what its
// children need: CAP_SYS_ADMIN and CAP_SYS_CHROOT to join a sandbox's
// namespaces, CAP_SETPCAP to drop the rest and lock the securebits.
bool TemplateHygiene(const PayloadHygienePlan& hygiene, ChildError* e) {
  constexpr uint64_t kKept = (uint64_t{1} << CAP_SYS_ADMIN) | (uint64_t{1} << CAP_SYS_CHROOT) |
                             (uint64_t{1} << CAP_SETPCAP);
  return (!hygiene.new_session || ::setsid() >= 0 || child::Fail(e, "setsid", "", errno)) &&
         namespaces::ApplyRlimits(hygiene.rlimits.data(), hygiene.rlimits.size(), e) &&
         namespaces::KeepCapabilities({.bounding = kKept, .keep = kKept, .exact = true}, e);
}

// A warm interpreter's process, forked by init before "ready" (DESIGN §5:
// the request then pays only for the hand-off): PayloadHygiene, stdio on
// /dev/null, its socket to init as kWarmSocketFd, every other fd closed
// but the control socket, execve of the interpreter with its bootstrap,
// which says "R" itself once its modules are imported and takes the
// request from there. Setup failures are reported on the control socket
// (close-on-exec: the interpreter never holds it). A template interpreter
// (kTemplate) keeps its capabilities and its owner's socket as
// kTemplateOwnerFd.
[[noreturn]] void WarmInterpreterMain(const ChildPlan& plan, int socket_fd, long init_pid, ControlMessage msg) {
  ChildError* e = &msg.error;
  const bool is_template = plan.route == PayloadRoute::kTemplate;
  const int control = ::fcntl(plan.fds.control, F_DUPFD_CLOEXEC, 10);
  const int sock = ::fcntl(socket_fd, F_DUPFD_CLOEXEC, 10);
  const int owner = is_template ? ::fcntl(plan.fds.template_owner, F_DUPFD_CLOEXEC, 10) : -1;
  // Made before the hygiene: the profile's filter need not allow memfds.
  // Out of the way of the fds set below, as the others are.
  int library = plan.warm.r_library ? RLibraryMemfd() : -1;
  if (library >= 0 && library < 10) {
    const int moved = ::fcntl(library, F_DUPFD_CLOEXEC, 10);
    ::close(library);
    library = moved < 0 ? -errno : moved;
  }
  bool ok = (control >= 0 || child::Fail(e, "dup(control)", "", errno)) &&
            (sock >= 0 || child::Fail(e, "dup(payload socket)", "", errno)) &&
            (!is_template || owner >= 0 || child::Fail(e, "dup(template owner socket)", "", errno)) &&
            (!plan.warm.r_library || library >= 0 || child::Fail(e, "memfd_create", "R library", -library)) &&
            DieWithInit(plan.hygiene, init_pid, e) &&
            (is_template ? TemplateHygiene(plan.hygiene, e) : PayloadHygiene(plan.hygiene, e));
  if (ok) {
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const int stdio[3] = {null_fd, null_fd, null_fd};
    int keep[7] = {0, 1, 2, kWarmSocketFd, control};
    size_t kept = 5;
    if (is_template) keep[kept++] = kTemplateOwnerFd;
    if (plan.warm.r_library) keep[kept++] = kRLibraryFd;
    ok = (null_fd >= 0 || child::Fail(e, "open", "/dev/null", errno)) && InstallStdio(stdio, e) &&
         (::dup2(sock, kWarmSocketFd) == kWarmSocketFd || child::Fail(e, "dup2(warm socket)", "", errno)) &&
         (!is_template || ::dup2(owner, kTemplateOwnerFd) == kTemplateOwnerFd ||
          child::Fail(e, "dup2(template owner socket)", "", errno)) &&
         (!plan.warm.r_library || ::dup2(library, kRLibraryFd) == kRLibraryFd ||
          child::Fail(e, "dup2(R library)", "", errno)) &&
         (::chdir("/") == 0 || child::Fail(e, "chdir", "/", errno)) &&
         namespaces::CloseAllFdsExcept(keep, kept, e);
    if (ok) {
      namespaces::ResetSignals();
      ::umask(022);
      // A warm interpreter execs with the sandbox's token (strict policy):
      // once it runs, neither it nor its payload can exec again. A
      // template loads no filter and has no token (PlanSeccomp).
      const uint64_t token = plan.hygiene.exec_token;
      namespaces::ExecSearchingPath(plan.warm.argv[0], plan.warm.argv.data(), plan.warm.envp.data(),
                                    plan.warm.search_path.c_str(), token);
      child::Fail(e, token != 0 ? "execveat" : "execve", plan.warm.argv[0], errno);
    }
  }
  ExitWithSetupError(control >= 0 ? control : plan.fds.control, msg, 127);
}

// Init's side: fork the warm interpreter and wait for its bootstrap's "R"
// (modules imported), or "E" and why.
bool StartWarmInterpreter(const ChildPlan& plan, const ControlMessage& report, int* socket_out, long* pid_out,
                          ChildError* e) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return child::Fail(e, "socketpair", "payload", errno);
  }
  const long init_pid = ::syscall(SYS_getpid);
  long pid = ::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) {
    ::close(sv[0]);
    WarmInterpreterMain(plan, sv[1], init_pid, report);
  }
  ::close(sv[1]);
  if (pid < 0) {
    ::close(sv[0]);
    return child::Fail(e, "clone", "warm interpreter", errno);
  }
  char word[256];
  ssize_t n;
  do {
    n = ::recv(sv[0], word, sizeof(word) - 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n == 1 && word[0] == 'R') {
    *socket_out = sv[0];
    *pid_out = pid;
    return true;
  }
  ::close(sv[0]);
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  if (n > 1 && word[0] == 'E') {
    word[n] = '\0';
    return child::Fail(e, "warm interpreter: preload", word + 1, 0);
  }
  // It reported its own failure on the control socket before exiting.
  return child::Fail(e, "warm interpreter", "exited before it was ready", n < 0 ? errno : 0);
}

// ---- kAdopted -------------------------------------------------------------

// Init's side of an interpreter that comes from a warm template: "adopt"
// to the launcher (the sandbox is built: its template may fork the
// interpreter in now), then the interpreter's "R" on the warm socket once
// it has done its hygiene, with its pid as the kernel vouches for it
// (SCM_CREDENTIALS, translated into this pid namespace); a pidfd for it,
// since it is not init's child.
bool StartAdopted(const ChildPlan& plan, const ControlMessage& report, int* pid_out, int* pidfd_out, ChildError* e) {
  const int sock = plan.fds.warm;
  const int on = 1;
  if (::setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
    return child::Fail(e, "setsockopt(SO_PASSCRED)", "warm socket", errno);
  }
  ControlMessage adopt = report;
  adopt.type = ControlType::kAdopt;
  if (namespaces::SendControl(plan.fds.control, adopt) != 0) return child::Fail(e, "send", "adopt", EPIPE);
  char word = 0;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(struct ucred))];
  struct iovec iov = {&word, 1};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  // A failed interpreter reported why on the control socket itself.
  if (n != 1 || word != 'R') return child::Fail(e, "warm interpreter", "exited before it was ready", n < 0 ? errno : 0);
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS) {
    return child::Fail(e, "warm interpreter", "said ready without its credentials", EPROTO);
  }
  struct ucred cred;
  std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, cred.pid, 0));
  if (pidfd < 0) return child::Fail(e, "pidfd_open", "warm interpreter", errno);
  *pid_out = cred.pid;
  *pidfd_out = pidfd;
  return true;
}

}  // namespace

void ExitWithSetupError(int control_fd, ControlMessage& msg, int code) {
  msg.type = ControlType::kSetupError;
  namespaces::SendControl(control_fd, msg);
  ::_exit(code);
}

void BecomePayload(const ChildPlan& plan, ExecRequestView& request, ControlMessage msg) {
  PrepareAndExec(plan.hygiene, request, plan.fds.control, msg, namespaces::ResetSignals);
  ExitWithSetupError(plan.fds.control, msg, 127);
}

bool InitPayload::StartAhead(ExecRequestView* request, const ControlMessage& report, int64_t* exec_stamp,
                             ChildError* e) {
  switch (plan_.route) {
    case PayloadRoute::kWarm:
    case PayloadRoute::kTemplate:
      return StartWarmInterpreter(plan_, report, &warm_socket_, &pid_, e);
    case PayloadRoute::kAdopted: {
      int pid = -1;
      if (!StartAdopted(plan_, report, &pid, &adopted_pidfd_, e)) return false;
      pid_ = pid;
      warm_socket_ = plan_.fds.warm;
      return true;
    }
    case PayloadRoute::kArmed:
      if (!StartArmedPayload(plan_, request, report, exec_stamp, &armed_, e)) return false;
      pid_ = armed_.pid;
      return true;
    case PayloadRoute::kSpawned:
    case PayloadRoute::kAsPid1:
      return true;
  }
  return true;
}

InitPayload::DirectWait InitPayload::AwaitDirectRequest(ChildError* e) {
  if (plan_.route != PayloadRoute::kArmed || plan_.fds.direct < 0) return DirectWait::kOnControl;
  // Init only waits, until the payload's end of their pair hangs up, which
  // it does at its execve or exit, once it has left init's memory. A
  // request on the control socket (one with a workspace) comes to init.
  struct pollfd wait[2] = {{plan_.fds.control, POLLIN, 0}, {armed_.init_sock, POLLIN, 0}};
  if (!PollRetrying(wait, 2, "hand-off", e)) return DirectWait::kFailed;
  if ((wait[0].revents & (POLLIN | POLLHUP)) || !(wait[1].revents & (POLLIN | POLLHUP))) {
    return DirectWait::kOnControl;
  }
  return armed_.direct_received ? DirectWait::kTaken : DirectWait::kDied;
}

bool InitPayload::HandOff(ExecRequestView& request, ControlMessage& report, ChildError* e) {
  switch (plan_.route) {
    case PayloadRoute::kWarm:
    case PayloadRoute::kAdopted: {
      const bool ok = namespaces::ForwardExecRequest(warm_socket_, plan_.memory.request_buffer.get(), request, e);
      ::close(warm_socket_);
      if (!ok) return false;
      // The interpreter runs the request itself: "executing" is now.
      report.type = ControlType::kExecuting;
      report.step_ns[namespaces::kStepExecReady] = namespaces::MonotonicNanos();
      namespaces::SendControl(plan_.fds.control, report);
      return true;
    }
    case PayloadRoute::kArmed:
      return HandOffToArmedPayload(armed_, request, e);
    case PayloadRoute::kSpawned:
      pid_ = SpawnPayload(plan_, request, report);
      return pid_ > 0 || child::Fail(e, "clone", "payload", errno);
    case PayloadRoute::kTemplate:
    case PayloadRoute::kAsPid1:
      break;
  }
  return child::Fail(e, "hand-off", "no payload to hand a request to", EINVAL);
}

}  // namespace cubicle::runtime

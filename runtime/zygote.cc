#include "runtime/zygote.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <linux/futex.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/fd_passing.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "namespaces/capabilities.h"
#include "namespaces/clone.h"
#include "namespaces/control.h"
#include "namespaces/exec_request.h"
#include "namespaces/idmap.h"
#include "namespaces/init.h"
#include "namespaces/prefault.h"
#include "namespaces/process.h"
#include "rootfs/builder.h"
#include "rootfs/host_tree.h"
#include "cgroups/cgroup.h"
#include "egress/bridge.h"
#include "egress/gateway_process.h"
#include "runtime/breakers.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "runtime/host_features.h"
#include "seccomp/policy.h"

namespace cubicle::runtime {
namespace {

using namespaces::ControlMessage;
using namespaces::ControlType;

constexpr size_t kPayloadStackBytes = 128 * 1024;

// The exec stamp page (why: Zygote::Create): CLOCK_MONOTONIC stamps of init's
// hand-off and of the armed payload's "executing".
enum : int { kStampHandOff = 0, kStampExecReady, kStampCount };
constexpr size_t kStampBytes = kStampCount * sizeof(int64_t);

// The launcher's 'J' (JoinGroupsSentLater): 'J', then the paths of the v1
// groups whose tasks files come with it, one per line.
constexpr size_t kGroupsMessageBytes = 2048;

// Everything the child side needs, computed before clone so that the child
// only reads memory and makes syscalls.
struct ChildPlan {
  rootfs::PreparedPlan rootfs;
  uid_t uid = 0;
  gid_t gid = 0;
  bool pid_namespace = true;
  bool net_namespace = true;
  bool uts_namespace = true;
  bool die_with_parent = true;
  bool new_session = true;
  std::string hostname;
  std::vector<namespaces::Rlimit> rlimits;
  sock_fprog seccomp{};
  bool load_seccomp = false;
  int control_fd = -1;
  // The bubblewrap front end's additions (SandboxSpec's appended fields).
  bool set_hostname = true;
  bool keep_capabilities = false;
  namespaces::KeptCapabilities capabilities;
  std::vector<sock_fprog> extra_seccomp;
  std::string argv0;
  bool disable_userns = false;
  bool assert_userns_disabled = false;
  bool as_pid_1 = false;
  bool init_new_session = false;  // SandboxSpec::init_new_session
  // A user namespace the launcher joined (SandboxSpec::join_userns): no
  // maps of ours; ids switch only where asked for.
  bool joined_userns = false;
  bool switch_uid = false;
  bool switch_gid = false;
  // SandboxSpec::join_userns_after_setup, or -1.
  int userns_after_setup_fd = -1;
  std::string exec_label;  // SandboxSpec::exec_label
  // The fds the payload keeps at their numbers (bwrap's inherited fds).
  std::vector<int> inherited_fds;
  // cwd fallbacks, each with its "PWD=..." entry ready for the environment.
  std::vector<std::string> cwd_fallbacks;
  std::vector<std::string> pwd_entries;
  // The launcher's end of the control pair: the child closes its copy
  // first, so that the launcher's death is EOF even before "go".
  int launcher_control_fd = -1;
  // The sandbox's end of its egress channel, and the bridge's port (-1 / 0:
  // no egress).
  int egress_fd = -1;
  uint16_t bridge_port = 0;
  // Where the child receives its execution request: allocated here, before
  // clone, so the child allocates nothing. Left uninitialised: the parent
  // never touches these pages, so the child's first write to each is a
  // fresh page, not a copy, and only the pages a request fills are made
  // at all (zeroing them here cost ~48 page faults per sandbox).
  std::unique_ptr<char[]> request_buffer{new char[namespaces::kMaxExecRequestBytes + 1]};
  std::unique_ptr<char*[]> request_pointers{new char*[namespaces::kMaxExecStrings + 2]};
  // The stack of the payload process init starts ahead (StartArmedPayload)
  // or spawns at hand-off (SpawnPayload); none for a warm interpreter or
  // --as-pid-1.
  std::unique_ptr<char[]> payload_stack;
  // A plain payload of a zygote built ahead of its request: started before
  // "ready", its hygiene done, it waits for the request (ArmedPayload).
  bool armed_payload = false;
  // Its exec stamp page's memfd (kStamp*), or -1.
  int exec_stamp_fd = -1;
  // Its end of the launcher's direct channel (ArmedPayload), or -1.
  int direct_fd = -1;
  // The v1 groups' "tasks" files, which the child writes "0" to first
  // thing (JoinOwnGroups), and the groups' paths for errors.
  std::vector<int> v1_task_fds;
  std::vector<const char*> v1_task_paths;
  // The v1 groups are made by the launcher while the child builds its root
  // (SandboxCgroup::CreateV2First): the child joins them at the end of its
  // setup, from the tasks files the launcher then sends (JoinGroupsSentLater).
  bool join_later = false;
  // A warm interpreter (runtime/warm.h): its command line and environment,
  // as NULL-terminated arrays into the strings below.
  bool warm = false;
  std::vector<std::string> warm_strings;
  std::vector<char*> warm_argv;
  std::vector<char*> warm_envp;
  std::string warm_search_path;
  // A zygote built ahead of its request (ZygoteOptions::wait_until_ready,
  // not cold): init and the payload map what the hand-off runs and writes
  // while they wait (PrefaultForHandOff).
  bool prefault = false;
  std::vector<namespaces::MemoryRange> text;
};

// The pages a hand-off touches, mapped before "ready" by each process of a
// zygote (namespaces/prefault.h): the text (the hand-off is the first time
// a forked process runs most of it), the pages a request is received into
// (a typical request fits in the first two), the stack and errno.
void PrefaultForHandOff(const ChildPlan& plan) {
  namespaces::PrefaultText(plan.text.data(), plan.text.size());
  namespaces::PrefaultWritable(plan.request_buffer.get(), 2 * 4096);
  namespaces::PrefaultWritable(plan.request_pointers.get(), sizeof(char*) * 64);
  namespaces::PrefaultStack(32 * 1024);
  if (plan.payload_stack != nullptr) {
    namespaces::PrefaultWritable(plan.payload_stack.get() + kPayloadStackBytes - 32 * 1024, 32 * 1024);
  }
  __atomic_fetch_or(&errno, 0, __ATOMIC_RELAXED);
}

// The end of a failed setup on the sandbox side: `msg`, its error filled
// in, goes to the launcher as a kSetupError on `control_fd`; then _exit.
[[noreturn]] void ExitWithSetupError(int control_fd, ControlMessage& msg, int code) {
  msg.type = ControlType::kSetupError;
  namespaces::SendControl(control_fd, msg);
  ::_exit(code);
}

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

// chdir to the request's cwd, else to the first fallback that works, and
// point PWD at it (the entry was made before clone).
bool EnterCwd(const ChildPlan& plan, const namespaces::ExecRequestView& request, ChildError* e) {
  if (::chdir(request.cwd) == 0) return true;
  const int first_errno = errno;
  for (size_t i = 0; i < plan.cwd_fallbacks.size(); ++i) {
    if (::chdir(plan.cwd_fallbacks[i].c_str()) != 0) continue;
    for (char** env = request.envp; *env != nullptr; ++env) {
      if (std::strncmp(*env, "PWD=", 4) == 0) *env = const_cast<char*>(plan.pwd_entries[i].c_str());
    }
    return true;
  }
  return child::Fail(e, "chdir", request.cwd, first_errno);
}

// The process-hygiene steps of DESIGN §4.5 that do not depend on the
// request: session, rlimits, capabilities, no_new_privs, the policy's
// seccomp filter.
bool PayloadHygiene(const ChildPlan& plan, ChildError* e) {
  bool ok = (!plan.new_session || ::setsid() >= 0 || child::Fail(e, "setsid", "", errno)) &&
            namespaces::ApplyRlimits(plan.rlimits.data(), plan.rlimits.size(), e) &&
            (plan.keep_capabilities ? namespaces::KeepCapabilities(plan.capabilities, e)
                                    : namespaces::DropAllCapabilities(e)) &&
            namespaces::SetNoNewPrivs(e);
  if (ok && plan.load_seccomp) {
    int rc = seccomp::Load(plan.seccomp);
    if (rc != 0) ok = child::Fail(e, "seccomp(SECCOMP_SET_MODE_FILTER)", "", -rc);
  }
  return ok;
}

// Closes every fd but `keep_stdio` 0..2, `control`, `sock` (unless -1)
// and the fds the spec passes on (bwrap's inherited fds). No allocation.
bool CloseAllBut(const ChildPlan& plan, bool keep_stdio, int control, int sock, ChildError* e) {
  int keep[5 + kMaxInheritedFds];
  size_t n = 0;
  if (keep_stdio) {
    for (int fd = 0; fd < 3; ++fd) keep[n++] = fd;
  }
  keep[n++] = control;
  if (sock >= 0) keep[n++] = sock;
  for (int fd : plan.inherited_fds) keep[n++] = fd;
  return namespaces::CloseAllFdsExcept(keep, n, e);
}

// The request's part, once the hygiene and the stdio are done: cwd,
// "executing", the supplied seccomp programs (last: they may forbid what
// this needs), execve. Returns only on failure. With `exec_stamp` (an
// armed payload's: a page the launcher reads, kStamp*), "executing"
// is its timestamp written there, not a message: the launcher is not woken
// while the payload execs.
void ExecTheRequest(const ChildPlan& plan, namespaces::ExecRequestView& request, int control, ControlMessage& msg,
                    int64_t* exec_stamp = nullptr) {
  ChildError* e = &msg.error;
  if (!EnterCwd(plan, request, e)) return;
  // The SELinux exec label (bwrap's setexeccon, before its seccomp
  // programs): only this thread may write its own attr/exec.
  if (!plan.exec_label.empty()) {
    const int attr = ::open("/proc/thread-self/attr/exec", O_WRONLY | O_CLOEXEC);
    const bool labelled = attr >= 0 && ::write(attr, plan.exec_label.c_str(), plan.exec_label.size()) ==
                                           static_cast<ssize_t>(plan.exec_label.size());
    const int saved = errno;
    if (attr >= 0) ::close(attr);
    if (!labelled) {
      child::Fail(e, "label_exec", request.argv[0], saved);
      return;
    }
  }
  msg.type = ControlType::kExecuting;
  msg.step_ns[namespaces::kStepExecReady] = namespaces::MonotonicNanos();
  if (exec_stamp != nullptr) {
    __atomic_store_n(&exec_stamp[kStampExecReady], msg.step_ns[namespaces::kStepExecReady], __ATOMIC_RELEASE);
  } else {
    namespaces::SendControl(control, msg);
  }
  for (const sock_fprog& extra : plan.extra_seccomp) {
    int rc = seccomp::Load(extra);
    if (rc != 0) {
      child::Fail(e, "seccomp(SECCOMP_SET_MODE_FILTER)", "supplied program", -rc);
      return;
    }
  }
  const char* file = request.argv[0];
  if (!plan.argv0.empty()) request.argv[0] = const_cast<char*>(plan.argv0.c_str());
  namespaces::ExecSearchingPath(file, request.argv, request.envp, request.search_path);
  child::Fail(e, "execve", file, errno);
}

// Dies with init, as bwrap's command dies with its parent
// (--die-with-parent): without a pid namespace nothing else would end a
// payload when the launcher, and with it init, is killed (init is only a
// subreaper there). Set before the capability drop, which keeps it; an
// init gone before it took effect is seen in the parent's pid.
bool DieWithInit(const ChildPlan& plan, long init_pid, ChildError* e) {
  if (!plan.die_with_parent) return true;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    return child::Fail(e, "prctl(PR_SET_PDEATHSIG)", "payload", errno);
  }
  if (::syscall(SYS_getppid) != init_pid) ::_exit(127);
  return true;
}

// The request's part of a payload's start, its PayloadHygiene done: the
// request's stdio, every other fd closed but `control` (and bwrap's
// inherited fds), the signals, umask, then ExecTheRequest. Returns only on
// failure, with the error in `msg`.
void ExecAfterHygiene(const ChildPlan& plan, namespaces::ExecRequestView& request, int control,
                      ControlMessage& msg, void (*reset_signals)(), int64_t* exec_stamp = nullptr,
                      int keep_until_exec = -1) {
  ChildError* e = &msg.error;
  if (!InstallStdio(request.stdio, e) || !CloseAllBut(plan, /*keep_stdio=*/true, control, keep_until_exec, e)) return;
  reset_signals();
  ::umask(022);
  ExecTheRequest(plan, request, control, msg, exec_stamp);
}

// The payload's own steps, all at once, in the process that execs it.
void PrepareAndExec(const ChildPlan& plan, namespaces::ExecRequestView& request, int control,
                    ControlMessage& msg, void (*reset_signals)()) {
  if (PayloadHygiene(plan, &msg.error)) ExecAfterHygiene(plan, request, control, msg, reset_signals);
}

// bwrap --as-pid-1: the sandbox's first process becomes the payload itself
// (no cubicle init); its exit status is the first process's, which the
// launcher reaps.
[[noreturn]] void BecomePayload(const ChildPlan& plan, namespaces::ExecRequestView& request, ControlMessage msg) {
  PrepareAndExec(plan, request, plan.control_fd, msg, namespaces::ResetSignals);
  ExitWithSetupError(plan.control_fd, msg, 127);
}

// What init hands the payload process it spawns (SpawnPayload).
struct PayloadStart {
  const ChildPlan* plan;
  namespaces::ExecRequestView* request;
  const ControlMessage* report;
  long init_pid;
};

// The payload process, spawned by init at hand-off with CLONE_VM |
// CLONE_VFORK: it runs on its own stack in init's memory while init waits,
// until its execve (or its exit) gives init back its memory. So it writes
// only its stack, the request's strings and errno, and its execve tears
// down no copy of an address space: that copy, and its teardown, was most
// of what a payload forked ahead of time cost on the request path (a
// fork of a fork of the launcher). A failure is reported on a copy of the
// control socket above the stdio fds (the control socket's number is the
// launcher's: with the launcher's stdio closed it may be 0..2); it is
// close-on-exec, so the payload never holds it.
int SpawnedPayloadMain(void* arg) {
  const PayloadStart& start = *static_cast<const PayloadStart*>(arg);
  const ChildPlan& plan = *start.plan;
  ControlMessage msg = *start.report;  // its own: init's report stays init's
  ChildError* e = &msg.error;
  const int control = ::fcntl(plan.control_fd, F_DUPFD_CLOEXEC, 10);
  if (control < 0) {
    child::Fail(e, "dup(control)", "", errno);
  } else if (DieWithInit(plan, start.init_pid, e)) {
    PrepareAndExec(plan, *start.request, control, msg, namespaces::RestoreSignalsForPayload);
  }
  ExitWithSetupError(control >= 0 ? control : plan.control_fd, msg, 127);
}

// Init's side of the spawn: returns the payload's pid once it has exec'd
// (or failed, and said why on the control socket), or -1 with errno.
long SpawnPayload(const ChildPlan& plan, namespaces::ExecRequestView& request, const ControlMessage& report) {
  PayloadStart start{&plan, &request, &report, ::syscall(SYS_getpid)};
  // new[] gives 16-byte alignment and the size is a multiple of it: the
  // top is a valid initial stack pointer.
  char* stack_top = plan.payload_stack.get() + kPayloadStackBytes;
  return ::clone(SpawnedPayloadMain, stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
}

// A plain payload started ahead of its request (ChildPlan::armed_payload),
// so that the hand-off pays for none of its start: the clone, the
// parent-death signal, the session, rlimits and capabilities, and the
// policy's seccomp filter (its JIT compile alone was ~0.1 ms here) are
// done before "ready". It is made with CLONE_VM, as SpawnPayload's is, and
// for the same reason: its execve then tears down no copy of an address
// space. It runs on its own stack in init's memory, and the two never run
// at once, because they share errno (one TLS): init waits for "armed",
// and at hand-off waits until the payload's execve or exit gives back the
// memory (the kernel clears `in_init_memory` then and wakes its futex:
// CLONE_CHILD_CLEARTID). In between, the payload only waits in poll, with
// every signal blocked. A request without a workspace comes to it
// directly from the launcher, on its direct channel: init then only waits
// in poll until the payload's end of their pair hangs up (close-on-exec,
// so after the payload has left its memory). It waits under its seccomp
// filter: every sandbox policy allows send, poll and recvmsg (seccomp_test
// says so), and whatever follows the filter here followed it before.
struct ArmedPayload {
  const ChildPlan* plan = nullptr;
  const namespaces::ExecRequestView* request = nullptr;  // init's; filled in before the hand-off
  ControlMessage report{};  // init's report when the payload started
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

// The request, whole, on the direct channel: read into init's request
// buffers (init is waiting in poll, away from them), then the exec.
// Returns only on failure.
void ExecFromDirectChannel(const ArmedPayload& armed, int sock, int control, ControlMessage& msg) {
  const ChildPlan& plan = *armed.plan;
  ChildError* e = &msg.error;
  namespaces::ExecRequestView request;
  if (!namespaces::ReceiveExecRequest(plan.direct_fd, plan.request_buffer.get(), plan.request_pointers.get(),
                                      &request, e)) {
    return;
  }
  if (armed.exec_stamp != nullptr) {
    __atomic_store_n(&armed.exec_stamp[kStampHandOff], namespaces::MonotonicNanos(), __ATOMIC_RELEASE);
  }
  // Init's memory, which init reads once this process has left it.
  const_cast<ArmedPayload&>(armed).direct_received = true;
  const_cast<ArmedPayload&>(armed).direct_linger = request.linger;
  if (request.workspace_fd >= 0) {
    child::Fail(e, "hand-off", "a workspace comes through init", EINVAL);
    return;
  }
  // The pair with init stays open until the execve (close-on-exec): its
  // hang-up tells init this process has left init's memory.
  ExecAfterHygiene(plan, request, control, msg, namespaces::RestoreSignalsForPayload, armed.exec_stamp, sock);
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
  namespaces::ExecRequestView request = *armed.request;
  for (int i = 0; i < 3; ++i) request.stdio[i] = fds[i];
  ExecAfterHygiene(*armed.plan, request, control, msg, namespaces::RestoreSignalsForPayload, armed.exec_stamp);
}

int ArmedPayloadMain(void* arg) {
  const ArmedPayload& armed = *static_cast<const ArmedPayload*>(arg);
  const ChildPlan& plan = *armed.plan;
  ControlMessage msg = armed.report;  // its own: init's report stays init's
  ChildError* e = &msg.error;
  ::close(armed.init_sock);
  const int control = ::fcntl(plan.control_fd, F_DUPFD_CLOEXEC, 10);
  // Its end of the pair, away from the stdio numbers: init (which may have
  // no stdio) can get 0 and 1 from socketpair, and the dup2 of the
  // request's stdout over a pair on fd 1 would hang it up before the
  // execve, waking init to supervise while this process still runs in its
  // memory (one errno for both). The copy is close-on-exec, as the pair is.
  const int sock = ::fcntl(armed.payload_sock, F_DUPFD_CLOEXEC, 10);
  ::close(armed.payload_sock);
  if ((control >= 0 || child::Fail(e, "dup(control)", "", errno)) &&
      (sock >= 0 || child::Fail(e, "dup(payload socket)", "", errno)) && DieWithInit(plan, armed.init_pid, e) &&
      PayloadHygiene(plan, e)) {
    const char word = 'A';
    if (::send(sock, &word, 1, MSG_NOSIGNAL) != 1) ::_exit(127);  // init is gone
    // The request comes on the direct channel (the launcher's, without a
    // workspace), or its stdio from init (with one: init moves it in).
    // Signals are blocked: poll returns only for the sockets.
    struct pollfd wait[2] = {{sock, POLLIN, 0}, {plan.direct_fd, POLLIN, 0}};
    while (::poll(wait, plan.direct_fd >= 0 ? 2 : 1, -1) < 0) {
    }
    if (!(wait[0].revents & (POLLIN | POLLHUP)) && (wait[1].revents & POLLIN)) {
      ExecFromDirectChannel(armed, sock, control, msg);
    } else {
      ExecFromInit(armed, sock, control, msg);
    }
  }
  ExitWithSetupError(control >= 0 ? control : plan.control_fd, msg, 127);
}

// Init's side, before "ready": starts the payload and waits until it is
// armed. On failure the payload has said why on the control socket
// (`e` gets init's own account, sent after it).
bool StartArmedPayload(const ChildPlan& plan, const namespaces::ExecRequestView* request,
                       const ControlMessage& report, int64_t* exec_stamp, ArmedPayload* armed, ChildError* e) {
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
  char* stack_top = plan.payload_stack.get() + kPayloadStackBytes;
  armed->pid = ::clone(ArmedPayloadMain, stack_top, CLONE_VM | CLONE_CHILD_CLEARTID | SIGCHLD, armed, nullptr,
                       nullptr, &armed->in_init_memory);
  const int clone_errno = errno;
  ::close(sv[1]);
  // The direct channel is the payload's alone: if it dies, the launcher's
  // send fails instead of waiting on init.
  if (plan.direct_fd >= 0) ::close(plan.direct_fd);
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
bool HandOffToArmedPayload(ArmedPayload& armed, const namespaces::ExecRequestView& request, ChildError* e) {
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

// A warm interpreter's process, forked by init before "ready" (DESIGN §5:
// the request then pays only for the hand-off): PayloadHygiene, stdio on
// /dev/null, its socket to init as kWarmSocketFd, every other fd closed
// but the control socket, execve of the interpreter with its bootstrap,
// which says "R" itself once its modules are imported and takes the
// request from there. Setup failures are reported on the control socket
// (close-on-exec: the interpreter never holds it).
[[noreturn]] void WarmInterpreterMain(const ChildPlan& plan, int socket_fd, long init_pid, ControlMessage msg) {
  ChildError* e = &msg.error;
  const int control = ::fcntl(plan.control_fd, F_DUPFD_CLOEXEC, 10);
  const int sock = ::fcntl(socket_fd, F_DUPFD_CLOEXEC, 10);
  bool ok = (control >= 0 || child::Fail(e, "dup(control)", "", errno)) &&
            (sock >= 0 || child::Fail(e, "dup(payload socket)", "", errno)) &&
            DieWithInit(plan, init_pid, e) && PayloadHygiene(plan, e);
  if (ok) {
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const int stdio[3] = {null_fd, null_fd, null_fd};
    const int keep[5] = {0, 1, 2, kWarmSocketFd, control};
    ok = (null_fd >= 0 || child::Fail(e, "open", "/dev/null", errno)) && InstallStdio(stdio, e) &&
         (::dup2(sock, kWarmSocketFd) == kWarmSocketFd || child::Fail(e, "dup2(warm socket)", "", errno)) &&
         (::chdir("/") == 0 || child::Fail(e, "chdir", "/", errno)) && namespaces::CloseAllFdsExcept(keep, 5, e);
    if (ok) {
      namespaces::ResetSignals();
      ::umask(022);
      namespaces::ExecSearchingPath(plan.warm_argv[0], plan.warm_argv.data(), plan.warm_envp.data(),
                                    plan.warm_search_path.c_str());
      child::Fail(e, "execve", plan.warm_argv[0], errno);
    }
  }
  ExitWithSetupError(control >= 0 ? control : plan.control_fd, msg, 127);
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

// The child's first step: it joins its v1 groups itself
// (SandboxCgroup::V1TaskFiles), then says 'A' on the control socket. Every
// process of the sandbox is made after, so all start in the groups.
bool JoinOwnGroups(const ChildPlan& plan, ChildError* e) {
  for (size_t i = 0; i < plan.v1_task_fds.size(); ++i) {
    if (::write(plan.v1_task_fds[i], "0", 1) != 1) return child::Fail(e, "join cgroup", plan.v1_task_paths[i], errno);
    ::close(plan.v1_task_fds[i]);
  }
  if (plan.v1_task_fds.empty()) return true;
  const char joined = 'A';
  return ::send(plan.control_fd, &joined, 1, MSG_NOSIGNAL) == 1 || child::Fail(e, "send", "joined", errno);
}

// JoinOwnGroups at the end of the setup, for v1 groups the launcher made
// meanwhile: its message 'J', the groups' paths one per line, carries their
// tasks files (none: it attached this process itself). Before any process
// of the sandbox but init exists, so all start in the groups.
bool JoinGroupsSentLater(const ChildPlan& plan, ChildError* e) {
  char text[kGroupsMessageBytes + 1];
  int fds[kMaxPassedFds];
  size_t nfds = 0;
  int flags = 0;
  const ssize_t n = ReceiveWithFds(plan.control_fd, text, kGroupsMessageBytes, fds, kMaxPassedFds, &nfds, 0, &flags);
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
  if (!ok || nfds == 0) return ok;
  const char joined = 'A';
  return ::send(plan.control_fd, &joined, 1, MSG_NOSIGNAL) == 1 || child::Fail(e, "send", "joined", errno);
}

// The sandbox's first process: ids, root filesystem, hostname, loopback,
// "ready", then it waits for its execution request and becomes cubicle's
// init.
[[noreturn]] void ChildMain(const ChildPlan& plan) {
  ControlMessage report;
  std::memset(&report, 0, sizeof(report));
  report.step_ns[namespaces::kStepChildStart] = namespaces::MonotonicNanos();
  // Egress: init passes each connection to the bridge's port on to the
  // host gateway over the egress channel.
  namespaces::InitService bridge{-1, plan.egress_fd, egress::bridge::PassPending};
  ChildError* e = &report.error;
  ::close(plan.launcher_control_fd);
  if (!JoinOwnGroups(plan, e)) {
    ExitWithSetupError(plan.control_fd, report, 1);
  }
  rootfs::BuildReport build;
  // The parent-death signal is set after the id switch: the kernel clears
  // it whenever the credentials change (as root, kuid 0 becomes 1000000+),
  // and a launcher that died in between is caught by the check after it.
  bool ok = namespaces::WaitForLauncher(plan.control_fd, e) &&
            (plan.joined_userns
                 ? namespaces::SwitchJoinedIds(plan.switch_uid, plan.uid, plan.switch_gid, plan.gid, e)
                 : namespaces::BecomeSandboxIds(plan.uid, plan.gid, e)) &&
            (!plan.die_with_parent || (namespaces::DieWithParent(e) &&
                                       namespaces::LauncherStillThere(plan.control_fd, e)));
  report.step_ns[namespaces::kStepIdsReady] = namespaces::MonotonicNanos();
  // --disable-userns needs a procfs after the pivot, when the sandbox may
  // have none: the host's, opened while it is still mounted.
  int proc_fd = -1;
  if (ok && plan.disable_userns) {
    proc_fd = ::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    ok = proc_fd >= 0 || child::Fail(e, "open", "/proc", errno);
  }
  ok = ok && rootfs::BuildRoot(plan.rootfs, &build, e);
  // Everything but the control socket goes: the launcher's other fds (and
  // the host-side mount trees, now attached). Stdio comes with the request.
  int keep[5 + kMaxInheritedFds];
  size_t kept = 0;
  keep[kept++] = plan.control_fd;
  if (plan.egress_fd >= 0) keep[kept++] = plan.egress_fd;
  if (proc_fd >= 0) keep[kept++] = proc_fd;
  if (plan.userns_after_setup_fd >= 0) keep[kept++] = plan.userns_after_setup_fd;
  if (plan.direct_fd >= 0) keep[kept++] = plan.direct_fd;
  for (int fd : plan.inherited_fds) keep[kept++] = fd;
  // The exec stamp page (an armed payload's): mapped before its fd goes
  // with the rest. None (a failed map) means "executing" is a message.
  int64_t* exec_stamp = nullptr;
  if (ok && plan.exec_stamp_fd >= 0) {
    void* page = ::mmap(nullptr, kStampBytes, PROT_READ | PROT_WRITE, MAP_SHARED, plan.exec_stamp_fd, 0);
    if (page != MAP_FAILED) exec_stamp = static_cast<int64_t*>(page);
  }
  ok = ok && namespaces::CloseAllFdsExcept(keep, kept, e);
  report.step_ns[namespaces::kStepRootfsReady] = namespaces::MonotonicNanos();
  ok = ok && (!plan.uts_namespace || !plan.set_hostname || namespaces::SetHostname(plan.hostname.c_str(), e)) &&
       (!plan.net_namespace || namespaces::BringUpLoopback(e)) &&
       (plan.egress_fd < 0 || egress::bridge::Listen(plan.bridge_port, &bridge.fd, e)) &&
       (plan.pid_namespace || ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ||
        child::Fail(e, "prctl(PR_SET_CHILD_SUBREAPER)", "", errno));
  ok = ok && (!plan.join_later || JoinGroupsSentLater(plan, e));
  // The user namespace to run in once set up (bwrap --userns2): the
  // setup above needed the privileges of the one it was made in.
  if (ok && plan.userns_after_setup_fd >= 0) {
    char fd_text[32];
    ok = ::setns(plan.userns_after_setup_fd, CLONE_NEWUSER) == 0 ||
         child::Fail(e, "join user namespace after setup",
                     child::FormatWithNumber(fd_text, sizeof(fd_text), "fd ", plan.userns_after_setup_fd), errno);
    if (!std::count(plan.inherited_fds.begin(), plan.inherited_fds.end(), plan.userns_after_setup_fd)) {
      ::close(plan.userns_after_setup_fd);
    }
  }
  // Last: from here on the sandbox's own capabilities are gone.
  ok = ok && (proc_fd < 0 || namespaces::EnterNestedUserNamespace(proc_fd, e));
  if (proc_fd >= 0) ::close(proc_fd);
  // The probe of --assert-userns-disabled: a user namespace made here
  // means the assertion is false, and this sandbox goes no further.
  if (ok && plan.assert_userns_disabled && ::syscall(SYS_unshare, CLONE_NEWUSER) == 0) {
    ok = child::Fail(e, "creation of new user namespaces was not disabled as requested", "", 0);
  }
  if (!ok) {
    ExitWithSetupError(plan.control_fd, report, 1);
  }
  // bwrap --new-session with a PID 1 of bwrap's: the session is init's,
  // and the payload forked below joins it.
  if (ok && plan.init_new_session && ::setsid() < 0) ok = child::Fail(e, "setsid", "init", errno);
  if (!ok) {
    ExitWithSetupError(plan.control_fd, report, 1);
  }
  if (build.proc_fallback) report.flags |= namespaces::kFlagProcFallback;
  // Init from here on (bwrap --as-pid-1: this process will be the payload,
  // no init). A warm interpreter is started now and imports its modules;
  // a plain payload is spawned at hand-off (SpawnPayload).
  int warm_socket = -1;
  long payload_pid = -1;
  namespaces::ExecRequestView request;
  ArmedPayload armed;
  if (!plan.as_pid_1) namespaces::BecomeInit();
  if ((plan.warm && !StartWarmInterpreter(plan, report, &warm_socket, &payload_pid, e)) ||
      (plan.armed_payload && !StartArmedPayload(plan, &request, report, exec_stamp, &armed, e))) {
    ExitWithSetupError(plan.control_fd, report, 1);
  }
  if (plan.prefault) PrefaultForHandOff(plan);
  report.step_ns[namespaces::kStepInitReady] = namespaces::MonotonicNanos();
  report.type = ControlType::kReady;
  namespaces::SendControl(plan.control_fd, report);

  // An armed payload with a direct channel may get its request there
  // (ArmedPayload): init then only waits, in poll, until the payload's
  // end of their pair hangs up, which it does at its execve or exit, once
  // it has left init's memory; then it supervises. A request on the
  // control socket (one with a workspace) goes the way below.
  if (plan.armed_payload && plan.direct_fd >= 0) {
    struct pollfd wait[2] = {{plan.control_fd, POLLIN, 0}, {armed.init_sock, POLLIN, 0}};
    while (::poll(wait, 2, -1) < 0) {
    }
    if (!(wait[0].revents & (POLLIN | POLLHUP)) && (wait[1].revents & (POLLIN | POLLHUP))) {
      if (!armed.direct_received) {  // it died waiting (killed): no execution to supervise
        child::Fail(e, "payload", "ended before its request", 0);
        ExitWithSetupError(plan.control_fd, report, 1);
      }
      namespaces::Supervise(plan.control_fd, &report, armed.pid, bridge.fd >= 0 ? &bridge : nullptr,
                            {.linger = armed.direct_linger, .own_pid_namespace = plan.pid_namespace});
    }
  }
  // The hand-off: one request, then the workspace (a detached mount made
  // on the host) is moved in while init still holds its capabilities.
  ok = namespaces::ReceiveExecRequest(plan.control_fd, plan.request_buffer.get(),
                                      plan.request_pointers.get(), &request, e);
  report.step_ns[namespaces::kStepRequestReceived] = namespaces::MonotonicNanos();
  if (ok && request.workspace_fd >= 0) {
    ok = ::move_mount(request.workspace_fd, "", AT_FDCWD, kWorkspaceDir, MOVE_MOUNT_F_EMPTY_PATH) == 0 ||
         child::Fail(e, "move_mount", kWorkspaceDir, errno);
    ::close(request.workspace_fd);
  }
  if (!ok) {
    ExitWithSetupError(plan.control_fd, report, 1);
  }
  // bwrap --as-pid-1: no init; the first process becomes the payload.
  if (plan.as_pid_1) BecomePayload(plan, request, report);
  // The warm interpreter is waiting already: pass it the request and its
  // stdio; an armed payload, its stdio (it reads the request in init's
  // memory). Any other plain payload is spawned now. A plain payload
  // reports "executing" itself, just before its execve.
  report.step_ns[namespaces::kStepPayloadForked] = namespaces::MonotonicNanos();
  if (exec_stamp != nullptr) {
    __atomic_store_n(&exec_stamp[kStampHandOff], report.step_ns[namespaces::kStepPayloadForked], __ATOMIC_RELEASE);
  }
  if (plan.warm) {
    ok = namespaces::ForwardExecRequest(warm_socket, plan.request_buffer.get(), request, e);
    ::close(warm_socket);
  } else if (plan.armed_payload) {
    ok = HandOffToArmedPayload(armed, request, e);
    payload_pid = armed.pid;
  } else {
    payload_pid = SpawnPayload(plan, request, report);
    ok = payload_pid > 0 || child::Fail(e, "clone", "payload", errno);
  }
  if (!ok) {
    ExitWithSetupError(plan.control_fd, report, 1);
  }
  if (plan.warm) {
    report.type = ControlType::kExecuting;
    report.step_ns[namespaces::kStepExecReady] = namespaces::MonotonicNanos();
    namespaces::SendControl(plan.control_fd, report);
  }
  namespaces::Supervise(plan.control_fd, &report, payload_pid, bridge.fd >= 0 ? &bridge : nullptr,
                        {.linger = request.linger, .own_pid_namespace = plan.pid_namespace});
}

struct Identity {
  namespaces::IdMapping mapping;
  uid_t host_uid;
  gid_t host_gid;
  // The launching thread drops its supplementary groups around the clone
  // (namespaces::ThreadGroupsCleared), so the sandbox starts with none.
  bool clear_groups;
};

absl::StatusOr<Identity> ResolveIdentity(const SandboxSpec& spec) {
  Identity id;
  uid_t euid = ::geteuid();
  gid_t egid = ::getegid();
  if (spec.join_userns.has_value()) {
    // The joined namespace's maps decide; nothing is written, no groups
    // are touched, and no tree is idmapped for it.
    id.host_uid = euid;
    id.host_gid = egid;
    id.clear_groups = false;
    return id;
  }
  if (spec.host_user_namespace) {
    // No user namespace: no maps, and the host's root with its groups, as
    // bwrap run as root without --unshare-user.
    if (euid != 0) {
      return absl::InvalidArgumentError("a sandbox in the host's user namespace needs root");
    }
    id.host_uid = euid;
    id.host_gid = egid;
    id.clear_groups = false;
    return id;
  }
  if (spec.map_all_host_ids) {
    // Every id is itself: the ids look like the host's, while the
    // capabilities stay those of a user namespace, not the host's.
    if (euid != 0) {
      return absl::InvalidArgumentError("mapping every host id needs root (a rootless sandbox maps only its own ids)");
    }
    id.host_uid = spec.uid;
    id.host_gid = spec.gid;
    // bwrap as root makes no user namespace: setgroups is the host's
    // ("allow") and so are root's groups.
    id.mapping.deny_setgroups = false;
    id.clear_groups = false;
    id.mapping.uids = {{0, 0, 4294967295u}};
    id.mapping.gids = {{0, 0, 4294967295u}};
    return id;
  }
  if (euid == 0) {
    id.host_uid = spec.host_uid.value_or(kDefaultHostIdBase + spec.uid);
    id.host_gid = spec.host_gid.value_or(kDefaultHostIdBase + spec.gid);
    // "deny", as bwrap writes it: nothing in the sandbox may change its
    // groups. The host's groups (root's gid 0 among them) are gone before
    // clone instead.
    id.mapping.deny_setgroups = true;
    id.clear_groups = true;
  } else {
    id.host_uid = spec.host_uid.value_or(euid);
    id.host_gid = spec.host_gid.value_or(egid);
    if (id.host_uid != euid || id.host_gid != egid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host ids ", id.host_uid, ":", id.host_gid, " requested, but rootless (uid ", euid,
          ") can only map its own ids ", euid, ":", egid));
    }
    id.mapping.deny_setgroups = true;
    id.clear_groups = false;
  }
  id.mapping.uids = {{spec.uid, id.host_uid, 1}};
  id.mapping.gids = {{spec.gid, id.host_gid, 1}};
  return id;
}

// Builds the detached, idmapped mount for a bind that asks to show its
// source's owner as the sandbox user. Needs privilege over the source's
// filesystem; rootless callers own their workspace already (no idmap needed).
absl::StatusOr<UniqueFd> OpenIdmappedTree(const std::string& source, const Identity& id) {
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat(", source, ")"));
  if (st.st_uid == id.host_uid && st.st_gid == id.host_gid) return UniqueFd();  // already right
  if (::geteuid() != 0) return UniqueFd();  // cannot idmap; plain bind keeps host ownership
  namespaces::IdMapping idmap;
  idmap.uids = {{st.st_uid, id.host_uid, 1}};
  idmap.gids = {{st.st_gid, id.host_gid, 1}};
  idmap.deny_setgroups = true;
  CUBICLE_ASSIGN_OR_RETURN(int ns_raw, namespaces::MakeUserNamespaceFd(idmap));
  UniqueFd userns(ns_raw);
  UniqueFd tree(::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return ErrnoStatus(errno, absl::StrCat("open_tree(", source, ")"));
  struct mount_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<uint64_t>(userns.get());
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("mount_setattr(", source, ", MOUNT_ATTR_IDMAP)"));
  }
  return tree;
}

std::string SearchPath(const std::vector<std::string>& env) {
  for (const std::string& kv : env) {
    if (kv.rfind("PATH=", 0) == 0) return kv.substr(5);
  }
  return "/usr/local/bin:/usr/bin:/bin";
}

// Owns the sandbox's init process until it is reaped: an early return
// anywhere in the parent kills and reaps it, so nothing outlives its Zygote.
class InitProcess {
 public:
  InitProcess(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  InitProcess(const InitProcess&) = delete;
  InitProcess& operator=(const InitProcess&) = delete;
  ~InitProcess() {
    if (!reaped_) {
      Signal(SIGKILL);
      Reap();
    }
  }
  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  bool reaped() const { return reaped_; }
  void Signal(int sig) { namespaces::SignalProcess(pidfd_.get(), pid_, sig); }
  // Gives up the process unreaped: its pidfd goes to the caller.
  UniqueFd Release() {
    reaped_ = true;
    return std::move(pidfd_);
  }
  int Reap() {
    int status = 0;
    while (::waitpid(pid_, &status, __WALL) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_;
  UniqueFd pidfd_;
  bool reaped_ = false;
};

class StepClock {
 public:
  explicit StepClock(ExecResult* result) : result_(result), last_(absl::Now()) {}
  void Mark(const char* name) {
    absl::Time now = absl::Now();
    result_->steps.emplace_back(name, now - last_);
    last_ = now;
  }

 private:
  ExecResult* result_;
  absl::Time last_;
};

absl::Duration NanosBetween(int64_t from, int64_t to) {
  return from > 0 && to >= from ? absl::Nanoseconds(to - from) : absl::ZeroDuration();
}

absl::Status ChildErrorStatus(const ChildError& error) {
  std::string step = error.detail[0] != '\0' ? absl::StrCat(error.step, "(", error.detail, ")")
                                              : std::string(error.step);
  if (error.err == 0) return absl::FailedPreconditionError(step);
  return ErrnoStatus(error.err, step);
}

ExecResult SetupFailure(absl::Status status) {
  ExecResult result;
  result.reason = ExitReason::kSetupFailed;
  result.setup_error = std::move(status);
  return result;
}

// The launcher's side of JoinOwnGroups: the child's 'A', or why it failed.
// The next message the sandbox sends on `control` before `deadline` (a
// ControlMessage, or JoinOwnGroups' one byte): its size, 0 when the
// sandbox hung up, -1 for a failed recv. Waiting for `step` (poll(step) on
// error); DeadlineExceeded with `late` when the deadline passes first.
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

// The launcher's side of JoinGroupsSentLater: 'J' with the tasks files. A
// child that failed its setup meanwhile is gone: its report is the error.
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
  ControlMessage msg;
  if (::recv(control, &msg, sizeof(msg), MSG_DONTWAIT | MSG_PEEK) == sizeof(msg) &&
      msg.type == ControlType::kSetupError) {
    return ChildErrorStatus(msg.error);
  }
  return ErrnoStatus(err, "send(control, cgroups)");
}

// The sandbox's cgroup, or nullptr when this host cannot give it one and
// the limits degrade to rlimits (rootless without a delegated subtree, no
// cgroup mount, a controller missing), with a warning in `result`.
absl::StatusOr<std::unique_ptr<cgroups::SandboxCgroup>> MakeCgroup(const cgroups::Limits& limits,
                                                                   bool v1_later, ExecResult* result) {
  const CgroupHost& host = SharedCgroupHost();
  auto degrade = [&](absl::string_view why) -> std::unique_ptr<cgroups::SandboxCgroup> {
    result->warnings.push_back(absl::StrCat(
        "no cgroup for this sandbox (", why,
        "): memory is bounded by RLIMIT_AS only; pids, CPU and IO limits are not enforced"));
    return nullptr;
  };
  if (host.misconfigured) return host.layout.status();  // the caller's mistake, not the host's
  if (!host.layout.ok()) return degrade(host.layout.status().message());
  const cgroups::Layout& layout = *host.layout;
  std::vector<std::string> missing;
  if ((limits.memory_max || limits.memory_high) && !layout.Has(cgroups::Controller::kMemory)) missing.push_back("memory");
  if (limits.pids_max && !layout.Has(cgroups::Controller::kPids)) missing.push_back("pids");
  if ((limits.cpus || limits.cpu_weight) && !layout.Has(cgroups::Controller::kCpu)) missing.push_back("cpu");
  if (!limits.io.empty() && !layout.Has(cgroups::Controller::kIo)) missing.push_back("io");
  if (!missing.empty()) return degrade(absl::StrCat("controllers not on this host: ", absl::StrJoin(missing, ", ")));
  absl::StatusOr<std::unique_ptr<cgroups::SandboxCgroup>> made =
      v1_later ? cgroups::SandboxCgroup::CreateV2First(layout, limits) : cgroups::SandboxCgroup::Create(layout, limits);
  if (!made.ok() && ::geteuid() != 0 && absl::IsPermissionDenied(made.status())) {
    return degrade(absl::StrCat("no writable delegated subtree: ", made.status().message()));
  }
  if (made.ok()) {
    for (const std::string& note : (*made)->notes()) result->warnings.push_back(note);
  }
  return made;
}

// The device cgroup of a spec that passes devices through: only those and
// the minimal /dev's nodes may be opened. Where the host has no usable
// device controller the mount namespace alone decides what is visible (a
// user namespace cannot mknod), and the result says so.
absl::Status MakeDeviceCgroup(const SandboxSpec& spec, const cgroups::SandboxCgroup* cgroup,
                              std::unique_ptr<cgroups::DeviceCgroup>* out, ExecResult* result) {
  if (spec.devices.empty()) return absl::OkStatus();
  std::vector<cgroups::DeviceRule> allow = cgroups::MinimalDevRules();
  allow.insert(allow.end(), spec.devices.begin(), spec.devices.end());
  const int v2_dir_fd = cgroup != nullptr ? cgroup->v2_dir_fd() : -1;  // v2: the program goes on the sandbox's group
  absl::StatusOr<std::unique_ptr<cgroups::DeviceCgroup>> made = cgroups::DeviceCgroup::Create(allow, v2_dir_fd);
  if (made.ok()) {
    *out = *std::move(made);
    return absl::OkStatus();
  }
  // Rootless, the devices hierarchy is usually not ours to write.
  if (absl::IsUnimplemented(made.status()) || absl::IsFailedPrecondition(made.status()) ||
      (::geteuid() != 0 && absl::IsPermissionDenied(made.status()))) {
    result->warnings.push_back(absl::StrCat(made.status().message(),
                                            "; only the sandbox's /dev limits which devices it can open"));
    return absl::OkStatus();
  }
  return made.status();
}

// v1 blkio accounts IO only for devices that have a throttle rule (its
// io_service_bytes stay 0 otherwise; v2 io.stat always counts). For the IO
// breaker, give every block device without a rule one that never throttles.
void AddIoAccountingRules(cgroups::Limits* limits) {
  const CgroupHost& host = SharedCgroupHost();
  if (!host.layout.ok()) return;
  const cgroups::Hierarchy* io = host.layout->Find(cgroups::Controller::kIo);
  if (io == nullptr || io->version != 1) return;
  constexpr uint64_t kNeverThrottles = uint64_t{1} << 50;  // 1 PiB/s
  DIR* dir = ::opendir("/sys/block");
  if (dir == nullptr) return;
  while (struct dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream dev(absl::StrCat("/sys/block/", e->d_name, "/dev"));
    uint32_t major = 0, minor = 0;
    char colon = 0;
    if (!(dev >> major >> colon >> minor) || colon != ':') continue;
    bool listed = std::any_of(limits->io.begin(), limits->io.end(), [&](const cgroups::IoLimit& l) {
      return l.major == major && l.minor == minor;
    });
    if (!listed) limits->io.push_back({.major = major, .minor = minor, .read_bps = kNeverThrottles, .write_bps = kNeverThrottles});
  }
  ::closedir(dir);
}

// What rlimits can stand in for cgroup limits: only memory, as RLIMIT_AS
// (address space, not resident memory: a looser bound). RLIMIT_NPROC is not
// used: it counts every process of the uid, across sandboxes.
std::vector<RlimitSpec> DegradedRlimits(const cgroups::Limits& limits) {
  std::vector<RlimitSpec> out;
  if (limits.memory_max) out.push_back({RLIMIT_AS, *limits.memory_max, *limits.memory_max});
  return out;
}

}  // namespace

struct Zygote::State {
  SandboxSpec spec;  // breakers and the host ids come from it at Run()
  std::optional<WarmInterpreter> interpreter;
  Identity identity;
  absl::Time start;
  bool cold = false;  // Launch(): times count from Create()
  // Declared before `init`: destroyed (killed, removed) after init is reaped.
  std::unique_ptr<cgroups::SandboxCgroup> cgroup;
  std::unique_ptr<cgroups::DeviceCgroup> devices;  // spec.devices: removed after init is reaped
  UniqueFd control;
  std::optional<InitProcess> init;
  // The sandbox's hold on its policy's gateway; closes its connections.
  egress::Attachment egress;
  ControlMessage last{};  // step stamps and flags gathered so far
  // An armed payload's "executing" (kStamp*): its stamp, read with
  // pread when the execution ends however it ends.
  UniqueFd exec_stamp;
  // The direct channel to an armed payload (ArmedPayload): a request
  // without a workspace goes there, not through init.
  UniqueFd direct;
  bool ready = false;
  bool used = false;
};

Zygote::Zygote(std::unique_ptr<State> state) : state_(std::move(state)) {}
Zygote::~Zygote() = default;

pid_t Zygote::init_pid() const { return state_->init.has_value() ? state_->init->pid() : -1; }

absl::StatusOr<SandboxRemains> Zygote::TakeRemains() {
  State& z = *state_;
  if (!z.used || !z.init.has_value() || z.init->reaped()) {
    return absl::FailedPreconditionError("no execution has left this sandbox standing");
  }
  // Its gateway's connections are closed by the Zygote's own teardown.
  if (z.spec.egress.mode == egress::NetMode::kAllowlist) {
    return absl::FailedPreconditionError("a sandbox with an egress allowlist is torn down by its Zygote");
  }
  const pid_t pid = z.init->pid();
  UniqueFd pidfd = z.init->Release();
  z.init.reset();
  return SandboxRemains(pid, std::move(pidfd), std::move(z.cgroup), std::move(z.devices));
}

bool Zygote::CanApplyLimits(const cgroups::Limits& limits) const {
  if (limits.empty()) return true;
  const CgroupHost& host = SharedCgroupHost();
  return state_->cgroup != nullptr && host.layout.ok() && state_->cgroup->CanRewrite(*host.layout, limits);
}

absl::Status ValidateRequest(const ExecRequest& request) {
  CUBICLE_RETURN_IF_ERROR(ValidateExecution(request.argv, request.env, request.cwd, request.timeout));
  if (request.workspace.has_value()) {
    // Cloning a host mount needs CAP_SYS_ADMIN over the host's mount
    // namespace, and the kernel refuses binds from another namespace into a
    // built sandbox: rootless, a workspace must be in the spec (cold path).
    if (::geteuid() != 0) {
      return absl::UnimplementedError(
          "a rootless zygote cannot attach a workspace at hand-off; give the workspace in the "
          "sandbox spec instead");
    }
    struct stat st;
    if (::stat(request.workspace->c_str(), &st) != 0) {
      return ErrnoStatus(errno, absl::StrCat("workspace ", *request.workspace));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("workspace ", *request.workspace, ": not a directory"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Zygote>> Zygote::Create(const SandboxSpec& spec, const ZygoteOptions& options) {
  auto state = std::make_unique<State>();
  state->start = absl::Now();
  state->spec = spec;
  state->cold = options.cold;
  ExecResult created;
  StepClock clock(&created);

  // 0. Validate everything before the first syscall that changes state.
  //    argv/env/cwd belong to the request: check the rest with a stand-in.
  if (!spec.argv.empty()) {
    CUBICLE_RETURN_IF_ERROR(ValidateSpec(spec));
  } else {
    SandboxSpec check = spec;
    check.argv = {"/bin/true"};
    CUBICLE_RETURN_IF_ERROR(ValidateSpec(check));
  }
  CUBICLE_ASSIGN_OR_RETURN(state->identity, ResolveIdentity(spec));
  clock.Mark("validate");

  // 1. Prepare what the child will read: seccomp program (embedded), mount
  //    plan, host-side mount trees, the cgroup.
  HostFeatures features = Features();
  if (options.features.has_value()) {
    features.clone3 &= options.features->clone3;
    features.new_mount_api &= options.features->new_mount_api;
    features.openat2 &= options.features->openat2;
  }
  CUBICLE_ASSIGN_OR_RETURN(const seccomp::BpfProgram* bpf, seccomp::Compiled(spec.seccomp));
  rootfs::MountPlan& mounts = state->spec.mounts;
  if (options.accept_workspace &&
      std::none_of(mounts.begin(), mounts.end(), [](const rootfs::MountOp& op) { return op.dest == kWorkspaceDir; })) {
    rootfs::MountOp dir;
    dir.kind = rootfs::MountKind::kDir;
    dir.dest = kWorkspaceDir;
    mounts.push_back(dir);
  }
  ChildPlan plan;
  plan.rootfs = rootfs::Prepare(mounts, spec.readonly_root, features.new_mount_api, features.openat2);
  // The host's procfs would show the host's processes, not the joined pid
  // namespace's: a procfs there is its own or none.
  plan.rootfs.allow_proc_fallback = options.allow_proc_fallback && !spec.join_pidns.has_value();
  std::vector<UniqueFd> trees;
  for (rootfs::PreparedOp& op : plan.rootfs.ops) {
    if (op.kind != rootfs::MountKind::kBind || !op.op->idmap_owner || op.op->readonly) continue;
    if (!features.new_mount_api) {
      created.warnings.push_back(absl::StrCat(
          "no idmapped mounts on this kernel: ", op.dest, " keeps its host ownership"));
      continue;
    }
    CUBICLE_ASSIGN_OR_RETURN(UniqueFd tree, OpenIdmappedTree(op.op->source, state->identity));
    op.tree_fd = tree.get();
    trees.push_back(std::move(tree));
  }
  // As root, a bind source the sandbox's ids may not look up (a root-only
  // directory on its path, a mktemp -d) is also cloned here, with the
  // launcher's privileges: what root can name, root can bind. The sandbox
  // attaches the clone only if its own lookup is refused (rootfs/builder.h
  // says why its own is preferred). Rootless, the sandbox's ids are the
  // caller's: it reaches what the caller does. Every host id mapped
  // (bwrap as root without --unshare-user): the sandbox's capabilities
  // cover every host file already.
  if (features.new_mount_api && ::geteuid() == 0 && !spec.join_userns.has_value() && !spec.map_all_host_ids) {
    for (rootfs::PreparedOp& op : plan.rootfs.ops) {
      if (op.kind != rootfs::MountKind::kBind || op.tree_fd >= 0) continue;
      if (rootfs::MayLookUpAs(op.op->source, state->identity.host_uid, state->identity.host_gid)) continue;
      absl::StatusOr<rootfs::HostTree> tree =
          rootfs::CloneBindSource(op.op->source, op.op->readonly, op.op->devices);
      if (!tree.ok()) {
        // A missing --bind-try source is skipped; any other problem is not
        // fatal here: the sandbox's own attempt names it, as without a clone.
        op.source_missing = op.op->optional && absl::IsNotFound(tree.status());
        continue;
      }
      op.fallback_tree_fd = tree->fd.get();
      op.tree_is_dir = tree->is_dir;
      trees.push_back(std::move(tree->fd));
    }
  }
  plan.uid = spec.uid;
  plan.gid = spec.gid;
  plan.pid_namespace = spec.namespaces.pid;
  plan.net_namespace = spec.namespaces.net;
  plan.uts_namespace = spec.namespaces.uts;
  plan.die_with_parent = spec.die_with_parent;
  plan.new_session = spec.new_session;
  plan.hostname = spec.hostname;
  for (const RlimitSpec& r : spec.rlimits) plan.rlimits.push_back({r.resource, r.soft, r.hard});
  plan.load_seccomp = !bpf->instructions.empty();
  plan.seccomp = bpf->AsFprog();
  if (options.interpreter.has_value()) {
    CUBICLE_RETURN_IF_ERROR(ValidateWarmInterpreter(*options.interpreter));
    state->interpreter = options.interpreter;
    plan.warm = true;
    plan.warm_strings = WarmCommandLine(*options.interpreter, kWarmSocketFd);
    const size_t argc = plan.warm_strings.size();
    plan.warm_strings.insert(plan.warm_strings.end(), spec.env.begin(), spec.env.end());
    for (size_t i = 0; i < plan.warm_strings.size(); ++i) {
      (i < argc ? plan.warm_argv : plan.warm_envp).push_back(plan.warm_strings[i].data());
    }
    plan.warm_argv.push_back(nullptr);
    plan.warm_envp.push_back(nullptr);
    plan.warm_search_path = SearchPath(spec.env);
  }
  plan.set_hostname = spec.set_hostname;
  if (spec.capabilities.has_value()) {
    plan.keep_capabilities = true;
    plan.capabilities = {spec.capabilities->bounding, spec.capabilities->keep, spec.capabilities->exact};
  }
  for (const std::string& program : state->spec.seccomp_programs) {
    plan.extra_seccomp.push_back(sock_fprog{static_cast<unsigned short>(program.size() / sizeof(sock_filter)),
                                            reinterpret_cast<sock_filter*>(const_cast<char*>(program.data()))});
  }
  plan.argv0 = spec.argv0;
  plan.disable_userns = spec.disable_userns;
  plan.assert_userns_disabled = spec.assert_userns_disabled;
  plan.as_pid_1 = spec.as_pid_1;
  plan.init_new_session = spec.init_new_session && !spec.as_pid_1;
  if (spec.join_userns.has_value()) {
    // As bwrap: ids the caller names differently from its own are switched
    // to; the others stay what the namespace's maps make of the caller's.
    plan.joined_userns = true;
    plan.switch_uid = spec.uid != ::getuid();
    plan.switch_gid = spec.gid != ::getgid();
  }
  plan.userns_after_setup_fd = spec.join_userns_after_setup.value_or(-1);
  plan.exec_label = spec.exec_label;
  plan.cwd_fallbacks = spec.cwd_fallbacks;
  for (const std::string& dir : spec.cwd_fallbacks) plan.pwd_entries.push_back(absl::StrCat("PWD=", dir));

  // A zygote built ahead of its request (a pool's): what the request path
  // will touch is prepared while it waits (stat files, prefaulted pages).
  const bool ahead_of_request = options.wait_until_ready && !options.cold;

  // The cgroup exists before the child does, so no payload instruction runs
  // unconfined. Its v1 groups (a hybrid or v1 host's memory and pids) are
  // made while the child builds its root, and the child joins them after
  // that: they were ~0.25 ms of a cold start's ~4 spent before clone. Only as root
  // (a rootless launcher that cannot make them falls back to rlimits, which
  // must be known before clone), and not with devices passed through or a
  // user namespace joined before clone (whose launcher may lose its rights
  // over the host's cgroup tree).
  const bool v1_later = ::geteuid() == 0 && spec.devices.empty() && !spec.join_userns.has_value();
  auto keep_stat_files = [&] {
    // The stats are read on the reply path: their files are opened now
    // (the first read opens them) and kept.
    if (ahead_of_request && state->cgroup != nullptr) {
      state->cgroup->KeepStatFilesOpen();
      (void)state->cgroup->ReadStats();
    }
  };
  if (!spec.limits.empty() || spec.breakers.any()) {
    cgroups::Limits limits = spec.limits;
    if (spec.breakers.io_bytes_per_sec.has_value()) AddIoAccountingRules(&limits);
    CUBICLE_ASSIGN_OR_RETURN(state->cgroup, MakeCgroup(limits, v1_later, &created));
    if (state->cgroup == nullptr) {
      for (const RlimitSpec& r : DegradedRlimits(spec.limits)) {
        plan.rlimits.push_back({r.resource, r.soft, r.hard});
      }
    }
  }
  const bool v1_deferred = state->cgroup != nullptr && state->cgroup->v1_pending();
  plan.join_later = v1_deferred;
  if (!v1_deferred) keep_stat_files();
  CUBICLE_RETURN_IF_ERROR(MakeDeviceCgroup(spec, state->cgroup.get(), &state->devices, &created));
  // The child joins its v1 groups itself (SandboxCgroup::V1TaskFiles): no
  // RCU grace period after an idle spell, as the launcher's cgroup.procs
  // write waits for. If the files cannot be opened, the launcher attaches.
  std::vector<cgroups::SandboxCgroup::TaskFile> task_files;
  if (state->cgroup != nullptr) {
    absl::StatusOr<std::vector<cgroups::SandboxCgroup::TaskFile>> opened = state->cgroup->V1TaskFiles();
    if (opened.ok()) task_files = *std::move(opened);
  }
  // The v1 devices group (accelerators) likewise, when the others are (or
  // there are none).
  bool devices_joined = false;
  if (state->devices != nullptr && !state->devices->v2() && (state->cgroup == nullptr || !task_files.empty())) {
    UniqueFd tasks(::open(absl::StrCat(state->devices->path(), "/tasks").c_str(), O_WRONLY | O_CLOEXEC));
    if (tasks) {
      task_files.push_back({std::move(tasks), state->devices->path()});
      devices_joined = true;
    }
  }
  for (const cgroups::SandboxCgroup::TaskFile& f : task_files) {
    plan.v1_task_fds.push_back(f.fd.get());
    plan.v1_task_paths.push_back(f.path.c_str());
  }
  // The sandbox's own groups' v1 part is the child's to join (else none
  // of it is: the launcher attaches it all).
  bool self_join = !task_files.empty();
  clock.Mark("cgroup");

  // Egress: the gateway of this policy (made on first use) and the
  // sandbox's private channel to it.
  std::shared_ptr<egress::GatewayProcess> gateway;
  UniqueFd egress_host, egress_child;
  if (spec.egress.mode == egress::NetMode::kAllowlist) {
    CUBICLE_ASSIGN_OR_RETURN(gateway, egress::SharedGateways().Acquire(spec.egress));
    int ev[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ev) != 0) {
      return ErrnoStatus(errno, "socketpair(egress)");
    }
    egress_host.reset(ev[0]);
    egress_child.reset(ev[1]);
    plan.egress_fd = egress_child.get();
    plan.bridge_port = spec.egress.bridge_port;
  }

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair(control)");
  }
  state->control.reset(sv[0]);
  UniqueFd child_control(sv[1]);
  plan.control_fd = child_control.get();
  plan.launcher_control_fd = sv[0];
  plan.inherited_fds = spec.inherited_fds;
  if (!plan.warm && !plan.as_pid_1) plan.payload_stack.reset(new char[kPayloadStackBytes]);
  plan.armed_payload = ahead_of_request && plan.payload_stack != nullptr;
  // The exec stamp page: an armed payload says "executing" by writing its
  // stamp into a memfd page init maps (init adds its hand-off's), instead
  // of sending a message that woke this process while the payload execs
  // (measured: daemon/posix_spawn P50 1.86x -> 1.67x). This process reads
  // it with pread when the execution ends, however it ends. Only init maps
  // it: zygotes forked later get no mapping of it. Without a memfd (or the
  // map), "executing" is a message, as before.
  if (plan.armed_payload) {
    UniqueFd page(::memfd_create("cubicle-exec-stamp", MFD_CLOEXEC));
    if (page && ::ftruncate(page.get(), kStampBytes) == 0) {
      plan.exec_stamp_fd = page.get();
      state->exec_stamp = std::move(page);
    }
  }
  // The direct channel: a request without a workspace goes from here to the
  // armed payload itself, one wake-up and init's forwarding fewer. Without
  // the pair, every request goes through init.
  UniqueFd direct_child;
  if (plan.armed_payload) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0) {
      state->direct.reset(pair[0]);
      direct_child.reset(pair[1]);
      plan.direct_fd = pair[1];
    }
  }
  plan.prefault = ahead_of_request;
  if (plan.prefault) plan.text = namespaces::ExecutableSegments();
  clock.Mark("prepare");

  // Namespaces to join: the user namespace first (it gives the privilege
  // over the pid namespace it owns), both just before clone. There is no
  // way back to the host's user namespace; ValidateSpec made sure the
  // launcher needs nothing of it from here on.
  if (spec.join_userns.has_value() && ::setns(*spec.join_userns, CLONE_NEWUSER) != 0) {
    const int err = errno;
    absl::Status st = ErrnoStatus(err, absl::StrCat("join user namespace(fd ", *spec.join_userns, ")"));
    if (err == EINVAL) {
      st = absl::Status(st.code(), absl::StrCat(st.message(), " (it might not be a descendant of the current "
                                                              "user namespace, or the launcher has threads)"));
    }
    return st;
  }
  if (spec.join_pidns.has_value() && ::setns(*spec.join_pidns, CLONE_NEWPID) != 0) {
    return ErrnoStatus(errno, absl::StrCat("join pid namespace(fd ", *spec.join_pidns, ")"));
  }
  if (spec.join_userns.has_value() || spec.join_pidns.has_value()) clock.Mark("join");

  // 2. clone into the new namespaces (and, on v2, straight into the cgroup:
  //    CLONE_INTO_CGROUP needs no migration).
  const int cgroup_fd = state->cgroup != nullptr && features.clone3 ? state->cgroup->v2_dir_fd() : -1;
  // A new pid namespace under a joined one is made by a process inside it.
  auto clone_sandbox = spec.join_pidns.has_value() && spec.namespaces.pid ? namespaces::CloneViaIntermediate
                                                                          : namespaces::CloneInto;
  namespaces::ThreadGroupsCleared groups;
  if (state->identity.clear_groups) CUBICLE_RETURN_IF_ERROR(groups.Clear());
  namespaces::CloneResult cloned = clone_sandbox(spec.namespaces.CloneFlags(), cgroup_fd, features.clone3);
  bool placed_on_v2 = cgroup_fd >= 0 && cloned.pid >= 0;
  if (cloned.pid < 0 && cgroup_fd >= 0) {
    // A v2 group the kernel will not clone into (a threaded or domain-
    // invalid parent): place the child by writing cgroup.procs instead.
    created.warnings.push_back(absl::StrCat("clone3(CLONE_INTO_CGROUP): ", ErrnoName(-cloned.pid),
                                            "; the sandbox is attached after clone instead"));
    cloned = clone_sandbox(spec.namespaces.CloneFlags(), -1, features.clone3);
  }
  if (cloned.pid == 0) ChildMain(plan);
  if (absl::Status restored = groups.Restore(); !restored.ok()) {
    // Only this thread is affected, and it has fewer privileges, not more.
    created.warnings.push_back(absl::StrCat("the launching thread keeps no supplementary groups: ", restored.message()));
  }
  if (cloned.pid < 0) {
    // A joined pid namespace whose init is gone takes no new process (ENOMEM).
    absl::Status st = ErrnoStatus(-cloned.pid, spec.join_pidns.has_value() ? "clone into the joined pid namespace"
                                               : cloned.used_clone3               ? "clone3"
                                                                                  : "clone");
    if (-cloned.pid == EPERM || -cloned.pid == ENOSPC || -cloned.pid == EUSERS) {
      st = absl::Status(st.code(), absl::StrCat(st.message(),
                                                " (are user namespaces disabled? see "
                                                "user.max_user_namespaces and "
                                                "kernel.unprivileged_userns_clone)"));
    }
    return st;
  }
  state->init.emplace(cloned.pid, cloned.pidfd);
  child_control.reset();
  egress_child.reset();
  if (gateway != nullptr) {
    // "<init pid>-<n>": unique for the gateway's life even if a pid is
    // reused before an earlier sandbox's teardown is done.
    static std::atomic<uint64_t> sandboxes{0};
    CUBICLE_ASSIGN_OR_RETURN(state->egress, gateway->Attach(absl::StrCat(cloned.pid, "-", ++sandboxes),
                                                            std::move(egress_host)));
  }
  trees.clear();  // the child holds its own copies
  task_files.clear();
  direct_child.reset();
  clock.Mark("clone");

  // 3. v1 groups (and v2 without CLONE_INTO_CGROUP). The child joins its
  //    v1 groups itself, first thing (JoinOwnGroups); Create waits for its
  //    'A' after "go". What the launcher still attaches (v1 only when the
  //    tasks files could not be opened): init makes no process before its
  //    request but a warm interpreter's or an armed payload's, which it
  //    starts once the sandbox is built: with one, init is attached while
  //    still blocked before its first step; without, while it builds its
  //    root (a v1 attach can wait for an RCU grace period), and Create
  //    returns only once it is attached, before any request can be sent.
  //    Either way every process of the sandbox starts in the groups.
  auto attach = [&]() -> absl::Status {
    // Deferred v1 groups are attached (or joined) once made, below.
    if (state->cgroup == nullptr || v1_deferred || (self_join && placed_on_v2)) return absl::OkStatus();
    using Placement = cgroups::SandboxCgroup::Placement;
    CUBICLE_RETURN_IF_ERROR(state->cgroup->Attach(
        cloned.pid, self_join ? Placement::kV2Only : placed_on_v2 ? Placement::kV1Only : Placement::kAll));
    clock.Mark("cgroup_attach");
    return absl::OkStatus();
  };
  const bool attach_before_release = plan.warm || plan.armed_payload;
  if (attach_before_release) CUBICLE_RETURN_IF_ERROR(attach());
  if (state->devices != nullptr && !devices_joined) CUBICLE_RETURN_IF_ERROR(state->devices->Attach(cloned.pid));

  // 4. Id maps, then release the child.
  if (!spec.join_userns.has_value() && !spec.host_user_namespace) {
    CUBICLE_RETURN_IF_ERROR(namespaces::WriteIdMaps(cloned.pid, state->identity.mapping));
  }
  char go = 'g';
  if (::send(state->control.get(), &go, 1, MSG_NOSIGNAL) != 1) return ErrnoStatus(errno, "send(control, go)");
  clock.Mark("id_maps");
  if (!attach_before_release) {
    if (absl::Status attached = attach(); !attached.ok()) {
      // A child that failed its setup meanwhile is gone: its report of why
      // is the error to give.
      ControlMessage msg;
      if (::recv(state->control.get(), &msg, sizeof(msg), MSG_DONTWAIT | MSG_PEEK) == sizeof(msg) &&
          msg.type == ControlType::kSetupError) {
        return ChildErrorStatus(msg.error);
      }
      return attached;
    }
  }
  if (v1_deferred) {
    // The v1 groups, made while the child builds its root; it waits for
    // their tasks files before it makes any process (JoinGroupsSentLater).
    const size_t notes = state->cgroup->notes().size();
    CUBICLE_RETURN_IF_ERROR(state->cgroup->CreateV1(*SharedCgroupHost().layout));
    for (size_t i = notes; i < state->cgroup->notes().size(); ++i) created.warnings.push_back(state->cgroup->notes()[i]);
    absl::StatusOr<std::vector<cgroups::SandboxCgroup::TaskFile>> opened = state->cgroup->V1TaskFiles();
    if (opened.ok()) task_files = *std::move(opened);
    self_join = !task_files.empty();
    if (!self_join) {
      using Placement = cgroups::SandboxCgroup::Placement;
      CUBICLE_RETURN_IF_ERROR(state->cgroup->Attach(cloned.pid, placed_on_v2 ? Placement::kV1Only : Placement::kAll));
    }
    CUBICLE_RETURN_IF_ERROR(SendGroups(state->control.get(), task_files));
    task_files.clear();
    keep_stat_files();
    clock.Mark("cgroup_v1");
  }
  // The cold path sends its request at once: the sandbox joins its groups
  // before it reads it, and its 'A' is skipped in Run().
  if (self_join && !options.cold) {
    CUBICLE_RETURN_IF_ERROR(WaitUntilJoined(state->control.get(), options.ready_timeout));
    clock.Mark("cgroup_join");
  }

  // 5. A pool waits until the sandbox says it is built (or failed).
  if (options.wait_until_ready) {
    const absl::Time deadline = absl::Now() + options.ready_timeout;
    const std::string late =
        absl::StrCat("the sandbox was not ready within ", absl::FormatDuration(options.ready_timeout));
    while (!state->ready) {
      ControlMessage msg;
      CUBICLE_ASSIGN_OR_RETURN(ssize_t got, ReceiveBy(state->control.get(), deadline, &msg, "ready", late));
      if (got != static_cast<ssize_t>(sizeof(msg))) {
        return absl::InternalError("sandbox init ended before it was ready");
      }
      if (msg.type == ControlType::kSetupError) return ChildErrorStatus(msg.error);
      if (msg.type == ControlType::kReady) {
        state->ready = true;
        state->last = msg;
      }
    }
    clock.Mark("ready");
  }
  auto zygote = std::unique_ptr<Zygote>(new Zygote(std::move(state)));
  zygote->created_ = std::move(created);
  return zygote;
}

absl::StatusOr<ExecResult> Zygote::Run(const ExecRequest& request) {
  State& z = *state_;
  if (z.used) return absl::FailedPreconditionError("a zygote runs one execution only");
  CUBICLE_RETURN_IF_ERROR(ValidateRequest(request));
  z.used = true;
  const absl::Time run_start = absl::Now();
  const int64_t run_start_ns = namespaces::MonotonicNanos();
  ExecResult result = created_;
  if (!z.cold) result.steps.clear();
  StepClock clock(&result);
  InitProcess& init = *z.init;
  std::unique_ptr<cgroups::SandboxCgroup>& cgroup = z.cgroup;
  auto fail = [&](absl::Status st) {
    ExecResult failed = SetupFailure(std::move(st));
    failed.warnings = result.warnings;
    return failed;  // ~Zygote kills and reaps
  };

  // The hand-off: this execution's limits, the workspace tree (idmapped on
  // the host), then the request.
  if (request.limits.has_value() && !request.limits->empty()) {
    if (cgroup == nullptr) {
      result.warnings.push_back("no cgroup for this sandbox: the request's limits are not enforced");
    } else {
      const CgroupHost& host = SharedCgroupHost();
      absl::Status written = host.layout.ok() ? cgroup->Rewrite(*host.layout, *request.limits) : host.layout.status();
      if (!written.ok()) return fail(written);
    }
    clock.Mark("limits");
  }
  UniqueFd workspace;
  if (request.workspace.has_value()) {
    char resolved[4096];
    if (::realpath(request.workspace->c_str(), resolved) == nullptr) {
      return fail(ErrnoStatus(errno, absl::StrCat("workspace ", *request.workspace)));
    }
    absl::StatusOr<UniqueFd> tree = OpenIdmappedTree(resolved, z.identity);
    if (!tree.ok()) return fail(tree.status());
    workspace = *std::move(tree);
    if (!workspace) {  // no idmap needed (or possible): a plain detached clone
      workspace.reset(::open_tree(AT_FDCWD, resolved, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
      if (!workspace) return fail(ErrnoStatus(errno, absl::StrCat("open_tree(", resolved, ")")));
      struct mount_attr attr;
      std::memset(&attr, 0, sizeof(attr));
      attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
      if (::mount_setattr(workspace.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
        return fail(ErrnoStatus(errno, absl::StrCat("mount_setattr(", resolved, ")")));
      }
    }
  }
  const int stdio[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
  uint32_t warm = 0;
  if (z.interpreter.has_value()) {
    std::optional<WarmInvocation> invocation = MatchWarmInvocation(*z.interpreter, request.argv);
    if (invocation.has_value()) warm = invocation->Encode();
    result.warm = invocation.has_value();
  }
  bool peer_gone = false;
  // Egress: the payload finds the bridge through the proxy variables
  // (they replace the request's own).
  std::vector<std::string> env = request.env;
  for (const std::string& kv : egress::ProxyEnvironment(z.spec.egress)) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
    env.push_back(kv);
  }
  // To an armed payload directly, unless a workspace needs init.
  const bool direct = z.direct && !workspace;
  absl::Status sent = namespaces::SendExecRequest(direct ? z.direct.get() : z.control.get(), request.argv, env,
                                                  request.cwd, SearchPath(env), stdio, workspace.get(),
                                                  &peer_gone, warm, /*linger=*/request.return_at_exit);
  // A sandbox that failed its setup before reading the request (an armed
  // payload killed while it waited: init says so) has already sent why, or
  // is about to: go on and collect it.
  if (!sent.ok() && !peer_gone) return fail(sent);
  workspace.reset();
  clock.Mark("handoff");

  // The breakers watch the cgroup: a v1 memory threshold eventfd where the
  // kernel has one, a sampling timer for the rest.
  const BreakerSpec& breaker_spec = z.spec.breakers;
  std::optional<BreakerState> breakers;
  UniqueFd breaker_timer, memory_mark_fd;
  if (breaker_spec.any()) {
    if (cgroup == nullptr) {
      result.warnings.push_back("the runtime breakers need a cgroup and are not enforced");
    } else {
      breakers.emplace(breaker_spec);
      if (breaker_spec.memory_mark.has_value()) {
        absl::StatusOr<UniqueFd> fd = cgroup->MemoryThresholdFd(*breaker_spec.memory_mark);
        if (fd.ok()) memory_mark_fd = *std::move(fd);
      }
      breaker_timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
      if (!breaker_timer) return fail(ErrnoStatus(errno, "timerfd_create(breakers)"));
      const int64_t ns = absl::ToInt64Nanoseconds(breakers->SampleInterval());
      struct itimerspec every = {{ns / 1'000'000'000, ns % 1'000'000'000}, {ns / 1'000'000'000, ns % 1'000'000'000}};
      if (::timerfd_settime(breaker_timer.get(), 0, &every, nullptr) != 0) {
        return fail(ErrnoStatus(errno, "timerfd_settime(breakers)"));
      }
    }
  }
  bool breaker_killed = false;
  auto act = [&](const BreakerAction& a) {
    if (a.kind == BreakerAction::Kind::kNone) return;
    result.warnings.push_back(absl::StrCat("breaker ", BreakerName(a.breaker), ": ", a.why,
                                           a.kind == BreakerAction::Kind::kKillSandbox
                                               ? "; sandbox killed"
                                               : absl::StrCat("; sent ", a.signal == SIGTERM ? "SIGTERM" : "SIGUSR1")));
    if (a.kind == BreakerAction::Kind::kKillSandbox) {
      breaker_killed = true;
      init.Signal(SIGKILL);
      cgroup->Kill().IgnoreError();
    } else {
      init.Signal(a.signal);  // init forwards it to the payload
    }
  };

  // Supervise: messages from init and the payload, init's exit, the
  // deadline, the breakers, and signals to forward.
  const absl::Time deadline = request.timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : (z.cold ? z.start : run_start) + request.timeout;
  ControlMessage& last = z.last;
  bool have_exit = false, have_exec = false, timed_out = false, init_gone = false, cancelled = false;
  absl::Time exec_time;
  absl::Status setup_error;
  // Init and the payload each send their own copy of the step stamps.
  auto absorb = [&](const ControlMessage& msg) {
    for (int i = 0; i < namespaces::kChildStepCount; ++i) {
      if (msg.step_ns[i] > 0) last.step_ns[i] = msg.step_ns[i];
    }
    last.flags |= msg.flags;
    switch (msg.type) {
      case ControlType::kSetupError:
        if (setup_error.ok()) setup_error = ChildErrorStatus(msg.error);
        break;
      case ControlType::kExecuting:
        have_exec = true;
        exec_time = absl::Now();
        break;
      case ControlType::kPayloadExited:
        have_exit = true;
        last.wait_status = msg.wait_status;
        last.rusage = msg.rusage;
        break;
      case ControlType::kReady:
        break;
    }
  };
  bool output_open[2] = {request.output_fds[0] >= 0 && request.on_output, request.output_fds[1] >= 0 && request.on_output};
  bool watching = request.watch_fd >= 0 && request.on_watch;
  bool control_open = true;
  while (!init_gone) {
    struct pollfd fds[9] = {{control_open ? z.control.get() : -1, POLLIN, 0}, {init.pidfd(), POLLIN, 0},
                            {request.signal_fd, POLLIN, 0},   {breaker_timer.get(), POLLIN, 0},
                            {memory_mark_fd.get(), POLLIN, 0}, {cancelled ? -1 : request.cancel_fd, POLLIN, 0},
                            {output_open[0] ? request.output_fds[0] : -1, POLLIN, 0},
                            {output_open[1] ? request.output_fds[1] : -1, POLLIN, 0},
                            {watching ? request.watch_fd : -1, POLLIN, 0}};
    int timeout_ms = -1;
    if (!timed_out && deadline != absl::InfiniteFuture()) {
      absl::Duration left = deadline - absl::Now();
      timeout_ms = left <= absl::ZeroDuration()
                       ? 0
                       : static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
    }
    int n = ::poll(fds, 9, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrnoStatus(errno, "poll(sandbox)"));
    }
    if (n == 0) {
      // Killing PID 1 makes the kernel kill every process of the pid
      // namespace, daemonized grandchildren included.
      timed_out = true;
      init.Signal(SIGKILL);
      if (cgroup != nullptr) cgroup->Kill().IgnoreError();  // init's death kills the rest too
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if ((fds[6 + i].revents & (POLLIN | POLLHUP | POLLERR)) && !request.on_output(i)) output_open[i] = false;
    }
    if (fds[8].revents & (POLLIN | POLLHUP | POLLERR)) {
      watching = false;
      request.on_watch();
    }
    if (fds[5].revents & (POLLIN | POLLHUP | POLLERR)) {
      cancelled = true;
      init.Signal(SIGKILL);
      // Returning at once, ~Zygote kills what is left and removes the cgroup
      // (a pool does that off the request path).
      if (request.return_at_exit) break;
      if (cgroup != nullptr) cgroup->Kill().IgnoreError();
    }
    if (breakers.has_value() && !breaker_killed) {
      if (fds[4].revents & POLLIN) {
        uint64_t count;
        (void)!::read(memory_mark_fd.get(), &count, sizeof(count));
        act(breakers->MemoryMarkCrossed(absl::Now()));
      }
      if (fds[3].revents & POLLIN) {
        uint64_t expirations;
        (void)!::read(breaker_timer.get(), &expirations, sizeof(expirations));
        absl::StatusOr<cgroups::SandboxCgroup::Usage> usage = cgroup->ReadUsage();
        if (usage.ok()) {
          act(breakers->Observe(absl::Now(), UsageSample{usage->memory_bytes, usage->cpu_ns, usage->io_bytes}));
        }
      }
    }
    if (fds[2].revents & POLLIN) {
      struct signalfd_siginfo si;
      if (::read(request.signal_fd, &si, sizeof(si)) == sizeof(si)) {
        init.Signal(static_cast<int>(si.ssi_signo));
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ControlMessage msg;
      ssize_t got = ::recv(z.control.get(), &msg, sizeof(msg), MSG_DONTWAIT);
      if (got == static_cast<ssize_t>(sizeof(msg))) {
        absorb(msg);
        if (have_exit && request.return_at_exit) break;  // the result is known
        continue;  // drain messages before looking at init's exit
      }
      if (got == 0) {  // every child end closed: init is exiting
        if (init.pidfd() < 0) init_gone = true;
        control_open = false;
        // Init's exit (its namespaces' teardown) takes a few hundred µs:
        // look at its pidfd without sleeping for a bounded while first
        // (`cubicle run`/bwrap P50 1.10 with a plain sleep, 1.07 with this;
        // the busy loop this replaced had the same P50 and a P99 of 1.53
        // against 1.09). Past the bound, the wait sleeps.
        if (!init_gone && namespaces::SpinUntilExited(init.pidfd(), namespaces::kInitExitSpinNs)) init_gone = true;
      }
    }
    if (fds[1].revents & POLLIN) init_gone = true;
  }
  // Messages sent just before init exited may still be queued.
  for (;;) {
    ControlMessage msg;
    const ssize_t got = ::recv(z.control.get(), &msg, sizeof(msg), MSG_DONTWAIT);
    if (got == 1) continue;  // a cold sandbox's 'A' (joined), which Create did not wait for
    if (got != static_cast<ssize_t>(sizeof(msg))) break;
    absorb(msg);
  }
  if (!have_exec && z.exec_stamp) {
    int64_t ns[kStampCount] = {};
    if (::pread(z.exec_stamp.get(), ns, sizeof(ns), 0) == sizeof(ns) && ns[kStampExecReady] > 0) {
      have_exec = true;
      last.step_ns[namespaces::kStepExecReady] = ns[kStampExecReady];
      if (last.step_ns[namespaces::kStepPayloadForked] == 0) {
        last.step_ns[namespaces::kStepPayloadForked] = ns[kStampHandOff];
      }
      exec_time = std::clamp(run_start + absl::Nanoseconds(ns[kStampExecReady] - run_start_ns), run_start, absl::Now());
    }
  }
  const bool early = (have_exit || cancelled) && request.return_at_exit && !init_gone;
  int init_status = early ? 0 : init.Reap();
  if (z.spec.as_pid_1 && have_exec && !have_exit) {
    // No init of cubicle's reported it: the payload was PID 1.
    have_exit = true;
    last.wait_status = init_status;
    ::getrusage(RUSAGE_CHILDREN, &last.rusage);
  }
  const absl::Time end = absl::Now();
  if (cgroup != nullptr) {
    const bool sigkilled = have_exit && WIFSIGNALED(last.wait_status) && WTERMSIG(last.wait_status) == SIGKILL;
    if (request.read_stats || sigkilled) {
      absl::StatusOr<cgroups::Stats> stats = cgroup->ReadStats();
      if (stats.ok()) {
        result.cgroup = *stats;
      } else {
        result.warnings.push_back(absl::StrCat("cgroup stats: ", stats.status().message()));
      }
    }
    // With its own pid namespace, init's death took every process of the
    // sandbox with it, so the groups are mostly empty already: RemoveOrKill
    // tries the removal first and kills only what that shows is left.
    // Returning early, the destructor kills and removes.
    if (!early) {
      if (absl::Status st = cgroup->RemoveOrKill(); !st.ok()) {
        result.warnings.push_back(absl::StrCat("cgroup cleanup: ", st.message()));
      }
    }
  }

  // The verdict.
  const absl::Time origin = z.cold ? z.start : run_start;
  result.wall = end - origin;
  result.setup = have_exec ? exec_time - origin : result.wall;
  const int64_t* ns = last.step_ns;
  using namespaces::ChildStep;
  auto child_step = [&](const char* name, ChildStep from, ChildStep to) {
    if (ns[from] > 0 && ns[to] > 0) result.steps.emplace_back(name, NanosBetween(ns[from], ns[to]));
  };
  if (z.cold) {
    child_step("child_ids", namespaces::kStepChildStart, namespaces::kStepIdsReady);
    child_step("rootfs", namespaces::kStepIdsReady, namespaces::kStepRootfsReady);
    child_step("uts_net", namespaces::kStepRootfsReady, namespaces::kStepInitReady);
    child_step("request_wait", namespaces::kStepInitReady, namespaces::kStepRequestReceived);
  }
  child_step("payload_fork", namespaces::kStepRequestReceived, namespaces::kStepPayloadForked);
  child_step("payload_setup", namespaces::kStepPayloadForked, namespaces::kStepExecReady);
  if (have_exec) result.steps.emplace_back("run", end - exec_time);
  if (last.flags & namespaces::kFlagProcFallback) {
    NoteProcfsFallback();
    result.warnings.push_back(
        "a new procfs was refused; /proc is a read-only bind of the host's, masked (host "
        "processes are visible)");
  }
  // A breaker is the reason when it killed the sandbox, or when the payload
  // died of the breaker's own warning signal.
  std::optional<ExitReason> breaker_reason;
  if (breakers.has_value() && breakers->tripped().has_value()) {
    bool died_of_warning = have_exit && WIFSIGNALED(last.wait_status) &&
                           WTERMSIG(last.wait_status) == breakers->warning_signal();
    if (breaker_killed || died_of_warning) {
      switch (*breakers->tripped()) {
        case Breaker::kCpu: breaker_reason = ExitReason::kBreakerCpu; break;
        case Breaker::kMemory: breaker_reason = ExitReason::kBreakerMemory; break;
        case Breaker::kIo: breaker_reason = ExitReason::kBreakerIo; break;
      }
    }
  }
  if (setup_error.ok() && !sent.ok()) setup_error = sent;
  if (!setup_error.ok()) {
    result.reason = ExitReason::kSetupFailed;
    result.setup_error = setup_error;
  } else if (cancelled) {
    result.reason = ExitReason::kKilled;
    if (have_exit && WIFEXITED(last.wait_status)) result.exit_code = WEXITSTATUS(last.wait_status);
    result.signal = have_exit && WIFSIGNALED(last.wait_status) ? WTERMSIG(last.wait_status) : SIGKILL;
  } else if (breaker_reason.has_value()) {
    result.reason = *breaker_reason;
    if (have_exit && WIFEXITED(last.wait_status)) result.exit_code = WEXITSTATUS(last.wait_status);
    result.signal = have_exit && WIFSIGNALED(last.wait_status) ? WTERMSIG(last.wait_status) : SIGKILL;
  } else if (timed_out) {
    result.reason = ExitReason::kTimeout;
    result.signal = SIGKILL;
  } else if (have_exit && WIFEXITED(last.wait_status)) {
    result.reason = ExitReason::kExited;
    result.exit_code = WEXITSTATUS(last.wait_status);
  } else if (have_exit && WIFSIGNALED(last.wait_status)) {
    // A SIGKILL while the cgroup counted an OOM kill is the OOM killer's.
    result.signal = WTERMSIG(last.wait_status);
    result.reason = result.signal == SIGKILL && result.cgroup.has_value() && result.cgroup->oom_killed()
                        ? ExitReason::kOom
                        : ExitReason::kSignaled;
  } else {
    result.reason = ExitReason::kSetupFailed;
    result.setup_error = absl::InternalError(absl::StrCat(
        "sandbox init ended without a report (",
        WIFSIGNALED(init_status) ? absl::StrCat("signal ", WTERMSIG(init_status))
                                 : absl::StrCat("exit ", WEXITSTATUS(init_status)),
        ")"));
  }
  if (have_exit) result.rusage = last.rusage;
  return result;
}

// The cold path: Create() and Run() back to back; the request goes out
// without waiting for "ready" (the sandbox reads it when it gets there).
absl::StatusOr<ExecResult> Launch(const SandboxSpec& spec, const LaunchOptions& options) {
  CUBICLE_RETURN_IF_ERROR(ValidateSpec(spec));
  ZygoteOptions zopts;
  zopts.allow_proc_fallback = options.allow_proc_fallback;
  zopts.features = options.features;
  zopts.wait_until_ready = false;
  zopts.cold = true;
  absl::StatusOr<std::unique_ptr<Zygote>> zygote = Zygote::Create(spec, zopts);
  if (!zygote.ok()) {
    if (absl::IsInvalidArgument(zygote.status())) return zygote.status();
    return SetupFailure(zygote.status());
  }
  ExecRequest request;
  request.argv = spec.argv;
  request.env = spec.env;
  request.cwd = spec.cwd;
  request.timeout = spec.timeout;
  request.stdin_fd = options.stdin_fd;
  request.stdout_fd = options.stdout_fd;
  request.stderr_fd = options.stderr_fd;
  request.signal_fd = options.signal_fd;
  request.read_stats = options.read_stats;
  request.return_at_exit = options.remains != nullptr;
  absl::StatusOr<ExecResult> result = (*zygote)->Run(request);
  if (options.remains != nullptr && result.ok()) {
    // Left standing only when Run() returned at the exit report; otherwise
    // (a timeout, a payload that was PID 1) it is all gone already.
    absl::StatusOr<SandboxRemains> remains = (*zygote)->TakeRemains();
    if (remains.ok()) options.remains->emplace(*std::move(remains));
  }
  return result;
}

}  // namespace cubicle::runtime

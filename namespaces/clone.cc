#include "namespaces/clone.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/fd_passing.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "namespaces/control.h"

namespace cubicle::namespaces {

uint64_t NamespaceSet::CloneFlags() const {
  uint64_t flags = 0;
  if (user) flags |= CLONE_NEWUSER;
  if (mount) flags |= CLONE_NEWNS;
  if (pid) flags |= CLONE_NEWPID;
  if (net) flags |= CLONE_NEWNET;
  if (uts) flags |= CLONE_NEWUTS;
  if (ipc) flags |= CLONE_NEWIPC;
  if (cgroup) flags |= CLONE_NEWCGROUP;
  return flags;
}

CloneResult CloneInto(uint64_t flags, int cgroup_fd, bool try_clone3) {
  CloneResult result;
  if (try_clone3) {
    int pidfd = -1;
    struct clone_args args;
    std::memset(&args, 0, sizeof(args));
    args.flags = flags | CLONE_PIDFD;
    args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
    // With CLONE_PARENT the child's exit signal is the caller's own, and
    // clone3 refuses any other.
    args.exit_signal = (flags & CLONE_PARENT) ? 0 : SIGCHLD;
    if (cgroup_fd >= 0) {
      args.flags |= CLONE_INTO_CGROUP;
      args.cgroup = static_cast<uint64_t>(cgroup_fd);
    }
    long pid = ::syscall(SYS_clone3, &args, sizeof(args));
    if (pid >= 0) {
      result.pid = static_cast<pid_t>(pid);
      result.pidfd = pid == 0 ? -1 : pidfd;
      result.used_clone3 = true;
      return result;
    }
    if (errno != ENOSYS) {
      result.pid = -errno;
      return result;
    }
  }
  // Legacy clone: fork semantics with a NULL stack. The argument order of
  // the raw syscall differs by architecture; with no tid/tls arguments
  // only the first two matter.
  long pid = ::syscall(SYS_clone, static_cast<unsigned long>(flags) | SIGCHLD, nullptr, nullptr,
                       nullptr, nullptr);
  result.pid = pid >= 0 ? static_cast<pid_t>(pid) : -errno;
  if (result.pid > 0) {
    long fd = ::syscall(SYS_pidfd_open, result.pid, 0);
    result.pidfd = fd >= 0 ? static_cast<int>(fd) : -1;
  }
  return result;
}

namespace {

// The pid a pidfd refers to, in the reader's pid namespace ("Pid:" of its
// fdinfo); -1 if the kernel does not say.
pid_t PidOfPidfd(int pidfd) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[1024];
  ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  const char* line = std::strstr(text, "\nPid:");
  if (line == nullptr) return -1;
  long pid = std::strtol(line + 5, nullptr, 10);
  return pid > 0 ? static_cast<pid_t>(pid) : -1;
}

constexpr int kPidfdIdType = 3;  // P_PIDFD (Linux 5.4), absent from older headers

struct IntermediateReport {
  int err;  // errno of the failed clone, or 0
  int used_clone3;
};

}  // namespace

namespace {

// In an intermediate: clones the sandbox with CLONE_PARENT, so that it is
// the caller's child, and reports its pidfd on `report_fd` (with, from a
// second intermediate, this process's own pidfd: it too is the caller's
// child, for the caller to reap). Returns in the sandbox only.
CloneResult CloneAndReport(uint64_t flags, int cgroup_fd, bool try_clone3, int report_fd, bool report_self) {
  CloneResult inner = CloneInto(flags | CLONE_PARENT, cgroup_fd, try_clone3);
  if (inner.pid == 0) {  // the sandbox's first process: the caller goes on as it
    ::close(report_fd);
    return inner;
  }
  IntermediateReport report = {inner.pid < 0 ? -inner.pid : 0, inner.used_clone3 ? 1 : 0};
  if (inner.pid > 0 && inner.pidfd < 0) report.err = ENOSYS;  // no pidfd: no way to name it to the caller
  // The sandbox's pidfd first, where there is one; this process's last.
  int fds[2];
  size_t nfds = 0;
  if (report.err == 0) fds[nfds++] = inner.pidfd;
  const long self = report_self ? ::syscall(SYS_pidfd_open, ::syscall(SYS_getpid), 0) : -1;
  if (self >= 0) fds[nfds++] = static_cast<int>(self);
  SendWithFds(report_fd, &report, sizeof(report), fds, nfds, MSG_NOSIGNAL);
  if (report.err != 0 && inner.pid > 0) ::kill(inner.pid, SIGKILL);
  ::_exit(0);
}

// Reaps a child the caller holds a pidfd of.
void ReapPidfd(int pidfd) {
  siginfo_t info;
  while (::waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(pidfd), &info, WEXITED) < 0 &&
         errno == EINTR) {
  }
  ::close(pidfd);
}

}  // namespace

CloneResult CloneViaIntermediate(uint64_t flags, int cgroup_fd, bool try_clone3, int join_userns_fd,
                                 int join_pidns_fd) {
  CloneResult result;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    result.pid = -errno;
    return result;
  }
  const bool second_hop = join_pidns_fd >= 0;
  // A raw fork: the intermediates make only raw syscalls until _exit.
  long mid = ::syscall(SYS_clone, static_cast<unsigned long>(SIGCHLD), nullptr, nullptr, nullptr, nullptr);
  if (mid == 0) {
    ::close(sv[0]);
    // The user namespace first: in it, this process may join the pid
    // namespace that namespace owns.
    int joined = join_userns_fd >= 0 && ::setns(join_userns_fd, CLONE_NEWUSER) != 0 ? errno : 0;
    if (joined == 0 && second_hop && ::setns(join_pidns_fd, CLONE_NEWPID) != 0) joined = errno;
    if (joined != 0) {
      IntermediateReport failed = {joined, 0};
      SendWithFds(sv[1], &failed, sizeof(failed), nullptr, 0, MSG_NOSIGNAL);
      ::_exit(0);
    }
    if (!second_hop) return CloneAndReport(flags, cgroup_fd, try_clone3, sv[1], false);
    // A new pid namespace nests only under its creator's active one: a
    // second intermediate, born in the joined one, clones the sandbox.
    // CLONE_PARENT both times: the sandbox, and the second intermediate,
    // are the caller's children.
    long second = ::syscall(SYS_clone, static_cast<unsigned long>(CLONE_PARENT), nullptr, nullptr, nullptr, nullptr);
    if (second == 0) return CloneAndReport(flags, cgroup_fd, try_clone3, sv[1], true);
    if (second < 0) {
      IntermediateReport failed = {errno, 0};
      SendWithFds(sv[1], &failed, sizeof(failed), nullptr, 0, MSG_NOSIGNAL);
    }
    ::_exit(0);
  }
  const int spawn_errno = errno;
  ::close(sv[1]);
  if (mid < 0) {
    ::close(sv[0]);
    result.pid = -spawn_errno;
    return result;
  }
  IntermediateReport report = {EPIPE, 0};
  int fds[2] = {-1, -1};
  size_t nfds = 0;
  int msg_flags = 0;
  ssize_t got = ReceiveWithFds(sv[0], &report, sizeof(report), fds, 2, &nfds, 0, &msg_flags);
  const int receive_errno = errno;
  ::close(sv[0]);
  int status = 0;
  while (::waitpid(static_cast<pid_t>(mid), &status, 0) < 0 && errno == EINTR) {
  }
  // The second intermediate's own pidfd comes last: reap it.
  const size_t sandbox_fds = got == static_cast<ssize_t>(sizeof(report)) && report.err == 0 ? 1 : 0;
  if (second_hop && nfds > sandbox_fds) ReapPidfd(fds[nfds - 1]);
  const int pidfd = sandbox_fds == 1 && nfds >= 1 ? fds[0] : -1;
  if (got != static_cast<ssize_t>(sizeof(report)) || (report.err == 0 && pidfd < 0)) {
    if (pidfd >= 0) ::close(pidfd);
    result.pid = got < 0 ? -receive_errno : -EPIPE;
    return result;
  }
  result.used_clone3 = report.used_clone3 != 0;
  if (report.err != 0) {
    result.pid = -report.err;
    return result;
  }
  result.pid = PidOfPidfd(pidfd);
  result.pidfd = pidfd;
  if (result.pid < 0) {
    ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    ReapPidfd(pidfd);
    result.pidfd = -1;
    result.pid = -ENOSYS;
  }
  return result;
}

int SignalProcess(int pidfd, pid_t pid, int sig) {
  if (pidfd >= 0) {
    if (::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0) return 0;
    if (errno != ENOSYS) return -errno;
  }
  return ::kill(pid, sig) == 0 ? 0 : -errno;
}

bool SpinUntilExited(int pidfd, int64_t bound_ns) {
  static const bool several_cpus = ::sysconf(_SC_NPROCESSORS_ONLN) > 1;
  if (pidfd < 0 || !several_cpus) return false;
  const int64_t until = MonotonicNanos() + bound_ns;
  do {
    struct pollfd p = {pidfd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) return true;
  } while (MonotonicNanos() < until);
  return false;
}

bool ThreadGroupsCleared::Possible() {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};  // pid 0: this thread
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0 || (data[0].effective & (1u << CAP_SETGID)) == 0) return false;
  // Without a readable setgroups file (no /proc) setgroups itself decides.
  UniqueFd fd(::open("/proc/thread-self/setgroups", O_RDONLY | O_CLOEXEC));
  char text[8] = {};
  if (!fd || ::read(fd.get(), text, sizeof(text) - 1) <= 0) return true;
  return std::strncmp(text, "deny", 4) != 0;
}

absl::Status ThreadGroupsCleared::Clear() {
  const long n = ::syscall(SYS_getgroups, 0, nullptr);
  if (n < 0) return ErrnoStatus(errno, "getgroups");
  if (n == 0) return absl::OkStatus();
  saved_.resize(static_cast<size_t>(n));
  const long got = ::syscall(SYS_getgroups, n, saved_.data());
  if (got < 0) return ErrnoStatus(errno, "getgroups");
  saved_.resize(static_cast<size_t>(got));
  // Raw: this thread only (see the header).
  if (::syscall(SYS_setgroups, 0, nullptr) != 0) return ErrnoStatus(errno, "setgroups([], before clone)");
  cleared_ = true;
  return absl::OkStatus();
}

absl::Status ThreadGroupsCleared::Restore() {
  if (!cleared_) return absl::OkStatus();
  cleared_ = false;
  if (::syscall(SYS_setgroups, saved_.size(), saved_.data()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("setgroups(", saved_.size(), " groups, after clone)"));
  }
  return absl::OkStatus();
}

}  // namespace cubicle::namespaces

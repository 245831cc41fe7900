#include "namespaces/clone.h"

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
    args.exit_signal = SIGCHLD;
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

int SignalProcess(int pidfd, pid_t pid, int sig) {
  if (pidfd >= 0) {
    if (::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0) return 0;
    if (errno != ENOSYS) return -errno;
  }
  return ::kill(pid, sig) == 0 ? 0 : -errno;
}

}  // namespace cubicle::namespaces

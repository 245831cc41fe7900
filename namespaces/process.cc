#include "namespaces/process.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace cubicle::namespaces {

bool WaitForLauncher(int control_fd, ChildError* error) {
  char go;
  for (;;) {
    ssize_t n = ::recv(control_fd, &go, 1, 0);
    if (n == 1) return true;
    if (n == 0) return child::Fail(error, "wait for launcher", "launcher exited", EPIPE);
    if (errno != EINTR) return child::Fail(error, "wait for launcher", "recv", errno);
  }
}

bool BecomeSandboxIds(uid_t uid, gid_t gid, ChildError* error) {
  // Raw syscalls: glibc's setresuid would try to broadcast to other threads
  // using state the raw clone did not set up.
  if (::syscall(SYS_setresgid, gid, gid, gid) != 0) return child::Fail(error, "setresgid", "", errno);
  if (::syscall(SYS_setresuid, uid, uid, uid) != 0) return child::Fail(error, "setresuid", "", errno);
  return true;
}

bool SwitchJoinedIds(bool set_uid, uid_t uid, bool set_gid, gid_t gid, ChildError* error) {
  char id[32];
  if (set_uid && ::syscall(SYS_setresuid, uid, uid, uid) != 0) {
    return child::Fail(error, "switch to uid", child::FormatWithNumber(id, sizeof(id), "", uid), errno);
  }
  if (set_gid && ::syscall(SYS_setresgid, gid, gid, gid) != 0) {
    return child::Fail(error, "switch to gid", child::FormatWithNumber(id, sizeof(id), "", gid), errno);
  }
  return true;
}

bool DieWithParent(ChildError* error) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    return child::Fail(error, "prctl(PR_SET_PDEATHSIG)", "", errno);
  }
  return true;
}

bool LauncherStillThere(int control_fd, ChildError* error) {
  struct pollfd p = {control_fd, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) {
    return child::Fail(error, "wait for launcher", "launcher exited", EPIPE);
  }
  return true;
}

bool SetHostname(const char* hostname, ChildError* error) {
  if (::sethostname(hostname, std::strlen(hostname)) != 0) {
    return child::Fail(error, "sethostname", hostname, errno);
  }
  return true;
}

bool BringUpLoopback(ChildError* error) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return child::Fail(error, "socket(AF_INET)", "lo", errno);
  struct ifreq req;
  std::memset(&req, 0, sizeof(req));
  child::CopyString(req.ifr_name, sizeof(req.ifr_name), "lo");
  bool ok = true;
  if (::ioctl(fd, SIOCGIFFLAGS, &req) != 0) {
    ok = child::Fail(error, "ioctl(SIOCGIFFLAGS)", "lo", errno);
  } else {
    req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &req) != 0) ok = child::Fail(error, "ioctl(SIOCSIFFLAGS)", "lo", errno);
  }
  ::close(fd);
  return ok;
}

bool ApplyRlimits(const Rlimit* limits, size_t count, ChildError* error) {
  for (size_t i = 0; i < count; ++i) {
    struct rlimit rl = {limits[i].soft, limits[i].hard};
    if (::setrlimit(static_cast<__rlimit_resource>(limits[i].resource), &rl) != 0) {
      char detail[32];
      child::FormatWithNumber(detail, sizeof(detail), "resource ", limits[i].resource);
      return child::Fail(error, "setrlimit", detail, errno);
    }
  }
  return true;
}

bool DropAllCapabilities(ChildError* error) {
  // Lock root's special treatment away first, while CAP_SETPCAP is held.
  unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                       SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) {
    return child::Fail(error, "prctl(PR_SET_SECUREBITS)", "", errno);
  }
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the kernel's last capability
      char detail[32];
      child::FormatWithNumber(detail, sizeof(detail), "cap ", cap);
      return child::Fail(error, "prctl(PR_CAPBSET_DROP)", detail, errno);
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return child::Fail(error, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", "", errno);
  }
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  std::memset(data, 0, sizeof(data));
  if (::syscall(SYS_capset, &header, data) != 0) return child::Fail(error, "capset", "all zero", errno);
  return true;
}

bool SetNoNewPrivs(ChildError* error) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return child::Fail(error, "prctl(PR_SET_NO_NEW_PRIVS)", "", errno);
  }
  return true;
}

bool CloseOtherFds(int keep, ChildError* error) {
  auto close_range = [](unsigned first, unsigned last) -> int {
    if (first > last) return 0;
    return static_cast<int>(::syscall(SYS_close_range, first, last, 0));
  };
  int rc = keep >= 3 ? close_range(3, static_cast<unsigned>(keep) - 1) : 0;
  if (rc == 0) rc = close_range(keep >= 3 ? static_cast<unsigned>(keep) + 1 : 3, ~0U);
  if (rc == 0) return true;
  if (errno != ENOSYS) return child::Fail(error, "close_range", "", errno);
  // Kernels before 5.9: close one by one up to the fd limit.
  long max = ::sysconf(_SC_OPEN_MAX);
  for (long fd = 3; fd < max; ++fd) {
    if (fd != keep) ::close(static_cast<int>(fd));
  }
  return true;
}

bool CloseAllFdsExcept(const int* keep, size_t count, ChildError* error) {
  // Ascending order without allocating: repeatedly pick the next kept fd.
  unsigned first = 0;
  for (;;) {
    long next = -1;
    for (size_t i = 0; i < count; ++i) {
      if (keep[i] >= static_cast<int>(first) && (next < 0 || keep[i] < next)) next = keep[i];
    }
    unsigned last = next < 0 ? ~0U : static_cast<unsigned>(next) - 1;
    if (next < 0 || static_cast<unsigned>(next) > first) {
      if (::syscall(SYS_close_range, first, last, 0) != 0) {
        if (errno != ENOSYS) return child::Fail(error, "close_range", "", errno);
        long max = ::sysconf(_SC_OPEN_MAX);
        for (long fd = first; fd < max && (next < 0 || fd < next); ++fd) ::close(static_cast<int>(fd));
      }
    }
    if (next < 0) return true;
    first = static_cast<unsigned>(next) + 1;
  }
}

void ResetSignals() {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::sigaction(sig, &dfl, nullptr);  // fails harmlessly for the libc-reserved ones
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

namespace {

// One try of ExecSearchingPath. The token rides in execveat's sixth
// argument, which the kernel ignores for execveat; after the exec the
// new image's registers and memory are fresh, so the program never holds it.
void ExecOne(const char* path, char* const argv[], char* const envp[], uint64_t exec_token) {
  if (exec_token == 0) {
    ::execve(path, argv, envp);
  } else {
    ::syscall(SYS_execveat, AT_FDCWD, path, argv, envp, 0, exec_token);
  }
}

}  // namespace

void ExecSearchingPath(const char* file, char* const argv[], char* const envp[], const char* path,
                       uint64_t exec_token) {
  if (std::strchr(file, '/') != nullptr || path == nullptr || path[0] == '\0') {
    ExecOne(file, argv, envp, exec_token);
    return;
  }
  char candidate[PATH_MAX];
  size_t file_len = std::strlen(file);
  int first_error = ENOENT;
  const char* p = path;
  for (;;) {
    const char* end = std::strchr(p, ':');
    size_t dir_len = end != nullptr ? static_cast<size_t>(end - p) : std::strlen(p);
    if (dir_len + 1 + file_len + 1 <= sizeof(candidate)) {
      size_t n = 0;
      if (dir_len == 0) {
        candidate[n++] = '.';
      } else {
        std::memcpy(candidate, p, dir_len);
        n = dir_len;
      }
      candidate[n++] = '/';
      std::memcpy(candidate + n, file, file_len + 1);
      ExecOne(candidate, argv, envp, exec_token);
      // Like execvp: remember a permission problem, keep looking past ENOENT.
      if (errno == EACCES) first_error = EACCES;
      else if (errno != ENOENT && errno != ENOTDIR) return;
    }
    if (end == nullptr) break;
    p = end + 1;
  }
  errno = first_error;
}

}  // namespace cubicle::namespaces

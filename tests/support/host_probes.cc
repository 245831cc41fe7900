#include "tests/support/host_probes.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace cubicle::test_support {
namespace {

std::string ErrnoName(int err) {
  const char* name = strerrorname_np(err);
  return name != nullptr ? name : absl::StrCat("errno ", err);
}

// How a probe child ended, in words: "returned ENOSYS", "died of SIGSEGV".
std::string Ending(int wait_status) {
  if (WIFEXITED(wait_status)) {
    const int code = WEXITSTATUS(wait_status);
    if (code == kProbeReturnedPid) return "returned the pid";
    if (code == kProbeReturnedOther) return "returned something other than the pid";
    return absl::StrCat("returned ", ErrnoName(code));
  }
  if (WIFSIGNALED(wait_status)) {
    const char* name = sigabbrev_np(WTERMSIG(wait_status));
    return absl::StrCat("died of SIG", name != nullptr ? name : absl::StrCat(WTERMSIG(wait_status)));
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

bool DiedOf(int wait_status, int sig) { return WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == sig; }

// The exit code of a probe child whose syscall returned `rc`.
int ProbeExitCode(long rc) {
  if (rc == ::getpid()) return kProbeReturnedPid;
  if (rc < 0 && rc > -kProbeReturnedOther) return static_cast<int>(-rc);
  return kProbeReturnedOther;
}

// Runs `probe` in a forked child (no filter, no core file) and returns its
// wait status, or -1 when it could not be forked.
template <typename Probe>
int RunUnfiltered(Probe probe) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(5);
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::_exit(ProbeExitCode(probe()));
  }
  if (pid < 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

HostProperty I386SyscallsFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kProbeReturnedPid) return HostProperty::Present();
  std::string why = absl::StrCat(
      "this host does not execute i386 syscalls via int 0x80: unfiltered getpid ", Ending(wait_status));
  if (DiedOf(wait_status, SIGSYS)) absl::StrAppend(&why, " (a seccomp filter of the host's own refuses them)");
  return HostProperty::Absent(std::move(why));
}

HostProperty X32SyscallsFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return HostProperty::Present();
  return HostProperty::Absent(absl::StrCat(
      "this host kills x32 syscalls by itself: unfiltered x32 getpid ", Ending(wait_status),
      ", so a SIGSYS under cubicle's filter would not show the filter refused it"));
}

const HostProperty& I386Syscalls() {
  static const HostProperty property = [] {
#if defined(__x86_64__)
    int status = RunUnfiltered([] {
      long rc;
      // 20 is getpid in the i386 table; int 0x80 clobbers r8-r11 on x86_64.
      asm volatile("int $0x80" : "=a"(rc) : "a"(20L) : "r8", "r9", "r10", "r11", "memory");
      return rc;
    });
    if (status == -1) return HostProperty::Absent(absl::StrCat("fork: ", ErrnoName(errno)));
    return I386SyscallsFromWaitStatus(status);
#else
    return HostProperty::Absent("int 0x80 is an x86_64 probe");
#endif
  }();
  return property;
}

const HostProperty& UnfilteredX32Syscalls() {
  static const HostProperty property = [] {
#if defined(__x86_64__)
    int status = RunUnfiltered([] {
      long rc = ::syscall(__X32_SYSCALL_BIT | __NR_getpid);
      return rc == -1 ? -static_cast<long>(errno) : rc;
    });
    if (status == -1) return HostProperty::Absent(absl::StrCat("fork: ", ErrnoName(errno)));
    return X32SyscallsFromWaitStatus(status);
#else
    return HostProperty::Absent("x32 is an x86_64 ABI");
#endif
  }();
  return property;
}

}  // namespace cubicle::test_support

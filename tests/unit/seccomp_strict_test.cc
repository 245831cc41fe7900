// Policy::kStrict: it compiles for x86_64 and aarch64 whichever the host,
// and on this host refuses what docs/security.md says it refuses, with
// EPERM, while what a Python program needs still works. Each behavioural
// test forks a child that loads the program and exits with the errno its
// one syscall got (0 for success).
#include <linux/audit.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

#include "gtest/gtest.h"
#include "seccomp/policy.h"

namespace cubicle::seccomp {
namespace {

constexpr int kExitSetupFailed = 250;

int ErrnoOf(long rc) { return rc == -1 ? errno : 0; }

// The exit status of a child that loaded the strict program and ran `probe`:
// the errno, 0 for success, or 256 + the signal that killed it.
template <typename Probe>
int UnderStrict(Probe probe) {
  absl::StatusOr<const BpfProgram*> program = Compiled(Policy::kStrict);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return -1;
  const sock_fprog fprog = (*program)->AsFprog();
  pid_t pid = fork();
  if (pid == 0) {
    alarm(5);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || Load(fprog) != 0) _exit(kExitSetupFailed);
    _exit(probe());
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 256 + WTERMSIG(status);
}

TEST(StrictPolicyTest, NameParses) {
  absl::StatusOr<Policy> parsed = ParsePolicy("strict");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, Policy::kStrict);
  EXPECT_EQ(PolicyName(Policy::kStrict), "strict");
}

// Every name resolves or is skipped on each architecture, and the filter
// libseccomp builds for it exports: the allowlist holds on both.
TEST(StrictPolicyTest, CompilesForX8664AndAarch64) {
  for (uint32_t arch : {uint32_t{AUDIT_ARCH_X86_64}, uint32_t{AUDIT_ARCH_AARCH64}}) {
    for (Policy policy : {Policy::kDefault, Policy::kNoNetwork, Policy::kStrict}) {
      absl::StatusOr<BpfProgram> program = CompileForArch(policy, arch);
      ASSERT_TRUE(program.ok()) << PolicyName(policy) << " for arch " << std::hex << arch << ": "
                                << program.status();
      EXPECT_GT(program->instructions.size(), 10u);
    }
  }
}

TEST(StrictPolicyTest, AllowlistNamesAreUnique) {
  std::vector<std::string_view> names = StrictAllowlist();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_EQ(std::count(names.begin(), names.end(), "socket"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "ptrace"), 0);
}

TEST(StrictPolicyTest, RefusesSocketsOfEveryFamily) {
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(socket(AF_INET, SOCK_STREAM, 0)); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(socket(AF_UNIX, SOCK_STREAM, 0)); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(socket(AF_NETLINK, SOCK_RAW, 0)); }), EPERM);
  EXPECT_EQ(UnderStrict([] {
              int pair[2];
              return ErrnoOf(socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
            }),
            EPERM);
}

TEST(StrictPolicyTest, RefusesNewProcessesButNotThreads) {
  EXPECT_EQ(UnderStrict([] {
              long pid = syscall(SYS_clone, SIGCHLD, 0, nullptr, nullptr, 0);
              if (pid == 0) _exit(0);
              return ErrnoOf(pid);
            }),
            EPERM);
  EXPECT_EQ(UnderStrict([] {
              pid_t pid = fork();  // glibc: clone without CLONE_THREAD
              if (pid == 0) _exit(0);
              return ErrnoOf(pid);
            }),
            EPERM);
#ifdef SYS_vfork
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(syscall(SYS_vfork)); }), EPERM);
#endif
  EXPECT_EQ(UnderStrict([] {
              int ran = 0;
              std::thread t([&ran] { ran = 1; });
              t.join();
              return ran == 1 ? 0 : 99;
            }),
            0);
}

TEST(StrictPolicyTest, RefusesReachingOutWithEperm) {
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(ptrace(PTRACE_TRACEME, 0, nullptr, nullptr)); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(kill(getppid(), 0)); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(mount("none", "/tmp", "tmpfs", 0, nullptr)); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(unshare(CLONE_NEWUSER)); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(personality(ADDR_NO_RANDOMIZE)); }), EPERM);
  EXPECT_EQ(UnderStrict([] {
              char c = 'x';
              return ErrnoOf(ioctl(0, TIOCSTI, &c));
            }),
            EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)); }), EPERM);
  EXPECT_EQ(UnderStrict([] {
              rlimit more{RLIM_INFINITY, RLIM_INFINITY};
              return ErrnoOf(setrlimit(RLIMIT_NOFILE, &more));
            }),
            EPERM);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(syscall(SYS_clone3, nullptr, 0)); }), ENOSYS);
}

// What the interpreter needs: files (seccomp reads no paths), its own
// limits, the time, randomness.
TEST(StrictPolicyTest, AllowsWhatPythonNeeds) {
  EXPECT_EQ(UnderStrict([] {
              int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
              if (fd < 0) return errno;
              char buf[64];
              return ErrnoOf(read(fd, buf, sizeof(buf)) < 0 ? -1 : close(fd));
            }),
            0);
  EXPECT_EQ(UnderStrict([] {
              rlimit now{};
              return ErrnoOf(getrlimit(RLIMIT_NOFILE, &now));
            }),
            0);
  EXPECT_EQ(UnderStrict([] {
              char buf[16];
              return ErrnoOf(getrandom(buf, sizeof(buf), 0) < 0 ? -1 : 0);
            }),
            0);
  EXPECT_EQ(UnderStrict([] { return ErrnoOf(ioctl(0, FIOCLEX)); }), 0);
}

}  // namespace
}  // namespace cubicle::seccomp

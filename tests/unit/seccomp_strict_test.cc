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

// The exec token the behavioural tests patch in.
constexpr uint64_t kTestToken = 0x0123456789ABCDEF;

// The exit status of a child that loaded `policy`'s program (kStrict's
// with kTestToken) and ran `probe`: the errno, 0 for success, or 256 +
// the signal that killed it.
template <typename Probe>
int UnderPolicy(Policy policy, Probe probe) {
  absl::StatusOr<const BpfProgram*> compiled = Compiled(policy);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return -1;
  absl::StatusOr<BpfProgram> program = **compiled;
  if (policy == Policy::kStrict) program = WithExecToken(**compiled, kTestToken);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return -1;
  const sock_fprog fprog = program->AsFprog();
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

template <typename Probe>
int UnderStrict(Probe probe) {
  return UnderPolicy(Policy::kStrict, probe);
}

// How many "jump if A equals k" instructions of `program` test `k`.
size_t ComparisonsWith(const BpfProgram& program, uint32_t k) {
  return static_cast<size_t>(std::count_if(program.instructions.begin(), program.instructions.end(),
                                           [k](const sock_filter& f) {
                                             return f.code == (BPF_JMP | BPF_JEQ | BPF_K) && f.k == k;
                                           }));
}

// execveat(AT_FDCWD, "/bin/true", ...) with `token` as its sixth argument:
// /bin/true's exit status (0) once exec'd, else the errno.
int ExecveatTrue(uint64_t token) {
  char* const argv[] = {const_cast<char*>("true"), nullptr};
  char* const envp[] = {nullptr};
  return ErrnoOf(syscall(SYS_execveat, AT_FDCWD, "/bin/true", argv, envp, 0, token));
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
    for (Policy policy : {Policy::kDefault, Policy::kNoNetwork, Policy::kStrict, Policy::kStrictNoExec}) {
      absl::StatusOr<BpfProgram> program = CompileForArch(policy, arch);
      ASSERT_TRUE(program.ok()) << PolicyName(policy) << " for arch " << std::hex << arch << ": "
                                << program.status();
      EXPECT_GT(program->instructions.size(), 10u);
    }
  }
}

// The placeholder is compared once per half on each architecture, so the
// patch finds exactly what it expects; the copy compares the token
// instead, and nothing else in it changes.
TEST(ExecTokenTest, PatchFindsOneComparisonPerHalfOnX8664AndAarch64) {
  for (uint32_t arch : {uint32_t{AUDIT_ARCH_X86_64}, uint32_t{AUDIT_ARCH_AARCH64}}) {
    absl::StatusOr<BpfProgram> program = CompileForArch(Policy::kStrict, arch);
    ASSERT_TRUE(program.ok()) << std::hex << arch << ": " << program.status();
    EXPECT_EQ(ComparisonsWith(*program, kExecTokenPlaceholderHigh), 1u) << std::hex << arch;
    EXPECT_EQ(ComparisonsWith(*program, kExecTokenPlaceholderLow), 1u) << std::hex << arch;
    absl::StatusOr<BpfProgram> patched = WithExecToken(*program, kTestToken);
    ASSERT_TRUE(patched.ok()) << std::hex << arch << ": " << patched.status();
    EXPECT_EQ(ComparisonsWith(*patched, kExecTokenPlaceholderHigh), 0u);
    EXPECT_EQ(ComparisonsWith(*patched, kExecTokenPlaceholderLow), 0u);
    EXPECT_EQ(ComparisonsWith(*patched, static_cast<uint32_t>(kTestToken >> 32)), 1u);
    EXPECT_EQ(ComparisonsWith(*patched, static_cast<uint32_t>(kTestToken)), 1u);
    ASSERT_EQ(patched->instructions.size(), program->instructions.size());
    size_t changed = 0;
    for (size_t i = 0; i < program->instructions.size(); ++i) {
      const sock_filter& a = program->instructions[i];
      const sock_filter& b = patched->instructions[i];
      EXPECT_TRUE(a.code == b.code && a.jt == b.jt && a.jf == b.jf) << "instruction " << i;
      if (a.k != b.k) ++changed;
    }
    EXPECT_EQ(changed, 2u);
  }
  // The embedded program, which sandboxes load, too.
  absl::StatusOr<const BpfProgram*> native = Compiled(Policy::kStrict);
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_TRUE(WithExecToken(**native, kTestToken).ok());
}

// A program without the rule (another policy's, the no-exec variant's) is
// refused, as is a zero token, which a plain execveat passes.
TEST(ExecTokenTest, PatchRefusesAProgramWithoutThePlaceholderAndAZeroToken) {
  for (Policy policy : {Policy::kDefault, Policy::kNoNetwork, Policy::kStrictNoExec}) {
    absl::StatusOr<const BpfProgram*> program = Compiled(policy);
    ASSERT_TRUE(program.ok()) << program.status();
    absl::StatusOr<BpfProgram> patched = WithExecToken(**program, kTestToken);
    EXPECT_EQ(patched.status().code(), absl::StatusCode::kFailedPrecondition) << PolicyName(policy);
  }
  absl::StatusOr<const BpfProgram*> strict = Compiled(Policy::kStrict);
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_EQ(WithExecToken(**strict, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NoExecVariant(Policy::kStrict), Policy::kStrictNoExec);
  EXPECT_EQ(NoExecVariant(Policy::kDefault), Policy::kDefault);
  EXPECT_FALSE(ParsePolicy("strict-no-exec").ok());
}

TEST(ExecTokenTest, TokensAreFreshAndNeverZero) {
  absl::StatusOr<uint64_t> a = NewExecToken();
  absl::StatusOr<uint64_t> b = NewExecToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, 0u);
  EXPECT_NE(*a, *b);
}

// execve always fails; execveat only with the token the program was
// patched with; the no-exec variant refuses both whatever is passed.
TEST(ExecTokenTest, OnlyExecveatWithTheTokenExecs) {
  EXPECT_EQ(UnderStrict([] {
              char* const argv[] = {const_cast<char*>("true"), nullptr};
              char* const envp[] = {nullptr};
              return ErrnoOf(syscall(SYS_execve, "/bin/true", argv, envp));
            }),
            EPERM);
  EXPECT_EQ(UnderStrict([] { return ExecveatTrue(0); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ExecveatTrue(kExecTokenPlaceholder); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ExecveatTrue(kTestToken ^ 1); }), EPERM);
  EXPECT_EQ(UnderStrict([] { return ExecveatTrue(kTestToken ^ (uint64_t{1} << 32)); }), EPERM);
  // /bin/true runs, under the same filter, and exits 0 (EPERM is 1).
  EXPECT_EQ(UnderStrict([] { return ExecveatTrue(kTestToken); }), 0);
  EXPECT_EQ(UnderPolicy(Policy::kStrictNoExec, [] { return ExecveatTrue(kTestToken); }), EPERM);
  EXPECT_EQ(UnderPolicy(Policy::kStrictNoExec, [] { return ExecveatTrue(kExecTokenPlaceholder); }), EPERM);
  EXPECT_EQ(UnderPolicy(Policy::kStrictNoExec, [] {
              char* const argv[] = {const_cast<char*>("true"), nullptr};
              char* const envp[] = {nullptr};
              return ErrnoOf(syscall(SYS_execve, "/bin/true", argv, envp));
            }),
            EPERM);
}

TEST(StrictPolicyTest, AllowlistNamesAreUnique) {
  std::vector<std::string_view> names = StrictAllowlist();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_EQ(std::count(names.begin(), names.end(), "socket"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "ptrace"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "execve"), 0);
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

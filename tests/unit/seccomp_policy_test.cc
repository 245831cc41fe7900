// Each behavioural test forks a child that sets no_new_privs, loads a compiled
// program and makes one syscall; the child's exit code is the errno it got
// (0 for success), so the parent can assert on what the filter did.
#include "seccomp/policy.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/fd_passing.h"
#include "gtest/gtest.h"
#include "tests/support/host_probes.h"

namespace cubicle::seccomp {
namespace {

// A child stuck in a syscall the filter failed to refuse dies of SIGALRM, so
// every waitpid below returns.
constexpr unsigned int kChildDeadlineSeconds = 5;
// Exit codes above every errno, for a child that never reached its probe.
constexpr int kExitNoNewPrivsFailed = 250;
constexpr int kExitLoadFailed = 251;

// 0 when a raw syscall succeeded, else its errno: what a child exits with.
int ErrnoOf(long rc) { return rc == -1 ? errno : 0; }

const BpfProgram& ProgramFor(Policy policy) {
  absl::StatusOr<const BpfProgram*> program = Compiled(policy);
  EXPECT_TRUE(program.ok()) << program.status();
  static const BpfProgram kEmpty;
  return program.ok() ? **program : kEmpty;
}

// Runs `probe` in a child confined by `policy`; returns the child's wait status.
// Compiling happens here in the parent, so the child only calls Load().
template <typename Probe>
int RunConfined(Policy policy, Probe probe) {
  const sock_fprog fprog = ProgramFor(policy).AsFprog();
  pid_t pid = fork();
  if (pid == 0) {
    alarm(kChildDeadlineSeconds);
    // A filter's KILL_PROCESS would otherwise leave a core file behind.
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(kExitNoNewPrivsFailed);
    if (Load(fprog) != 0) _exit(kExitLoadFailed);
    _exit(probe());
  }
  EXPECT_GT(pid, 0) << "fork: " << std::strerror(errno);
  if (pid < 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::string Describe(int status) {
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code == 0) return "succeeded";
    if (code == kExitNoNewPrivsFailed) return "could not set no_new_privs";
    if (code == kExitLoadFailed) return "could not load the filter";
    const char* name = strerrorname_np(code);
    return name != nullptr ? absl::StrCat("failed with ", name)
                           : absl::StrCat("failed with errno ", code);
  }
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return absl::StrCat("was killed by SIG", name != nullptr ? name : "?");
  }
  return absl::StrCat("ended with wait status ", status);
}

testing::AssertionResult FailedWith(int status, int err) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == err) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << "the syscall " << Describe(status) << ", expected it to fail with "
         << (strerrorname_np(err) != nullptr ? strerrorname_np(err) : "an unnamed errno");
}

testing::AssertionResult Succeeded(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "the syscall " << Describe(status);
}

// Refused by any means: an errno, or the process killed by SIGSYS.
testing::AssertionResult Refused(int status) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) return testing::AssertionSuccess();
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
      WEXITSTATUS(status) < kExitNoNewPrivsFailed) {
    return testing::AssertionSuccess();
  }
  return testing::AssertionFailure() << "the syscall " << Describe(status);
}

// Raw clone(2) as fork does it; a child that appears despite the filter leaves at once.
int CloneWithFlags(unsigned long flags) {
  long pid = syscall(SYS_clone, flags | SIGCHLD, 0, nullptr, nullptr, 0);
  if (pid == 0) _exit(0);
  if (pid < 0) return errno;
  waitpid(static_cast<pid_t>(pid), nullptr, 0);
  return 0;
}

// --- Names ---------------------------------------------------------------

TEST(PolicyNameTest, ParsesEveryName) {
  for (Policy policy : {Policy::kNone, Policy::kDefault, Policy::kNoNetwork}) {
    absl::StatusOr<Policy> parsed = ParsePolicy(PolicyName(policy));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, policy);
  }
  EXPECT_EQ(PolicyName(Policy::kNone), "none");
  EXPECT_EQ(PolicyName(Policy::kDefault), "default");
  EXPECT_EQ(PolicyName(Policy::kNoNetwork), "no-network");
}

TEST(PolicyNameTest, RejectsUnknownName) {
  absl::StatusOr<Policy> parsed = ParsePolicy("foo");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "unknown seccomp policy 'foo' (expected none, default, no-network or strict)");
  EXPECT_FALSE(ParsePolicy("").ok());
  EXPECT_FALSE(ParsePolicy("Default").ok());
}

// --- Compiling and loading ---------------------------------------------

TEST(CompiledTest, ReturnsTheSameProgramEachTime) {
  for (Policy policy : {Policy::kNone, Policy::kDefault, Policy::kNoNetwork}) {
    absl::StatusOr<const BpfProgram*> first = Compiled(policy);
    absl::StatusOr<const BpfProgram*> second = Compiled(policy);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(*first, *second) << PolicyName(policy);
  }
}

TEST(CompiledTest, IsSafeToCallFromManyThreads) {
  std::vector<const BpfProgram*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] {
      absl::StatusOr<const BpfProgram*> program = Compiled(Policy::kNoNetwork);
      if (program.ok()) seen[i] = *program;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const BpfProgram* program : seen) {
    ASSERT_NE(program, nullptr);
    EXPECT_EQ(program, seen.front());
  }
}

TEST(CompiledTest, ProgramsFitTheKernelLimit) {
  const BpfProgram& base = ProgramFor(Policy::kDefault);
  const BpfProgram& no_network = ProgramFor(Policy::kNoNetwork);
  EXPECT_GT(base.instructions.size(), 0u);
  EXPECT_GT(no_network.instructions.size(), base.instructions.size());
  EXPECT_LE(no_network.instructions.size(), size_t{BPF_MAXINSNS});
  EXPECT_EQ(no_network.AsFprog().len, no_network.instructions.size());
}

TEST(CompiledTest, NoneIsAnEmptyProgramThatLoadsAsNothing) {
  const BpfProgram& none = ProgramFor(Policy::kNone);
  EXPECT_TRUE(none.instructions.empty());
  // Safe in the test process itself: an empty program installs nothing.
  EXPECT_EQ(Load(none.AsFprog()), 0);
  EXPECT_TRUE(Succeeded(RunConfined(
      Policy::kNone, [] { return ErrnoOf(syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0)); })));
}

TEST(LoadTest, ReturnsMinusErrnoForAProgramTheKernelRejects) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(kChildDeadlineSeconds);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    sock_filter bogus[] = {{0xffff, 0, 0, 0}};  // no such opcode
    sock_fprog prog{1, bogus};
    _exit(-Load(prog));
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(FailedWith(status, EINVAL));
}

// --- The baseline refuses -------------------------------------------------

struct Probe {
  const char* name;
  int (*run)();
};

void PrintTo(const Probe& probe, std::ostream* os) { *os << probe.name; }

// Each call's arguments are invalid, so even a filter that let it through could
// change nothing: the kernel would fail it with another errno than EPERM.
const Probe kRefusedProbes[] = {
    {"mount",
     [] {
       return ErrnoOf(syscall(SYS_mount, nullptr, "/nonexistent/cubicle", nullptr, 0, nullptr));
     }},
    {"umount2", [] { return ErrnoOf(syscall(SYS_umount2, "/nonexistent/cubicle", 0)); }},
    {"pivot_root", [] { return ErrnoOf(syscall(SYS_pivot_root, nullptr, nullptr)); }},
    {"chroot", [] { return ErrnoOf(syscall(SYS_chroot, "/nonexistent/cubicle")); }},
    {"open_tree", [] { return ErrnoOf(syscall(SYS_open_tree, -1, nullptr, 0)); }},
    {"move_mount", [] { return ErrnoOf(syscall(SYS_move_mount, -1, nullptr, -1, nullptr, 0)); }},
    {"fsopen", [] { return ErrnoOf(syscall(SYS_fsopen, nullptr, 0)); }},
    {"fsmount", [] { return ErrnoOf(syscall(SYS_fsmount, -1, 0, 0)); }},
    {"fspick", [] { return ErrnoOf(syscall(SYS_fspick, -1, nullptr, 0)); }},
    {"mount_setattr",
     [] { return ErrnoOf(syscall(SYS_mount_setattr, -1, nullptr, 0, nullptr, 0)); }},
    {"ptrace_traceme", [] { return ErrnoOf(syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0)); }},
    {"process_vm_readv",
     [] { return ErrnoOf(syscall(SYS_process_vm_readv, 0, nullptr, 0, nullptr, 0, 0)); }},
    {"bpf", [] { return ErrnoOf(syscall(SYS_bpf, -1, nullptr, 0)); }},
    {"perf_event_open",
     [] { return ErrnoOf(syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0)); }},
    {"keyctl", [] { return ErrnoOf(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0)); }},
    {"add_key", [] { return ErrnoOf(syscall(SYS_add_key, nullptr, nullptr, nullptr, 0, 0)); }},
    {"request_key", [] { return ErrnoOf(syscall(SYS_request_key, nullptr, nullptr, nullptr, 0)); }},
    {"kexec_file_load",
     [] { return ErrnoOf(syscall(SYS_kexec_file_load, -1, -1, 0, nullptr, ~0ul)); }},
    {"finit_module", [] { return ErrnoOf(syscall(SYS_finit_module, -1, "", 0)); }},
    {"delete_module", [] { return ErrnoOf(syscall(SYS_delete_module, nullptr, 0)); }},
    {"reboot", [] { return ErrnoOf(syscall(SYS_reboot, 0, 0, 0, nullptr)); }},  // bad magic
    {"swapon", [] { return ErrnoOf(syscall(SYS_swapon, nullptr, 0)); }},
    {"swapoff", [] { return ErrnoOf(syscall(SYS_swapoff, nullptr)); }},
    {"setns", [] { return ErrnoOf(syscall(SYS_setns, -1, 0)); }},
    {"unshare_user", [] { return ErrnoOf(syscall(SYS_unshare, CLONE_NEWUSER)); }},
    {"unshare_mount", [] { return ErrnoOf(syscall(SYS_unshare, CLONE_NEWNS)); }},
    {"io_uring_setup", [] { return ErrnoOf(syscall(SYS_io_uring_setup, 1, nullptr)); }},
    {"io_uring_enter",
     [] { return ErrnoOf(syscall(SYS_io_uring_enter, -1, 0, 0, 0, nullptr, 0)); }},
    {"io_uring_register",
     [] { return ErrnoOf(syscall(SYS_io_uring_register, -1, 0, nullptr, 0)); }},
    {"userfaultfd", [] { return ErrnoOf(syscall(SYS_userfaultfd, O_CLOEXEC)); }},
    {"open_by_handle_at", [] { return ErrnoOf(syscall(SYS_open_by_handle_at, -1, nullptr, 0)); }},
    {"name_to_handle_at",
     [] { return ErrnoOf(syscall(SYS_name_to_handle_at, -1, nullptr, nullptr, nullptr, 0)); }},
    {"acct", [] { return ErrnoOf(syscall(SYS_acct, "/nonexistent/cubicle")); }},
    {"quotactl", [] { return ErrnoOf(syscall(SYS_quotactl, 0, nullptr, 0, nullptr)); }},
    {"syslog", [] { return ErrnoOf(syscall(SYS_syslog, -1, nullptr, 0)); }},
    {"settimeofday", [] { return ErrnoOf(syscall(SYS_settimeofday, nullptr, nullptr)); }},
    {"clock_settime", [] { return ErrnoOf(syscall(SYS_clock_settime, -1, nullptr)); }},
    {"clock_adjtime", [] { return ErrnoOf(syscall(SYS_clock_adjtime, -1, nullptr)); }},
    {"adjtimex", [] { return ErrnoOf(syscall(SYS_adjtimex, nullptr)); }},
    {"nfsservctl", [] { return ErrnoOf(syscall(SYS_nfsservctl, 0, nullptr, nullptr)); }},
    {"fanotify_init", [] { return ErrnoOf(syscall(SYS_fanotify_init, ~0u, 0)); }},
    {"pidfd_getfd", [] { return ErrnoOf(syscall(SYS_pidfd_getfd, -1, -1, 0)); }},
    {"kcmp", [] { return ErrnoOf(syscall(SYS_kcmp, 0, 0, -1, 0, 0)); }},
    {"personality_no_aslr", [] { return ErrnoOf(personality(ADDR_NO_RANDOMIZE)); }},
#ifdef SYS_iopl
    {"iopl", [] { return ErrnoOf(syscall(SYS_iopl, 99)); }},
    {"ioperm", [] { return ErrnoOf(syscall(SYS_ioperm, ~0ul, 1, 0)); }},
#endif
#ifdef SYS__sysctl
    {"_sysctl", [] { return ErrnoOf(syscall(SYS__sysctl, nullptr)); }},
#endif
#ifdef SYS_uselib
    {"uselib", [] { return ErrnoOf(syscall(SYS_uselib, nullptr)); }},
#endif
    {"clone_newuser", [] { return CloneWithFlags(CLONE_NEWUSER); }},
    {"clone_newns", [] { return CloneWithFlags(CLONE_NEWNS); }},
    {"clone_newpid", [] { return CloneWithFlags(CLONE_NEWPID); }},
    {"clone_newnet", [] { return CloneWithFlags(CLONE_NEWNET); }},
    {"clone_newuts", [] { return CloneWithFlags(CLONE_NEWUTS); }},
    {"clone_newipc", [] { return CloneWithFlags(CLONE_NEWIPC); }},
    {"clone_newcgroup", [] { return CloneWithFlags(CLONE_NEWCGROUP); }},
    {"ioctl_tiocsti",
     [] {
       int pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
       if (pty < 0) return 200;
       char c = 'x';
       return ErrnoOf(ioctl(pty, TIOCSTI, &c));
     }},
    {"ioctl_tiocsti_high_bits",
     [] {
       // The kernel drops the high half of the request; the filter must too.
       int pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
       if (pty < 0) return 200;
       char c = 'x';
       return ErrnoOf(syscall(SYS_ioctl, pty, (uint64_t{1} << 32) | TIOCSTI, &c));
     }},
    {"ioctl_tioclinux",
     [] {
       int pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
       if (pty < 0) return 200;
       char subcode = 0;
       return ErrnoOf(ioctl(pty, TIOCLINUX, &subcode));
     }},
};

class RefusedByDefault : public testing::TestWithParam<Probe> {};

TEST_P(RefusedByDefault, FailsWithEperm) {
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kDefault, GetParam().run), EPERM));
}

TEST_P(RefusedByDefault, FailsWithEpermWithoutNetworkToo) {
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kNoNetwork, GetParam().run), EPERM));
}

INSTANTIATE_TEST_SUITE_P(Syscalls, RefusedByDefault, testing::ValuesIn(kRefusedProbes),
                         [](const testing::TestParamInfo<Probe>& info) { return info.param.name; });

TEST(DefaultPolicyTest, Clone3FailsWithEnosysSoLibcFallsBackToClone) {
  // Unfiltered, a NULL clone_args of size 0 is EINVAL.
  EXPECT_TRUE(FailedWith(
      RunConfined(Policy::kDefault, [] { return ErrnoOf(syscall(SYS_clone3, nullptr, 0)); }),
      ENOSYS));
}

TEST(DefaultPolicyTest, ThreadsAndForkStillWork) {
  // glibc tries clone3 first for both and falls back to clone on ENOSYS.
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kDefault, [] {
    pthread_t thread;
    int err = pthread_create(
        &thread, nullptr, [](void*) -> void* { return nullptr; }, nullptr);
    if (err != 0) return err;
    pthread_join(thread, nullptr);
    pid_t child = fork();
    if (child < 0) return errno;
    if (child == 0) _exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 199;
  })));
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kDefault, [] { return CloneWithFlags(0); })));
}

// The egress gateway's own policy: the baseline, and no new program or
// process, while its threads still start.
TEST(EgressGatewayPolicyTest, NoExecNoForkButThreads) {
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kEgressGateway, [] {
                           char* const argv[] = {const_cast<char*>("true"), nullptr};
                           return ErrnoOf(syscall(SYS_execve, "/bin/true", argv, nullptr));
                         }),
                         EPERM));
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kEgressGateway, [] {
                           char* const argv[] = {const_cast<char*>("true"), nullptr};
                           return ErrnoOf(syscall(SYS_execveat, AT_FDCWD, "/bin/true", argv, nullptr, 0));
                         }),
                         EPERM));
  // libc's fork is clone(2) without CLONE_THREAD; the raw ones too.
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kEgressGateway, [] {
                           pid_t child = fork();
                           if (child == 0) _exit(0);
                           return child < 0 ? errno : 0;
                         }),
                         EPERM));
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kEgressGateway, [] { return CloneWithFlags(0); }), EPERM));
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kEgressGateway, [] { return ErrnoOf(syscall(SYS_vfork)); }),
                         EPERM));
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kEgressGateway, [] {
    pthread_t thread;
    int err = pthread_create(
        &thread, nullptr, [](void*) -> void* { return nullptr; }, nullptr);
    if (err != 0) return err;
    pthread_join(thread, nullptr);
    return 0;
  })));
  // The baseline is in it too.
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kEgressGateway, [] { return ErrnoOf(syscall(SYS_setns, -1, 0)); }),
                         EPERM));
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kEgressGateway, [] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return errno;
    close(fd);
    return 0;
  })));
  // Not a name a sandbox can ask for.
  EXPECT_FALSE(ParsePolicy("egress-gateway").ok());
  EXPECT_EQ(PolicyName(Policy::kEgressGateway), "egress-gateway");
}

TEST(DefaultPolicyTest, OrdinarySyscallsStillWork) {
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kDefault, [] { return ErrnoOf(getpid()); })));
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kDefault, [] {
    int fds[2];
    if (pipe(fds) != 0) return errno;
    if (write(fds[1], "x", 1) != 1) return errno;
    int queued = 0;
    if (ioctl(fds[0], FIONREAD, &queued) != 0) return errno;
    return queued == 1 ? 0 : 198;
  })));
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kDefault, [] {
    int pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (pty < 0) return errno;
    winsize size{};
    return ErrnoOf(ioctl(pty, TIOCGWINSZ, &size));
  })));
  EXPECT_TRUE(Succeeded(
      RunConfined(Policy::kDefault, [] { return ErrnoOf(socket(AF_INET, SOCK_STREAM, 0)); })));
}

// A pool's payload waits for its request under its policy's filter
// (runtime/zygote.cc, ArmedPayload): "armed" goes out with send, it waits
// in poll, the request (or its three stdio fds) comes in with recvmsg.
// Every policy a sandbox can name must allow all three, or pooled
// payloads would die at hand-off.
TEST(SandboxPolicies, LetAnArmedPayloadSayArmedAndReceiveItsStdio) {
  for (Policy policy : {Policy::kNone, Policy::kDefault, Policy::kNoNetwork}) {
    SCOPED_TRACE(std::string(PolicyName(policy)));
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    const int init_end = pair[0], payload_end = pair[1];
    EXPECT_TRUE(Succeeded(RunConfined(policy, [&] {
      const char armed = 'A';
      if (send(payload_end, &armed, 1, MSG_NOSIGNAL) != 1) return errno;
      char word = 0;
      if (recv(init_end, &word, 1, 0) != 1 || word != 'A') return 197;
      const int stdio[3] = {0, 1, 2};
      if (cubicle::SendWithFds(init_end, "G", 1, stdio, 3, MSG_NOSIGNAL) != 1) return errno;
      struct pollfd wait = {payload_end, POLLIN, 0};
      if (poll(&wait, 1, 5000) != 1) return errno != 0 ? errno : 195;
      int fds[3];
      size_t nfds = 0;
      int flags = 0;
      if (cubicle::ReceiveWithFds(payload_end, &word, 1, fds, 3, &nfds, 0, &flags) != 1) return errno;
      return nfds == 3 && word == 'G' ? 0 : 196;
    })));
    close(init_end);
    close(payload_end);
  }
}

TEST(DefaultPolicyTest, AllowsOnlyTheHarmlessPersonas) {
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kDefault, [] {
    for (unsigned long persona :
         {0x0ul, 0x8ul, 0xfffffffful, ~0ul /* the kernel reads 0xffffffff */}) {
      if (personality(persona) == -1) return errno;
    }
    return 0;
  })));
  // The allowed set is built from masked comparisons; sweep values around it.
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kDefault, [] {
    std::vector<uint64_t> refused = {
        1,          7,          9,          0x10,       0x18,
        0xfffffff7, 0xfffffffe, 0x7fffffff, 0x80000000, 0x0020000 /* UNAME26 */,
        0x0400000,  0x0100000};
    for (int bit = 0; bit < 32; ++bit) {
      if (bit != 3) refused.push_back(uint64_t{1} << bit);
      refused.push_back(0xffffffff & ~(uint64_t{1} << bit));
    }
    uint64_t x = 0x9e3779b97f4a7c15;  // a fixed sequence: the test must be repeatable
    for (int i = 0; i < 2000; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      uint32_t persona = static_cast<uint32_t>(x);
      if (persona != 0 && persona != 8 && persona != 0xffffffff) refused.push_back(persona);
    }
    for (uint64_t persona : refused) {
      if (syscall(SYS_personality, persona) != -1 || errno != EPERM) return 197;
    }
    return 0;
  })));
}

// --- Other ABIs -----------------------------------------------------------

#if defined(__x86_64__)
// Both probes first ask the host, with no filter, what the foreign syscall
// does there: only a call that lives unfiltered can show what the filter
// does to it.
TEST(ForeignAbiTest, X32SyscallIsRefused) {
  // The filter acts before the kernel looks the number up, so the kernel
  // need not have x32: built without it, it answers ENOSYS by itself. Only
  // the bad-arch action's SIGSYS shows that the filter, not the kernel,
  // refused it, so the host must not kill the call by itself.
  REQUIRE_HOST(test_support::UnfilteredX32Syscalls());
  int status = RunConfined(Policy::kDefault,
                           [] { return ErrnoOf(syscall(__X32_SYSCALL_BIT | __NR_getpid)); });
  EXPECT_TRUE(Refused(status));
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) << Describe(status);
}

TEST(ForeignAbiTest, I386SyscallViaInt80IsRefused) {
  // Not every x86_64 host runs int 0x80 at all (ia32 emulation off at
  // build or boot, or not offered by the hypervisor: SIGSEGV unfiltered).
  REQUIRE_HOST(test_support::I386Syscalls());
  int status = RunConfined(Policy::kDefault, [] {
    long rc;
    // 20 is getpid in the i386 table; int 0x80 clobbers r8-r11 on x86_64.
    asm volatile("int $0x80" : "=a"(rc) : "a"(20L) : "r8", "r9", "r10", "r11", "memory");
    return rc == getpid() ? 0 : 196;
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) << Describe(status);
}
#endif

// How an unfiltered probe child's end decides whether the tests above can
// run: the wait statuses a host can give.
TEST(ForeignAbiProbeTest, I386RunsOnlyWhereInt80ReturnsThePid) {
  using test_support::I386SyscallsFromWaitStatus;
  EXPECT_TRUE(I386SyscallsFromWaitStatus(W_EXITCODE(test_support::kProbeReturnedPid, 0)).present);
  test_support::HostProperty segv = I386SyscallsFromWaitStatus(W_EXITCODE(0, SIGSEGV));
  EXPECT_FALSE(segv.present);
  EXPECT_EQ(segv.absent_reason,
            "this host does not execute i386 syscalls via int 0x80: unfiltered getpid died of SIGSEGV");
  test_support::HostProperty sigsys = I386SyscallsFromWaitStatus(W_EXITCODE(0, SIGSYS));
  EXPECT_FALSE(sigsys.present);
  EXPECT_NE(sigsys.absent_reason.find("died of SIGSYS (a seccomp filter of the host's own"), std::string::npos)
      << sigsys.absent_reason;
  test_support::HostProperty enosys = I386SyscallsFromWaitStatus(W_EXITCODE(ENOSYS, 0));
  EXPECT_FALSE(enosys.present);
  EXPECT_NE(enosys.absent_reason.find("unfiltered getpid returned ENOSYS"), std::string::npos)
      << enosys.absent_reason;
  EXPECT_FALSE(I386SyscallsFromWaitStatus(W_EXITCODE(test_support::kProbeReturnedOther, 0)).present);
}

TEST(ForeignAbiProbeTest, X32RunsWhereverTheUnfilteredCallReturns) {
  using test_support::X32SyscallsFromWaitStatus;
  // x32 in the kernel, x32 left out of it, a host filter's errno.
  for (int code : {test_support::kProbeReturnedPid, ENOSYS, EPERM}) {
    EXPECT_TRUE(X32SyscallsFromWaitStatus(W_EXITCODE(code, 0)).present) << code;
  }
  test_support::HostProperty killed = X32SyscallsFromWaitStatus(W_EXITCODE(0, SIGSYS));
  EXPECT_FALSE(killed.present);
  EXPECT_NE(killed.absent_reason.find("unfiltered x32 getpid died of SIGSYS"), std::string::npos)
      << killed.absent_reason;
}

// --- No network -----------------------------------------------------------

class RefusedFamily : public testing::TestWithParam<int> {};

TEST_P(RefusedFamily, SocketAndSocketpairFailWithEperm) {
  const int family = GetParam();
  EXPECT_TRUE(FailedWith(
      RunConfined(Policy::kNoNetwork, [family] { return ErrnoOf(socket(family, SOCK_DGRAM, 0)); }),
      EPERM));
  EXPECT_TRUE(FailedWith(RunConfined(Policy::kNoNetwork,
                                     [family] {
                                       int pair[2];
                                       return ErrnoOf(socketpair(family, SOCK_DGRAM, 0, pair));
                                     }),
                         EPERM));
}

TEST_P(RefusedFamily, SocketWorksUnderDefault) {
  const int family = GetParam();
  int status =
      RunConfined(Policy::kDefault, [family] { return ErrnoOf(socket(family, SOCK_DGRAM, 0)); });
  // The kernel may lack a family or want a capability; only the filter's EPERM matters.
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == EPERM) << Describe(status);
}

std::string FamilyName(const testing::TestParamInfo<int>& info) {
  switch (info.param) {
    case AF_INET:
      return "AF_INET";
    case AF_INET6:
      return "AF_INET6";
    case AF_PACKET:
      return "AF_PACKET";
    case AF_NETLINK:
      return "AF_NETLINK";
  }
  return absl::StrCat("family_", info.param);
}

INSTANTIATE_TEST_SUITE_P(Families, RefusedFamily,
                         testing::Values(AF_INET, AF_INET6, AF_PACKET, AF_NETLINK), FamilyName);

TEST(NoNetworkPolicyTest, UnixSocketsStillWork) {
  EXPECT_TRUE(Succeeded(
      RunConfined(Policy::kNoNetwork, [] { return ErrnoOf(socket(AF_UNIX, SOCK_STREAM, 0)); })));
  EXPECT_TRUE(Succeeded(RunConfined(Policy::kNoNetwork, [] {
    int pair[2];
    return ErrnoOf(socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
  })));
}

}  // namespace
}  // namespace cubicle::seccomp

namespace cubicle::seccomp {
namespace {

// The programs embedded at build time are exactly what libseccomp compiles
// now: a stale or hand-edited embedded table cannot go unnoticed.
TEST(EmbeddedPrograms, MatchLibseccompOutput) {
  ASSERT_TRUE(ProgramsEmbedded());
  for (Policy policy :
       {Policy::kDefault, Policy::kNoNetwork, Policy::kEgressGateway, Policy::kStrict, Policy::kStrictNoExec}) {
    absl::StatusOr<const BpfProgram*> embedded = Compiled(policy);
    absl::StatusOr<BpfProgram> fresh = CompileWithLibseccomp(policy);
    ASSERT_TRUE(embedded.ok() && fresh.ok());
    ASSERT_EQ((*embedded)->instructions.size(), fresh->instructions.size()) << PolicyName(policy);
    for (size_t i = 0; i < fresh->instructions.size(); ++i) {
      const sock_filter& a = (*embedded)->instructions[i];
      const sock_filter& b = fresh->instructions[i];
      EXPECT_TRUE(a.code == b.code && a.jt == b.jt && a.jf == b.jf && a.k == b.k)
          << PolicyName(policy) << " instruction " << i;
    }
  }
}

}  // namespace
}  // namespace cubicle::seccomp

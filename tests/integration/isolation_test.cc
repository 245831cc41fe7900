// Isolation, observed from inside real sandboxes made in-process (DESIGN §4
// and §8), on every route a payload takes (tests/support/route_test.h): the
// cold path, an armed payload reached directly or through init, and a warm
// interpreter. Every assertion is about what the payload itself could see
// or do.
//
// Suites named Core* must pass as root and rootless (tests/rootless.sh runs
// them as an unprivileged uid); Root* suites need root by nature and skip
// otherwise.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/defaults.h"
#include "seccomp/policy.h"
#include "tests/support/host_probes.h"
#include "tests/support/route_test.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

using runtime::ExitReason;

// The preamble of every syscall probe: `call(rc)` prints "errno=NAME" for a
// failed libc call, "ok" for a successful one.
constexpr char kPyPrelude[] = R"py(
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(rc):
    if rc == -1:
        e = ctypes.get_errno()
        print("errno=" + errno.errorcode.get(e, str(e)))
    else:
        print("ok")
ARCH = os.uname().machine
SYS = {"x86_64": {"bpf": 321, "keyctl": 250}, "aarch64": {"bpf": 280, "keyctl": 219}}[ARCH]
)py";

class IsolationTest : public PayloadRouteTest {
 protected:
  // Runs `script` in the default sandbox and fails the test (returning an
  // empty run) when the route refuses it or the setup fails.
  SandboxRun Shell(absl::string_view script, const runtime::DefaultsOptions& options = {}) {
    absl::StatusOr<SandboxRun> run = Run(ShellSpec(script, options));
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return {};
    EXPECT_NE(run->result.reason, ExitReason::kSetupFailed) << run->result.setup_error;
    return *std::move(run);
  }

  // Runs a Python snippet (the host's /usr/bin/python3, visible through the
  // /usr bind) in the default sandbox and returns its stdout. On the warm
  // route it runs in the interpreter started ahead of the request.
  std::string Python(absl::string_view code) {
    runtime::SandboxSpec spec = TestSpec({"/usr/bin/python3", "-I", "-c", std::string(code)});
    if (policy_.has_value()) spec.seccomp = *policy_;
    absl::StatusOr<SandboxRun> run = Run(spec);
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return "";
    EXPECT_EQ(run->result.reason, ExitReason::kExited) << run->result.setup_error << "\n" << run->err;
    EXPECT_EQ(run->result.exit_code, 0) << run->err;
    if (route() == PayloadRoute::kWarm) {
      EXPECT_TRUE(run->result.warm) << "exec'd by the bootstrap, not run in the warm interpreter";
    }
    return run->out;
  }

  std::string Probe(absl::string_view body) { return Python(absl::StrCat(kPyPrelude, body)); }

  std::optional<seccomp::Policy> policy_;  // the default sandbox's unless set
};

class CoreIsolation : public IsolationTest {};
// Its probes are Python (ctypes): where the host has no python3 for the
// sandbox to run, there is nothing to probe with.
class CoreSeccomp : public IsolationTest {
 protected:
  void SetUp() override {
    IsolationTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    REQUIRE_HOST(Python3());
  }
};
// The same probes, and those the strict policy adds, under "strict"
// (docs/security.md, "The strict policy"): refused at least as the default
// policy refuses them, each with the errno the docs state.
class CoreStrictSeccomp : public CoreSeccomp {
 protected:
  void SetUp() override {
    policy_ = seccomp::Policy::kStrict;
    CoreSeccomp::SetUp();
  }
};
class RootIsolation : public IsolationTest {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "needs root: exercises what only a root launcher does";
    IsolationTest::SetUp();
  }
  void TearDown() override {
    if (IsRoot()) IsolationTest::TearDown();
  }
};

INSTANTIATE_TEST_SUITE_P(EveryRoute, CoreIsolation, ::testing::ValuesIn(kEveryRoute), RouteTestName);
INSTANTIATE_TEST_SUITE_P(EveryRoute, CoreSeccomp, ::testing::ValuesIn(kEveryRoute), RouteTestName);
INSTANTIATE_TEST_SUITE_P(EveryRoute, CoreStrictSeccomp, ::testing::ValuesIn(kEveryRoute), RouteTestName);
INSTANTIATE_TEST_SUITE_P(EveryRoute, RootIsolation, ::testing::ValuesIn(kEveryRoute), RouteTestName);

// ---- Processes ---------------------------------------------------------------

TEST_P(CoreIsolation, Pid1IsCubicleInitAndNoHostProcessIsVisible) {
  SandboxRun run = Shell(
      "echo $$; cat /proc/1/comm; ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '; echo");
  std::vector<std::string> lines = Lines(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out << run.err;
  EXPECT_EQ(lines[0], "2") << "the payload is the first child of the sandbox's init";
  // Init is a clone of this test binary (no exec) that renames itself.
  EXPECT_EQ(lines[1], "cubicle-init");
  std::set<int> pids;
  for (absl::string_view p : absl::StrSplit(lines[2], ' ', absl::SkipEmpty())) {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(p, &pid)) << p;
    pids.insert(pid);
  }
  EXPECT_TRUE(pids.contains(1)) << lines[2];
  EXPECT_TRUE(pids.contains(2)) << lines[2];
  // init, sh, and at most the pipeline's own processes: never a host pid.
  EXPECT_LE(pids.size(), 5u) << lines[2];
  for (int pid : pids) EXPECT_LE(pid, 10) << "a process the sandbox did not make: " << lines[2];
}

TEST_P(CoreIsolation, ExitCodePropagates) {
  SandboxRun run = Shell("exit 7");
  EXPECT_EQ(run.result.reason, ExitReason::kExited);
  EXPECT_EQ(run.result.exit_code, 7);
  EXPECT_EQ(run.result.ShellStatus(), 7);
}

// The payload starts with a fresh process's signal state, nothing ignored
// and nothing blocked, whatever ran before it in its process: init's
// forwarding handlers, or an interpreter that ignores SIGPIPE (the warm
// route's exec path).
TEST_P(CoreIsolation, SignalsAreAtTheirDefaults) {
  // exec: the payload's own status, not its shell's while the shell waits
  // for a child (dash blocks every signal then).
  SandboxRun run = Shell("exec grep -E '^Sig(Ign|Blk):' /proc/self/status");
  EXPECT_EQ(run.result.ShellStatus(), 0) << run.err;
  EXPECT_EQ(run.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST_P(CoreIsolation, DeathBySignalPropagates) {
  SandboxRun run = Shell("kill -TERM $$; sleep 5");
  EXPECT_EQ(run.result.reason, ExitReason::kSignaled);
  EXPECT_EQ(run.result.signal, 15);
  EXPECT_EQ(run.result.ShellStatus(), 143);
}

TEST_P(CoreIsolation, OrphansAreReaped) {
  // The subshell exits at once, so its child is orphaned to the sandbox's
  // init, which must reap it; a reaped process has no /proc entry (a zombie
  // still has one). Bounded wait: 200 x 20 ms.
  SandboxRun run = Shell(R"sh(
    (sleep 0.05 & echo $! > /tmp/orphan)
    orphan=$(cat /tmp/orphan)
    i=0
    while [ -e /proc/$orphan ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done
    if [ -e /proc/$orphan ]; then echo "orphan: $(cat /proc/$orphan/stat)"; fi
    zombies=0
    for f in /proc/[0-9]*/stat; do
      read -r line < "$f" 2>/dev/null || continue
      case "${line##*) }" in Z*) zombies=$((zombies+1)); echo "zombie: $line";; esac
    done
    echo "zombies=$zombies"
  )sh");
  EXPECT_EQ(run.result.reason, ExitReason::kExited);
  EXPECT_EQ(run.out, "zombies=0\n") << run.err;
}

TEST_P(CoreIsolation, TimeoutKillsDaemonizedGrandchildren) {
  // A unique sleep length marks every process of this sandbox, so a survivor
  // is found even if it escaped to another parent.
  const std::string mark = absl::StrCat("1000.", ::getpid());
  runtime::SandboxSpec spec = ShellSpec(absl::StrCat(
      "setsid sh -c 'sleep ", mark, "' >/dev/null 2>&1 &\n",
      "nohup sleep ", mark, " >/dev/null 2>&1 &\n",
      "sleep ", mark, "\n"));
  spec.timeout = absl::Milliseconds(500);
  absl::StatusOr<SandboxRun> run = Run(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, ExitReason::kTimeout) << run->result.setup_error;
  EXPECT_EQ(run->result.ShellStatus(), 124);
  EXPECT_EQ(ProcessesWithArgument(absl::StrCat("sleep ", mark)), std::vector<pid_t>{});
  EXPECT_EQ(Descendants(), std::vector<pid_t>{});
}

// ---- Identity, privileges, seccomp ------------------------------------------

TEST_P(CoreIsolation, RunsAsUid1000Gid1000) {
  SandboxRun run = Shell("id -u; id -g");
  EXPECT_EQ(run.out, "1000\n1000\n") << run.err;
}

TEST_P(RootIsolation, SupplementaryGroupsAreCleared) {
  // The launcher (root, with group 0) must not pass its groups on.
  SandboxRun run = Shell("id -G");
  EXPECT_EQ(run.out, "1000\n") << run.err;
}

TEST_P(CoreIsolation, NoCapabilitiesNoNewPrivsAndSeccompFilter) {
  SandboxRun run = Shell("cat /proc/self/status");
  for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_EQ(StatusField(run.out, cap), "0000000000000000") << cap;
  }
  EXPECT_EQ(StatusField(run.out, "NoNewPrivs"), "1");
  EXPECT_EQ(StatusField(run.out, "Seccomp"), "2");
}

TEST_P(CoreSeccomp, MountIsRefusedWithEperm) {
  EXPECT_EQ(Probe("call(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))"), "errno=EPERM\n");
}

TEST_P(CoreSeccomp, PtraceIsRefusedWithEperm) {
  EXPECT_EQ(Probe("call(libc.ptrace(0, 0, None, None))  # PTRACE_TRACEME"), "errno=EPERM\n");
}

TEST_P(CoreSeccomp, NestedUserNamespaceIsRefusedWithEperm) {
  EXPECT_EQ(Probe("call(libc.unshare(0x10000000))  # CLONE_NEWUSER"), "errno=EPERM\n");
}

TEST_P(CoreSeccomp, BpfIsRefusedWithEperm) {
  EXPECT_EQ(Probe("call(libc.syscall(SYS['bpf'], 0, None, 0))  # BPF_MAP_CREATE"), "errno=EPERM\n");
}

TEST_P(CoreSeccomp, KeyctlIsRefusedWithEperm) {
  // KEYCTL_GET_KEYRING_ID of the session keyring: allowed without any
  // privilege, so only the filter can refuse it.
  EXPECT_EQ(Probe("call(libc.syscall(SYS['keyctl'], 0, -3, 1))"), "errno=EPERM\n");
}

TEST_P(CoreSeccomp, TiocstiIsRefusedWithEperm) {
  EXPECT_EQ(Probe(R"py(
master, slave = os.openpty()
c = ctypes.c_char(b"x")
call(libc.ioctl(slave, 0x5412, ctypes.byref(c)))  # TIOCSTI
)py"),
            "errno=EPERM\n");
}

TEST_P(CoreSeccomp, InetSocketIsRefusedWithEpermButUnixSocketWorks) {
  EXPECT_EQ(Probe(R"py(
import socket
call(libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0))
call(libc.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0))
)py"),
            "errno=EPERM\nok\n");
}

TEST_P(CoreStrictSeccomp, TheDefaultPolicysProbesAreRefusedWithEperm) {
  EXPECT_EQ(Probe(R"py(
call(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))
call(libc.ptrace(0, 0, None, None))
call(libc.unshare(0x10000000))
call(libc.syscall(SYS['bpf'], 0, None, 0))
call(libc.syscall(SYS['keyctl'], 0, -3, 1))
c = ctypes.c_char(b"x")
call(libc.ioctl(0, 0x5412, ctypes.byref(c)))  # TIOCSTI
)py"),
            "errno=EPERM\nerrno=EPERM\nerrno=EPERM\nerrno=EPERM\nerrno=EPERM\nerrno=EPERM\n");
}

TEST_P(CoreStrictSeccomp, SocketsOfEveryFamilyAndForkAreRefusedWithEperm) {
  EXPECT_EQ(Probe(R"py(
import socket
call(libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0))
call(libc.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0))
call(libc.fork())
)py"),
            "errno=EPERM\nerrno=EPERM\nerrno=EPERM\n");
}

// Seccomp reads no paths: a host path is absent (the mount tree), the
// root read-only.
TEST_P(CoreStrictSeccomp, AHostPathIsAbsentAndTheRootReadOnly) {
  TempDir host;  // on the host's /tmp, which the sandbox replaces
  ASSERT_TRUE(WriteFile(host.Join("secret"), "host data"));
  EXPECT_EQ(Probe(absl::StrCat("call(libc.open(b'", host.Join("secret"), "', 0))\n",
                               "call(libc.open(b'/cubicle-strict-probe', 0o101, 0o600))  # O_WRONLY|O_CREAT\n",
                               "call(libc.open(b'/etc/shadow', 0))\n")),
            "errno=ENOENT\nerrno=EROFS\nerrno=ENOENT\n");
}

// The exec probes: Python's own execv of another program, then a raw
// execveat whose sixth argument (the strict policy's exec token) is 0,
// each in a run of its own, since a successful one replaces the probe.
// Another program's output shows that the exec went through.
constexpr char kExecvProbe[] = R"py(
try:
    os.execv("/bin/echo", ["echo", "execd"])
except OSError as e:
    print("errno=" + errno.errorcode.get(e.errno, str(e.errno)))
)py";
constexpr char kExecveatProbe[] = R"py(
NR = {"x86_64": 322, "aarch64": 281}[ARCH]
argv = (ctypes.c_char_p * 3)(b"echo", b"execd", None)
envp = (ctypes.c_char_p * 1)(None)
L = ctypes.c_long
call(libc.syscall(L(NR), L(-100), ctypes.c_char_p(b"/bin/echo"), argv, envp, L(0), L(0)))  # AT_FDCWD
)py";

// The control: under the default policy both execs go through, on every
// route, so the strict tests below cannot pass for another reason.
TEST_P(CoreSeccomp, ExecOfAnotherProgramWorks) {
  EXPECT_EQ(Probe(kExecvProbe), "execd\n");
  EXPECT_EQ(Probe(kExecveatProbe), "execd\n");
}

// Strict: the payload's own exec was the sandbox's one (the interpreter's,
// on the warm route; none in a warm template's child); any further one is
// refused, Python's execv and an execveat without the token alike.
TEST_P(CoreStrictSeccomp, ExecOfAnotherProgramIsRefusedWithEperm) {
  EXPECT_EQ(Probe(kExecvProbe), "errno=EPERM\n");
  EXPECT_EQ(Probe(kExecveatProbe), "errno=EPERM\n");
}

// A program that is not Python runs: its own exec carries the token. On a
// warm zygote it would be the bootstrap's exec, which strict refuses (a
// pool sends such a request to a cold sandbox: StrictSeccomp.* through the
// daemon), and the refusal is reported as an exec failure.
TEST_P(CoreStrictSeccomp, AProgramRunsItsOwnExecButCannotStartAnother) {
  runtime::SandboxSpec spec = TestSpec({"/bin/sh", "-c", "echo ok; /bin/true"});
  spec.seccomp = seccomp::Policy::kStrict;
  absl::StatusOr<SandboxRun> run = Run(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  if (route() == PayloadRoute::kWarm || route() == PayloadRoute::kWarmTemplate) {
    EXPECT_EQ(run->out, "");
    EXPECT_TRUE(absl::StrContains(run->err, "execve(/bin/sh): Operation not permitted")) << run->err;
    EXPECT_EQ(run->result.exit_code, 127);
    return;
  }
  EXPECT_EQ(run->out, "ok\n") << run->err;
  // dash cannot fork for /bin/true (nor exec it: no fork, no exec).
  EXPECT_TRUE(absl::StrContains(run->err, "fork")) << run->err;  // dash: "Cannot fork"
  EXPECT_NE(run->result.exit_code, 0);
}

TEST_P(CoreIsolation, InitEnvironmentIsNotReadable) {
  // Init is a copy of this process; our environment must not leak through it.
  ASSERT_EQ(::setenv("CUBICLE_ITEST_SECRET", "s3cr3t-in-the-launcher", 1), 0);
  SandboxRun run = Shell("cat /proc/1/environ; echo; echo rc=$?; tr '\\0' '\\n' < /proc/1/cmdline");
  ::unsetenv("CUBICLE_ITEST_SECRET");
  EXPECT_FALSE(absl::StrContains(run.out, "s3cr3t")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.err, "Permission denied")) << run.err;
}

TEST_P(CoreIsolation, EnvironmentIsNotInherited) {
  ASSERT_EQ(::setenv("CUBICLE_ITEST_INHERITED", "leaked", 1), 0);
  SandboxRun run = Shell("env");
  ::unsetenv("CUBICLE_ITEST_INHERITED");
  EXPECT_FALSE(absl::StrContains(run.out, "CUBICLE_ITEST_INHERITED")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "PATH=")) << run.out;
}

// ---- Namespaces --------------------------------------------------------------

TEST_P(CoreIsolation, HostnameIsTheSandboxes) {
  EXPECT_EQ(Shell("uname -n").out, "cubicle\n");
  runtime::DefaultsOptions options;
  options.hostname = "skill-box";
  EXPECT_EQ(Shell("uname -n; hostname", options).out, "skill-box\nskill-box\n");
}

TEST_P(CoreIsolation, OnlyLoopbackExistsAndNoSys) {
  SandboxRun run = Shell("tail -n +3 /proc/net/dev; test -e /sys && echo sys-visible; true");
  std::vector<std::string> names;
  for (const std::string& line : Lines(run.out)) {
    size_t colon = line.find(':');
    ASSERT_NE(colon, std::string::npos) << line;
    names.emplace_back(absl::StripAsciiWhitespace(absl::string_view(line).substr(0, colon)));
  }
  EXPECT_EQ(names, std::vector<std::string>{"lo"}) << run.out;
}

// ---- Filesystem --------------------------------------------------------------

TEST_P(CoreIsolation, RootAndUsrAreReadOnly) {
  SandboxRun run = Shell(
      "touch /newfile || echo refused; touch /usr/newfile || echo refused; "
      "(echo x >> /etc/passwd) || echo refused");
  EXPECT_EQ(run.out, "refused\nrefused\nrefused\n") << run.err;
  std::vector<std::string> errors = Lines(run.err);
  ASSERT_EQ(errors.size(), 3u) << run.err;
  for (const std::string& e : errors) EXPECT_TRUE(absl::StrContains(e, "Read-only file system")) << e;
}

TEST_P(CoreIsolation, ProcIsHardened) {
  SandboxRun run = Shell(
      "(echo x > /proc/sys/kernel/hostname) 2>/dev/null || echo sys-refused; "
      "(echo h > /proc/sysrq-trigger) 2>/dev/null || echo sysrq-refused; "
      "for f in kcore keys timer_list sched_debug kpagecount kpageflags; do"
      "  [ -e /proc/$f ] && echo \"$f=$(head -c 4096 /proc/$f 2>/dev/null | wc -c)\"; done; true");
  std::vector<std::string> lines = Lines(run.out);
  ASSERT_GE(lines.size(), 2u) << run.err;
  EXPECT_EQ(lines[0], "sys-refused");
  EXPECT_EQ(lines[1], "sysrq-refused");
  for (size_t i = 2; i < lines.size(); ++i) {
    EXPECT_TRUE(absl::EndsWith(lines[i], "=0")) << "not masked: /proc/" << lines[i];
  }
}

TEST_P(CoreIsolation, UidZeroInsideHasNoPower) {
  runtime::DefaultsOptions options;
  options.uid = 0;
  options.gid = 0;
  SandboxRun run = Shell(
      "id -u; grep -E '^Cap(Eff|Bnd):' /proc/self/status; "
      "touch /usr/x 2>/dev/null || echo usr-refused; "
      "cat /proc/1/environ >/dev/null 2>&1 || echo environ-refused; "
      "(echo x > /proc/sys/kernel/hostname) 2>/dev/null || echo sys-refused",
      options);
  EXPECT_EQ(run.out,
            "0\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
            "usr-refused\nenviron-refused\nsys-refused\n")
      << run.err;
}

TEST_P(CoreIsolation, LargeOutputIsCapturedWhole) {
  SandboxRun run = Shell("head -c 8388608 /dev/zero; head -c 1048576 /dev/zero >&2");
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.out.size(), 8388608u);
  EXPECT_EQ(run.err.size(), 1048576u);
}

TEST_P(CoreIsolation, TmpIsWritableUpToItsCap) {
  runtime::DefaultsOptions options;
  options.tmp_size = 1 << 20;
  SandboxRun run = Shell(
      "echo small > /tmp/small && cat /tmp/small; "
      "head -c 2097152 /dev/zero > /tmp/big; echo rc=$?",
      options);
  EXPECT_EQ(run.out, "small\nrc=1\n");
  EXPECT_TRUE(absl::StrContains(run.err, "No space left on device")) << run.err;
}

TEST_P(CoreIsolation, HostFilesOutsideTheBindsAreAbsent) {
  TempDir host;  // on the host's /tmp, which the sandbox replaces
  ASSERT_TRUE(WriteFile(host.Join("secret"), "host data"));
  SandboxRun run = Shell(absl::StrCat(
      "for p in ", host.Join("secret"), " ", host.path(),
      " /etc/shadow /home /root /var /sys /boot /run /mnt /opt /srv; do",
      "  if [ -e \"$p\" ]; then echo \"visible: $p\"; fi; done; ls /etc"));
  std::vector<std::string> lines = Lines(run.out);
  for (const std::string& line : lines) EXPECT_FALSE(absl::StartsWith(line, "visible:")) << line;
  // /etc is generated; only the loader cache and alternatives come from the host.
  const std::set<std::string> allowed = {"passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache",
                                         "alternatives"};
  for (const std::string& name : lines) {
    if (absl::StartsWith(name, "visible:")) continue;
    EXPECT_TRUE(allowed.contains(name)) << "/etc/" << name << " is visible";
  }
}

TEST_P(CoreIsolation, InheritedFdWithoutCloexecIsNotPassedOn) {
  int raw = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(raw, 0);
  int leaked = ::fcntl(raw, F_DUPFD, 100);  // F_DUPFD: the copy is not CLOEXEC either
  ::close(raw);
  ASSERT_GE(leaked, 100);
  SandboxRun run = Shell("ls /proc/self/fd | tr '\\n' ' '");
  ::close(leaked);
  // 0-2 and the directory ls itself opened to list.
  EXPECT_EQ(run.out, "0 1 2 3 ") << "fd " << leaked << " was open in the launcher";
}

TEST_P(CoreIsolation, StdioPassesThrough) {
  absl::StatusOr<SandboxRun> run = Run(ShellSpec("cat; echo to-stderr >&2"), "line one\nline two\n");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, ExitReason::kExited);
  EXPECT_EQ(run->out, "line one\nline two\n");
  EXPECT_EQ(run->err, "to-stderr\n");
}

TEST_P(CoreIsolation, WorkspaceIsWritableAndKeepsTheHostOwner) {
  TempDir ws;
  // As root the workspace (root's) is idmapped to the sandbox user's host id.
  if (IsRoot()) REQUIRE_HOST(IdmappedMounts(ws.path()));
  struct stat dir_st;
  ASSERT_EQ(::stat(ws.path().c_str(), &dir_st), 0);
  runtime::DefaultsOptions options;
  options.workspace = ws.path();
  SandboxRun run = Shell("pwd; stat -c %u:%g /workspace; echo made-inside > out.txt && stat -c %u out.txt",
                         options);
  EXPECT_EQ(run.out, "/workspace\n1000:1000\n1000\n") << run.err;
  struct stat file_st;
  ASSERT_EQ(::stat(ws.Join("out.txt").c_str(), &file_st), 0);
  EXPECT_EQ(file_st.st_uid, dir_st.st_uid);
  EXPECT_EQ(file_st.st_gid, dir_st.st_gid);
  EXPECT_EQ(ReadFile(ws.Join("out.txt")), "made-inside\n");
}

TEST_P(RootIsolation, IdmappedWorkspaceOfAnotherUserIsWritable) {
  // A workspace owned by an arbitrary host user shows as the sandbox user
  // inside; what the payload writes belongs to that host user.
  TempDir ws;
  REQUIRE_HOST(IdmappedMounts(ws.path()));
  constexpr uid_t kOwner = 4343;
  ASSERT_EQ(::chown(ws.path().c_str(), kOwner, kOwner), 0);
  runtime::DefaultsOptions options;
  options.workspace = ws.path();
  SandboxRun run = Shell("stat -c %u:%g /workspace; echo hi > /workspace/f && stat -c %u:%g /workspace/f",
                         options);
  EXPECT_EQ(run.out, "1000:1000\n1000:1000\n") << run.err;
  struct stat st;
  ASSERT_EQ(::stat(ws.Join("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kOwner);
  EXPECT_EQ(st.st_gid, kOwner);
}

}  // namespace
}  // namespace cubicle::test_support

// The launcher's contract on bad input and on repetition (DESIGN §4, §8):
// a bad spec gets a clear error that names the problem and changes nothing;
// any number of sandboxes leave no process, mount, fd or temp file behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/unique_fd.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "runtime/launcher.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

using runtime::ExitReason;

class CoreLauncher : public HostHygieneTest {};

// Launch must refuse `spec` up front: InvalidArgument-like status whose
// message contains every one of `words`.
void ExpectRefused(const runtime::SandboxSpec& spec, std::vector<std::string> words) {
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_FALSE(run.ok()) << "launched anyway: reason " << runtime::ExitReasonName(run->result.reason);
  for (const std::string& w : words) {
    EXPECT_TRUE(absl::StrContains(run.status().message(), w)) << "'" << w << "' not in: " << run.status();
  }
}

// Launch must accept `spec` and report a setup failure whose message
// contains every one of `words` (never the payload's exit code).
void ExpectSetupFailure(const runtime::SandboxSpec& spec, std::vector<std::string> words) {
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, ExitReason::kSetupFailed)
      << "reason " << runtime::ExitReasonName(run->result.reason) << ", exit " << run->result.exit_code;
  EXPECT_FALSE(run->result.setup_error.ok());
  EXPECT_EQ(run->result.ShellStatus(), 125);
  for (const std::string& w : words) {
    EXPECT_TRUE(absl::StrContains(run->result.setup_error.message(), w))
        << "'" << w << "' not in: " << run->result.setup_error;
  }
}

// ---- Device rules (accelerator passthrough) -------------------------------------
// As root the sandbox gets a device cgroup allowing only the minimal /dev
// and its rules; rootless the devices hierarchy is not the caller's to
// write, and the run goes on with a warning saying so (the rootless run of
// the Core suites checks that side).

// Whether this host has a device cgroup for a root launcher's sandbox: a
// mounted v1 devices controller, or, on cgroup v2, the sandbox's own group
// for the device program, which it has where its default limits give it
// one (the memory and pids controllers are there). A pure v2 host without
// them (no delegated controllers) has neither.
bool HostHasADeviceCgroupForRoot() {
  bool v2 = false;
  for (absl::string_view line : absl::StrSplit(ReadFile("/proc/self/mountinfo"), '\n', absl::SkipEmpty())) {
    size_t dash = line.find(" - ");
    if (dash == absl::string_view::npos) continue;
    std::vector<absl::string_view> fs = absl::StrSplit(line.substr(dash + 3), ' ');
    if (fs.size() < 3) continue;
    if (fs[0] == "cgroup2") v2 = true;
    if (fs[0] != "cgroup") continue;
    for (absl::string_view option : absl::StrSplit(fs[2], ',')) {
      if (option == "devices") return true;
    }
  }
  return v2 && runtime::CgroupsUsable().ok();
}

TEST_F(CoreLauncher, DeviceRulesWithoutADeviceCgroupWarnAndRun) {
  runtime::SandboxSpec spec = ShellSpec("head -c 0 /dev/null && echo ok");
  spec.devices = {{'c', 1, 3, "rw"}};  // /dev/null's rule: the minimal /dev has it anyway
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->out, "ok\n") << run->err;
  bool warned = false;
  for (const std::string& w : run->result.warnings) {
    warned |= absl::StrContains(w, "only the sandbox's /dev limits which devices it can open");
  }
  if (IsRoot() && HostHasADeviceCgroupForRoot()) {
    EXPECT_FALSE(warned) << "root makes the device cgroup: " << absl::StrJoin(run->result.warnings, "; ");
  } else if (IsRoot()) {
    EXPECT_TRUE(warned) << "this host has no device cgroup for the sandbox, and the run must say so";
  } else {
    EXPECT_TRUE(warned) << "rootless cannot make a device cgroup and must say so";
  }
}

// ---- SELinux labels (bwrap --exec-label, --file-label) ------------------------
// Both reach the kernel. A context no policy knows is refused by it, on a
// host with SELinux and without, and the refusal is a setup error naming
// the step, never the payload's status.

TEST_F(CoreLauncher, ExecLabelIsWrittenJustBeforeExecve) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.exec_label = "cubicle_nobody_u:cubicle_nobody_r:cubicle_nobody_t:s0";
  ExpectSetupFailure(spec, {"label_exec", "/bin/true", "EINVAL"});
}

TEST_F(CoreLauncher, FileLabelIsATmpfsMountOption) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  rootfs::MountOp labelled = Tmpfs("/labelled");
  labelled.selinux_context = "cubicle_nobody_u:object_r:cubicle_nobody_t:s0";
  spec.mounts.push_back(labelled);
  ExpectSetupFailure(spec, {"tmpfs", "/labelled", "EINVAL"});
  // The same mount without the label is fine.
  spec.mounts.back().selinux_context.clear();
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, ExitReason::kExited) << run->result.setup_error;
}

// ---- Refused before anything is created --------------------------------------

TEST_F(CoreLauncher, EmptyArgvIsRefused) {
  runtime::SandboxSpec spec = TestSpec({});
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(run.status().message(), "argv is empty")) << run.status();
  spec.argv = {""};
  ExpectRefused(spec, {"argv"});
}

TEST_F(CoreLauncher, RelativeMountDestinationIsRefused) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Tmpfs("scratch"));
  ExpectRefused(spec, {"'scratch'", "absolute"});
}

TEST_F(CoreLauncher, DotDotInMountDestinationIsRefused) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Tmpfs("/tmp/../etc"));
  ExpectRefused(spec, {"/tmp/../etc", "'..'"});
}

TEST_F(CoreLauncher, UnnormalisedOrRootDestinationIsRefused) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Tmpfs("/scratch//x/"));
  ExpectRefused(spec, {"/scratch//x/", "normalised"});
  spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Tmpfs("/"));
  ExpectRefused(spec, {"'/'"});
}

TEST_F(CoreLauncher, MissingBindSourceIsRefusedNamingPathAndErrno) {
  TempDir dir;
  const std::string missing = dir.Join("not-there");
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Bind(missing, "/data", true));
  ExpectRefused(spec, {missing, "ENOENT"});
}

TEST_F(CoreLauncher, RelativeBindSourceIsRefused) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Bind("usr", "/data", true));
  ExpectRefused(spec, {"'usr'", "absolute"});
}

TEST_F(CoreLauncher, NonPositiveTimeoutIsRefused) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.timeout = absl::ZeroDuration();
  ExpectRefused(spec, {"timeout", "positive"});
  spec.timeout = absl::Seconds(-1);
  ExpectRefused(spec, {"timeout", "positive"});
}

TEST_F(CoreLauncher, BadHostnameIsRefused) {
  for (const std::string& name : {std::string(""), std::string("has space"), std::string("a/b"),
                                  std::string(65, 'h')}) {
    SCOPED_TRACE(name);
    runtime::SandboxSpec spec = TestSpec({"/bin/true"});
    spec.hostname = name;
    ExpectRefused(spec, {"hostname"});
  }
}

TEST_F(CoreLauncher, RelativeWorkingDirectoryIsRefused) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.cwd = "tmp";
  ExpectRefused(spec, {"working directory", "'tmp'"});
}

// ---- Refused by the sandbox's own setup --------------------------------------

// A destination that resolves, through a symlink in a bound host directory,
// to somewhere outside the sandbox root must fail the setup and create
// nothing, on the host or anywhere else.
void ExpectSymlinkEscapeRefused(const std::string& link_target) {
  TempDir host;
  // Traversable by the sandbox's setup, which runs as the sandbox user.
  ASSERT_EQ(::chmod(host.path().c_str(), 0755), 0);
  ASSERT_EQ(::symlink(link_target.c_str(), host.Join("esc").c_str()), 0);
  const std::string name = absl::StrCat("itest-escape-", ::getpid());
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Bind(host.path(), "/data", false));
  spec.mounts.push_back(Tmpfs(absl::StrCat("/data/esc/", name)));
  ExpectSetupFailure(spec, {"leaves the sandbox root", "EXDEV", "/data/esc/"});
  EXPECT_EQ(ListDirectory(host.path()), std::set<std::string>{"esc"});
  struct stat st;
  EXPECT_NE(::lstat(absl::StrCat("/etc/", name).c_str(), &st), 0);
  EXPECT_NE(::lstat(absl::StrCat("/", name).c_str(), &st), 0);
}

TEST_F(CoreLauncher, AbsoluteSymlinkOutOfTheRootIsRefused) { ExpectSymlinkEscapeRefused("/etc"); }

TEST_F(CoreLauncher, RelativeSymlinkOutOfTheRootIsRefused) { ExpectSymlinkEscapeRefused("../../.."); }

TEST_F(CoreLauncher, SymlinkAsTheDestinationItselfIsRefused) {
  TempDir host;
  ASSERT_EQ(::chmod(host.path().c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/etc", host.Join("esc").c_str()), 0);
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.mounts.push_back(Bind(host.path(), "/data", false));
  spec.mounts.push_back(Tmpfs("/data/esc"));
  ExpectSetupFailure(spec, {"leaves the sandbox root", "EXDEV"});
}

TEST_F(CoreLauncher, MissingCommandIsASetupFailureNotExit127) {
  ExpectSetupFailure(TestSpec({"/no/such/command"}), {"execve", "/no/such/command", "ENOENT"});
  // Through the PATH search too.
  ExpectSetupFailure(TestSpec({"no-such-command-itest"}), {"execve", "no-such-command-itest", "ENOENT"});
}

TEST_F(CoreLauncher, NonExecutableCommandIsASetupFailure) {
  ExpectSetupFailure(TestSpec({"/etc/passwd"}), {"execve", "/etc/passwd", "EACCES"});
}

TEST_F(CoreLauncher, MissingWorkingDirectoryIsASetupFailure) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.cwd = "/no/such/dir";
  ExpectSetupFailure(spec, {"chdir", "/no/such/dir", "ENOENT"});
}

// ---- Repetition and reporting -------------------------------------------------

// Entries of the host's /tmp that a sandbox could plausibly have left: the
// staging names, or anything naming cubicle. Other processes (and other
// tests, whose temp dirs start with kTempPrefix) may create files there
// concurrently, so only these are compared.
std::set<std::string> SandboxLookingEntries(const std::set<std::string>& names) {
  std::set<std::string> out;
  for (const std::string& n : names) {
    // Other test binaries' own temp dirs (they run in parallel) are theirs.
    if (absl::StartsWith(n, kTempPrefix) || absl::StartsWith(n, "fakecg-")) continue;
    if (n == "newroot" || n == "oldroot" || absl::StrContains(n, "cubicle") ||
        absl::StrContains(n, "staging") || absl::StrContains(n, "sandbox")) {
      out.insert(n);
    }
  }
  return out;
}

TEST_F(CoreLauncher, HundredRunsLeaveNothingBehind) {
  const std::set<std::string> tmp_before = SandboxLookingEntries(ListDirectory("/tmp"));
  const std::set<std::string> fds_before = ListDirectory("/proc/self/fd");
  const runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  int exited_zero = 0;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
    ASSERT_TRUE(run.ok()) << "run " << i << ": " << run.status();
    ASSERT_EQ(run->result.reason, ExitReason::kExited) << "run " << i << ": " << run->result.setup_error;
    if (run->result.exit_code == 0) ++exited_zero;
    ASSERT_EQ(Descendants(), std::vector<pid_t>{}) << "after run " << i;
  }
  EXPECT_EQ(exited_zero, 100);
  EXPECT_EQ(SandboxLookingEntries(ListDirectory("/tmp")), tmp_before);
  // The directory listing opens one fd in both snapshots.
  EXPECT_EQ(ListDirectory("/proc/self/fd"), fds_before);
}

TEST_F(CoreLauncher, PerStepTimingsAreReported) {
  absl::StatusOr<SandboxRun> run = RunArgv({"/bin/true"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->result.reason, ExitReason::kExited);
  std::set<std::string> names;
  for (const auto& [name, duration] : run->result.steps) {
    names.insert(name);
    EXPECT_GE(duration, absl::ZeroDuration()) << name;
  }
  for (const char* step : {"validate", "clone", "id_maps", "rootfs", "run"}) {
    EXPECT_TRUE(names.contains(step)) << "no step '" << step << "'";
  }
  EXPECT_GT(run->result.wall, absl::ZeroDuration());
  EXPECT_LE(run->result.setup, run->result.wall);
}

TEST_F(CoreLauncher, ResourceUsageIsReported) {
  absl::StatusOr<SandboxRun> run =
      RunArgv({"/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->result.reason, ExitReason::kExited);
  EXPECT_GT(run->result.rusage.ru_maxrss, 0);
  EXPECT_GT(run->result.rusage.ru_utime.tv_sec * 1000000 + run->result.rusage.ru_utime.tv_usec +
                run->result.rusage.ru_stime.tv_sec * 1000000 + run->result.rusage.ru_stime.tv_usec,
            0);
}

// Waits (bounded: 2000 x 10 ms) until the memfd `fd` holds at least `n` bytes.
bool WaitForBytes(int fd, size_t n) {
  for (int i = 0; i < 2000; ++i) {
    struct stat st;
    if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= n) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST_F(CoreLauncher, SignalsFromTheSignalFdReachThePayload) {
  sigset_t usr1, previous;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &usr1, &previous), 0);
  UniqueFd sigfd(::signalfd(-1, &usr1, SFD_CLOEXEC | SFD_NONBLOCK));
  ASSERT_TRUE(sigfd);
  UniqueFd out(::memfd_create("itest-stdout", MFD_CLOEXEC));
  ASSERT_TRUE(out);
  runtime::SandboxSpec spec = TestSpec(
      {"/bin/sh", "-c",
       "trap 'echo got-usr1; exit 3' USR1; echo ready; "
       "i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"});
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<runtime::ExecResult> result;
  // The thread inherits the blocked mask, so SIGUSR1 can only land in sigfd.
  std::thread launcher([&] {
    result = runtime::Launch(spec, {.stdin_fd = out.get(), .stdout_fd = out.get(), .stderr_fd = out.get(),
                                    .signal_fd = sigfd.get()});
  });
  bool started = WaitForBytes(out.get(), 6);
  ::kill(::getpid(), SIGUSR1);
  launcher.join();
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ASSERT_TRUE(started);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->reason, ExitReason::kExited) << runtime::ExitReasonName(result->reason);
  EXPECT_EQ(result->exit_code, 3);
  char buf[64] = {};
  ssize_t n = ::pread(out.get(), buf, sizeof(buf) - 1, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "ready\ngot-usr1\n");
}

// Regression test: the sandbox's init is a fork of the launcher
// that never execs and never closes what it inherited, so it holds a copy of
// every fd the launcher process had at clone time (O_CLOEXEC does not help
// without an exec). A caller that feeds the payload's stdin through a pipe
// and then closes the write end never delivers EOF: init still holds the
// write end, `cat` waits forever, and the run ends only by its timeout. The
// same holds for any other fd of a multi-threaded launcher (a daemon): each
// sandbox keeps the others' pipes and sockets alive. Fixed: the child keeps
// only the control socket and the payload's stdio, and init drops even those
// once the payload is forked.
TEST_F(CoreLauncher, PayloadSeesEofWhenTheCallerClosesItsStdinPipe) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd stdin_read(p[0]), stdin_write(p[1]);
  UniqueFd out(::memfd_create("itest-stdout", MFD_CLOEXEC));
  UniqueFd err(::memfd_create("itest-stderr", MFD_CLOEXEC));
  ASSERT_TRUE(out && err);
  runtime::SandboxSpec spec = TestSpec({"/bin/sh", "-c", "echo ready; cat"});
  spec.timeout = absl::Seconds(3);  // bounds the test when the bug is present
  absl::StatusOr<runtime::ExecResult> result;
  std::thread launcher([&] {
    result = runtime::Launch(spec, {.stdin_fd = stdin_read.get(), .stdout_fd = out.get(),
                                    .stderr_fd = err.get()});
  });
  bool started = WaitForBytes(out.get(), 6);
  EXPECT_TRUE(started);
  ASSERT_EQ(::write(stdin_write.get(), "hello\n", 6), 6);
  stdin_write.reset();
  launcher.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->reason, ExitReason::kExited)
      << "reason " << runtime::ExitReasonName(result->reason) << ": cat never saw EOF";
  char buf[64] = {};
  ssize_t n = ::pread(out.get(), buf, sizeof(buf) - 1, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "ready\nhello\n");
}

}  // namespace
}  // namespace cubicle::test_support

// Resource limits through the launcher and the CLI, on this host's real
// cgroups (v1 memory/cpu/pids here; v2 where the host has it). Root only:
// without a writable cgroup tree the limits degrade to rlimits, which
// CoreLimits checks.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/cgroup_host.h"
#include "runtime/launcher.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

// Sandbox groups of process `owner` still present in any hierarchy.
std::vector<std::string> GroupsOf(pid_t owner) {
  std::vector<std::string> found;
  const runtime::CgroupHost& host = runtime::SharedCgroupHost();
  if (!host.layout.ok()) return found;
  const std::string prefix = absl::StrCat("cubicle-", owner, "-");
  for (const cgroups::Hierarchy& h : host.layout->hierarchies) {
    for (const std::string& name : ListDirectory(h.parent)) {
      if (absl::StartsWith(name, prefix)) found.push_back(absl::StrCat(h.parent, "/", name));
    }
  }
  return found;
}

class RootLimits : public HostHygieneTest {
 protected:
  // Whether this host's cgroups offer controller `c` (CgroupsUsable, which
  // SetUp requires, vouches for memory and pids only).
  static bool Have(cgroups::Controller c) {
    const runtime::CgroupHost& host = runtime::SharedCgroupHost();
    return host.layout.ok() && host.layout->Has(c);
  }

  void SetUp() override {
    HostHygieneTest::SetUp();
    if (!IsRoot()) GTEST_SKIP() << "needs root: cgroups are not delegated to this user";
    absl::Status usable = runtime::CgroupsUsable();
    if (!usable.ok()) GTEST_SKIP() << "no usable cgroups here: " << usable;
  }
  void TearDown() override {
    EXPECT_EQ(GroupsOf(::getpid()), std::vector<std::string>{}) << "a sandbox cgroup was left behind";
    HostHygieneTest::TearDown();
  }
};

// A plain sandbox's init is attached to its v1 groups while it builds its
// root (runtime/zygote.cc, step 3), not before it is released: Create must
// still return only once it is in every group, since the request (and with
// it the only process init makes) may follow at once.
TEST_F(RootLimits, InitIsInItsGroupsWhenCreateReturns) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.limits.memory_max = 256ull << 20;
  spec.limits.pids_max = 64;
  for (bool wait_until_ready : {false, true}) {
    runtime::ZygoteOptions options;
    options.wait_until_ready = wait_until_ready;
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(spec, options);
    ASSERT_TRUE(z.ok()) << z.status();
    const std::string cgroups = ReadFile(absl::StrCat("/proc/", (*z)->init_pid(), "/cgroup"));
    const std::string group = absl::StrCat("/cubicle-", ::getpid(), "-");
    int in_groups = 0;
    for (absl::string_view line : absl::StrSplit(cgroups, '\n', absl::SkipEmpty())) {
      // "4:memory:/path" for a v1 hierarchy, "0::/path" for the v2 one.
      std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (f.size() != 3) continue;
      for (cgroups::Controller c : {cgroups::Controller::kMemory, cgroups::Controller::kPids}) {
        const cgroups::Hierarchy* h = runtime::SharedCgroupHost().layout->Find(c);
        if (h == nullptr || (h->version == 2 ? !f[1].empty() : f[1] != cgroups::V1Name(c))) continue;
        EXPECT_TRUE(absl::StrContains(f[2], group)) << "wait_until_ready " << wait_until_ready << ": " << line;
        ++in_groups;
      }
    }
    EXPECT_GE(in_groups, 1) << cgroups;
  }
}

// The sandbox joins its v1 groups itself, writing "0" to their tasks files
// (runtime/zygote.cc, JoinOwnGroups, JoinGroupsSentLater): the launcher
// writes no v1 cgroup.procs, whose migration waits for an RCU grace period
// after an idle spell. As root the launcher makes those groups while the
// sandbox builds its root (step cgroup_v1), which joins them at the end of
// its setup. The steps say which way it went; the limits hold either way
// (the tests above).
TEST_F(RootLimits, TheSandboxJoinsItsV1GroupsItself) {
  const cgroups::Layout& layout = *runtime::SharedCgroupHost().layout;
  bool v1 = false;
  for (cgroups::Controller c : {cgroups::Controller::kMemory, cgroups::Controller::kPids}) {
    const cgroups::Hierarchy* h = layout.Find(c);
    v1 |= h != nullptr && h->version == 1;
  }
  if (!v1) GTEST_SKIP() << "memory and pids are not on cgroup v1 here: no v1 group to join";
  runtime::SandboxSpec spec = TestSpec({"/bin/sh", "-c", "cat /proc/self/cgroup"});
  spec.limits.memory_max = 256ull << 20;
  spec.limits.pids_max = 64;
  // Not the cold path, whose Create does not wait for the join (the sandbox
  // joins before it reads its request; the limit tests run that way).
  runtime::ZygoteOptions options;
  options.wait_until_ready = false;
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(spec, options);
  ASSERT_TRUE(z.ok()) << z.status();
  runtime::ExecRequest request;
  request.argv = spec.argv;
  request.env = spec.env;
  absl::StatusOr<SandboxRun> run = RunInZygote(**z, request);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  bool joined = false, launcher_attached = false, born_elsewhere = false, made_later = false;
  for (const auto& [name, d] : (*z)->creation().steps) {
    joined |= name == "cgroup_join";
    launcher_attached |= name == "cgroup_attach";
    made_later |= name == "cgroup_v1";
  }
  for (const std::string& w : (*z)->creation().warnings) born_elsewhere |= absl::StrContains(w, "CLONE_INTO_CGROUP");
  EXPECT_TRUE(joined);
  EXPECT_TRUE(made_later) << "the v1 groups were made before clone";
  // Born in its v2 group (or none here): the launcher attached nothing.
  if (!born_elsewhere) {
    EXPECT_FALSE(launcher_attached);
  }
  // The payload's own view (its cgroup namespace is rooted at its groups).
  EXPECT_FALSE(run->out.empty());
}

// The v1 groups are made while the sandbox builds its root: a root that
// fails to build is still the sandbox's own clear error (not a failure to
// hand it its groups), cold and pooled, and so is a failure after the join;
// no group or process is left.
TEST_F(RootLimits, ASetupThatFailsBeforeJoiningItsGroupsSaysWhy) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.limits.memory_max = 256ull << 20;
  spec.limits.pids_max = 64;
  // /usr is bound read-only: the sandbox's own mkdir fails (EROFS).
  rootfs::MountOp dir;
  dir.kind = rootfs::MountKind::kDir;
  dir.dest = "/usr/itest-no-such-dir";
  spec.mounts.push_back(dir);
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kSetupFailed);
  EXPECT_TRUE(absl::StrContains(run->result.setup_error.message(), "mkdir(/usr/itest-no-such-dir): EROFS"))
      << run->result.setup_error;
  // Failing after the join: the cold path's Create did not wait for the
  // sandbox's 'A', which comes before the report, and the report is read.
  spec.mounts.pop_back();
  spec.cwd = "/no/such/dir";
  run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kSetupFailed);
  EXPECT_TRUE(absl::StrContains(run->result.setup_error.message(), "chdir")) << run->result.setup_error;
  spec.cwd = "/";
  spec.mounts.push_back(dir);
  runtime::ZygoteOptions pooled;
  pooled.wait_until_ready = true;
  spec.argv.clear();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(spec, pooled);
  ASSERT_FALSE(z.ok());
  EXPECT_TRUE(absl::StrContains(z.status().message(), "mkdir(/usr/itest-no-such-dir): EROFS")) << z.status();
}

// A zygote reads its stats through files it opened while it waited
// (SandboxCgroup::KeepStatFilesOpen): the reply still carries what this
// execution used, as a pool returns it (at the exit report).
TEST_F(RootLimits, AZygotesStatsAreThoseOfItsExecution) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.limits.memory_max = 256ull << 20;
  spec.limits.pids_max = 64;
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(spec, {});
  ASSERT_TRUE(z.ok()) << z.status();
  runtime::ExecRequest r;
  // Holds 8 MB in the shell, with a few processes, and spins a little.
  r.argv = {"/bin/sh", "-c", "x=$(head -c 8000000 /dev/zero | tr '\\0' a); i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo ${#x}"};
  r.env = {"PATH=/usr/bin:/bin"};
  r.return_at_exit = true;
  absl::StatusOr<SandboxRun> run = RunInZygote(**z, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "8000000\n") << run->err;
  ASSERT_TRUE(run->result.cgroup.has_value()) << "no cgroup stats in the result";
  const cgroups::Stats& stats = *run->result.cgroup;
  EXPECT_GT(stats.memory_peak_bytes.value_or(0), 8000000u);
  EXPECT_GT(stats.cpu_usage_ns.value_or(0), 0u);
  if (stats.pids_peak.has_value()) {
    EXPECT_GE(*stats.pids_peak, 3u);  // init, sh and its pipeline
  }
}

TEST_F(RootLimits, MemoryBombEndsWithReasonOom) {
  REQUIRE_HOST(Python3());
  runtime::SandboxSpec spec =
      TestSpec({"python3", "-c", "b = bytearray(512 << 20)\nprint('survived', len(b))"});
  spec.limits.memory_max = 64ull << 20;
  spec.timeout = absl::Seconds(60);
  // Also without the counters asked for, as `cubicle run` launches.
  for (bool read_stats : {true, false}) {
    SCOPED_TRACE(read_stats ? "stats asked for" : "stats not asked for");
    runtime::LaunchOptions options;
    options.read_stats = read_stats;
    absl::StatusOr<SandboxRun> run = RunInSandbox(spec, "", options);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->result.reason, runtime::ExitReason::kOom) << run->out << run->err;
    EXPECT_EQ(run->result.signal, SIGKILL);
    ASSERT_TRUE(run->result.cgroup.has_value());
    EXPECT_GE(run->result.cgroup->oom_kills.value_or(0), 1u);
    EXPECT_LE(run->result.cgroup->memory_peak_bytes.value_or(0), 64ull << 20);
    EXPECT_EQ(run->out.find("survived"), std::string::npos);
  }
}

// A caller that reports no counters (`cubicle run` without --json-status)
// has them read only for the OOM verdict of a SIGKILLed payload.
TEST_F(RootLimits, StatsAreReadOnlyWhenAskedOrForTheOomVerdict) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.limits.memory_max = 256ull << 20;
  spec.limits.pids_max = 64;
  runtime::LaunchOptions quiet;
  quiet.read_stats = false;
  absl::StatusOr<runtime::ExecResult> plain = runtime::Launch(spec, quiet);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->reason, runtime::ExitReason::kExited);
  EXPECT_FALSE(plain->cgroup.has_value());

  absl::StatusOr<runtime::ExecResult> asked = runtime::Launch(spec);
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_TRUE(asked->cgroup.has_value());
  EXPECT_TRUE(asked->cgroup->pids_peak.has_value());

  spec.argv = {"/bin/sh", "-c", "kill -KILL $$"};
  absl::StatusOr<runtime::ExecResult> killed = runtime::Launch(spec, quiet);
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(killed->reason, runtime::ExitReason::kSignaled);
  ASSERT_TRUE(killed->cgroup.has_value()) << "no counters for the OOM verdict of a SIGKILL";
  EXPECT_EQ(killed->cgroup->oom_kills.value_or(0), 0u);
}

TEST_F(RootLimits, ForkBombIsBoundedByPidsAndDiesOnTimeout) {
  REQUIRE_HOST(Python3());
  // Every shell forks copies of itself forever; once the pids limit
  // refuses forks they keep trying, and only the timeout ends the sandbox.
  // (Python, not sh: dash gives up at the first refused fork.)
  runtime::SandboxSpec spec = TestSpec(
      {"python3", "-c",
       "import os, time\n"
       "while True:\n"
       "    try:\n"
       "        os.fork()\n"
       "    except OSError:\n"
       "        time.sleep(0.01)\n"});
  spec.limits.pids_max = 32;
  spec.timeout = absl::Seconds(2);
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kTimeout);
  ASSERT_TRUE(run->result.cgroup.has_value());
  if (run->result.cgroup->pids_peak.has_value()) {
    EXPECT_LE(*run->result.cgroup->pids_peak, 32u);
    EXPECT_GE(*run->result.cgroup->pids_peak, 8u) << "the bomb should have reached the limit";
  }
}

TEST_F(RootLimits, CpuQuotaBoundsCpuTime) {
  // Two busy loops for 2 s of wall time under a 0.2-CPU quota: the group's
  // own accounting should show about 0.4 s (generous bounds: a loaded VM).
  if (!Have(cgroups::Controller::kCpu) || !Have(cgroups::Controller::kCpuacct)) {
    GTEST_SKIP() << "no cpu and cpuacct controllers here: no CPU quota to set and measure";
  }
  runtime::SandboxSpec spec = ShellSpec("while :; do :; done & while :; do :; done");
  spec.limits.cpus = 0.2;
  spec.timeout = absl::Seconds(2);
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kTimeout);
  ASSERT_TRUE(run->result.cgroup.has_value() && run->result.cgroup->cpu_usage_ns.has_value());
  double cpu_s = static_cast<double>(*run->result.cgroup->cpu_usage_ns) / 1e9;
  EXPECT_GT(cpu_s, 0.15) << "the loops should have used their quota";
  EXPECT_LT(cpu_s, 0.8) << "0.2 CPU over 2 s is 0.4 s; two unthrottled loops would use up to 4 s";
}

TEST_F(RootLimits, TwoHundredRunsLeaveNoCgroup) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.limits.pids_max = 16;
  spec.limits.memory_max = 32ull << 20;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_EQ(run->result.reason, runtime::ExitReason::kExited) << i << ": " << run->result.setup_error;
    ASSERT_TRUE(run->result.warnings.empty()) << run->result.warnings.front();
  }
  EXPECT_EQ(GroupsOf(::getpid()), std::vector<std::string>{});
}

TEST_F(RootLimits, KilledCubicleLeavesNothingAfterTheNextStart) {
  const std::string mark = absl::StrCat("sleep 1000.", ::getpid(), "3");
  RunningProcess cubicle(CubicleArgv({"run", "--pids", "16", "--", "/bin/sh", "-c",
                                      absl::StrCat("echo ready; ", mark)}));
  ASSERT_TRUE(cubicle.started());
  ASSERT_TRUE(cubicle.WaitForStdout("ready\n"));
  ASSERT_FALSE(GroupsOf(cubicle.pid()).empty()) << "the running sandbox should have its cgroup";
  cubicle.Signal(SIGKILL);
  cubicle.Wait();
  EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{});
  // The dead cubicle could not remove its groups; the next one sweeps them.
  ProcessRun next = RunCubicle({"run", "--pids", "16", "--", "/bin/true"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(GroupsOf(cubicle.pid()), std::vector<std::string>{});
}

// `cubicle run` exits once its sandbox's processes are gone and leaves the
// groups to a cleaner process (runtime/teardown.h). This test makes itself
// the subreaper of what outlives the launcher, reaps it, and then finds
// every group gone: the cleaner ran, and removed them.
TEST_F(RootLimits, ColdRunsCleanerRemovesTheGroupsAfterTheLauncherExits) {
  OrphanReaper reaper;
  RunningProcess cubicle(CubicleArgv({"run", "--pids", "16", "--memory", "64M", "--", "/bin/sh", "-c", "exit 7"}));
  ASSERT_TRUE(cubicle.started());
  ProcessRun run = cubicle.Wait();
  EXPECT_EQ(run.exit_code, 7) << run.err;
  EXPECT_EQ(reaper.ReapAll(), 1) << "one cleaner outlives the launcher (init is the launcher's to reap)";
  EXPECT_EQ(GroupsOf(cubicle.pid()), std::vector<std::string>{});
}

// `cubicle run` as PID 1 of its own pid namespace (a container's entry
// point): its exit kills every process of that namespace, a cleaner
// included, so it tears its sandbox down itself. Its groups are named
// after the pid it sees, 1. (With a procfs of its own pid namespace: it
// names processes by /proc/<pid>, which the host's procfs answers for
// other processes.)
TEST_F(RootLimits, RunAsPid1OfAPidNamespaceLeavesNoGroup) {
  if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "unshare(1) is not installed";
  ASSERT_EQ(GroupsOf(1), std::vector<std::string>{}) << "left by something else before this test";
  std::vector<std::string> argv = {"/usr/bin/unshare", "--pid", "--fork", "--kill-child", "--mount-proc"};
  for (const std::string& a : CubicleArgv({"run", "--pids", "16", "--", "/bin/sh", "-c", "exit 6"})) argv.push_back(a);
  OrphanReaper reaper;  // nothing should outlive it, but a regression's cleaner would
  ProcessRun run = RunProcess(argv);
  EXPECT_EQ(run.exit_code, 6) << run.err;
  EXPECT_EQ(reaper.ReapAll(), 0) << "a cleaner outlived the namespace's PID 1";
  EXPECT_EQ(GroupsOf(1), std::vector<std::string>{});
}

// What a cold launch leaves standing (LaunchOptions::remains), not handed
// to ExitAfterSandbox, is torn down by its destructor: init reaped, groups
// removed (the fixture checks both).
TEST_F(RootLimits, LaunchRemainsAreTornDownWhenDropped) {
  runtime::SandboxSpec spec = TestSpec({"/bin/sh", "-c", "sleep 1000 & exit 5"});
  spec.limits.pids_max = 16;
  std::optional<runtime::SandboxRemains> remains;
  runtime::LaunchOptions options;
  options.remains = &remains;
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec, "", options);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->result.exit_code, 5);
  ASSERT_TRUE(remains.has_value()) << "the run returned at the exit report: init lingers";
  EXPECT_FALSE(GroupsOf(::getpid()).empty()) << "the groups stay until the remains go";
  remains.reset();
  EXPECT_EQ(GroupsOf(::getpid()), std::vector<std::string>{});
  EXPECT_EQ(Descendants(), std::vector<pid_t>{});
}

TEST_F(RootLimits, JsonStatusCarriesTheAccounting) {
  if (!Have(cgroups::Controller::kCpuacct)) GTEST_SKIP() << "no CPU accounting (cpuacct) here";
  TempDir dir;
  std::string json = dir.Join("status.json");
  ProcessRun run = RunCubicle({"run", "--memory", "128M", "--pids", "64", "--json-status", json, "--",
                               "/bin/sh", "-c", "head -c 4000000 /dev/zero > /dev/null"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string text = ReadFile(json);
  EXPECT_TRUE(absl::StrContains(text, "\"memory_peak_bytes\":")) << text;
  EXPECT_TRUE(absl::StrContains(text, "\"cpu_usage_ns\":")) << text;
  EXPECT_TRUE(absl::StrContains(text, "\"oom_kills\":0")) << text;
}

TEST_F(RootLimits, CpuBreakerWarnsWithSigusr1ThenKills) {
  if (!Have(cgroups::Controller::kCpuacct)) GTEST_SKIP() << "no CPU accounting (cpuacct) for the breaker to read";
  // The payload hears SIGUSR1 (and says so) but keeps spinning. The share
  // is low so that a spinning loop stays above it even on a loaded CI
  // machine; if it still dips under at the end of the grace, the breaker
  // re-arms (as designed) and warns again before it kills, so the test
  // checks the first and the last warning rather than their count.
  runtime::SandboxSpec spec =
      ShellSpec("trap 'echo got-usr1' USR1; while :; do :; done");
  spec.breakers.cpu_share = 0.1;
  spec.breakers.cpu_window = absl::Milliseconds(500);
  spec.breakers.cpu_grace = absl::Milliseconds(800);
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kBreakerCpu)
      << run->err << absl::StrJoin(run->result.warnings, "\n");
  EXPECT_EQ(run->result.signal, SIGKILL);
  EXPECT_TRUE(absl::StrContains(run->out, "got-usr1")) << run->out;
  ASSERT_GE(run->result.warnings.size(), 2u);
  EXPECT_TRUE(absl::StrContains(run->result.warnings.front(), "sent SIGUSR1"))
      << run->result.warnings.front();
  EXPECT_TRUE(absl::StrContains(run->result.warnings.back(), "sandbox killed"))
      << run->result.warnings.back();
  for (size_t i = 0; i + 1 < run->result.warnings.size(); ++i) {
    EXPECT_TRUE(absl::StrContains(run->result.warnings[i], "sent SIGUSR1")) << run->result.warnings[i];
  }
}

TEST_F(RootLimits, MemoryBreakerSendsSigtermThenKillsAfterTheGrace) {
  REQUIRE_HOST(Python3());
  runtime::SandboxSpec spec = TestSpec(
      {"python3", "-c",
       "import signal, time\n"
       "signal.signal(signal.SIGTERM, lambda *a: print('got-term', flush=True))\n"
       "b = bytearray(96 << 20)\n"
       "time.sleep(30)\n"});
  spec.limits.memory_max = 256ull << 20;
  spec.breakers.memory_mark = 48ull << 20;
  // Long enough for the handler to run and print on a loaded CI machine
  // (the CPU breaker's test failed there on a tight timing once).
  spec.breakers.memory_grace = absl::Milliseconds(1500);
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kBreakerMemory) << run->err;
  EXPECT_EQ(run->result.signal, SIGKILL);
  EXPECT_TRUE(absl::StrContains(run->out, "got-term")) << run->out;
  EXPECT_FALSE(run->result.cgroup->oom_killed()) << "the breaker acts below the hard limit";
}

TEST_F(RootLimits, MemoryBreakerReasonWhenThePayloadObeysSigterm) {
  REQUIRE_HOST(Python3());
  runtime::SandboxSpec spec = TestSpec(
      {"python3", "-c", "import time\nb = bytearray(96 << 20)\ntime.sleep(30)\n"});
  spec.breakers.memory_mark = 48ull << 20;
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kBreakerMemory);
  EXPECT_EQ(run->result.signal, SIGTERM) << "it died of the breaker's SIGTERM, before any SIGKILL";
}

TEST_F(RootLimits, IoBreakerKillsAWriteStorm) {
  // Block IO needs a real disk: a host directory (not the sandbox's tmpfs).
  TempDir host;
  REQUIRE_HOST(DirectWrites(host.path()));  // dd's oflag=direct
  ASSERT_EQ(::chmod(host.path().c_str(), 0777), 0);
  runtime::SandboxSpec spec = ShellSpec(
      "i=0; while [ $i -lt 40 ]; do dd if=/dev/zero of=/data/f bs=1M count=64 oflag=direct "
      "2>/dev/null || exit 3; i=$((i+1)); done; echo finished");
  rootfs::MountOp data;
  data.kind = rootfs::MountKind::kBind;
  data.source = host.path();
  data.dest = "/data";
  spec.mounts.push_back(data);
  spec.breakers.io_bytes_per_sec = 4ull << 20;
  spec.breakers.io_window = absl::Milliseconds(300);
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  if (run->result.reason == runtime::ExitReason::kExited && absl::StrContains(run->out, "finished")) {
    GTEST_SKIP() << "this host's cgroup accounted no block IO for the sandbox (virtual disk "
                    "without IO accounting?)";
  }
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kBreakerIo) << run->out << run->err;
  EXPECT_EQ(run->result.signal, SIGKILL);
}

class CoreLimits : public HostHygieneTest {};

TEST_F(CoreLimits, BadLimitValuesAreUsageErrorsNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--memory", "-1"}, "--memory"},       {{"--memory", "lots"}, "--memory"},
      {{"--memory", "12"}, "--memory"},       {{"--pids", "0"}, "--pids"},
      {{"--pids", "-5"}, "--pids"},           {{"--cpus", "0"}, "--cpus"},
      {{"--cpus", "abc"}, "--cpus"},          {{"--cpus", "100000"}, "--cpus"},
      {{"--cpu-weight", "0"}, "--cpu-weight"}, {{"--io-read-bps", "8:0"}, "--io-read-bps"},
      {{"--memory", "64M", "--memory-high", "128M"}, "--memory-high"},
  };
  for (const auto& [flags, named] : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "/bin/true"});
    ProcessRun run = RunCubicle(args);
    EXPECT_EQ(run.exit_code, 2) << flags[0] << " " << flags[1] << ": " << run.err;
    EXPECT_EQ(Lines(run.err).size(), 1u) << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, named)) << run.err;
  }
}

TEST_F(CoreLimits, WithoutCgroupsMemoryDegradesToAnAddressSpaceLimit) {
  if (runtime::CgroupsUsable().ok()) GTEST_SKIP() << "cgroups are usable here: no degradation to see";
  runtime::SandboxSpec spec = ShellSpec("ulimit -v");
  spec.limits.memory_max = 100ull << 20;
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "102400\n");
  ASSERT_FALSE(run->result.warnings.empty());
  EXPECT_TRUE(absl::StrContains(run->result.warnings.front(), "RLIMIT_AS")) << run->result.warnings.front();
  EXPECT_FALSE(run->result.cgroup.has_value());
}

}  // namespace
}  // namespace cubicle::test_support

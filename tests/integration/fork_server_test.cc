// The fork server (runtime/fork_server.h): zygotes made by `cubicle
// __fork-server` and run here; its errors; what is left when it, its
// client or the daemon above it dies.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "cgroups/layout.h"
#include "runtime/capture.h"
#include "runtime/cgroup_host.h"
#include "runtime/fork_server.h"
#include "runtime/pool.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

// The daemon config the server is given: one plain profile, with limits
// so that every sandbox has groups where the host gives any.
constexpr char kSetup[] = R"({"profiles": {"shell": {"limits": {"memory": "256M", "pids": 64}}}})";
constexpr absl::Duration kStart = absl::Seconds(30);
constexpr absl::Duration kMake = absl::Seconds(30);

runtime::ZygoteOptions ShellOptions() { return runtime::ZygoteOptions{}; }

runtime::SandboxSpec ShellSpec() {
  runtime::SandboxSpec spec = TestSpec({});
  spec.limits.memory_max = 256 << 20;
  spec.limits.pids_max = 64;
  return spec;
}

// Runs `argv` in `zygote` with its output captured.
absl::StatusOr<runtime::CapturedRun> RunIn(runtime::Zygote& zygote, std::vector<std::string> argv) {
  runtime::ExecRequest request;
  request.argv = std::move(argv);
  request.timeout = absl::Seconds(30);
  request.return_at_exit = true;
  return runtime::RunCaptured([&](const runtime::ExecRequest& r) { return zygote.Run(r); }, request, "", 1 << 16);
}

class CoreForkServer : public HostHygieneTest {
 protected:
  std::unique_ptr<runtime::ForkServer> Start(const std::string& setup = kSetup) {
    absl::StatusOr<std::unique_ptr<runtime::ForkServer>> server =
        runtime::ForkServer::Start(CubicleBinary(), setup, kStart);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }
};

TEST_F(CoreForkServer, MakesZygotesThatRunHere) {
  std::unique_ptr<runtime::ForkServer> server = Start();
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<runtime::ZygoteHandover> handover = server->Make("shell", ShellSpec().limits, kMake);
    ASSERT_TRUE(handover.ok()) << handover.status();
    EXPECT_GT(handover->init_pid, 0);
    EXPECT_TRUE(handover->direct) << "a zygote built ahead of its request has an armed payload";
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> zygote =
        runtime::Zygote::TakeOver(*std::move(handover), ShellSpec(), ShellOptions());
    ASSERT_TRUE(zygote.ok()) << zygote.status();
    EXPECT_TRUE((*zygote)->alive());
    absl::StatusOr<runtime::CapturedRun> run = RunIn(**zygote, {"/bin/sh", "-c", "echo made; cat /proc/1/comm; id -u"});
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error << run->err;
    EXPECT_EQ(run->out, "made\ncubicle-init\n1000\n") << run->err;
    if (runtime::CgroupsUsable().ok()) {
      ASSERT_TRUE(run->result.cgroup.has_value()) << "the groups were not taken over";
      EXPECT_GT(run->result.cgroup->cpu_usage_ns.value_or(0), 0u);
    }
  }
  // Each Zygote's destruction killed its init and removed its groups; the
  // server reaped the inits.
  const pid_t server_pid = server->pid();
  server.reset();
  EXPECT_EQ(CgroupsMadeBy(server_pid), std::vector<std::string>{});
}

TEST_F(CoreForkServer, RefusesASetupItCannotParseAndSaysWhy) {
  absl::StatusOr<std::unique_ptr<runtime::ForkServer>> server =
      runtime::ForkServer::Start(CubicleBinary(), R"({"profiles": {"shell": {"limits": {"memory": "lots"}}}})", kStart);
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(server.status())) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(), "profiles.shell.limits.memory")) << server.status();
}

TEST_F(CoreForkServer, AnExecutableThatIsNoServerIsAnError) {
  absl::StatusOr<std::unique_ptr<runtime::ForkServer>> server =
      runtime::ForkServer::Start("/bin/true", kSetup, kStart);
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::IsUnavailable(server.status())) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(), "exited before it was ready")) << server.status();
}

TEST_F(CoreForkServer, AnUnknownProfileIsNotFound) {
  std::unique_ptr<runtime::ForkServer> server = Start();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<runtime::ZygoteHandover> handover = server->Make("nonesuch", ShellSpec().limits, kMake);
  ASSERT_FALSE(handover.ok());
  EXPECT_TRUE(absl::IsNotFound(handover.status())) << handover.status();
  EXPECT_TRUE(absl::StrContains(handover.status().message(), "nonesuch")) << handover.status();
  // The server goes on serving.
  EXPECT_TRUE(server->Make("shell", ShellSpec().limits, kMake).ok());
}

// A warm profile's zygotes are forks of its template's interpreter unless
// its interpreter says "template": false; then each starts its own, as
// init's child.
TEST_F(CoreForkServer, AWarmProfileMayOptOutOfItsTemplate) {
  REQUIRE_HOST(Python3());
  std::unique_ptr<runtime::ForkServer> server = Start(R"({"profiles": {
      "shared": {"limits": {"memory": "256M", "pids": 64},
                 "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}},
      "own": {"limits": {"memory": "256M", "pids": 64},
              "interpreter": {"argv": ["python3", "-I"], "preload": ["json"], "template": false}}}})");
  ASSERT_NE(server, nullptr);
  auto init_children = [](pid_t init) {
    std::vector<std::string> comms;
    for (absl::string_view pid : absl::StrSplit(ReadFile(absl::StrCat("/proc/", init, "/task/", init, "/children")),
                                                ' ', absl::SkipWhitespace())) {
      comms.push_back(std::string(absl::StripAsciiWhitespace(ReadFile(absl::StrCat("/proc/", pid, "/comm")))));
    }
    return comms;
  };
  absl::StatusOr<runtime::ZygoteHandover> shared = server->Make("shared", ShellSpec().limits, kMake);
  ASSERT_TRUE(shared.ok()) << shared.status();
  absl::StatusOr<runtime::ZygoteHandover> own = server->Make("own", ShellSpec().limits, kMake);
  ASSERT_TRUE(own.ok()) << own.status();
  // The template's zygote: its interpreter is the template's child, not init's.
  EXPECT_EQ(init_children(shared->init_pid), std::vector<std::string>{});
  EXPECT_EQ(init_children(own->init_pid), std::vector<std::string>{"python3"});
  const pid_t server_pid = server->pid();
  server.reset();  // a hang-up: the server ends both, and the template
  EXPECT_EQ(CgroupsMadeBy(server_pid), std::vector<std::string>{});
}

// A zygote made but never taken over: the server removes what the taker
// would have when the client hangs up.
TEST_F(CoreForkServer, AHangUpEndsWhatWasNotTakenOver) {
  std::unique_ptr<runtime::ForkServer> server = Start();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<runtime::ZygoteHandover> handover = server->Make("shell", ShellSpec().limits, kMake);
  ASSERT_TRUE(handover.ok()) << handover.status();
  const pid_t server_pid = server->pid();
  if (runtime::CgroupsUsable().ok()) {
    EXPECT_FALSE(CgroupsMadeBy(server_pid).empty());
  }
  server.reset();  // hangs up, reaps the server
  EXPECT_EQ(CgroupsMadeBy(server_pid), std::vector<std::string>{});
}

// The server killed: what it made dies with it, a new request says so, and
// the taker's teardown leaves nothing.
TEST_F(CoreForkServer, AKilledServerTakesItsZygotesWithIt) {
  std::unique_ptr<runtime::ForkServer> server = Start();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<runtime::ZygoteHandover> handover = server->Make("shell", ShellSpec().limits, kMake);
  ASSERT_TRUE(handover.ok()) << handover.status();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> zygote =
      runtime::Zygote::TakeOver(*std::move(handover), ShellSpec(), ShellOptions());
  ASSERT_TRUE(zygote.ok()) << zygote.status();
  const pid_t server_pid = server->pid();
  ASSERT_EQ(::kill(server_pid, SIGKILL), 0);  // ours, by pid
  for (int i = 0; i < 2000 && (*zygote)->alive(); ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_FALSE((*zygote)->alive()) << "a zygote outlived its server";
  EXPECT_FALSE(server->alive());
  absl::StatusOr<runtime::ZygoteHandover> again = server->Make("shell", ShellSpec().limits, kMake);
  EXPECT_TRUE(absl::IsUnavailable(again.status())) << again.status();
  absl::StatusOr<runtime::CapturedRun> run = RunIn(**zygote, {"/bin/true"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kSetupFailed);
  zygote->reset();
  server.reset();
  EXPECT_EQ(CgroupsMadeBy(server_pid), std::vector<std::string>{});
}

// A pool whose fork server is killed under load starts a new one, drops
// what died, and keeps serving.
TEST_F(CoreForkServer, APoolRestartsAKilledServerAndKeepsServing) {
  runtime::PoolConfig config;
  config.min_idle = 2;
  config.max_idle = 2;
  config.refill_parallelism = 1;  // one server to kill
  absl::StatusOr<std::unique_ptr<runtime::Pool>> pool = runtime::Pool::Create(
      "shell", ShellSpec(), config, runtime::ForkServerMakers(CubicleBinary(), kSetup, "shell"));
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitWarm(absl::Seconds(30)));
  std::vector<pid_t> servers = Descendants();
  std::vector<pid_t> first_servers;
  for (pid_t pid : servers) {
    // "PID (COMM) STATE PPID ...": a child of this process, in whatever
    // state it is caught (sleeping, or running a refill).
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(") ");
    const bool ours = paren != std::string::npos && stat.size() > paren + 4 &&
                      absl::StartsWith(stat.substr(paren + 4), absl::StrCat(::getpid(), " "));
    if (absl::StrContains(ReadFile(absl::StrCat("/proc/", pid, "/cmdline")), runtime::kForkServerCommand) && ours) {
      first_servers.push_back(pid);
    }
  }
  ASSERT_EQ(first_servers.size(), 1u) << "one refill thread, one server";
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::thread load([&] {
    for (int i = 0; i < 400 && !stop; ++i) {
      runtime::ExecRequest r;
      r.argv = {"/bin/true"};
      absl::StatusOr<runtime::ExecResult> result = (*pool)->Run(r);
      (result.ok() && result->reason == runtime::ExitReason::kExited ? ok : failed)++;
    }
  });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(::kill(first_servers[0], SIGKILL), 0);  // ours (a child), by pid
  bool restarted = false;
  for (int i = 0; i < 3000 && !restarted; ++i) {
    restarted = (*pool)->Stats().maker_restarts >= 1 && (*pool)->Stats().idle >= 1;
    if (!restarted) absl::SleepFor(absl::Milliseconds(10));
  }
  stop = true;
  load.join();
  EXPECT_TRUE(restarted) << "the pool did not start a new server";
  EXPECT_GT(ok.load(), 0);
  // After the restart every request is served again.
  for (int i = 0; i < 5; ++i) {
    runtime::ExecRequest r;
    r.argv = {"/bin/echo", "after"};
    absl::StatusOr<runtime::ExecResult> result = (*pool)->Run(r);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->reason, runtime::ExitReason::kExited) << result->setup_error;
  }
  pool->reset();
  EXPECT_EQ(CgroupsMadeBy(first_servers[0]), std::vector<std::string>{}) << "the dead server's groups were left";
}

// Admission: a miss never makes its sandbox in the daemon's process; it
// takes the next zygote refill makes.
TEST_F(CoreForkServer, AMissWaitsForTheNextZygoteInsteadOfBuildingOne) {
  runtime::PoolConfig config;
  config.min_idle = 0;  // nothing is built ahead: every request misses
  config.max_idle = 1;
  absl::StatusOr<std::unique_ptr<runtime::Pool>> pool = runtime::Pool::Create(
      "shell", ShellSpec(), config, runtime::ForkServerMakers(CubicleBinary(), kSetup, "shell"));
  ASSERT_TRUE(pool.ok()) << pool.status();
  for (int i = 0; i < 3; ++i) {
    runtime::ExecRequest r;
    r.argv = {"/bin/echo", "waited"};
    absl::StatusOr<runtime::ExecResult> result = (*pool)->Run(r);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->reason, runtime::ExitReason::kExited) << result->setup_error;
  }
  runtime::PoolStats s = (*pool)->Stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.queue_wait.count(), 3u);
  EXPECT_EQ(s.cold_start.count(), 0u) << "a miss built its own sandbox";
  EXPECT_EQ(s.handoff.count(), 3u);
  EXPECT_EQ(s.built, 3u);
  EXPECT_EQ(s.waiting, 0u);
  EXPECT_EQ(s.refill_cpu.count(), 3u);
  EXPECT_GT(s.refill_cpu.sum_seconds(), 0.0) << "a build's CPU time was not counted";
}

// A request whose limits need a group the profile's zygotes do not have
// gets a zygote built with them, by the fork server.
TEST_F(CoreForkServer, LimitsTheZygotesCannotTakeGetAZygoteOfTheirOwn) {
  const runtime::CgroupHost& host = runtime::SharedCgroupHost();
  if (!runtime::CgroupsUsable().ok() || !host.layout.ok() || !host.layout->Has(cgroups::Controller::kCpu)) {
    GTEST_SKIP() << "needs usable cgroups with the cpu controller";
  }
  runtime::PoolConfig config;
  config.min_idle = 1;
  config.max_idle = 1;
  absl::StatusOr<std::unique_ptr<runtime::Pool>> pool = runtime::Pool::Create(
      "shell", ShellSpec(), config, runtime::ForkServerMakers(CubicleBinary(), kSetup, "shell"));
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitWarm(absl::Seconds(30)));
  runtime::ExecRequest r;
  r.argv = {"/bin/echo", "capped"};
  r.limits = ShellSpec().limits;
  r.limits->cpus = 0.5;
  absl::StatusOr<runtime::ExecResult> result = (*pool)->Run(r);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->reason, runtime::ExitReason::kExited) << result->setup_error;
  runtime::PoolStats s = (*pool)->Stats();
  EXPECT_EQ(s.hits, 0u) << "the idle zygote has no cpu group to take the limit";
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.cold_start.count(), 0u);
  EXPECT_GE(s.built, 2u);
  EXPECT_EQ(s.idle, 1u) << "the idle zygote stays for requests it suits";
}

}  // namespace
}  // namespace cubicle::test_support

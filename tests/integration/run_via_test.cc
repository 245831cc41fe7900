// `cubicle run --via SOCKET` (cli/run_via.h): the command runs in a sandbox
// of a running `cubicle serve`, from its pool, and comes back as a local
// run's would — output, stdin, exit status, messages.
#include <signal.h>

#include <string>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

class CoreRunVia : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    socket_ = dir_.Join("cubicle.sock");
    daemon_ = std::make_unique<RunningProcess>(CubicleArgv({"serve", "--socket", socket_}));
    ASSERT_TRUE(daemon_->started());
    bool up = false;
    for (int i = 0; i < 500 && !up; ++i) {  // at most 5 s
      up = DaemonClient(socket_).connected();
      if (!up) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(up) << "the daemon never listened";
  }

  void TearDown() override {
    if (daemon_ != nullptr) {
      daemon_->Signal(SIGTERM);
      ProcessRun done = daemon_->Wait(absl::Seconds(60));
      EXPECT_EQ(done.exit_code, 0) << done.err;
      daemon_.reset();
    }
    HostHygieneTest::TearDown();
  }

  // The shell pool's hits + misses: how many runs the daemon has served.
  int64_t ShellRequests() {
    std::string reply = DaemonClient(socket_).Call(R"({"jsonrpc":"2.0","id":1,"method":"pool.stats"})");
    boost::system::error_code ec;
    json::value v = json::parse(reply, ec);
    if (ec) return -1;
    const json::value& shell = v.at("result").at("pools").at("shell");
    return shell.at("hits").as_int64() + shell.at("misses").as_int64();
  }

  TempDir dir_;
  std::string socket_;
  std::unique_ptr<RunningProcess> daemon_;
};

TEST_F(CoreRunVia, OutputStdinEnvironmentAndExitStatusComeBackAsFromALocalRun) {
  const int64_t before = ShellRequests();
  ProcessRun run = RunCubicle({"run", "--via", socket_, "--setenv", "FOO", "bar", "--chdir", "/tmp", "--", "sh", "-c",
                               "cat; echo $FOO $(pwd); echo to-stderr >&2; exit 3"},
                              "from-stdin\n");
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_EQ(run.out, "from-stdin\nbar /tmp\n");
  EXPECT_TRUE(absl::StrContains(run.err, "to-stderr\n")) << run.err;
  EXPECT_EQ(ShellRequests(), before + 1) << "the daemon's shell pool did not serve it";
}

TEST_F(CoreRunVia, ASignalIs128PlusNAndATimeoutIs124AndSaysSo) {
  ProcessRun killed = RunCubicle({"run", "--via", socket_, "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(killed.exit_code, 137) << killed.err;
  ProcessRun slow = RunCubicle({"run", "--via", socket_, "--timeout", "0.3", "--", "sleep", "30"});
  EXPECT_EQ(slow.exit_code, 124) << slow.err;
  EXPECT_TRUE(absl::StrContains(slow.err, "timed out")) << slow.err;
}

TEST_F(CoreRunVia, AMissingCommandIs125WithTheSetupError) {
  ProcessRun run = RunCubicle({"run", "--via", socket_, "--", "/nonexistent-command"});
  EXPECT_EQ(run.exit_code, 125) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "execve(/nonexistent-command)")) << run.err;
}

TEST_F(CoreRunVia, AFlagTheDaemonCannotTakeIsRefusedBeforeAnythingRuns) {
  const int64_t before = ShellRequests();
  ProcessRun run = RunCubicle({"run", "--via", socket_, "--bind", "/tmp", "/x", "--", "true"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(run.err, "--bind cannot go with --via")) << run.err;
  ProcessRun bad = RunCubicle({"run", "--via", socket_, "--pids", "many", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad.err, "--pids 'many'")) << bad.err;
  EXPECT_EQ(ShellRequests(), before) << "a refused run reached the daemon";
}

TEST_F(CoreRunVia, WhatTheDaemonRefusesIsAUsageErrorNamingWhy) {
  ProcessRun looser = RunCubicle({"run", "--via", socket_, "--memory", "64G", "--", "true"});
  EXPECT_EQ(looser.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(looser.err, "exceeds the profile's")) << looser.err;
  ProcessRun unknown = RunCubicle({"run", "--via", socket_, "--profile", "no-such-profile", "--", "true"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(unknown.err, "no-such-profile")) << unknown.err;
}

TEST_F(CoreRunVia, TheEnvironmentVariableSelectsTheDaemonAndJsonStatusIsWritten) {
  const std::string status = dir_.Join("status.json");
  ProcessRun run = RunCubicle({"run", "--json-status", status, "--", "sh", "-c", "echo via-env"}, "",
                              {"CUBICLE_VIA=" + socket_});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "via-env\n");
  boost::system::error_code ec;
  json::value v = json::parse(ReadFile(status), ec);
  ASSERT_FALSE(ec) << ReadFile(status);
  EXPECT_EQ(v.at("reason").as_string(), "exited");
  EXPECT_EQ(v.at("profile").as_string(), "shell");
}

TEST_F(CoreRunVia, AnUnreachableDaemonIs125NamingTheSocket) {
  const std::string missing = dir_.Join("missing.sock");
  ProcessRun run = RunCubicle({"run", "--via", missing, "--", "true"});
  EXPECT_EQ(run.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(run.err, missing)) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "ENOENT")) << run.err;
}

TEST(RunViaFlags, AProfileWithoutViaIsAUsageError) {
  ProcessRun run = RunCubicle({"run", "--profile", "shell", "--", "true"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(run.err, "needs --via")) << run.err;
}

}  // namespace
}  // namespace cubicle::test_support

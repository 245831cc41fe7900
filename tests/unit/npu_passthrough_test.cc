// npu/: the chip-list flag, the device-cgroup rules, and the host broker's
// policy (a fixed argv by id, no shell, timeout, output budget).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cgroups/devices.h"
#include "npu/broker.h"
#include "npu/host_command.h"
#include "npu/passthrough.h"

namespace cubicle::npu {
namespace {

TEST(ChipList, AscendingDistinctWhateverTheOrderAsked) {
  EXPECT_EQ(*ParseChipList("6,4", "--npu"), (std::vector<int>{4, 6}));
  EXPECT_EQ(*ParseChipList("4,4,6,4", "--npu"), (std::vector<int>{4, 6}));
  EXPECT_EQ(*ParseChipList(" 3 , 0 ", "--npu"), (std::vector<int>{0, 3}));
  EXPECT_EQ(*ParseChipList("1023", "--gpu"), (std::vector<int>{1023}));
}

TEST(ChipList, BadInputNamesTheFlagAndThePart) {
  for (const char* bad : {"", " ", "a", "-1", "1,,2", "1,", "+3", "0x4", "1024", "99999", "4 6"}) {
    absl::StatusOr<std::vector<int>> ids = ParseChipList(bad, "--npu");
    ASSERT_FALSE(ids.ok()) << "\"" << bad << "\"";
    EXPECT_TRUE(absl::IsInvalidArgument(ids.status()));
    EXPECT_NE(ids.status().message().find("--npu"), std::string::npos) << ids.status();
  }
}

TEST(DeviceRules, LinesAsTheKernelWantsThem) {
  EXPECT_EQ(cgroups::DeviceRuleLine({'c', 240, 4, "rw"}), "c 240:4 rw");
  EXPECT_EQ(cgroups::DeviceRuleLine({'c', 136, -1, "rwm"}), "c 136:* rwm");
  EXPECT_TRUE(cgroups::ValidateDeviceRules(cgroups::MinimalDevRules()).ok());
  EXPECT_TRUE(cgroups::ValidateDeviceRules({}).ok());
}

TEST(DeviceRules, BadRulesAreRefused) {
  for (const cgroups::DeviceRule& bad : std::vector<cgroups::DeviceRule>{
           {'x', 1, 3, "rw"}, {'c', 1, 3, ""}, {'c', 1, 3, "rwx"}, {'c', 1, 3, "rr"}, {'c', 1, -2, "r"},
           {'c', 4096, 0, "r"}}) {
    absl::Status st = cgroups::ValidateDeviceRules({bad});
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << cgroups::DeviceRuleLine(bad) << ": " << st;
  }
}

BrokerConfig Config() {
  BrokerConfig config;
  config.enabled = true;
  config.jobs.push_back({.id = "hello", .argv = {"/bin/echo", "hello", "$HOME", ";", "id"}});
  config.jobs.push_back({.id = "flood", .argv = {"/bin/sh", "-c", "head -c 100000 /dev/zero"}, .output_budget = 1000});
  config.jobs.push_back({.id = "hang", .argv = {"/bin/sleep", "300"}, .timeout = absl::Milliseconds(200)});
  config.jobs.push_back({.id = "env", .argv = {"/usr/bin/env"}, .env = {"ONLY=this"}});
  return config;
}

TEST(Broker, OffUnlessEnabled) {
  BrokerConfig config = Config();
  config.enabled = false;
  absl::StatusOr<HostCommandResult> r = RunBrokerJob(config, "hello");
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
}

TEST(Broker, UnknownJobsAreNotFound) {
  absl::StatusOr<HostCommandResult> r = RunBrokerJob(Config(), "rm -rf /");
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
}

TEST(Broker, AFixedArgvWithoutAShell) {
  absl::StatusOr<HostCommandResult> r = RunBrokerJob(Config(), "hello");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->out, "hello $HOME ; id\n") << "no shell expanded or split anything";
}

TEST(Broker, OnlyTheConfiguredEnvironment) {
  absl::StatusOr<HostCommandResult> r = RunBrokerJob(Config(), "env");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "ONLY=this\n");
}

TEST(Broker, OutputBeyondTheBudgetIsDropped) {
  absl::StatusOr<HostCommandResult> r = RunBrokerJob(Config(), "flood");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out.size(), 1000u);
  EXPECT_TRUE(r->out_truncated);
  EXPECT_EQ(r->exit_code, 0) << "the job ran to its end: the rest was read and dropped";
}

TEST(Broker, TheTimeoutKillsTheJob) {
  absl::StatusOr<HostCommandResult> r = RunBrokerJob(Config(), "hang");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_FALSE(r->ok());
}

TEST(Broker, BadConfigsAreRefused) {
  auto with = [](BrokerJob job) {
    BrokerConfig c;
    c.enabled = true;
    c.jobs = {job};
    return ValidateBrokerConfig(c);
  };
  EXPECT_TRUE(with({.id = "ok", .argv = {"/bin/true"}}).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(with({.id = "", .argv = {"/bin/true"}})));
  EXPECT_TRUE(absl::IsInvalidArgument(with({.id = "a b", .argv = {"/bin/true"}})));
  EXPECT_TRUE(absl::IsInvalidArgument(with({.id = "x", .argv = {}})));
  EXPECT_TRUE(absl::IsInvalidArgument(with({.id = "x", .argv = {"true"}})));
  EXPECT_TRUE(absl::IsInvalidArgument(with({.id = "x", .argv = {"/bin/true"}, .env = {"NOEQUALS"}})));
  EXPECT_TRUE(absl::IsInvalidArgument(with({.id = "x", .argv = {"/bin/true"}, .timeout = absl::ZeroDuration()})));
  EXPECT_TRUE(absl::IsInvalidArgument(with({.id = "x", .argv = {"/bin/true"}, .output_budget = 0})));
  BrokerConfig twice;
  twice.jobs = {{.id = "x", .argv = {"/bin/true"}}, {.id = "x", .argv = {"/bin/false"}}};
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateBrokerConfig(twice)));
}

TEST(HostCommand, AMissingProgramIsAnErrorNamingIt) {
  absl::StatusOr<HostCommandResult> r = RunHostCommand({"/nonexistent/npu-smi", "info"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/npu-smi"), std::string::npos) << r.status();
  EXPECT_FALSE(RunHostCommand({"npu-smi"}, {}).ok()) << "a relative argv[0] is refused";
  EXPECT_FALSE(RunHostCommand({}, {}).ok());
}

TEST(HostCommand, ExitStatusAndStderr) {
  absl::StatusOr<HostCommandResult> r = RunHostCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_FALSE(r->ok());
}

}  // namespace
}  // namespace cubicle::npu

// npu/: the chip-list flag, the device-cgroup rules, and the host broker's
// policy (a fixed argv by id, no shell, timeout, output budget).
#include <dirent.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cgroups/devices.h"
#include "npu/broker.h"
#include "npu/host_command.h"
#include "npu/passthrough.h"
#include "runtime/defaults.h"

namespace cubicle::npu {
namespace {

// Whether /usr/bin has at most 256 entries (then it can be shadowed).
bool UsrBinIsSmall() {
  size_t n = 0;
  if (DIR* d = ::opendir("/usr/bin")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n <= 258;
}

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

// ApplyPassthrough against the default sandbox, with driver files chosen
// from this host's own /usr (no accelerator needed): only the host's file
// system is read.
runtime::SandboxSpec Default() {
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec({});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

rootfs::MountOp ReadOnlyBind(const std::string& source, const std::string& dest) {
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kBind;
  op.source = source;
  op.dest = dest;
  op.readonly = true;
  return op;
}

TEST(ApplyPassthrough, WhatTheReadOnlyUsrAlreadyShowsIsNotMountedTwice) {
  runtime::SandboxSpec spec = Default();
  const size_t before = spec.mounts.size();
  Passthrough p;
  p.mounts = {ReadOnlyBind("/usr/bin/env", "/usr/bin/env")};
  ASSERT_TRUE(ApplyPassthrough(p, &spec).ok());
  EXPECT_EQ(spec.mounts.size(), before);
}

TEST(ApplyPassthrough, AMissingDirectoryUnderUsrIsShadowedThenMadeReadOnly) {
  runtime::SandboxSpec spec = Default();
  const size_t before = spec.mounts.size();
  Passthrough p;
  // /usr/local exists on any Debian host; /usr/local/cubicle-test-driver does not.
  ASSERT_NE(::access("/usr/local", F_OK), -1);
  ASSERT_EQ(::access("/usr/local/cubicle-test-driver", F_OK), -1);
  p.mounts = {ReadOnlyBind("/usr/bin/env", "/usr/local/cubicle-test-driver/lib64/env")};
  ASSERT_TRUE(ApplyPassthrough(p, &spec).ok());
  ASSERT_GT(spec.mounts.size(), before + 2);
  const rootfs::MountOp& shadow = spec.mounts[before];
  EXPECT_EQ(shadow.kind, rootfs::MountKind::kTmpfs);
  EXPECT_EQ(shadow.dest, "/usr/local");
  // The host's entries of /usr/local come back, read-only (or as the same
  // symlinks), before the driver's file; then the shadow is read-only.
  std::set<std::string> carried;
  for (size_t i = before + 1; i + 2 < spec.mounts.size(); ++i) {
    const rootfs::MountOp& op = spec.mounts[i];
    EXPECT_TRUE(op.kind == rootfs::MountKind::kSymlink || (op.kind == rootfs::MountKind::kBind && op.readonly))
        << op.dest;
    carried.insert(op.dest);
  }
  EXPECT_TRUE(carried.count("/usr/local/bin")) << "the host's /usr/local/bin stays visible";
  EXPECT_EQ(spec.mounts[spec.mounts.size() - 2].dest, "/usr/local/cubicle-test-driver/lib64/env");
  EXPECT_EQ(spec.mounts.back().kind, rootfs::MountKind::kRemountRo);
  EXPECT_EQ(spec.mounts.back().dest, "/usr/local");
  runtime::SandboxSpec check = spec;
  check.argv = {"/bin/true"};
  EXPECT_TRUE(runtime::ValidateSpec(check).ok());
}

TEST(ApplyPassthrough, AHugeDirectoryIsNotShadowed) {
  runtime::SandboxSpec spec = Default();
  const runtime::SandboxSpec before = spec;
  Passthrough p;
  p.mounts = {ReadOnlyBind("/usr/bin/env", "/usr/bin/cubicle-test-tool")};
  absl::Status st = ApplyPassthrough(p, &spec);
  if (UsrBinIsSmall()) GTEST_SKIP() << "this host's /usr/bin has few entries";
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("/usr/bin"), std::string::npos) << st;
  EXPECT_EQ(spec, before) << "a refused passthrough changes nothing";
}

TEST(ApplyPassthrough, NeedsTheSandboxsOwnDev) {
  runtime::SandboxSpec spec = Default();
  std::erase_if(spec.mounts, [](const rootfs::MountOp& op) { return op.kind == rootfs::MountKind::kDev; });
  Passthrough p;
  absl::Status st = ApplyPassthrough(p, &spec);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
}

}  // namespace
}  // namespace cubicle::npu

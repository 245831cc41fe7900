// The same sandbox under each kernel-feature fallback: what an older kernel
// would get (no clone3, no new mount API, no openat2) is exercised on this
// one by turning the feature off through LaunchOptions::features.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "runtime/host_features.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle {
namespace {

using test_support::RunInSandbox;
using test_support::ShellSpec;
using test_support::TempDir;

struct FeatureCase {
  const char* name;
  runtime::HostFeatures features;
};

// Names the case in test output (and in ctest's test names).
void PrintTo(const FeatureCase& c, std::ostream* os) { *os << c.name; }

class CoreFallbacks : public ::testing::TestWithParam<FeatureCase> {
 protected:
  runtime::LaunchOptions Options() const {
    runtime::LaunchOptions options;
    options.features = GetParam().features;
    return options;
  }
};

TEST_P(CoreFallbacks, BaselineIsolationHolds) {
  TempDir host;
  ASSERT_EQ(::chmod(host.path().c_str(), 0755), 0);  // readable by the sandbox's unprivileged host id
  ASSERT_TRUE(test_support::WriteFile(host.Join("data.txt"), "from-the-host\n"));
  ASSERT_EQ(::chmod(host.Join("data.txt").c_str(), 0644), 0);
  runtime::SandboxSpec spec = ShellSpec(
      "set -e\n"
      "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status\n"
      "touch /usr/x 2>/dev/null && echo usr-writable || echo usr-ro\n"
      "touch /x 2>/dev/null && echo root-writable || echo root-ro\n"
      "touch /ro/x 2>/dev/null && echo bind-writable || echo bind-ro\n"
      "cat /ro/data.txt\n"
      "echo hi > /tmp/t && cat /tmp/t\n"
      "echo > /dev/null && echo devnull-ok\n"
      "ls /proc | grep -c '^[0-9]' | sed 's/^/pids=/'\n");
  rootfs::MountOp ro;
  ro.kind = rootfs::MountKind::kBind;
  ro.source = host.path();
  ro.dest = "/ro";
  ro.readonly = true;
  spec.mounts.push_back(ro);
  absl::StatusOr<test_support::SandboxRun> run = RunInSandbox(spec, "", Options());
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->result.exit_code, 0) << run->err;
  const std::string& out = run->out;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("CapBnd:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  EXPECT_NE(out.find("Seccomp:\t2"), std::string::npos) << out;
  EXPECT_NE(out.find("usr-ro"), std::string::npos) << out;
  EXPECT_NE(out.find("root-ro"), std::string::npos) << out;
  EXPECT_NE(out.find("bind-ro"), std::string::npos) << out;
  EXPECT_NE(out.find("from-the-host"), std::string::npos) << out;
  EXPECT_NE(out.find("hi\n"), std::string::npos) << out;
  EXPECT_NE(out.find("devnull-ok"), std::string::npos) << out;
  EXPECT_EQ(out.find("pids=1\n"), std::string::npos) << "sh, init and the pipeline at least";
}

// A destination reached through a symlink that leaves the new root is
// refused under every resolver (openat2 says EXDEV; the walk refuses every
// symlink).
TEST_P(CoreFallbacks, EscapingSymlinkInDestinationIsRefused) {
  TempDir host;
  ASSERT_EQ(::chmod(host.path().c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/etc", host.Join("esc").c_str()), 0);
  runtime::SandboxSpec spec = ShellSpec("true");
  rootfs::MountOp data;
  data.kind = rootfs::MountKind::kBind;
  data.source = host.path();
  data.dest = "/data";
  spec.mounts.push_back(data);
  rootfs::MountOp tmpfs;
  tmpfs.kind = rootfs::MountKind::kTmpfs;
  tmpfs.dest = "/data/esc/x";
  spec.mounts.push_back(tmpfs);
  absl::StatusOr<test_support::SandboxRun> run = RunInSandbox(spec, "", Options());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kSetupFailed);
  EXPECT_NE(run->result.setup_error.message().find("/data/esc/x"), std::string::npos)
      << run->result.setup_error;
  EXPECT_NE(run->result.setup_error.message().find("EXDEV"), std::string::npos)
      << run->result.setup_error;
  struct stat st;
  EXPECT_NE(::stat("/etc/x", &st), 0) << "nothing may have been created on the host";
}

runtime::HostFeatures With(bool clone3, bool new_mount_api, bool openat2) {
  runtime::HostFeatures f;
  f.clone3 = clone3;
  f.new_mount_api = new_mount_api;
  f.openat2 = openat2;
  return f;
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, CoreFallbacks,
    ::testing::Values(FeatureCase{"all", With(true, true, true)},
                      FeatureCase{"no_clone3", With(false, true, true)},
                      FeatureCase{"no_new_mount_api", With(true, false, true)},
                      FeatureCase{"no_openat2", With(true, true, false)},
                      FeatureCase{"none", With(false, false, false)}),
    [](const ::testing::TestParamInfo<FeatureCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cubicle

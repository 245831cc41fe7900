// The same sandbox under each kernel-feature fallback: what an older kernel
// would get (no clone3, no new mount API, no openat2) is exercised on this
// one by turning the feature off through LaunchOptions::features.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/host_features.h"
#include "tests/support/host_probes.h"
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

// Layers named with what overlayfs's mount options split on (',', ':',
// '\'): escaped in mount(2)'s options, under either mount API.
TEST_P(CoreFallbacks, OverlayLayersMayHaveAnyName) {
  REQUIRE_HOST(test_support::OverlayfsInUserNamespace());
  TempDir host;
  ASSERT_EQ(::chmod(host.path().c_str(), 0755), 0);
  const std::string odd = host.Join("lo,w:er\\1"), plain = host.Join("lower2"), upper = host.Join("up,p:er\\"),
                    work = host.Join("wo,r:k\\");
  for (const std::string& dir : {odd, plain, upper, work}) ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  // The sandbox's host ids, as root, are not root's: they write the upper layer.
  for (const std::string& dir : {upper, work}) ASSERT_EQ(::chmod(dir.c_str(), 0777), 0) << dir;
  ASSERT_TRUE(test_support::WriteFile(odd + "/a.txt", "from-odd\n"));
  ASSERT_TRUE(test_support::WriteFile(plain + "/b.txt", "from-plain\n"));
  for (const std::string& file : {odd + "/a.txt", plain + "/b.txt"}) ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  runtime::SandboxSpec spec = ShellSpec("cat /ov/a.txt /ov/b.txt && echo written > /ov/new.txt");
  rootfs::MountOp overlay;
  overlay.kind = rootfs::MountKind::kOverlay;
  overlay.dest = "/ov";
  overlay.lower = {odd, plain};
  overlay.upper = upper;
  overlay.work = work;
  spec.mounts.push_back(overlay);
  absl::StatusOr<test_support::SandboxRun> run = RunInSandbox(spec, "", Options());
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->result.exit_code, 0) << run->err;
  EXPECT_EQ(run->out, "from-odd\nfrom-plain\n");
  EXPECT_EQ(test_support::ReadFile(upper + "/new.txt"), "written\n");
}

// More layers than mount(2)'s page of options holds (which the kernel
// would cut short): the new mount API takes them one by one; without it,
// the mount is refused (E2BIG), never made with fewer layers.
TEST_P(CoreFallbacks, OverlayWithMoreLayersThanAPageOfOptions) {
  REQUIRE_HOST(test_support::OverlayfsInUserNamespace());
  TempDir host;
  ASSERT_EQ(::chmod(host.path().c_str(), 0755), 0);
  rootfs::MountOp overlay;
  overlay.kind = rootfs::MountKind::kOverlay;
  overlay.dest = "/ov";
  overlay.readonly = true;
  constexpr int kLayers = 30;
  size_t options = 0;
  for (int i = 0; i < kLayers; ++i) {
    // Under fsconfig's 255 bytes a value, "/oldroot" included.
    const std::string layer = host.Join(absl::StrCat(std::string(180, 'l'), i));
    ASSERT_EQ(::mkdir(layer.c_str(), 0755), 0);
    ASSERT_TRUE(test_support::WriteFile(absl::StrCat(layer, "/layer-", i), absl::StrCat(i, "\n")));
    ASSERT_EQ(::chmod(absl::StrCat(layer, "/layer-", i).c_str(), 0644), 0);
    overlay.lower.push_back(layer);
    options += layer.size() + 9;
  }
  ASSERT_GT(options, 4096u) << "the layers must not fit one page of options";
  runtime::SandboxSpec spec = ShellSpec(absl::StrCat("cat /ov/layer-0 /ov/layer-", kLayers - 1));
  spec.mounts.push_back(overlay);
  absl::StatusOr<test_support::SandboxRun> run = RunInSandbox(spec, "", Options());
  ASSERT_TRUE(run.ok()) << run.status();
  if (GetParam().features.new_mount_api) {
    ASSERT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
    EXPECT_EQ(run->out, absl::StrCat("0\n", kLayers - 1, "\n"));
  } else {
    EXPECT_EQ(run->result.reason, runtime::ExitReason::kSetupFailed);
    EXPECT_NE(run->result.setup_error.message().find("mount(overlay)(/ov): E2BIG"), std::string::npos)
        << run->result.setup_error;
  }
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

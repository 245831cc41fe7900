// Bind sources the sandbox's own ids cannot reach (DESIGN §5: mount sources
// opened on the host). As root the sandbox's ids are unprivileged host ids,
// so a source under a directory only root may enter (/root, any mktemp -d)
// is cloned by the launcher and attached; what root can name, root can
// bind. The Core tests run rootless too, where such a directory is the
// caller's own and the sandbox's ids are the caller's.
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rootfs/host_tree.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

using runtime::ExitReason;

// A private directory (mode 0700, as mktemp -d makes it) holding a
// readable directory `data` with a file `f`, and a readable file `single`.
class PrivateSource {
 public:
  PrivateSource() {
    ::chmod(dir_.path().c_str(), 0700);
    EXPECT_EQ(::mkdir(dir_.Join("data").c_str(), 0755), 0) << std::strerror(errno);
    EXPECT_TRUE(WriteFile(dir_.Join("data/f"), "in a private directory\n"));
    EXPECT_TRUE(WriteFile(dir_.Join("single"), "a single file\n"));
    ::chmod(dir_.Join("data/f").c_str(), 0644);
    ::chmod(dir_.Join("single").c_str(), 0644);
  }
  std::string Join(absl::string_view name) const { return dir_.Join(name); }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
};

class CoreBindSources : public HostHygieneTest {};

// Runs `script` with `op` mounted; an error unless it ran to its exit.
absl::StatusOr<SandboxRun> RunWith(const std::string& script, rootfs::MountOp op) {
  runtime::SandboxSpec spec = ShellSpec(script);
  spec.mounts.push_back(std::move(op));
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  if (run.ok() && run->result.reason != ExitReason::kExited) {
    return absl::InternalError(absl::StrCat("reason ", runtime::ExitReasonName(run->result.reason), ": ",
                                            run->result.setup_error.message(), " ", run->err));
  }
  return run;
}

TEST_F(CoreBindSources, ADirectoryUnderAPrivateDirectoryIsBoundReadOnly) {
  PrivateSource src;
  absl::StatusOr<SandboxRun> run = RunWith("cat /data/f; touch /data/new 2>/dev/null || echo read-only",
                                         Bind(src.Join("data"), "/data", true));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "in a private directory\nread-only\n") << run->err;
  EXPECT_NE(::access(src.Join("data/new").c_str(), F_OK), 0) << "the read-only bind was written";
}

TEST_F(CoreBindSources, AFileUnderAPrivateDirectoryIsBound) {
  PrivateSource src;
  absl::StatusOr<SandboxRun> run = RunWith("test -f /etc/single && cat /etc/single",
                                         Bind(src.Join("single"), "/etc/single", true));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "a single file\n") << run->err;
}

TEST_F(CoreBindSources, AWritableBindUnderAPrivateDirectoryKeepsTheBindsFlags) {
  PrivateSource src;
  ::chmod(src.Join("data").c_str(), 0777);
  absl::StatusOr<SandboxRun> run = RunWith("echo written > /data/out && grep ' /data ' /proc/self/mountinfo",
                                         Bind(src.Join("data"), "/data", false));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(ReadFile(src.Join("data/out")), "written\n");
  // nosuid and nodev, as every bind; and private: no "shared:" peer group
  // ties it to the host's mount.
  EXPECT_TRUE(absl::StrContains(run->out, "nosuid")) << run->out;
  EXPECT_TRUE(absl::StrContains(run->out, "nodev")) << run->out;
  EXPECT_FALSE(absl::StrContains(run->out, "shared:")) << run->out;
}

TEST_F(CoreBindSources, AMissingOptionalSourceUnderAPrivateDirectoryIsSkipped) {
  PrivateSource src;
  rootfs::MountOp op = Bind(src.Join("absent"), "/absent", true);
  op.optional = true;
  absl::StatusOr<SandboxRun> run = RunWith("test -e /absent && echo present || echo skipped", op);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "skipped\n");
}

TEST_F(CoreBindSources, CubicleRunBindsAMktempDirectory) {
  PrivateSource src;
  ProcessRun r = RunCubicle({"run", "--ro-bind", src.Join("data"), "/data", "--", "cat", "/data/f"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "in a private directory\n");
}

TEST_F(CoreBindSources, ReadingThroughTheBindFollowsTheSandboxUsersPermissions) {
  PrivateSource src;
  ::chmod(src.Join("data/f").c_str(), 0600);  // the host owner's only
  absl::StatusOr<SandboxRun> run = RunWith("cat /data/f 2>/dev/null || echo denied",
                                         Bind(src.Join("data"), "/data", true));
  ASSERT_TRUE(run.ok()) << run.status();
  // As root the sandbox user is an unprivileged host id: denied. Rootless it
  // is the caller, who owns the file.
  EXPECT_EQ(run->out, IsRoot() ? "denied\n" : "in a private directory\n");
}

// ---- What the launcher decides (rootfs::MayLookUpAs) -------------------------

TEST(MayLookUpAs, FollowsTheModeBitsOfEveryDirectoryOnTheWay) {
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.Join("open").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.Join("open/closed").c_str(), 0700), 0);
  ::chmod(dir.path().c_str(), 0711);  // search without read is enough
  const uid_t nobody = 1'234'567;
  EXPECT_TRUE(rootfs::MayLookUpAs(dir.Join("open"), nobody, nobody));
  EXPECT_TRUE(rootfs::MayLookUpAs(dir.Join("open/closed"), nobody, nobody)) << "the last component needs none";
  EXPECT_FALSE(rootfs::MayLookUpAs(dir.Join("open/closed/x"), nobody, nobody));
  ::chmod(dir.path().c_str(), 0700);
  EXPECT_FALSE(rootfs::MayLookUpAs(dir.Join("open"), nobody, nobody));
  // The owner's bits apply to the owner.
  EXPECT_TRUE(rootfs::MayLookUpAs(dir.Join("open"), ::geteuid(), nobody));
}

TEST(MayLookUpAs, IsConservativeAboutSymlinksAndGroupsAndBadPaths) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  ASSERT_EQ(::mkdir(dir.Join("real").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("real", dir.Join("link").c_str()), 0);
  const uid_t nobody = 1'234'567;
  EXPECT_TRUE(rootfs::MayLookUpAs(dir.Join("real/x"), nobody, nobody));
  EXPECT_FALSE(rootfs::MayLookUpAs(dir.Join("link/x"), nobody, nobody)) << "a symlink is not followed";
  EXPECT_FALSE(rootfs::MayLookUpAs(dir.Join("real/x"), nobody, ::getegid())) << "a group match is undecided";
  EXPECT_FALSE(rootfs::MayLookUpAs(dir.Join("missing/x"), nobody, nobody));
  EXPECT_FALSE(rootfs::MayLookUpAs("relative/x", nobody, nobody));
  EXPECT_FALSE(rootfs::MayLookUpAs("", nobody, nobody));
}

// ---- As root ------------------------------------------------------------------

class RootBindSources : public HostHygieneTest {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "binds from directories the sandbox cannot enter exist only as root";
    HostHygieneTest::SetUp();
  }
};

TEST_F(RootBindSources, ASourceUnderRootsHomeIsBound) {
  // /root is 0700 on Debian; a directory made for the test under it.
  struct stat st;
  if (::stat("/root", &st) != 0 || (st.st_mode & S_IXOTH) != 0) {
    GTEST_SKIP() << "/root is missing or searchable by others on this host";
  }
  char tmpl[] = "/root/.cubicle-bind-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr) << std::strerror(errno);
  const std::string dir = tmpl;
  ::chmod(dir.c_str(), 0755);
  ASSERT_TRUE(WriteFile(dir + "/f", "root's data\n"));
  ::chmod((dir + "/f").c_str(), 0644);
  runtime::SandboxSpec spec = TestSpec({"cat", "/data/f"});
  spec.mounts.push_back(Bind(dir, "/data", true));
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ::unlink((dir + "/f").c_str());
  ::rmdir(dir.c_str());
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->result.reason, ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->out, "root's data\n") << run->err;
}

// A source the sandbox can reach is bound by the sandbox itself, from its
// copy of the host's mounts: a host mount that is read-only stays locked
// read-only, even for a payload holding CAP_SYS_ADMIN in its user
// namespace with no seccomp filter (bwrap --cap-add). A clone made on the
// host would not be locked (rootfs/builder.h).
TEST_F(RootBindSources, AReachableHostReadOnlyMountStaysLockedReadOnly) {
  // The tmpfs below is this test's alone: tests in other processes compare
  // the host's mount table meanwhile.
  ASSERT_NO_FATAL_FAILURE(EnterPrivateMountNamespace());
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const std::string src = dir.Join("ro");
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  ASSERT_EQ(::mount("tmpfs", src.c_str(), "tmpfs", 0, "mode=0777,size=64k"), 0) << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{src};
  // Read-only as a mount (the tmpfs itself stays writable).
  ASSERT_EQ(::mount(nullptr, src.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  runtime::SandboxSpec spec = TestSpec({"python3", "-I", "-c",
                                        "import ctypes\n"
                                        "libc = ctypes.CDLL(None, use_errno=True)\n"
                                        "rc = libc.mount(None, b'/data', None, ctypes.c_ulong(32 | 4096 | 2 | 4), None)\n"
                                        "print('remount', rc, ctypes.get_errno())\n"
                                        "try:\n"
                                        "    open('/data/x', 'w').write('x')\n"
                                        "    print('wrote')\n"
                                        "except OSError as e:\n"
                                        "    print('write', e.errno)\n"});
  spec.mounts.push_back(Bind(src, "/data", false));
  spec.seccomp = seccomp::Policy::kNone;
  const uint64_t cap_sys_admin = uint64_t{1} << CAP_SYS_ADMIN;
  spec.capabilities = runtime::CapabilitySpec{cap_sys_admin, cap_sys_admin, true};
  absl::StatusOr<SandboxRun> run = RunInSandbox(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->result.reason, ExitReason::kExited) << run->result.setup_error << run->err;
  EXPECT_EQ(run->out, absl::StrCat("remount -1 ", EPERM, "\nwrite ", EROFS, "\n")) << run->err;
}

}  // namespace
}  // namespace cubicle::test_support

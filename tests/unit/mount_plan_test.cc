#include "rootfs/mount_plan.h"

#include "rootfs/builder.h"

#include <gtest/gtest.h>

namespace cubicle::rootfs {
namespace {

TEST(NormalizeSandboxPath, CollapsesSlashesAndDots) {
  EXPECT_EQ(*NormalizeSandboxPath("/a//b/./c/", "dest"), "/a/b/c");
  EXPECT_EQ(*NormalizeSandboxPath("/", "dest"), "/");
  EXPECT_EQ(*NormalizeSandboxPath("//./", "dest"), "/");
}

TEST(NormalizeSandboxPath, RejectsRelativeDotDotEmptyAndNul) {
  auto relative = NormalizeSandboxPath("tmp/x", "--tmpfs");
  ASSERT_FALSE(relative.ok());
  EXPECT_NE(relative.status().message().find("--tmpfs 'tmp/x': must be an absolute path"),
            std::string::npos);
  auto dotdot = NormalizeSandboxPath("/usr/../etc", "--bind");
  ASSERT_FALSE(dotdot.ok());
  EXPECT_NE(dotdot.status().message().find("'..' is not allowed"), std::string::npos);
  EXPECT_FALSE(NormalizeSandboxPath("", "x").ok());
  EXPECT_FALSE(NormalizeSandboxPath(std::string("/a\0b", 4), "x").ok());
}

MountOp Bind(std::string src, std::string dest) {
  MountOp op;
  op.kind = MountKind::kBind;
  op.source = std::move(src);
  op.dest = std::move(dest);
  return op;
}

TEST(ValidatePlan, AcceptsTheObviousPlan) {
  MountPlan plan = {Bind("/usr", "/usr")};
  MountOp tmp;
  tmp.kind = MountKind::kTmpfs;
  tmp.dest = "/tmp";
  plan.push_back(tmp);
  EXPECT_TRUE(ValidatePlan(plan).ok());
}

TEST(ValidatePlan, MissingBindSourceNamesPathAndErrno) {
  absl::Status st = ValidatePlan({Bind("/nonexistent/cubicle-src", "/x")});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("bind source /nonexistent/cubicle-src: ENOENT"), std::string::npos)
      << st.message();
}

TEST(ValidatePlan, OptionalBindSourceMayBeMissing) {
  MountOp op = Bind("/nonexistent/cubicle-src", "/x");
  op.optional = true;
  EXPECT_TRUE(ValidatePlan({op}).ok());
}

TEST(ValidatePlan, RejectsUnnormalisedRootAndRelativeSources) {
  EXPECT_FALSE(ValidatePlan({Bind("/usr", "/usr/")}).ok());
  EXPECT_FALSE(ValidatePlan({Bind("/usr", "/")}).ok());
  EXPECT_FALSE(ValidatePlan({Bind("usr", "/usr")}).ok());
  MountOp bad_mode;
  bad_mode.kind = MountKind::kDir;
  bad_mode.dest = "/d";
  bad_mode.mode = 010000;
  EXPECT_FALSE(ValidatePlan({bad_mode}).ok());
  MountOp link;
  link.kind = MountKind::kSymlink;
  link.dest = "/l";
  EXPECT_FALSE(ValidatePlan({link}).ok());
}

}  // namespace
}  // namespace cubicle::rootfs

namespace cubicle::rootfs {
namespace {

// bubblewrap's --bind / / replaces the root; cubicle's own plans may not.
TEST(ValidatePlan, ABindOverTheRootOnlyInBubblewrapStyle) {
  MountOp root = Bind("/usr", "/");
  EXPECT_FALSE(ValidatePlan({root}).ok());
  root.bwrap_style = true;
  EXPECT_TRUE(ValidatePlan({root}).ok());
  MountOp tmpfs;
  tmpfs.kind = MountKind::kTmpfs;
  tmpfs.dest = "/";
  tmpfs.bwrap_style = true;
  EXPECT_FALSE(ValidatePlan({tmpfs}).ok());
}

TEST(ValidatePlan, OverlayLayersAreAbsoluteExistingAndSafeForOptions) {
  MountOp overlay;
  overlay.kind = MountKind::kOverlay;
  overlay.dest = "/ov";
  overlay.source = "/usr\n/etc";
  EXPECT_TRUE(ValidatePlan({overlay}).ok());
  for (const char* bad : {"usr", "/usr,upperdir=/x", "/us:r", "/nonexistent-layer"}) {
    overlay.source = bad;
    absl::Status st = ValidatePlan({overlay});
    EXPECT_FALSE(st.ok()) << bad;
  }
  overlay.source = "/usr";
  overlay.upper = "/tmp";
  overlay.work = "relative";
  EXPECT_FALSE(ValidatePlan({overlay}).ok());
}

TEST(MountKindName, NamesTheBubblewrapKinds) {
  EXPECT_EQ(MountKindName(MountKind::kChmod), "chmod");
  EXPECT_EQ(MountKindName(MountKind::kBindData), "bind-data");
  EXPECT_EQ(MountKindName(MountKind::kOverlay), "overlay");
}

}  // namespace
TEST(Prepare, FileLabelBecomesTheTmpfsContextOption) {
  MountPlan plan(3);
  plan[0].kind = MountKind::kTmpfs;
  plan[0].dest = "/tmp";
  plan[0].mode = 01777;
  plan[0].selinux_context = "u:object_r:sandbox_file_t:s0:c1,c2";
  plan[1].kind = MountKind::kDev;
  plan[1].dest = "/dev";
  plan[1].selinux_context = "u:object_r:sandbox_file_t:s0";
  plan[2].kind = MountKind::kTmpfs;
  plan[2].dest = "/plain";
  PreparedPlan prepared = Prepare(plan, true, true, true);
  ASSERT_EQ(prepared.ops.size(), 3u);
  // Quoted: the MCS part has a comma.
  EXPECT_EQ(prepared.ops[0].tmpfs_options, "mode=01777,context=\"u:object_r:sandbox_file_t:s0:c1,c2\"");
  EXPECT_EQ(prepared.ops[1].tmpfs_options, "mode=0755,size=64k,context=\"u:object_r:sandbox_file_t:s0\"");
  EXPECT_EQ(prepared.ops[2].tmpfs_options, "mode=0755");
}

}  // namespace cubicle::rootfs

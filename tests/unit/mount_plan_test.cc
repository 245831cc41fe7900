#include "rootfs/mount_plan.h"

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
}  // namespace cubicle::rootfs

#include "rootfs/mount_plan.h"

#include "rootfs/builder.h"
#include "rootfs/plan_paths.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

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

// A layer named with what overlayfs's options split on, removed after.
struct OddLayer {
  char parent[32] = "/tmp/cubicle-layer-XXXXXX";
  std::string path;
  OddLayer() {
    if (::mkdtemp(parent) == nullptr) return;
    path = std::string(parent) + "/lo,w:er\\1";
    if (::mkdir(path.c_str(), 0755) != 0) path.clear();
  }
  ~OddLayer() {
    if (!path.empty()) ::rmdir(path.c_str());
    ::rmdir(parent);
  }
};

TEST(ValidatePlan, OverlayLayersAreAbsoluteAndExisting) {
  OddLayer odd;
  ASSERT_FALSE(odd.path.empty()) << "could not make a layer directory under /tmp";
  const std::string& odd_layer = odd.path;
  MountOp overlay;
  overlay.kind = MountKind::kOverlay;
  overlay.dest = "/ov";
  overlay.lower = {"/usr", "/etc"};
  EXPECT_TRUE(ValidatePlan({overlay}).ok());
  // What overlayfs's options split on is escaped when they are made.
  overlay.lower = {odd_layer};
  EXPECT_TRUE(ValidatePlan({overlay}).ok());
  for (const char* bad : {"usr", "", "/nonexistent-layer"}) {
    overlay.lower = {"/usr", bad};
    absl::Status st = ValidatePlan({overlay});
    EXPECT_FALSE(st.ok()) << bad;
  }
  overlay.lower = {};
  EXPECT_FALSE(ValidatePlan({overlay}).ok()) << "no lower layer";
  overlay.lower = {"/usr"};
  overlay.upper = "/tmp";
  EXPECT_FALSE(ValidatePlan({overlay}).ok()) << "an upper layer without a work directory";
  overlay.work = "relative";
  EXPECT_FALSE(ValidatePlan({overlay}).ok());
}

TEST(EscapeOverlayPath, EscapesWhatOverlayfsSplitsOnAsBubblewrapDoes) {
  EXPECT_EQ(EscapeOverlayPath("/plain/path"), "/plain/path");
  EXPECT_EQ(EscapeOverlayPath("/a,b:c\\d"), "/a\\,b\\:c\\\\d");
  EXPECT_EQ(EscapeOverlayPath("/sp ace=eq\n"), "/sp ace=eq\n");
}

TEST(Prepare, OverlayOptionsInBubblewrapsOrderAndEscaping) {
  MountPlan plan(3);
  plan[0].kind = MountKind::kOverlay;
  plan[0].dest = "/rw";
  plan[0].lower = {"/bottom", "/to,p"};
  plan[0].upper = "/up:per";
  plan[0].work = "/wo\\rk";
  plan[1].kind = MountKind::kOverlay;
  plan[1].dest = "/tmp-ov";
  plan[1].lower = {"/a"};
  plan[2].kind = MountKind::kOverlay;
  plan[2].dest = "/ro";
  plan[2].lower = {"/a", "/b"};
  plan[2].readonly = true;
  PreparedPlan prepared = Prepare(plan, true, true, true);
  ASSERT_EQ(prepared.ops.size(), 3u);
  EXPECT_EQ(prepared.ops[0].tmpfs_options,
            "upperdir=/oldroot/up\\:per,workdir=/oldroot/wo\\\\rk,lowerdir=/oldroot/to\\,p:/oldroot/bottom,userxattr");
  // The new mount API's layers: lowerdir+ as is, top first.
  EXPECT_EQ(prepared.ops[0].overlay_lower, (std::vector<std::string>{"/oldroot/to,p", "/oldroot/bottom"}));
  EXPECT_EQ(prepared.ops[1].tmpfs_options,
            "upperdir=/tmp-overlay-upper-0,workdir=/tmp-overlay-work-0,lowerdir=/oldroot/a,userxattr");
  EXPECT_EQ(prepared.ops[2].tmpfs_options, "lowerdir=/oldroot/b:/oldroot/a,userxattr");
  // A --tmp-overlay writes to the staging root: no size cap there, as in bwrap.
  EXPECT_EQ(prepared.staging_options, "mode=0700");
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

namespace cubicle::rootfs {
namespace {

MountOp BindOf(std::string src, std::string dest) {
  MountOp op;
  op.kind = MountKind::kBind;
  op.source = std::move(src);
  op.dest = std::move(dest);
  return op;
}

// Which host file a sandbox path shows, and back (rootfs/plan_paths.h).
TEST(PlanPaths, TheLastCoveringOperationDecides) {
  MountPlan plan = {BindOf("/usr", "/usr"), BindOf("/opt/py", "/opt/lib"), BindOf("/", "/host")};
  MountOp tmp;
  tmp.kind = MountKind::kTmpfs;
  tmp.dest = "/usr/local";
  plan.push_back(tmp);
  MountOp dir;
  dir.kind = MountKind::kDir;
  dir.dest = "/opt/lib/x";
  plan.push_back(dir);
  EXPECT_EQ(HostPathOf(plan, "/usr/bin/python3"), "/usr/bin/python3");
  EXPECT_EQ(HostPathOf(plan, "/usr"), "/usr");
  EXPECT_EQ(HostPathOf(plan, "/usr/local/lib"), std::nullopt);     // the tmpfs covers it
  EXPECT_EQ(HostPathOf(plan, "/opt/lib/x/site"), "/opt/py/x/site");  // a directory op covers nothing
  EXPECT_EQ(HostPathOf(plan, "/host"), "/");
  EXPECT_EQ(HostPathOf(plan, "/host/etc"), "/etc");
  EXPECT_EQ(HostPathOf(plan, "/usrx"), std::nullopt);
  EXPECT_EQ(HostPathOf(plan, "/tmp"), std::nullopt);
}

TEST(PlanPaths, AHostFileShowsUnderTheLastBindThatHoldsIt) {
  char real[PATH_MAX];
  ASSERT_NE(::realpath("/usr/bin", real), nullptr);
  const std::string bin = real;
  MountPlan plan = {BindOf("/usr", "/usr")};
  EXPECT_EQ(SandboxPathOf(plan, bin + "/env"), bin + "/env");
  plan.push_back(BindOf("/usr/bin", "/tools"));
  EXPECT_EQ(SandboxPathOf(plan, bin + "/env"), "/tools/env");
  MountOp tmp;
  tmp.kind = MountKind::kTmpfs;
  tmp.dest = "/tools";
  plan.push_back(tmp);  // covers /tools: /usr/bin shows it still
  EXPECT_EQ(SandboxPathOf(plan, bin + "/env"), bin + "/env");
  EXPECT_EQ(SandboxPathOf(plan, "/etc/passwd"), std::nullopt);
  MountOp optional = BindOf("/nonexistent-cubicle", "/gone");
  optional.optional = true;
  plan.push_back(optional);
  EXPECT_EQ(SandboxPathOf(plan, "/nonexistent-cubicle/x"), std::nullopt);
}

}  // namespace
}  // namespace cubicle::rootfs

// Discovery of the hierarchies (from mountinfo and /proc/self/cgroup texts),
// parents and the pure planning of groups and limit writes, against fake
// cgroupfs trees: no root, no cgroups.
#include "cgroups/layout.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cgroups/fake_tree.h"
#include "cgroups/plan.h"

namespace cubicle::cgroups {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = FakeCgroupTree::Kind;

// The development host's cgroup mounts, verbatim (plus an escaped path).
constexpr char kHostMountinfo[] =
    "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    "42 31 0:39 /docker/x /mnt/my\\040cg rw,relatime shared:5 master:2 - cgroup cgroup "
    "rw,pids,clone_children\n";

TEST(ParseMountinfo, KeepsCgroupMountsWithControllers) {
  auto mounts = ParseMountinfo(kHostMountinfo);
  ASSERT_TRUE(mounts.ok()) << mounts.status();
  ASSERT_EQ(mounts->size(), 6u);  // not ext4, tmpfs or name=systemd
  EXPECT_EQ((*mounts)[0], (CgroupMount{1, "/sys/fs/cgroup/cpu", "/", {"cpu"}}));
  EXPECT_EQ((*mounts)[4], (CgroupMount{2, "/sys/fs/cgroup/unified", "/", {}}));
  // Escapes undone, optional fields skipped, options that are not controllers dropped.
  EXPECT_EQ((*mounts)[5], (CgroupMount{1, "/mnt/my cg", "/docker/x", {"pids"}}));
}

TEST(ParseMountinfo, RejectsGarbage) {
  auto mounts = ParseMountinfo("not a mountinfo line\n");
  ASSERT_FALSE(mounts.ok());
  EXPECT_THAT(mounts.status().message(), HasSubstr("mountinfo: unexpected line"));
}

class FakeLayoutTest : public ::testing::Test {
 protected:
  void Make(Kind kind) {
    auto tree = FakeCgroupTree::Make(kind);
    ASSERT_TRUE(tree.ok()) << tree.status();
    tree_ = std::move(*tree);
  }
  std::string P(const std::string& rel) const { return tree_->Path(rel); }
  std::unique_ptr<FakeCgroupTree> tree_;
};

TEST_F(FakeLayoutTest, HybridPlacesEachControllerWhereItIsMounted) {
  Make(Kind::kHybrid);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->version, Version::kHybrid);
  ASSERT_GE(layout->unified, 0);
  const Hierarchy& u = *layout->Unified();
  EXPECT_EQ(u.version, 2);
  EXPECT_EQ(u.mount_point, P("unified"));
  EXPECT_THAT(u.controllers, ElementsAre("hugetlb"));
  EXPECT_EQ(u.parent, P("unified/cubicle"));

  const Hierarchy* mem = layout->Find(Controller::kMemory);
  ASSERT_NE(mem, nullptr);
  EXPECT_EQ(mem->version, 1);
  EXPECT_EQ(mem->own, "/process_api/abc");
  EXPECT_EQ(mem->own_dir, P("memory/process_api/abc"));
  EXPECT_EQ(mem->parent, P("memory/process_api/abc/cubicle"));
  // cpu limits on the co-mounted v1 hierarchy; io is blkio; CPU time and
  // kill from the unified group, which has cpu.stat and cgroup.kill. The
  // v1 freezer serves nothing but stays listed, for the sweep.
  EXPECT_EQ(layout->Find(Controller::kCpu)->mount_point, P("cpu,cpuacct"));
  EXPECT_EQ(layout->Find(Controller::kCpuacct), &u);
  EXPECT_EQ(layout->Find(Controller::kIo)->mount_point, P("blkio"));
  EXPECT_EQ(layout->Find(Controller::kFreezer), &u);
  EXPECT_EQ(layout->hierarchies.size(), 6u);  // unified + 5 v1 (no name=systemd)
  EXPECT_EQ(layout->hierarchies.back().mount_point, P("freezer"));
  EXPECT_THAT(layout->Describe(), HasSubstr("(unused: swept only)"));
  EXPECT_TRUE(layout->v1_swap_accounting);
  EXPECT_TRUE(layout->emulated);
  EXPECT_THAT(layout->Describe(), HasSubstr("cgroups hybrid"));
}

TEST_F(FakeLayoutTest, V2PlacesEverythingInTheUnifiedHierarchy) {
  Make(Kind::kV2);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->version, Version::kV2);
  ASSERT_EQ(layout->hierarchies.size(), 1u);
  for (Controller c : kAllControllers) EXPECT_EQ(layout->placement[static_cast<int>(c)], 0);
  EXPECT_EQ(layout->hierarchies[0].own, "/user.slice/cubicle.service");
  EXPECT_EQ(layout->hierarchies[0].parent, P("unified/user.slice/cubicle.service/cubicle"));
}

TEST_F(FakeLayoutTest, V1HasNoUnifiedHierarchy) {
  Make(Kind::kV1);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->version, Version::kV1);
  EXPECT_EQ(layout->unified, -1);
  EXPECT_EQ(layout->hierarchies.size(), 5u);
}

TEST_F(FakeLayoutTest, WithoutMemswSwapAccountingIsOff) {
  Make(Kind::kV1);
  ASSERT_EQ(::unlink(P("memory/process_api/abc/memory.memsw.limit_in_bytes").c_str()), 0);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_FALSE(layout->v1_swap_accounting);
}

TEST_F(FakeLayoutTest, AbsoluteParentStartsAtEachHierarchyRoot) {
  Make(Kind::kHybrid);
  LayoutOptions options;
  options.parent = "/cubicle.slice/sandboxes";
  auto layout = tree_->Discover(options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->Find(Controller::kMemory)->parent, P("memory/cubicle.slice/sandboxes"));
  EXPECT_EQ(layout->Unified()->parent, P("unified/cubicle.slice/sandboxes"));
}

TEST_F(FakeLayoutTest, BadParentsAreRefused) {
  Make(Kind::kV2);
  const std::string long_part(256, 'a');
  const std::vector<std::string> bads = {"", "/", "//", "../escape", "a/./b", "a\nb", "a:b", "tab\there", "a/" + long_part};
  for (const std::string& bad : bads) {
    LayoutOptions options;
    options.parent = bad;
    auto layout = tree_->Discover(options);
    ASSERT_FALSE(layout.ok()) << bad;
    EXPECT_THAT(layout.status().message(), HasSubstr("cgroup parent")) << bad;
    EXPECT_FALSE(CheckParentOption(bad).ok()) << bad;
  }
  const std::vector<std::string> goods = {"cubicle", "/cubicle.slice/sandboxes", "a//b/", "user@1000.service",
                                          std::string(255, 'a')};
  for (const std::string& good : goods) {
    EXPECT_TRUE(CheckParentOption(good).ok()) << good;
  }
}

TEST_F(FakeLayoutTest, MountOfASubtreeMapsOurPathUnderIt) {
  Make(Kind::kV2);  // for its temporary directory only
  std::string mount = P("container-cg");
  ASSERT_EQ(::mkdir(mount.c_str(), 0755), 0);
  std::string mountinfo = "50 1 0:40 /docker/abc " + mount + " rw - cgroup2 cgroup2 rw\n";
  auto layout =
      LayoutFromProc(mountinfo, "0::/docker/abc/payload\n", LayoutOptions{.emulated = true});
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->hierarchies.size(), 1u);
  EXPECT_EQ(layout->hierarchies[0].own_dir, mount + "/payload");
  EXPECT_EQ(layout->hierarchies[0].parent, mount + "/payload/cubicle");
  // An absolute parent outside what the mount shows: skipped, with a note.
  LayoutOptions absolute{.parent = "/cubicle", .emulated = true};
  layout = LayoutFromProc(mountinfo, "0::/docker/abc/payload\n", absolute);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(layout->hierarchies.empty());
  EXPECT_EQ(layout->version, Version::kNone);
  ASSERT_FALSE(layout->notes.empty());
  EXPECT_THAT(layout->notes.back(), HasSubstr("not the parent /cubicle"));
}

TEST_F(FakeLayoutTest, PrepareParentsDelegatesV2ControllersDownToTheParent) {
  Make(Kind::kV2);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(PrepareParents(&*layout).ok());
  struct stat st;
  EXPECT_EQ(::stat(P("unified/user.slice/cubicle.service/cubicle").c_str(), &st), 0);
  EXPECT_EQ(*tree_->Read("unified/user.slice/cubicle.service/cgroup.subtree_control"),
            "+memory +pids +cpu +io");
  EXPECT_EQ(*tree_->Read("unified/user.slice/cubicle.service/cubicle/cgroup.subtree_control"),
            "+memory +pids +cpu +io");
  // What the kernel reports as enabled is not asked for again.
  ASSERT_TRUE(tree_
                  ->Write("unified/user.slice/cubicle.service/cgroup.subtree_control",
                          "memory pids cpu io\n")
                  .ok());
  ASSERT_TRUE(PrepareParents(&*layout).ok());
  EXPECT_EQ(*tree_->Read("unified/user.slice/cubicle.service/cgroup.subtree_control"),
            "memory pids cpu io\n");
}

TEST_F(FakeLayoutTest, PrepareAndRemoveParentsInEveryHierarchy) {
  Make(Kind::kHybrid);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(PrepareParents(&*layout).ok());
  struct stat st;
  for (const Hierarchy& h : layout->hierarchies)
    EXPECT_EQ(::stat(h.parent.c_str(), &st), 0) << h.parent;
  // hugetlb is all the unified hierarchy offers: nothing to enable there.
  EXPECT_EQ(*tree_->Read("unified/cgroup.subtree_control"), "");
  // A parent that still holds a group stays.
  std::string busy = layout->hierarchies[1].parent + "/cubicle-1-0";
  ASSERT_EQ(::mkdir(busy.c_str(), 0755), 0);
  ASSERT_TRUE(RemoveParents(*layout).ok());
  for (size_t i = 0; i < layout->hierarchies.size(); ++i) {
    EXPECT_EQ(::stat(layout->hierarchies[i].parent.c_str(), &st) == 0, i == 1) << i;
  }
}

std::vector<std::string> Mounts(const Layout& layout, const GroupPlan& plan) {
  std::vector<std::string> out;
  for (int h : plan.hierarchies) {
    out.push_back(
        layout.hierarchies[h].mount_point.substr(layout.hierarchies[h].mount_point.rfind('/') + 1));
  }
  return out;
}

TEST_F(FakeLayoutTest, PlanGroupsUsesWhatLimitsAndOutcomesNeed) {
  Make(Kind::kHybrid);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto none = PlanGroups(*layout, Limits{});
  ASSERT_TRUE(none.ok()) << none.status();
  // Placement (v2, which also gives CPU time and kill), then accounting
  // (memory, pids); no blkio without an IO limit (v1 counts nothing there
  // without a throttle rule).
  EXPECT_THAT(Mounts(*layout, *none), ElementsAre("unified", "memory", "pids"));
  EXPECT_TRUE(none->writes.empty());
  Limits io;
  io.io.push_back(IoLimit{8, 0, 1024});
  auto with_io = PlanGroups(*layout, io);
  ASSERT_TRUE(with_io.ok()) << with_io.status();
  EXPECT_THAT(Mounts(*layout, *with_io), ElementsAre("unified", "blkio", "memory", "pids"));
  Limits cpu;
  cpu.cpus = 0.5;
  auto with_cpu = PlanGroups(*layout, cpu);
  ASSERT_TRUE(with_cpu.ok()) << with_cpu.status();
  EXPECT_THAT(Mounts(*layout, *with_cpu), ElementsAre("unified", "cpu,cpuacct", "memory", "pids"));
}

// A unified hierarchy without cgroup.kill (before Linux 5.14) or cpu.stat:
// the v1 freezer and cpuacct, as mounted.
TEST_F(FakeLayoutTest, HybridWithoutV2KillOrCpuStatUsesTheV1FreezerAndCpuacct) {
  Make(Kind::kHybrid);
  ASSERT_EQ(::unlink(P("unified/cgroup.kill").c_str()), 0);
  ASSERT_EQ(::unlink(P("unified/cpu.stat").c_str()), 0);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->Find(Controller::kFreezer)->mount_point, P("freezer"));
  EXPECT_EQ(layout->Find(Controller::kCpuacct)->mount_point, P("cpu,cpuacct"));
  EXPECT_EQ(layout->hierarchies.size(), 6u);
  auto none = PlanGroups(*layout, Limits{});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(Mounts(*layout, *none), ElementsAre("unified", "memory", "pids", "cpu,cpuacct", "freezer"));
}

TEST_F(FakeLayoutTest, PlanGroupsNamesTheLimitWhoseControllerIsMissing) {
  Make(Kind::kV1);
  auto layout = tree_->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();
  layout->placement[static_cast<int>(Controller::kPids)] = -1;
  layout->placement[static_cast<int>(Controller::kIo)] = -1;
  Limits l;
  l.pids_max = 10;
  l.io.push_back(IoLimit{8, 0, 1024});
  auto plan = PlanGroups(*layout, l);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "pids_max: needs the pids controller, which this host (cgroups v1) does not offer; "
            "io: needs the io/blkio controller, which this host (cgroups v1) does not offer");
}

}  // namespace
}  // namespace cubicle::cgroups

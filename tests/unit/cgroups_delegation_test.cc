// cgroups/delegation.h against fake cgroupfs trees: the daemon steps into a
// leaf of its delegated cgroup on a pure v2 host only when it is alone
// there and nothing is delegated yet, and the parent it names then lets
// PrepareParents delegate the controllers beside it.
#include "cgroups/delegation.h"

#include <gtest/gtest.h>

#include <memory>

#include "cgroups/fake_tree.h"

namespace cubicle::cgroups {
namespace {

using Kind = FakeCgroupTree::Kind;
constexpr pid_t kDaemon = 4242;

std::unique_ptr<FakeCgroupTree> Tree(Kind kind) {
  absl::StatusOr<std::unique_ptr<FakeCgroupTree>> made = FakeCgroupTree::Make(kind);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

TEST(MoveIntoLeaf, ADaemonAloneInItsV2CgroupMovesBesideItsSandboxes) {
  std::unique_ptr<FakeCgroupTree> tree = Tree(Kind::kV2);
  ASSERT_NE(tree, nullptr);
  ASSERT_TRUE(tree->Write("unified/user.slice/cubicle.service/cgroup.procs", "4242\n").ok());
  absl::StatusOr<Layout> layout = tree->Discover();
  ASSERT_TRUE(layout.ok()) << layout.status();

  absl::StatusOr<std::optional<LeafMove>> moved = MoveIntoLeaf(*layout, kDaemon);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_TRUE(moved->has_value());
  EXPECT_EQ((*moved)->leaf, tree->Path("unified/user.slice/cubicle.service/daemon"));
  EXPECT_EQ((*moved)->parent, "/user.slice/cubicle.service/cubicle");
  EXPECT_EQ(*tree->Read("unified/user.slice/cubicle.service/daemon/cgroup.procs"), "4242");

  // The kernel has moved it out of the service's group; the sandboxes'
  // parent, named absolutely, is prepared beside the leaf with the
  // controllers enabled from the service's group down.
  ASSERT_TRUE(tree->Write("unified/user.slice/cubicle.service/cgroup.procs", "").ok());
  absl::StatusOr<Layout> beside = tree->Discover(LayoutOptions{.parent = (*moved)->parent});
  ASSERT_TRUE(beside.ok()) << beside.status();
  ASSERT_TRUE(PrepareParents(&*beside).ok());
  EXPECT_EQ(beside->Unified()->parent, tree->Path("unified/user.slice/cubicle.service/cubicle"));
  absl::StatusOr<std::string> delegated = tree->Read("unified/user.slice/cubicle.service/cgroup.subtree_control");
  ASSERT_TRUE(delegated.ok());
  EXPECT_NE(delegated->find("+memory"), std::string::npos) << *delegated;
  EXPECT_NE(delegated->find("+pids"), std::string::npos) << *delegated;
}

TEST(MoveIntoLeaf, NothingMovesWhenAnotherProcessSharesTheCgroup) {
  std::unique_ptr<FakeCgroupTree> tree = Tree(Kind::kV2);
  ASSERT_NE(tree, nullptr);
  ASSERT_TRUE(tree->Write("unified/user.slice/cubicle.service/cgroup.procs", "4242\n77\n").ok());
  absl::StatusOr<std::optional<LeafMove>> moved = MoveIntoLeaf(*tree->Discover(), kDaemon);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(moved->has_value()) << "a shell's session scope is not the daemon's to rearrange";
  EXPECT_FALSE(tree->Read("unified/user.slice/cubicle.service/daemon/cgroup.procs").ok());
}

TEST(MoveIntoLeaf, NothingMovesWhenControllersAreDelegatedAlready) {
  std::unique_ptr<FakeCgroupTree> tree = Tree(Kind::kV2);
  ASSERT_NE(tree, nullptr);
  ASSERT_TRUE(tree->Write("unified/user.slice/cubicle.service/cgroup.procs", "4242\n").ok());
  ASSERT_TRUE(tree->Write("unified/user.slice/cubicle.service/cgroup.subtree_control", "cpu memory pids\n").ok());
  absl::StatusOr<std::optional<LeafMove>> moved = MoveIntoLeaf(*tree->Discover(), kDaemon);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(moved->has_value());
}

TEST(MoveIntoLeaf, NothingMovesOnHybridOrV1Hosts) {
  for (Kind kind : {Kind::kHybrid, Kind::kV1}) {
    std::unique_ptr<FakeCgroupTree> tree = Tree(kind);
    ASSERT_NE(tree, nullptr);
    absl::StatusOr<std::optional<LeafMove>> moved = MoveIntoLeaf(*tree->Discover(), kDaemon);
    ASSERT_TRUE(moved.ok()) << moved.status();
    EXPECT_FALSE(moved->has_value());
  }
}

}  // namespace
}  // namespace cubicle::cgroups

// sessions/workspace_store.h: a workspace per key, capped by a tmpfs of its
// own where the daemon may mount (root), found again after a restart, and
// removed with nothing left.
#include "sessions/workspace_store.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace cubicle::sessions {
namespace {

class WorkspaceStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cubicle-ws-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    // Whatever a failed test left mounted under the temp dir, then the dir.
    for (const char* sub : {"/workspaces/conv-1", "/workspaces/conv-2", "/on-tmpfs/workspaces/conv-1", "/on-tmpfs"}) {
      std::string p = dir_ + sub;
      for (int i = 0; i < 4 && ::umount2(p.c_str(), MNT_DETACH) == 0; ++i) {
      }
    }
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static bool CanMount() { return ::geteuid() == 0; }
  static bool IsTmpfs(const std::string& p) {
    struct statfs fs;
    return ::statfs(p.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  }
  static int WriteBytes(const std::string& path, size_t n) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    std::string chunk(1 << 16, 'x');
    int err = 0;
    for (size_t done = 0; done < n && err == 0;) {
      ssize_t w = ::write(fd, chunk.data(), std::min(chunk.size(), n - done));
      if (w < 0) err = errno;
      else done += static_cast<size_t>(w);
    }
    ::close(fd);
    return err;
  }
  std::string dir_;
};

TEST(SessionKey, AcceptsConversationIdsAndRefusesAnythingPathLike) {
  EXPECT_TRUE(ValidateSessionKey("conv_01HZY.a-b").ok());
  for (const char* bad : {"", ".hidden", "a/b", "..", "a b", "x\n", "é"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateSessionKey(bad))) << bad;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateSessionKey(std::string(129, 'a'))));
}

TEST_F(WorkspaceStoreTest, AsRootEachWorkspaceIsATmpfsCappedAtItsSize) {
  if (!CanMount()) GTEST_SKIP() << "mounting a tmpfs needs root";
  auto store = WorkspaceStore::Open(dir_ + "/workspaces", /*mount_tmpfs=*/true);
  ASSERT_TRUE(store.ok()) << store.status();
  WorkspaceShape shape{.size_bytes = 4 << 20, .uid = 4242, .gid = 4243};
  auto ws = store->Attach("conv-1", shape);
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_TRUE(ws->capped);
  EXPECT_TRUE(IsTmpfs(ws->path));
  struct stat st;
  ASSERT_EQ(::stat(ws->path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4242u);
  EXPECT_EQ(st.st_gid, 4243u);
  EXPECT_EQ(WriteBytes(ws->path + "/big", 8 << 20), ENOSPC);
  auto usage = store->Usage("conv-1");
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->size_bytes, 4u << 20);
  EXPECT_GE(usage->used_bytes, 3u << 20);
}

TEST_F(WorkspaceStoreTest, AttachAfterARestartFindsTheSameWorkspaceAndItsFiles) {
  if (!CanMount()) GTEST_SKIP() << "mounting a tmpfs needs root";
  auto store = WorkspaceStore::Open(dir_ + "/workspaces", true);
  ASSERT_TRUE(store.ok()) << store.status();
  auto first = store->Attach("conv-1", {.size_bytes = 1 << 20, .uid = 0, .gid = 0});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(WriteBytes(first->path + "/kept", 100), 0);
  auto again = WorkspaceStore::Open(dir_ + "/workspaces", true)->Attach("conv-1", {.size_bytes = 8 << 20});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(::access((again->path + "/kept").c_str(), F_OK), 0);
  EXPECT_EQ(store->Usage("conv-1")->size_bytes, 1u << 20) << "a second mount was stacked on the first";
  auto keys = store->Keys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(*keys, std::vector<std::string>{"conv-1"});
}

TEST_F(WorkspaceStoreTest, RemoveUnmountsAndLeavesNothing) {
  if (!CanMount()) GTEST_SKIP() << "mounting a tmpfs needs root";
  auto store = WorkspaceStore::Open(dir_ + "/workspaces", true);
  ASSERT_TRUE(store.ok());
  auto ws = store->Attach("conv-2", {.size_bytes = 1 << 20});
  ASSERT_TRUE(ws.ok()) << ws.status();
  const std::string path = ws->path;
  ws->root.reset();
  ASSERT_TRUE(store->Remove("conv-2").ok());
  EXPECT_FALSE(IsTmpfs(path));
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  EXPECT_TRUE(store->Remove("conv-2").ok()) << "removing what is gone is not an error";
}

// A state directory may itself be on a tmpfs (/run, a memory-backed
// volume): each workspace must still be a capped tmpfs of its own, and
// removing it must unmount only that.
TEST_F(WorkspaceStoreTest, OnATmpfsEachWorkspaceIsStillAMountOfItsOwn) {
  if (!CanMount()) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string parent = dir_ + "/on-tmpfs";
  ASSERT_EQ(::mkdir(parent.c_str(), 0700), 0);
  ASSERT_EQ(::mount("tmpfs", parent.c_str(), "tmpfs", 0, "size=8m"), 0) << std::strerror(errno);
  auto store = WorkspaceStore::Open(parent + "/workspaces", true);
  ASSERT_TRUE(store.ok()) << store.status();
  auto ws = store->Attach("conv-1", {.size_bytes = 1 << 20});
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_TRUE(ws->capped);
  auto usage = store->Usage("conv-1");
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->size_bytes, 1u << 20) << "the workspace is the parent tmpfs, not a mount of its own";
  ws->root.reset();
  EXPECT_TRUE(store->Remove("conv-1").ok());
  EXPECT_NE(::access(ws->path.c_str(), F_OK), 0);
  EXPECT_TRUE(IsTmpfs(parent)) << "the parent tmpfs was unmounted too";
  EXPECT_EQ(::umount2(parent.c_str(), MNT_DETACH), 0);
}

TEST_F(WorkspaceStoreTest, WithoutMountingAWorkspaceIsAPlainUncappedDirectory) {
  auto store = WorkspaceStore::Open(dir_ + "/workspaces", /*mount_tmpfs=*/false);
  ASSERT_TRUE(store.ok()) << store.status();
  auto ws = store->Attach("conv-1", {.size_bytes = 1 << 20, .uid = ::geteuid(), .gid = ::getegid()});
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_FALSE(ws->capped);
  ASSERT_EQ(WriteBytes(ws->path + "/data", 64 << 10), 0);
  ASSERT_EQ(::mkdir((ws->path + "/d").c_str(), 0755), 0);
  ASSERT_EQ(WriteBytes(ws->path + "/d/more", 64 << 10), 0);
  // A payload's link to a file outside: removal takes the link, not its target.
  const std::string outside = dir_ + "/outside";
  ASSERT_EQ(WriteBytes(outside, 10), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (ws->path + "/d/link").c_str()), 0);
  auto usage = store->Usage("conv-1");
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->size_bytes, 0u);
  EXPECT_GE(usage->used_bytes, 128u << 10);
  ASSERT_TRUE(store->Remove("conv-1").ok());
  EXPECT_NE(::access(ws->path.c_str(), F_OK), 0);
  EXPECT_EQ(::access(outside.c_str(), F_OK), 0);
}

TEST_F(WorkspaceStoreTest, ABadKeyIsRefusedBeforeAnythingIsMade) {
  auto store = WorkspaceStore::Open(dir_ + "/workspaces", false);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(store->Attach("../escape", {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Remove("a/b")));
  EXPECT_NE(::access((dir_ + "/escape").c_str(), F_OK), 0);
  EXPECT_TRUE(store->Keys()->empty());
}

TEST_F(WorkspaceStoreTest, AStoreDirectoryThatIsASymlinkIsRefused) {
  ASSERT_EQ(::symlink("/etc", (dir_ + "/workspaces").c_str()), 0);
  auto store = WorkspaceStore::Open(dir_ + "/workspaces", false);
  EXPECT_FALSE(store.ok());
}

}  // namespace
}  // namespace cubicle::sessions

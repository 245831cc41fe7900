// The host cache through the cubicle binary (runtime/host_cache.h): the
// first process stores the cgroup layout it discovered, the next ones use
// it, and one that no longer holds is discovered afresh. Each test gives
// the binary a cache directory of its own (CUBICLE_HOST_CACHE).
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cgroups/cgroupfs.h"
#include "runtime/cgroup_host.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

class RootHostCache : public HostHygieneTest {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "the default limits need cgroups, made here as root";
    if (absl::Status st = runtime::CgroupsUsable(); !st.ok()) GTEST_SKIP() << "no usable cgroups: " << st;
    HostHygieneTest::SetUp();
    // Parents of this test's own: `cubicle cleanup` run by a test beside it
    // removes the empty default parents, which would make this cache stale.
    parent_ = absl::StrCat("cubicle-host-cache-test-", ::getpid());
    env_ = {CacheEnv(), ParentEnv()};
  }
  void TearDown() override {
    if (!parent_.empty()) {
      env_ = {CacheEnv(), ParentEnv()};  // a test may have changed env_
      ProcessRun cleanup = Cubicle({"cleanup"});
      EXPECT_EQ(cleanup.exit_code, 0) << cleanup.err;
      EXPECT_EQ(ParentsLeft(), std::vector<std::string>{}) << "the test's parents outlived cubicle cleanup";
    }
    HostHygieneTest::TearDown();
  }
  std::string CacheEnv() const { return absl::StrCat("CUBICLE_HOST_CACHE=", cache_dir()); }
  std::string ParentEnv() const { return absl::StrCat(runtime::kCgroupParentEnv, "=", parent_); }
  // The test's parent directories that still exist, in every hierarchy.
  std::vector<std::string> ParentsLeft() const {
    std::vector<std::string> left;
    for (const cgroups::Hierarchy& h : runtime::SharedCgroupHost().layout->hierarchies) {
      if (h.own_dir.empty()) continue;
      std::string dir = cgroups::cgroupfs::Join(h.own_dir, parent_);
      if (::access(dir.c_str(), F_OK) == 0) left.push_back(dir);
    }
    return left;
  }
  std::string cache_dir() const { return dir_.Join("cache"); }
  std::string cache_file() const { return dir_.Join("cache/host-cache"); }
  // Waits for what a run leaves behind too (its cleaner): what the tests
  // then look at is final.
  ProcessRun Cubicle(const std::vector<std::string>& args) {
    ProcessRun run = RunCubicle(args, "", env_);
    reaper_.ReapAll();
    return run;
  }

  OrphanReaper reaper_;
  TempDir dir_;
  std::string parent_;
  std::vector<std::string> env_;
};

TEST_F(RootHostCache, TheFirstRunStoresTheLayoutAndTheNextUsesIt) {
  ProcessRun first = Cubicle({"run", "--", "/bin/true"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string stored = ReadFile(cache_file());
  ASSERT_TRUE(absl::StartsWith(stored, "cubicle host cache 2\n")) << stored;
  struct stat st;
  ASSERT_EQ(::stat(cache_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ProcessRun probe = Cubicle({"probe"});
  EXPECT_TRUE(absl::StrContains(probe.out, "from the host cache")) << probe.out << probe.err;
  EXPECT_EQ(ReadFile(cache_file()), stored) << "a cache that holds is not rewritten";
}

TEST_F(RootHostCache, ACacheThatNoLongerHoldsIsDiscoveredAfresh) {
  ASSERT_EQ(Cubicle({"run", "--", "/bin/true"}).exit_code, 0);
  const std::string stored = ReadFile(cache_file());
  // Every parent moved to a directory that does not exist: revalidation
  // fails, the layout is discovered again and the cache rewritten.
  ASSERT_TRUE(WriteFile(cache_file(), absl::StrReplaceAll(stored, {{"/cubicle\t", "/cubicle-gone\t"}})));
  ProcessRun run = Cubicle({"run", "--", "/bin/sh", "-c", "echo ran"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "ran\n");
  EXPECT_EQ(ReadFile(cache_file()), stored);
  // Garbage is no different.
  ASSERT_TRUE(WriteFile(cache_file(), "cubicle host cache 2\nkey\tnot this one\nversion\t1\n"));
  EXPECT_EQ(Cubicle({"run", "--", "/bin/true"}).exit_code, 0);
  EXPECT_EQ(ReadFile(cache_file()), stored);
  ProcessRun probe = Cubicle({"probe"});
  EXPECT_TRUE(absl::StrContains(probe.out, "from the host cache")) << probe.out;
}

TEST_F(RootHostCache, CleanupRemovesTheCache) {
  ASSERT_EQ(Cubicle({"run", "--", "/bin/true"}).exit_code, 0);
  ASSERT_EQ(::access(cache_file().c_str(), F_OK), 0);
  ProcessRun cleanup = Cubicle({"cleanup"});
  EXPECT_EQ(cleanup.exit_code, 0) << cleanup.err;
  EXPECT_NE(::access(cache_file().c_str(), F_OK), 0) << "the cache outlived cubicle cleanup";
}

TEST_F(RootHostCache, TheSandboxGroupsGoUnderTheConfiguredParent) {
  ProcessRun run = Cubicle({"run", "--", "/bin/cat", "/proc/self/cgroup"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // The payload's cgroup namespace starts at its group, so its lines read
  // "/"; the group itself is a child of the configured parent on the host.
  std::vector<std::string> parents = ParentsLeft();
  ASSERT_FALSE(parents.empty()) << "no parent named " << parent_ << " was made";
  for (const std::string& dir : parents) {
    EXPECT_FALSE(cgroups::cgroupfs::HasSubdirectories(dir)) << dir << ": the group outlived its run";
  }
  const std::string stored = ReadFile(cache_file());
  EXPECT_TRUE(absl::StrContains(stored, absl::StrCat("/", parent_, "\t"))) << stored;
  EXPECT_FALSE(absl::StrContains(stored, "/cubicle\t")) << stored;
}

TEST_F(RootHostCache, ABadParentFailsTheSandboxAndMakesNothing) {
  for (const char* bad : {"../escape", "/", "a\nb"}) {
    std::vector<std::string> env = {CacheEnv(), absl::StrCat(runtime::kCgroupParentEnv, "=", bad)};
    ProcessRun run = RunCubicle({"run", "--", "/bin/echo", "ran"}, "", env);
    EXPECT_EQ(run.exit_code, 125) << bad << ": " << run.err;
    EXPECT_EQ(run.out, "") << bad << ": the payload ran without its limits";
    EXPECT_TRUE(absl::StrContains(run.err, "CUBICLE_CGROUP_PARENT: cgroup parent")) << run.err;
    ProcessRun cleanup = RunCubicle({"cleanup"}, "", env);
    EXPECT_EQ(cleanup.exit_code, 2) << bad << ": " << cleanup.out << cleanup.err;
    EXPECT_TRUE(absl::StrContains(cleanup.err, "CUBICLE_CGROUP_PARENT")) << cleanup.err;
  }
  EXPECT_NE(::access(cache_file().c_str(), F_OK), 0) << "a bad parent was cached";
  EXPECT_EQ(ParentsLeft(), std::vector<std::string>{});
}

TEST_F(RootHostCache, OffMeansNoCache) {
  env_ = {"CUBICLE_HOST_CACHE=off", ParentEnv()};
  ProcessRun run = Cubicle({"run", "--", "/bin/true"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  ProcessRun probe = Cubicle({"probe"});
  EXPECT_FALSE(absl::StrContains(probe.out, "from the host cache")) << probe.out;
}

}  // namespace
}  // namespace cubicle::test_support

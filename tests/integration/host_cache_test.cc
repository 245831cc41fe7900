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
    env_ = {absl::StrCat("CUBICLE_HOST_CACHE=", cache_dir())};
  }
  std::string cache_dir() const { return dir_.Join("cache"); }
  std::string cache_file() const { return dir_.Join("cache/host-cache"); }
  ProcessRun Cubicle(const std::vector<std::string>& args) { return RunCubicle(args, "", env_); }

  TempDir dir_;
  std::vector<std::string> env_;
};

TEST_F(RootHostCache, TheFirstRunStoresTheLayoutAndTheNextUsesIt) {
  ProcessRun first = Cubicle({"run", "--", "/bin/true"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string stored = ReadFile(cache_file());
  ASSERT_TRUE(absl::StartsWith(stored, "cubicle host cache 1\n")) << stored;
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
  ASSERT_TRUE(WriteFile(cache_file(), "cubicle host cache 1\nkey\tnot this one\nversion\t1\n"));
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

TEST_F(RootHostCache, OffMeansNoCache) {
  env_ = {"CUBICLE_HOST_CACHE=off"};
  ProcessRun run = Cubicle({"run", "--", "/bin/true"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  ProcessRun probe = Cubicle({"probe"});
  EXPECT_FALSE(absl::StrContains(probe.out, "from the host cache")) << probe.out;
}

}  // namespace
}  // namespace cubicle::test_support

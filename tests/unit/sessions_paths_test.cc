// sessions/paths.h: names are refused before any syscall, and what is
// opened is resolved beneath the root whatever a payload planted there.
#include "sessions/paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace cubicle::sessions {
namespace {

TEST(SplitRelativePath, AcceptsPlainRelativeNames) {
  auto parts = SplitRelativePath("outputs/plot.png");
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(*parts, (std::vector<std::string>{"outputs", "plot.png"}));
  EXPECT_EQ(JoinPath(*parts), "outputs/plot.png");
}

TEST(SplitRelativePath, RefusesWhatCouldLeaveOrAmbiguouslyNameTheWorkspace) {
  for (const char* bad : {"", "/etc/shadow", "../x", "a/../../x", "a//b", "a/", "./a", "a/./b", "..", "."}) {
    auto parts = SplitRelativePath(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parts.status())) << "'" << bad << "' gave " << parts.status();
  }
  EXPECT_TRUE(absl::IsInvalidArgument(SplitRelativePath(std::string("a\0b", 3)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SplitRelativePath(std::string(kMaxPathBytes + 1, 'a')).status()));
  std::string deep;
  for (size_t i = 0; i <= kMaxPathDepth; ++i) deep += i ? "/d" : "d";
  EXPECT_TRUE(absl::IsInvalidArgument(SplitRelativePath(deep).status()));
}

class OpenBeneathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cubicle-paths-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(::mkdir((dir_ + "/ws").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((dir_ + "/ws/sub").c_str(), 0755), 0);
    ASSERT_EQ(::symlink("/etc", (dir_ + "/ws/etc-link").c_str()), 0);
    ASSERT_EQ(::symlink("../..", (dir_ + "/ws/sub/up").c_str()), 0);
    ASSERT_EQ(::symlink("/etc/hostname", (dir_ + "/ws/file-link").c_str()), 0);
    root_.reset(::open((dir_ + "/ws").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_.valid());
  }
  void TearDown() override {
    root_.reset();
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string dir_;
  UniqueFd root_;
};

TEST_F(OpenBeneathTest, NoSymlinkIsFollowedAnywhereInThePath) {
  for (const char* through : {"etc-link/hostname", "sub/up/etc/hostname", "file-link"}) {
    auto fd = OpenBeneath(root_.get(), through, O_RDONLY);
    EXPECT_FALSE(fd.ok()) << through << " was opened";
    EXPECT_NE(std::string(fd.status().message()).find(through), std::string::npos) << fd.status();
  }
}

TEST_F(OpenBeneathTest, OpenParentMakesMissingDirectoriesBeneathTheRoot) {
  auto parts = SplitRelativePath("sub/new/deeper/file.txt");
  ASSERT_TRUE(parts.ok());
  auto parent = OpenParent(root_.get(), *parts, /*make_parents=*/true);
  ASSERT_TRUE(parent.ok()) << parent.status();
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/ws/sub/new/deeper").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_F(OpenBeneathTest, OpenParentRefusesASymlinkedParentAndMakesNothingThrough) {
  auto parts = SplitRelativePath("etc-link/x/file");
  ASSERT_TRUE(parts.ok());
  auto parent = OpenParent(root_.get(), *parts, /*make_parents=*/true);
  EXPECT_FALSE(parent.ok());
  struct stat st;
  EXPECT_NE(::stat("/etc/x", &st), 0);
}

TEST_F(OpenBeneathTest, WithoutMakeParentsAMissingParentIsNotFound) {
  auto parts = SplitRelativePath("nope/file");
  ASSERT_TRUE(parts.ok());
  EXPECT_TRUE(absl::IsNotFound(OpenParent(root_.get(), *parts, false).status()));
}

}  // namespace
}  // namespace cubicle::sessions

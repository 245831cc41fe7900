// sessions/ids.h, state_dir.h and records.h: ids that sort and never
// repeat, one daemon per state directory, and records that survive the
// daemon being killed, on temporary directories.
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <latch>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sessions/ids.h"
#include "sessions/records.h"
#include "sessions/state_dir.h"

namespace cubicle::sessions {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cubicle-records-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The millisecond timestamp in an id's first 10 digits.
int64_t IdTimeMs(const std::string& id) {
  static constexpr absl::string_view kDigits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  int64_t ms = 0;
  for (size_t i = 1; i <= 10; ++i) ms = ms * 32 + static_cast<int64_t>(kDigits.find(id[i]));
  return ms;
}

// Everything the child wrote to `fd` until it closed it (bounded by the child's life).
std::string ReadAllFrom(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR) return out;
  }
}

TEST(NewId, IsThePrefixAndAUlidOfNow) {
  int64_t before = NowMs();
  std::string id = NewId('e');
  int64_t after = NowMs();
  EXPECT_EQ(id.size(), 1 + kUlidChars);
  EXPECT_TRUE(LooksLikeId(id, 'e')) << id;
  EXPECT_FALSE(LooksLikeId(id, 's')) << id;
  EXPECT_GE(IdTimeMs(id), before);
  EXPECT_LE(IdTimeMs(id), after);
}

TEST(LooksLikeId, RefusesWhatNewIdNeverMakes) {
  std::string good = NewId('e');
  ASSERT_TRUE(LooksLikeId(good, 'e'));
  EXPECT_FALSE(LooksLikeId("", 'e'));
  EXPECT_FALSE(LooksLikeId(good.substr(0, good.size() - 1), 'e'));
  EXPECT_FALSE(LooksLikeId(good + "0", 'e'));
  for (char bad : {'I', 'L', 'O', 'U', 'a', '-', '\0'}) {
    std::string id = good;
    id.back() = bad;
    EXPECT_FALSE(LooksLikeId(id, 'e')) << id;
  }
  std::string too_big = good;
  too_big[1] = '8';  // over 128 bits
  EXPECT_FALSE(LooksLikeId(too_big, 'e'));
}

TEST(NewId, EachSortsAfterTheLastInATightLoop) {
  std::string last = NewId('e');
  for (int i = 0; i < 100000; ++i) {
    std::string id = NewId('e');
    ASSERT_LT(last, id) << "after " << i << " ids";
    last = std::move(id);
  }
}

TEST(NewId, ThreadsNeverShareAnIdAndEachSeesItsOwnInOrder) {
  constexpr int kThreads = 8;
  constexpr int kEach = 20000;
  std::vector<std::vector<std::string>> made(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kEach; ++i) made[t].push_back(NewId('e'));
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::string> all;
  for (const auto& mine : made) {
    EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
    EXPECT_EQ(std::adjacent_find(mine.begin(), mine.end()), mine.end());
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "an id was made twice";
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
}

TEST(NewId, AForkedChildDoesNotReplayItsParentsNextIds) {
  (void)NewId('e');  // the generator has state to inherit
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string id = NewId('e');
    _exit(::write(fds[1], id.data(), id.size()) == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string ours = NewId('e');
  std::string theirs = ReadAllFrom(fds[0]);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(LooksLikeId(theirs, 'e')) << theirs;
  EXPECT_NE(ours, theirs);
}

// A fresh temporary directory per test, removed with everything in it.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(tmp.path().empty()) << "mkdtemp under /tmp failed"; }
  TempDir tmp;
};

using StateDirTest = TempDirTest;

TEST_F(StateDirTest, CreatesAPrivateDirectoryAndRecordsOurPid) {
  auto dir = StateDir::Open(tmp / "state");
  ASSERT_TRUE(dir.ok()) << dir.status();
  struct stat st;
  ASSERT_EQ(::stat((tmp / "state").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(dir->path(), tmp / "state");
  ASSERT_EQ(::fstat(dir->fd(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(ReadFile(tmp / "state/lock"), absl::StrCat(::getpid(), "\n"));
}

TEST_F(StateDirTest, ASecondOpenInThisProcessIsRefusedNamingUs) {
  auto first = StateDir::Open(tmp / "state");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StateDir::Open(tmp / "state");
  ASSERT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_EQ(second.status().message(), absl::StrCat("state directory ", tmp / "state", " is in use by cubicle pid ",
                                                    ::getpid(), " (lock ", tmp / "state/lock", ")"));
}

TEST_F(StateDirTest, AForkedChildIsRefusedNamingTheParent) {
  auto dir = StateDir::Open(tmp / "state");
  ASSERT_TRUE(dir.ok()) << dir.status();
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto again = StateDir::Open(tmp / "state");
    std::string said = again.ok() ? "opened" : std::string(again.status().message());
    _exit(::write(fds[1], said.data(), said.size()) == static_cast<ssize_t>(said.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string said = ReadAllFrom(fds[0]);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(said.find(absl::StrCat("is in use by cubicle pid ", ::getpid(), " ")), std::string::npos) << said;
}

TEST_F(StateDirTest, TheLockGoesWithTheObjectAndIsReleasedWhenItIsDestroyed) {
  {
    auto dir = StateDir::Open(tmp / "state");
    ASSERT_TRUE(dir.ok()) << dir.status();
    StateDir moved = std::move(*dir);
    EXPECT_TRUE(absl::IsFailedPrecondition(StateDir::Open(tmp / "state").status()));
  }
  auto again = StateDir::Open(tmp / "state");
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(StateDirTest, RefusesASymlinkAndLeavesItsTargetAlone) {
  ASSERT_EQ(::mkdir((tmp / "real").c_str(), 0700), 0);
  ASSERT_EQ(::symlink((tmp / "real").c_str(), (tmp / "state").c_str()), 0);
  auto dir = StateDir::Open(tmp / "state");
  ASSERT_TRUE(absl::IsFailedPrecondition(dir.status())) << dir.status();
  EXPECT_NE(dir.status().message().find("is a symlink"), absl::string_view::npos) << dir.status();
  EXPECT_TRUE(fs::is_empty(tmp / "real"));
}

TEST_F(StateDirTest, RefusesAFile) {
  std::ofstream(tmp / "state") << "x";
  auto dir = StateDir::Open(tmp / "state");
  ASSERT_TRUE(absl::IsFailedPrecondition(dir.status())) << dir.status();
  EXPECT_NE(dir.status().message().find("is not a directory"), absl::string_view::npos) << dir.status();
  EXPECT_EQ(ReadFile(tmp / "state"), "x");
}

TEST_F(StateDirTest, RefusesADirectoryOthersCanWriteAndTakesNoLockThere) {
  ASSERT_EQ(::mkdir((tmp / "state").c_str(), 0700), 0);
  ASSERT_EQ(::chmod((tmp / "state").c_str(), 0770), 0);
  auto dir = StateDir::Open(tmp / "state");
  ASSERT_TRUE(absl::IsPermissionDenied(dir.status())) << dir.status();
  EXPECT_NE(dir.status().message().find("writable by group or others (mode 0770)"), absl::string_view::npos)
      << dir.status();
  EXPECT_TRUE(fs::is_empty(tmp / "state"));
}

TEST_F(StateDirTest, RefusesADirectorySomeoneElseOwns) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another uid";
  ASSERT_EQ(::mkdir((tmp / "state").c_str(), 0700), 0);
  ASSERT_EQ(::chown((tmp / "state").c_str(), 65534, 65534), 0);
  auto dir = StateDir::Open(tmp / "state");
  ASSERT_TRUE(absl::IsPermissionDenied(dir.status())) << dir.status();
  EXPECT_NE(dir.status().message().find("is owned by uid 65534"), absl::string_view::npos) << dir.status();
  EXPECT_TRUE(fs::is_empty(tmp / "state"));
}

TEST_F(StateDirTest, ParentsAreNotMade) {
  auto dir = StateDir::Open(tmp / "missing/state");
  ASSERT_TRUE(absl::IsNotFound(dir.status())) << dir.status();
  EXPECT_NE(dir.status().message().find("its parent does not exist"), absl::string_view::npos) << dir.status();
  EXPECT_FALSE(fs::exists(tmp / "missing"));
}

}  // namespace
}  // namespace cubicle::sessions

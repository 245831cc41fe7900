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
#include "sessions/sqlite.h"
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


// ---- Records ----

class RecordsTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    db_path = tmp / "records.db";
    auto opened = Records::Open(db_path);
    ASSERT_TRUE(opened.ok()) << opened.status();
    records = std::move(*opened);
  }
  std::string db_path;
  std::unique_ptr<Records> records;
};

SessionRecord Session(const std::string& key) {
  SessionRecord s;
  s.key = key;
  s.profile = "python";
  s.created_ms = 1000;
  s.last_used_ms = 2000;
  s.idle_ttl_ms = 300000;
  s.expires_ms = 86400000;
  s.state = "live";
  s.workspace = "/var/lib/cubicle/ws/" + key;
  s.options = R"({"memory":"512M"})";
  return s;
}

ExecRecord Exec(const std::string& id, const std::string& session = "", const std::string& key = "",
                int64_t created_ms = 1000) {
  ExecRecord e;
  e.id = id;
  e.session = session;
  e.key = key;
  e.state = "queued";
  e.created_ms = created_ms;
  e.request = R"({"argv":["true"]})";
  return e;
}

void ExpectSameSession(const SessionRecord& a, const SessionRecord& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.profile, b.profile);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.last_used_ms, b.last_used_ms);
  EXPECT_EQ(a.idle_ttl_ms, b.idle_ttl_ms);
  EXPECT_EQ(a.expires_ms, b.expires_ms);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.workspace, b.workspace);
  EXPECT_EQ(a.options, b.options);
}

void ExpectSameExec(const ExecRecord& a, const ExecRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.session, b.session);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.started_ms, b.started_ms);
  EXPECT_EQ(a.finished_ms, b.finished_ms);
  EXPECT_EQ(a.request, b.request);
  EXPECT_EQ(a.result, b.result);
}

TEST_F(RecordsTest, SessionsRoundTrip) {
  SessionRecord b = Session("b");
  SessionRecord a = Session("a");
  a.options = "";  // empty text stays text
  ASSERT_TRUE(records->PutSession(b).ok());
  ASSERT_TRUE(records->PutSession(a).ok());
  auto got = records->GetSession("b");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  ExpectSameSession(**got, b);

  b.state = "archived";
  b.last_used_ms = 5000;
  ASSERT_TRUE(records->PutSession(b).ok());
  auto all = records->ListSessions();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  ExpectSameSession((*all)[0], a);
  ExpectSameSession((*all)[1], b);

  ASSERT_TRUE(records->RemoveSession("a").ok());
  got = records->GetSession("a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
  absl::Status again = records->RemoveSession("a");
  EXPECT_TRUE(absl::IsNotFound(again)) << again;
}

TEST_F(RecordsTest, BadSessionsAndExecutionsAreRefusedAndWriteNothing) {
  SessionRecord no_key = Session("");
  SessionRecord bad_state = Session("s");
  bad_state.state = "sleeping";
  EXPECT_TRUE(absl::IsInvalidArgument(records->PutSession(no_key)));
  absl::Status st = records->PutSession(bad_state);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("'sleeping'"), absl::string_view::npos) << st;
  auto sessions = records->ListSessions();
  ASSERT_TRUE(sessions.ok());
  EXPECT_TRUE(sessions->empty());

  ExecRecord bad_exec = Exec("e1");
  bad_exec.state = "finished";
  EXPECT_TRUE(absl::IsInvalidArgument(records->PutExec(Exec(""))));
  EXPECT_TRUE(absl::IsInvalidArgument(records->PutExec(bad_exec)));
  EXPECT_TRUE(absl::IsInvalidArgument(records->PutExecIfKeyFree(Exec("e2"), 0).status()));  // no key
  EXPECT_TRUE(absl::IsInvalidArgument(records->FindKey("", 0).status()));
  auto execs = records->ListExecs("", 100);
  ASSERT_TRUE(execs.ok());
  EXPECT_TRUE(execs->empty());

  ASSERT_TRUE(records->PutExec(Exec("e3")).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(records->EndExec("e3", "running", 5, "{}")));
  EXPECT_TRUE(absl::IsInvalidArgument(records->SetExecState("e3", "done", 5)));
  EXPECT_TRUE(absl::IsNotFound(records->EndExec("e4", "done", 5, "{}")));
  EXPECT_TRUE(absl::IsNotFound(records->SetExecState("e4", "running", 5)));
  auto e3 = records->GetExec("e3");
  ASSERT_TRUE(e3.ok() && e3->has_value());
  ExpectSameExec(**e3, Exec("e3"));
}

TEST_F(RecordsTest, AnExecutionRoundTripsThroughItsStates) {
  ExecRecord e = Exec(NewId('e'), "s1", "k1");
  ASSERT_TRUE(records->PutExec(e).ok());
  ASSERT_TRUE(records->SetExecState(e.id, "running", 1500).ok());
  ASSERT_TRUE(records->EndExec(e.id, "done", 1700, R"({"exit_code":0})").ok());
  e.state = "done";
  e.started_ms = 1500;
  e.finished_ms = 1700;
  e.result = R"({"exit_code":0})";
  auto got = records->GetExec(e.id);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  ExpectSameExec(**got, e);
  auto none = records->GetExec(NewId('e'));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST_F(RecordsTest, ListExecsPagesNewestFirst) {
  std::vector<std::string> all, in_a;
  for (int i = 0; i < 25; ++i) {
    std::string id = NewId('e');
    std::string session = i % 3 == 0 ? "a" : "b";
    ASSERT_TRUE(records->PutExec(Exec(id, session)).ok());
    all.insert(all.begin(), id);
    if (session == "a") in_a.insert(in_a.begin(), id);
  }
  for (const auto& [session, want] : {std::pair<std::string, std::vector<std::string>>{"", all}, {"a", in_a}}) {
    std::vector<std::string> paged;
    std::string before;
    for (int page = 0; page < 10; ++page) {
      auto got = records->ListExecs(session, 4, before);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_LE(got->size(), 4u);
      if (got->empty()) break;
      for (const ExecRecord& e : *got) paged.push_back(e.id);
      before = got->back().id;
    }
    EXPECT_EQ(paged, want) << "session '" << session << "'";
  }
  auto none = records->ListExecs("nobody", 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto zero = records->ListExecs("", 0);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->empty());
}

TEST_F(RecordsTest, AKeyHoldsForItsWindowAndThenIsFreeAgain) {
  ASSERT_TRUE(records->PutExec(Exec("e1", "", "K", 1000)).ok());
  auto found = records->FindKey("K", 500);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, std::optional<std::string>("e1"));
  found = records->FindKey("K", 1000);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::optional<std::string>("e1"));  // the window's start is inclusive
  found = records->FindKey("K", 1001);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  found = records->FindKey("other", 0);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());

  // Within e1's window the key is held: e2 is not written.
  auto holder = records->PutExecIfKeyFree(Exec("e2", "", "K", 1200), 900);
  ASSERT_TRUE(holder.ok()) << holder.status();
  EXPECT_EQ(*holder, "e1");
  auto e2 = records->GetExec("e2");
  ASSERT_TRUE(e2.ok());
  EXPECT_FALSE(e2->has_value());

  // Past it, e3 takes the key.
  holder = records->PutExecIfKeyFree(Exec("e3", "", "K", 2000), 1500);
  ASSERT_TRUE(holder.ok()) << holder.status();
  EXPECT_EQ(*holder, "e3");
  found = records->FindKey("K", 0);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::optional<std::string>("e3"));

  // Rewriting the older execution does not take the key back.
  ASSERT_TRUE(records->PutExec(Exec("e1", "", "K", 1000)).ok());
  found = records->FindKey("K", 0);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::optional<std::string>("e3"));
}

TEST_F(RecordsTest, OfRacingClaimsOnOneKeyExactlyOneWins) {
  constexpr int kThreads = 8;
  std::vector<std::string> ids(kThreads), holders(kThreads);
  std::vector<absl::Status> errors(kThreads);
  for (std::string& id : ids) id = NewId('e');
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      auto holder = records->PutExecIfKeyFree(Exec(ids[t], "", "K", 1000), 0);
      if (holder.ok()) holders[t] = *holder;
      else errors[t] = holder.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& st : errors) ASSERT_TRUE(st.ok()) << st;
  const std::string& winner = holders[0];
  EXPECT_NE(std::find(ids.begin(), ids.end(), winner), ids.end());
  for (const std::string& h : holders) EXPECT_EQ(h, winner);
  auto written = records->ListExecs("", 100);
  ASSERT_TRUE(written.ok());
  ASSERT_EQ(written->size(), 1u);
  EXPECT_EQ((*written)[0].id, winner);
}

TEST_F(RecordsTest, AfterARestartUnfinishedExecutionsAreLost) {
  ASSERT_TRUE(records->PutExec(Exec("q")).ok());
  ASSERT_TRUE(records->PutExec(Exec("r")).ok());
  ASSERT_TRUE(records->SetExecState("r", "running", 1100).ok());
  ASSERT_TRUE(records->PutExec(Exec("d")).ok());
  ASSERT_TRUE(records->EndExec("d", "done", 1200, R"({"exit_code":0})").ok());
  auto lost = records->MarkUnfinishedLost(9000, R"({"reason":"lost"})");
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(*lost, 2u);
  for (const char* id : {"q", "r"}) {
    auto e = records->GetExec(id);
    ASSERT_TRUE(e.ok() && e->has_value());
    EXPECT_EQ((*e)->state, "lost");
    EXPECT_EQ((*e)->finished_ms, 9000);
    EXPECT_EQ((*e)->result, R"({"reason":"lost"})");
  }
  auto d = records->GetExec("d");
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->state, "done");
  EXPECT_EQ((*d)->result, R"({"exit_code":0})");
  lost = records->MarkUnfinishedLost(9500, "{}");
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(*lost, 0u);
}

TEST_F(RecordsTest, ForgetEndedDropsTheOldAndAllButTheNewestKeep) {
  for (int i = 1; i <= 5; ++i) {
    std::string id = absl::StrCat("e", i);
    ASSERT_TRUE(records->PutExec(Exec(id, "", absl::StrCat("k", i))).ok());
    ASSERT_TRUE(records->EndExec(id, i == 5 ? "cancelled" : "done", i * 100, "{}").ok());
  }
  ASSERT_TRUE(records->PutExec(Exec("running")).ok());
  ASSERT_TRUE(records->SetExecState("running", "running", 50).ok());

  auto dropped = records->ForgetEnded(300, 100);  // finished at 100 and 200
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 2u);
  dropped = records->ForgetEnded(0, 1);  // all but the newest ended one
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 2u);
  auto left = records->ListExecs("", 100);
  ASSERT_TRUE(left.ok());
  std::vector<std::string> ids;
  for (const ExecRecord& e : *left) ids.push_back(e.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"running", "e5"}));
  // A forgotten execution's key is free again.
  auto found = records->FindKey("k1", 0);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  found = records->FindKey("k5", 0);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::optional<std::string>("e5"));
}

TEST_F(RecordsTest, TheFilesArePrivateAndAReopenKeepsEverything) {
  ASSERT_TRUE(records->PutSession(Session("s")).ok());
  ExecRecord e = Exec(NewId('e'), "s", "K");
  ASSERT_TRUE(records->PutExec(e).ok());
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st;
    ASSERT_EQ(::stat((db_path + suffix).c_str(), &st), 0) << suffix;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << db_path << suffix;
  }
  records.reset();
  auto reopened = Records::Open(db_path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto s = (*reopened)->GetSession("s");
  ASSERT_TRUE(s.ok() && s->has_value());
  ExpectSameSession(**s, Session("s"));
  auto got = (*reopened)->GetExec(e.id);
  ASSERT_TRUE(got.ok() && got->has_value());
  ExpectSameExec(**got, e);
  auto found = (*reopened)->FindKey("K", 0);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::optional<std::string>(e.id));
}

// A child writes executions and reports each once PutExec/EndExec return;
// killed at a random point, nothing it reported may be missing.
TEST_F(RecordsTest, AWriterKilledMidStreamLosesNothingItReportedCommitted) {
  records.reset();
  constexpr int kWrites = 20000;
  std::random_device seed;
  const int kill_after = std::uniform_int_distribution<int>(1, kWrites / 2)(seed);
  SCOPED_TRACE(absl::StrCat("killed after ", kill_after, " reports"));
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto child = Records::Open(db_path);
    if (!child.ok()) _exit(2);
    for (int i = 0; i < kWrites; ++i) {
      ExecRecord e = Exec(NewId('e'), "s", absl::StrCat("k", i));
      if (!(*child)->PutExec(e).ok() || !(*child)->EndExec(e.id, "done", 2000, "{}").ok()) _exit(3);
      std::string line = e.id + "\n";
      if (::write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(4);
    }
    _exit(0);
  }
  ::close(fds[1]);
  // The pipe's capacity keeps the child at most a few thousand writes ahead
  // of what is read here, so it is still writing when killed.
  std::vector<std::string> reported;
  std::string pending;
  char buf[4096];
  for (bool killed = false;;) {
    ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      reported.push_back(pending.substr(0, nl));
    }
    if (!killed && reported.size() >= static_cast<size_t>(kill_after)) {
      ASSERT_EQ(::kill(pid, SIGKILL), 0);
      killed = true;
    }
  }
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  ASSERT_GE(reported.size(), static_cast<size_t>(kill_after));
  ASSERT_LT(reported.size(), static_cast<size_t>(kWrites));

  auto reopened = Records::Open(db_path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  for (const std::string& id : reported) {
    auto e = (*reopened)->GetExec(id);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(e->has_value()) << id << " was reported committed but is missing";
    EXPECT_EQ((*e)->state, "done") << id;
  }
  // At most the one in flight when it died was committed unreported.
  auto all = (*reopened)->ListExecs("", kWrites);
  ASSERT_TRUE(all.ok());
  EXPECT_LE(all->size(), reported.size() + 1);
}

TEST_F(RecordsTest, ADatabaseFromANewerSchemaIsRefusedAndLeftAsItWas) {
  records.reset();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &raw), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(raw, "PRAGMA user_version = 2", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_close(raw), SQLITE_OK);
  std::string before = ReadFile(db_path);

  auto opened = Records::Open(db_path);
  ASSERT_TRUE(absl::IsFailedPrecondition(opened.status())) << opened.status();
  EXPECT_NE(opened.status().message().find(db_path), absl::string_view::npos) << opened.status();
  EXPECT_NE(opened.status().message().find("schema version 2; this cubicle knows versions up to 1"),
            absl::string_view::npos)
      << opened.status();
  EXPECT_EQ(ReadFile(db_path), before);
}

TEST_F(RecordsTest, AFileOfGarbageIsRefusedAsDataLossAndLeftAsItWas) {
  records.reset();
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_path + suffix);
  std::string garbage(8192, '\0');
  std::mt19937 bytes(42);
  for (char& c : garbage) c = static_cast<char>(bytes());
  std::ofstream(db_path, std::ios::binary) << garbage;

  auto opened = Records::Open(db_path);
  ASSERT_TRUE(absl::IsDataLoss(opened.status())) << opened.status();
  EXPECT_NE(opened.status().message().find(db_path), absl::string_view::npos) << opened.status();
  EXPECT_NE(opened.status().message().find("SQLITE_NOTADB"), absl::string_view::npos) << opened.status();
  EXPECT_EQ(ReadFile(db_path), garbage);
  EXPECT_FALSE(fs::exists(db_path + "-wal"));
}

TEST_F(RecordsTest, ADatabaseInADirectoryThatIsMissingIsRefused) {
  auto opened = Records::Open(tmp / "missing/records.db");
  ASSERT_TRUE(absl::IsNotFound(opened.status())) << opened.status();
  EXPECT_NE(opened.status().message().find("create: ENOENT"), absl::string_view::npos) << opened.status();
  EXPECT_FALSE(fs::exists(tmp / "missing"));
}

TEST_F(RecordsTest, AWriterHoldingTheDatabaseMakesWritesUnavailableNotStuck) {
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  absl::Status st = records->PutExec(Exec("e1"));  // waits out the busy timeout
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_NE(st.message().find("SQLITE_BUSY"), absl::string_view::npos) << st;
  EXPECT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_close(other), SQLITE_OK);
  auto none = records->GetExec("e1");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  EXPECT_TRUE(records->PutExec(Exec("e1")).ok());
}

TEST(SqliteError, NamesThePurposeAndMapsTheCode) {
  struct Case {
    int rc;
    absl::StatusCode code;
    const char* name;
  };
  for (const Case& c : {Case{SQLITE_FULL, absl::StatusCode::kResourceExhausted, "SQLITE_FULL"},
                        Case{SQLITE_BUSY, absl::StatusCode::kUnavailable, "SQLITE_BUSY"},
                        Case{SQLITE_CORRUPT, absl::StatusCode::kDataLoss, "SQLITE_CORRUPT"},
                        Case{SQLITE_NOTADB, absl::StatusCode::kDataLoss, "SQLITE_NOTADB"},
                        Case{SQLITE_READONLY, absl::StatusCode::kPermissionDenied, "SQLITE_READONLY"},
                        Case{SQLITE_IOERR_WRITE, absl::StatusCode::kInternal, "SQLITE_IOERR"}}) {
    absl::Status st = sqlite::Error(nullptr, c.rc, "put execution");
    EXPECT_EQ(st.code(), c.code) << st;
    EXPECT_EQ(st.message(), absl::StrCat("put execution: ", c.name, ": ", sqlite3_errstr(c.rc)));
  }
}

}  // namespace
}  // namespace cubicle::sessions

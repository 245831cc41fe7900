// The daemon's log as its configuration sets it ("log": level and
// destination): lines in a file opened anew at each SIGHUP (logrotate), the
// level changed by a reload, and the pools' events at info — a build that
// failed with its error, zygotes expired, a resize. Read back and parsed.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// The JSON lines of `text`; a line that is not JSON fails the test.
std::vector<json::object> Lines(const std::string& text) {
  std::vector<json::object> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    boost::system::error_code ec;
    json::value v = json::parse(json::string_view(line.data(), line.size()), ec);
    EXPECT_FALSE(ec) << "not a JSON line: " << line;
    if (!ec && v.is_object()) out.push_back(v.as_object());
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

// Polls `path` (every 20 ms, at most 20 s) until `pred` holds for its lines.
template <typename Pred>
bool WaitForLines(const std::string& path, Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred(Lines(ReadAll(path)))) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

bool HasRequest(const std::vector<json::object>& lines, int64_t id) {
  for (const json::object& l : lines) {
    if (l.at("msg") == "request" && l.at("request").at("id") == id) return true;
  }
  return false;
}

// The "pool" events of `lines` named `event` for `pool`.
std::vector<json::object> PoolEvents(const std::vector<json::object>& lines, const std::string& pool,
                                     const std::string& event) {
  std::vector<json::object> out;
  for (const json::object& l : lines) {
    if (l.at("msg") != "pool") continue;
    const json::object& p = l.at("pool").as_object();
    if (p.at("pool") == pool.c_str() && p.at("event") == event.c_str()) out.push_back(p);
  }
  return out;
}

class DaemonLog : public ::testing::Test {
 protected:
  // CUBICLE_LOG_LEVEL overrides the file: none of ours reaches the daemon.
  void SetUp() override { ::unsetenv("CUBICLE_LOG_LEVEL"); }
};

TEST_F(DaemonLog, TheConfigSendsLinesToAFileThatSighupOpensAnew) {
  TempDir dir;
  const std::string log = dir.Join("cubicle.log");
  const std::string config = WriteConfig(dir, absl::StrCat(R"({"log": {"level": "info", "destination": ")", log,
                                                           R"("}, "profiles": {"shell": {"pool": {"min_idle": 1}}}})"));
  SocketDaemon daemon({"--config", config});
  ASSERT_TRUE(daemon.up()) << daemon.process().StderrSoFar();
  daemon.Call(RequestLine(21, "sandbox.run", R"({"argv":["true"]})"));
  ASSERT_TRUE(WaitForLines(log, [](const auto& lines) { return HasRequest(lines, 21); })) << ReadAll(log);
  for (const json::object& l : Lines(ReadAll(log))) {
    if (l.at("msg") == "request") {
      EXPECT_TRUE(l.at("request").as_object().contains("request_id")) << l;
    }
  }

  // logrotate: the file is moved away, then SIGHUP; the lines after it go
  // to a new file at the same path.
  const std::string rotated = log + ".1";
  ASSERT_EQ(::rename(log.c_str(), rotated.c_str()), 0);
  daemon.process().Signal(SIGHUP);
  ASSERT_TRUE(WaitForLines(log, [](const auto& lines) {
    for (const json::object& l : lines) {
      if (absl::StrContains(json::serialize(l.at("msg")), "configuration reloaded")) return true;
    }
    return false;
  })) << "no reload line in a new " << log << "; stderr: " << daemon.process().StderrSoFar();
  daemon.Call(RequestLine(22, "sandbox.run", R"({"argv":["true"]})"));
  EXPECT_TRUE(WaitForLines(log, [](const auto& lines) { return HasRequest(lines, 22); })) << ReadAll(log);
  EXPECT_FALSE(HasRequest(Lines(ReadAll(rotated)), 22));
  EXPECT_TRUE(HasRequest(Lines(ReadAll(rotated)), 21));
  struct stat st;
  ASSERT_EQ(::stat(log.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);

  ProcessRun ended = daemon.Stop();
  EXPECT_EQ(ended.exit_code, 0) << ended.err;
  EXPECT_FALSE(absl::StrContains(ended.err, "\"msg\":\"request\"")) << "request lines went to stderr too";
}

TEST_F(DaemonLog, AReloadChangesTheLevel) {
  TempDir dir;
  const std::string log = dir.Join("cubicle.log");
  auto config_at = [&](const char* level) {
    return absl::StrCat(R"({"log": {"level": ")", level, R"(", "destination": ")", log,
                        R"("}, "profiles": {"shell": {"pool": {"min_idle": 1}}}})");
  };
  const std::string config = WriteConfig(dir, config_at("warn"));
  SocketDaemon daemon({"--config", config});
  ASSERT_TRUE(daemon.up()) << daemon.process().StderrSoFar();
  daemon.Call(RequestLine(31, "sandbox.run", R"({"argv":["true"]})"));
  WriteConfig(dir, config_at("info"));
  daemon.process().Signal(SIGHUP);
  // The reload's own line is at info, written once the level is applied:
  // requests after it are logged.
  bool logged = false;
  for (int i = 0; i < 200 && !logged; ++i) {
    daemon.Call(RequestLine(32, "sandbox.run", R"({"argv":["true"]})"));
    logged = HasRequest(Lines(ReadAll(log)), 32);
    if (!logged) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(logged) << ReadAll(log);
  EXPECT_FALSE(HasRequest(Lines(ReadAll(log)), 31)) << "logged at warn";
  EXPECT_EQ(daemon.Stop().exit_code, 0);
}

TEST_F(DaemonLog, PoolEventsAreLoggedAtInfo) {
  TempDir dir;
  const std::string data = dir.Join("data");
  ASSERT_EQ(::mkdir(data.c_str(), 0755), 0);
  const std::string log = dir.Join("cubicle.log");
  auto config_with = [&](int min_idle) {
    return absl::StrCat(R"({"log": {"level": "info", "destination": ")", log, R"("}, "profiles": {)",
                        R"("aging": {"pool": {"min_idle": 1, "max_idle": 1, "max_age_s": 0.3}},)",
                        R"("bound": {"binds": [{"source": ")", data, R"(", "dest": "/data"}],)",
                        R"( "pool": {"min_idle": )", min_idle, R"(, "max_idle": 2}}}})");
  };
  const std::string config = WriteConfig(dir, config_with(1));
  SocketDaemon daemon({"--config", config});
  ASSERT_TRUE(daemon.up()) << daemon.process().StderrSoFar();

  // Idle zygotes older than max_age_s are replaced: each drop is an event.
  EXPECT_TRUE(WaitForLines(log, [](const auto& lines) { return !PoolEvents(lines, "aging", "expired").empty(); }))
      << ReadAll(log);
  for (const json::object& e : PoolEvents(Lines(ReadAll(log)), "aging", "expired")) {
    EXPECT_GE(e.at("dropped").as_int64(), 1) << e;
  }

  // A resize by reload.
  WriteConfig(dir, config_with(2));
  daemon.process().Signal(SIGHUP);
  EXPECT_TRUE(WaitForLines(log, [](const auto& lines) {
    for (const json::object& e : PoolEvents(lines, "bound", "resized")) {
      if (e.at("min_idle") == 2 && e.at("max_idle") == 2) return true;
    }
    return false;
  })) << ReadAll(log);

  // The bind's source gone, the next builds fail: each failure is logged
  // with the error, which names what was missing.
  ASSERT_EQ(::rmdir(data.c_str()), 0);
  daemon.Call(RequestLine(41, "sandbox.run", R"({"profile": "bound", "argv":["true"]})"));
  EXPECT_TRUE(WaitForLines(log, [&](const auto& lines) {
    for (const json::object& e : PoolEvents(lines, "bound", "build_failed")) {
      if (absl::StrContains(json::serialize(e.at("error")), "bind source")) return true;
    }
    return false;
  })) << ReadAll(log);
  // Refill tries again every 100 ms; each error is said once (then
  // counted, for the next line after 30 s).
  absl::SleepFor(absl::Seconds(1));
  std::map<std::string, int> said;  // by error
  for (const json::object& e : PoolEvents(Lines(ReadAll(log)), "bound", "build_failed")) {
    ++said[json::serialize(e.at("error"))];
  }
  for (const auto& [error, times] : said) EXPECT_EQ(times, 1) << error << "\n" << ReadAll(log);
  EXPECT_EQ(daemon.Stop().exit_code, 0);
}

TEST_F(DaemonLog, ALogFileThatCannotBeOpenedRefusesTheStart) {
  TempDir dir;
  const std::string config = WriteConfig(dir, absl::StrCat(R"({"log": {"destination": ")", dir.Join("no/such/dir.log"),
                                                           R"("}, "profiles": {"shell": {}}})"));
  const std::string socket = dir.Join("rpc.sock");
  ProcessRun run = RunCubicle({"serve", "--socket", socket, "--config", config});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(run.err, "log destination")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "ENOENT")) << run.err;
  EXPECT_NE(::access(socket.c_str(), F_OK), 0) << "the socket was left behind";
}

}  // namespace
}  // namespace cubicle::test_support

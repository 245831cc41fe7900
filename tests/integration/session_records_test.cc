// Managed executions through a daemon with a state directory
// (rpc/exec_methods.cc, rpc/exec_records.cc; docs/protocol.md, "Managed
// executions"): the output of a running one, its logs in pages, the list in
// pages and by session, the ids it makes, and an idempotency key that holds
// across a restart. Root only, like the sessions it lists
// (tests/support/session_daemon.h).
#include <unistd.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

class SessionRecords : public SessionDaemonTest {
 protected:
  // exec.start of `script` (sh -c) with `more` members; its reply.
  json::value Start(DaemonClient& c, const std::string& script, const std::string& more = "") {
    return Call(c, "exec.start", absl::StrCat(R"({"argv":["sh","-c",)", Quoted(script), "]", more, "}"));
  }
  // exec.wait for `id`'s end (30 s at most: the bound for a failure).
  json::value WaitFor(DaemonClient& c, const std::string& id) {
    return Call(c, "exec.wait", absl::StrCat(R"({"exec_id":)", Quoted(id), R"(,"timeout_ms":30000})"));
  }
};

// e and a ULID: 26 of Crockford's base32 (no I, L, O, U).
bool IsExecUlid(const std::string& id) {
  static const std::regex ulid("e[0-9A-HJKMNP-TV-Z]{26}");
  return std::regex_match(id, ulid);
}

// exec.status of a running execution carries its output so far; exec.cancel
// kills it, and its sandbox is gone.
TEST_F(SessionRecords, StatusOfARunningExecutionShowsItsOutputSoFar) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  const std::string mark = absl::StrCat("30.", ::getpid(), "7");  // a unique sleep argument
  json::value started = Start(c, absl::StrCat("echo first; exec sleep ", mark));
  ASSERT_TRUE(HasResult(started)) << json::serialize(started);
  const std::string id = Str(started.at("result").at("exec_id"));

  json::value status;
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) {  // at most 20 s: the bound for a failure
    status = Call(c, "exec.status", absl::StrCat(R"({"exec_id":)", Quoted(id), "}"));
    ASSERT_TRUE(HasResult(status)) << json::serialize(status);
    const json::value& r = status.at("result");
    seen = r.at("state") == "running" && r.as_object().contains("output") &&
           r.at("output").at("stdout") == "first\n";
    if (!seen) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(seen) << "never running with its first line: " << json::serialize(status);
  EXPECT_EQ(status.at("result").at("output").at("stderr"), "") << json::serialize(status);
  EXPECT_FALSE(status.at("result").as_object().contains("result")) << "no result while it runs";

  json::value cancelled = Call(c, "exec.cancel", absl::StrCat(R"({"exec_id":)", Quoted(id), "}"));
  ASSERT_TRUE(HasResult(cancelled)) << json::serialize(cancelled);
  json::value ended = WaitFor(c, id);
  ASSERT_TRUE(HasResult(ended)) << json::serialize(ended);
  EXPECT_EQ(ended.at("result").at("state"), "done") << json::serialize(ended);
  EXPECT_EQ(ended.at("result").at("result").at("reason"), "killed") << json::serialize(ended);
  EXPECT_EQ(ended.at("result").at("result").at("stdout"), "first\n") << json::serialize(ended);
  std::vector<pid_t> left = WaitUntilGone(mark);
  EXPECT_EQ(left, std::vector<pid_t>{}) << "the cancelled execution's sleep outlived it";
}

// exec.logs in pages of 4096 bytes gives back exactly what the execution
// printed, each page where the last ended, `eof` on the last page only.
TEST_F(SessionRecords, LogsInPagesReassembleTheOutput) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  std::string expected;
  for (int i = 1; i <= 10000; ++i) absl::StrAppend(&expected, "line ", i, "\n");
  json::value started =
      Start(c, R"(i=1; while [ $i -le 10000 ]; do echo "line $i"; i=$((i+1)); done)", R"(,"output_bytes":1048576)");
  ASSERT_TRUE(HasResult(started)) << json::serialize(started);
  const std::string id = Str(started.at("result").at("exec_id"));
  json::value ended = WaitFor(c, id);
  ASSERT_EQ(ended.at("result").at("state"), "done") << json::serialize(ended);
  ASSERT_EQ(ended.at("result").at("result").at("status"), 0) << json::serialize(ended);

  std::string got;
  int pages = 0;
  int eofs = 0;
  for (size_t offset = 0; pages < 1000; ++pages) {  // 1000 pages: the bound for a failure
    json::value page = Call(c, "exec.logs",
                            absl::StrCat(R"({"exec_id":)", Quoted(id), R"(,"offset":)", offset, R"(,"max_bytes":4096})"));
    ASSERT_TRUE(HasResult(page)) << json::serialize(page);
    const json::value& r = page.at("result");
    EXPECT_EQ(r.at("offset"), offset);
    EXPECT_EQ(r.at("stream"), "stdout");
    const std::string data = Str(r.at("data"));
    EXPECT_LE(data.size(), 4096u);
    got += data;
    EXPECT_EQ(r.at("next_offset"), offset + data.size()) << json::serialize(r.at("next_offset"));
    offset += data.size();
    const bool last = offset == expected.size();
    EXPECT_EQ(r.at("eof"), last) << "at offset " << offset;
    if (r.at("eof") == true) ++eofs;
    if (last || data.empty()) break;
  }
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "the pages do not reassemble the output";
  EXPECT_EQ(pages + 1, static_cast<int>((expected.size() + 4095) / 4096));
  EXPECT_EQ(eofs, 1);

  json::value stderr_page = Call(c, "exec.logs", absl::StrCat(R"({"exec_id":)", Quoted(id), R"(,"stream":"stderr"})"));
  ASSERT_TRUE(HasResult(stderr_page)) << json::serialize(stderr_page);
  EXPECT_EQ(json::serialize(stderr_page.at("result").at("data")), R"("")");
  EXPECT_EQ(stderr_page.at("result").at("eof"), true);

  json::value bad = Call(c, "exec.logs", absl::StrCat(R"({"exec_id":)", Quoted(id), R"(,"stream":"stdlog"})"));
  EXPECT_EQ(ErrorCode(bad), -32602) << json::serialize(bad);
  json::value unknown = Call(c, "exec.logs", R"({"exec_id":"e00000000000000000000000000"})");
  EXPECT_EQ(ErrorCode(unknown), -32004) << json::serialize(unknown);
}

// Ids are e-ULIDs that sort by creation; exec.list pages walk every one,
// newest first, once; `session` lists that session's only.
TEST_F(SessionRecords, ListPagesNewestFirstAndBySession) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  std::vector<std::string> made;  // in the order started, back to back
  for (int i = 0; i < 5; ++i) {
    json::value started = Start(c, "true");
    ASSERT_TRUE(HasResult(started)) << json::serialize(started);
    made.push_back(Str(started.at("result").at("exec_id")));
  }
  for (const std::string& id : made) {
    EXPECT_TRUE(IsExecUlid(id)) << id;
    EXPECT_EQ(WaitFor(c, id).at("result").at("state"), "done") << id;
  }
  for (size_t i = 1; i < made.size(); ++i) EXPECT_LT(made[i - 1], made[i]) << "ids do not sort by creation";

  std::vector<std::string> listed;
  std::string before;
  int pages = 0;
  for (; pages < 10; ++pages) {  // the bound for a failure
    json::value page = Call(c, "exec.list",
                            before.empty() ? R"({"limit":2})"
                                           : absl::StrCat(R"({"limit":2,"before":)", Quoted(before), "}"));
    ASSERT_TRUE(HasResult(page)) << json::serialize(page);
    const json::array& items = page.at("result").at("executions").as_array();
    EXPECT_LE(items.size(), 2u);
    for (const json::value& e : items) {
      listed.push_back(Str(e.at("exec_id")));
      EXPECT_EQ(e.at("state"), "done") << json::serialize(e);
      EXPECT_FALSE(e.as_object().contains("session")) << json::serialize(e);
    }
    const json::value* next = page.at("result").as_object().if_contains("next_before");
    if (next == nullptr) break;
    EXPECT_EQ(items.size(), 2u) << "next_before on a page that is not full";
    before = Str(*next);
    EXPECT_EQ(before, listed.back());
  }
  EXPECT_EQ(pages, 2) << "five in pages of two: three pages";
  EXPECT_EQ(listed, std::vector<std::string>(made.rbegin(), made.rend())) << absl::StrJoin(listed, ",");

  // Two in a session, one outside it: the session lists its two.
  ASSERT_TRUE(HasResult(Create(c, "listed")));
  json::value one = Exec(c, "listed", "true");
  ASSERT_TRUE(HasResult(one)) << json::serialize(one);
  json::value outside = Start(c, "true");
  ASSERT_TRUE(HasResult(outside)) << json::serialize(outside);
  json::value two = Exec(c, "listed", "true");
  ASSERT_TRUE(HasResult(two)) << json::serialize(two);
  EXPECT_TRUE(IsExecUlid(Str(one.at("result").at("exec_id")))) << json::serialize(one);
  json::value mine = Call(c, "exec.list", R"({"session":"listed"})");
  ASSERT_TRUE(HasResult(mine)) << json::serialize(mine);
  std::vector<std::string> ids;
  for (const json::value& e : mine.at("result").at("executions").as_array()) {
    ids.push_back(Str(e.at("exec_id")));
    EXPECT_EQ(e.at("session"), "listed") << json::serialize(e);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{Str(two.at("result").at("exec_id")), Str(one.at("result").at("exec_id"))}));
  EXPECT_FALSE(mine.at("result").as_object().contains("next_before")) << json::serialize(mine);
  json::value none = Call(c, "exec.list", R"({"session":"nobody"})");
  ASSERT_TRUE(HasResult(none)) << json::serialize(none);
  EXPECT_EQ(json::serialize(none.at("result")), R"({"executions":[]})");
  EXPECT_EQ(WaitFor(c, Str(outside.at("result").at("exec_id"))).at("result").at("state"), "done");
}

// A second exec.start with the same key within 60 s runs nothing and names
// the first; a daemon restarted (SIGTERM) on the same state directory
// still refuses it.
TEST_F(SessionRecords, AKeyHoldsAcrossARestart) {
  const std::string config = SessionConfig(StateMembers());
  SocketDaemon& a = StartDaemon(config);
  ASSERT_TRUE(a.up());
  std::string first;
  {
    DaemonClient c(a.socket());
    json::value started = Start(c, "echo once", R"(,"key":"retry-me")");
    ASSERT_TRUE(HasResult(started)) << json::serialize(started);
    first = Str(started.at("result").at("exec_id"));
    json::value again = Start(c, "echo twice", R"(,"key":"retry-me")");
    EXPECT_EQ(ErrorCode(again), -32003) << json::serialize(again);
    EXPECT_EQ(Str(again.at("error").at("data").at("exec_id")), first) << json::serialize(again);
    EXPECT_EQ(WaitFor(c, first).at("result").at("state"), "done");
    json::value all = Call(c, "exec.list", "{}");
    EXPECT_EQ(all.at("result").at("executions").as_array().size(), 1u) << "the refused start ran: "
                                                                        << json::serialize(all);
  }
  ProcessRun stopped = a.Stop();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;

  SocketDaemon& b = StartDaemon(config);
  ASSERT_TRUE(b.up());
  DaemonClient c(b.socket());
  json::value again = Start(c, "echo twice", R"(,"key":"retry-me")");
  EXPECT_EQ(ErrorCode(again), -32003) << json::serialize(again);
  ASSERT_TRUE(again.is_object() && again.as_object().contains("error")) << json::serialize(again);
  EXPECT_EQ(Str(again.at("error").at("data").at("exec_id")), first) << json::serialize(again);
  json::value status = Call(c, "exec.status", absl::StrCat(R"({"exec_id":)", Quoted(first), "}"));
  ASSERT_TRUE(HasResult(status)) << json::serialize(status);
  EXPECT_EQ(Str(status.at("result").at("result").at("stdout")), "once\n") << json::serialize(status);
  json::value other = Start(c, "true", R"(,"key":"another")");
  ASSERT_TRUE(HasResult(other)) << "another key is free: " << json::serialize(other);
  EXPECT_EQ(WaitFor(c, Str(other.at("result").at("exec_id"))).at("result").at("state"), "done");
}

}  // namespace
}  // namespace cubicle::test_support

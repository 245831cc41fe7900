// The skill audit trail through the real daemon: one line per skill.call —
// answered, answered with an error, timed out — whose hashes the test
// recomputes with sha256sum(1) from the bytes it sent and the skill wrote,
// found again by audit.query by request id and time; and the method's
// refusals.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// A shell skill: reads its request line, answers `response` (id 1).
std::string ShellSkill(const std::string& response) {
  return absl::StrCat(R"({"profile": "shell", "argv": ["sh", "-c", )", Quoted(absl::StrCat("read line; echo '", response, "'")),
                      "]");
}

class SkillAudit : public SessionDaemonTest {};

TEST_F(SkillAudit, EveryCallIsOneLineWithHashesOfWhatWentInAndOut) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  const absl::Time start = absl::Now();

  const std::string params = R"({"text":"a b c"})";
  const std::string answered = R"({"words":3})";
  json::value ok = Call(c, "skill.call",
                        absl::StrCat(ShellSkill(absl::StrCat(R"({"jsonrpc":"2.0","id":1,"result":)", answered, "}")),
                                     R"(, "method": "stats", "params": )", params, "}"));
  ASSERT_TRUE(HasResult(ok)) << ok;
  const std::string refusal = R"({"code":-1,"message":"no"})";
  json::value erred = Call(c, "skill.call",
                           absl::StrCat(ShellSkill(absl::StrCat(R"({"jsonrpc":"2.0","id":1,"error":)", refusal, "}")),
                                        R"(, "method": "stats", "params": )", params, "}"));
  ASSERT_TRUE(HasResult(erred)) << erred;
  json::value slow = Call(c, "skill.call",
                          R"({"profile": "shell", "argv": ["sleep", "5"], "timeout_ms": 300, "method": "stats"})");
  EXPECT_EQ(ErrorCode(slow), -32007) << slow;

  json::value all = Call(c, "audit.query", R"({"limit": 10})");
  ASSERT_TRUE(HasResult(all)) << all;
  const json::array& entries = all.at("result").at("entries").as_array();
  ASSERT_EQ(entries.size(), 3u) << all;
  // Newest first: the timeout, the error, the answer.
  const json::object& timed_out = entries[0].as_object();
  const json::object& error = entries[1].as_object();
  const json::object& answer = entries[2].as_object();

  EXPECT_EQ(answer.at("outcome"), "ok");
  EXPECT_EQ(answer.at("method"), "stats");
  EXPECT_EQ(answer.at("profile"), "shell");
  EXPECT_EQ(Str(answer.at("params_sha256")), Sha256Hex(params));
  EXPECT_EQ(Str(answer.at("result_sha256")), Sha256Hex(answered));
  EXPECT_TRUE(answer.at("skill").is_null()) << "an argv call names no skill";
  EXPECT_EQ(Str(answer.at("argv_sha256")),
            Sha256Hex(absl::StrCat(R"(["sh","-c","read line; echo ')", R"({\"jsonrpc\":\"2.0\",\"id\":1,\"result\":)",
                                   R"({\"words\":3}}'"])")));
  EXPECT_GT(answer.at("duration_ms").as_double(), 0.0);
  EXPECT_TRUE(answer.at("usage").as_object().contains("user_ms")) << answer;

  EXPECT_EQ(error.at("outcome"), "error");
  EXPECT_EQ(Str(error.at("result_sha256")), Sha256Hex(refusal));

  EXPECT_EQ(timed_out.at("outcome"), "failed");
  EXPECT_EQ(timed_out.at("reason"), "timeout");
  EXPECT_EQ(timed_out.at("error_code"), -32007);
  EXPECT_FALSE(timed_out.contains("result_sha256"));
  EXPECT_EQ(Str(timed_out.at("params_sha256")), Sha256Hex("null")) << "no params: JSON null";

  // By request id, and by time.
  for (const json::value& e : entries) {
    const std::string id = Str(e.at("request_id"));
    ASSERT_EQ(id.size(), 27u) << id;
    json::value one = Call(c, "audit.query", absl::StrCat(R"({"request_id": )", Quoted(id), "}"));
    ASSERT_TRUE(HasResult(one)) << one;
    ASSERT_EQ(one.at("result").at("entries").as_array().size(), 1u);
    EXPECT_EQ(one.at("result").at("entries").at(0), e);
  }
  json::value later = Call(c, "audit.query", absl::StrCat(R"({"since": )", absl::ToUnixMillis(absl::Now()) + 60000, "}"));
  EXPECT_TRUE(later.at("result").at("entries").as_array().empty()) << later;
  json::value since_start = Call(c, "audit.query", absl::StrCat(R"({"since": ")",
                                                                absl::FormatTime(absl::RFC3339_full, start - absl::Seconds(1),
                                                                                 absl::UTCTimeZone()),
                                                                R"("})"));
  EXPECT_EQ(since_start.at("result").at("entries").as_array().size(), 3u) << since_start;
  // sandbox.run is not a skill call: no line.
  ASSERT_TRUE(HasResult(Call(c, "sandbox.run", R"({"argv": ["true"]})")));
  EXPECT_EQ(Call(c, "audit.query", "{}").at("result").at("entries").as_array().size(), 3u);
}

TEST_F(SkillAudit, ACallByNameNamesItsSkillVersionAndId) {
  TempDir skills;
  const std::string folder = skills.Join("answer");
  ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(folder + "/skill.json",
                        R"({"name": "answer", "version": "1.2.0", "entry": "main.sh", "profile": "shell"})"));
  ASSERT_TRUE(WriteFile(folder + "/main.sh", R"(read line; echo '{"jsonrpc":"2.0","id":1,"result":42}')"));
  std::string config = SessionConfig(StateMembers());
  config.insert(1, absl::StrCat(R"("skills": {"dir": )", Quoted(skills.path()), "}, "));
  SocketDaemon& d = StartDaemon(config);
  ASSERT_TRUE(d.up()) << d.process().StderrSoFar();
  DaemonClient c(d.socket());
  json::value called = Call(c, "skill.call", R"({"skill": "answer", "method": "ask", "params": {"q": 1}})");
  ASSERT_TRUE(HasResult(called)) << called;
  const std::string id = Str(called.at("result").at("skill").at("id"));
  ASSERT_EQ(id.size(), 64u) << called;

  json::value found = Call(c, "audit.query", R"({"skill": "answer"})");
  ASSERT_TRUE(HasResult(found)) << found;
  ASSERT_EQ(found.at("result").at("entries").as_array().size(), 1u) << found;
  const json::object& line = found.at("result").at("entries").at(0).as_object();
  EXPECT_EQ(line.at("skill").at("name"), "answer");
  EXPECT_EQ(line.at("skill").at("version"), "1.2.0");
  EXPECT_EQ(Str(line.at("skill").at("id")), id);
  EXPECT_FALSE(line.contains("argv_sha256")) << "a call by name has no argv of the caller's";
  EXPECT_EQ(Str(line.at("params_sha256")), Sha256Hex(R"({"q":1})"));
  EXPECT_EQ(Str(line.at("result_sha256")), Sha256Hex("42"));
  EXPECT_EQ(Call(c, "audit.query", absl::StrCat(R"({"skill": ")", id, R"("})")).at("result").at("entries"),
            found.at("result").at("entries"))
      << "by id as by name";
}

TEST_F(SkillAudit, BadQueriesAreRefusedNamingTheField) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  for (const char* params : {R"({"limit": 0})", R"({"limit": 1001})", R"({"since": "yesterday"})",
                             R"({"skill": 3})", R"({"skil": "x"})"}) {
    json::value r = Call(c, "audit.query", params);
    EXPECT_EQ(ErrorCode(r), -32602) << params << " " << r;
  }
}

TEST(SkillAuditStateless, WithoutAStateDirectoryThereIsNoTrail) {
  TempDir dir;
  SocketDaemon d({"--config", WriteConfig(dir, R"({"profiles": {"shell": {}}})")});
  ASSERT_TRUE(d.up());
  json::value r = d.Call(RequestLine(1, "audit.query", "{}"));
  EXPECT_EQ(ErrorCode(r), -32600) << r;
  EXPECT_NE(ErrorMessage(r).find("state directory"), std::string::npos) << r;
}

}  // namespace
}  // namespace cubicle::test_support

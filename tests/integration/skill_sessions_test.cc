// Conversational skills and skills calling skills through `cubicle serve`
// (docs/skills.md, "Skill sessions" and "Calling other skills"): one
// skill process keeping a counter across five calls, its progress
// notifications arriving in order before each response; the session's
// sandbox isolated as a pooled one; idle timeouts, busy sessions, timed
// out and dead skills, and bad params each with their error and nothing
// left open; progress streamed on a one-shot skill.call; a skill calling
// an allowed skill, refused one it may not call and refused past the
// depth limit, with the audit linking callee to caller. Waits are bounds
// for failures; nothing asserts how long anything took.
#include <sys/stat.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"
#include "tests/integration/skills_fixture.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// A conversational skill: a line loop. "add" sends two progress
// notifications, then the counter; "probe" says what the sandbox lets it
// do; "sleep" waits for /gate/go; "exit" ends the process unanswered.
constexpr char kCounter[] = R"PY(
import json, os, socket, sys, time
count = 0
for line in sys.stdin:
    req = json.loads(line)
    m, p = req["method"], req.get("params") or {}
    if m == "add":
        for step in (1, 2):
            print(json.dumps({"jsonrpc": "2.0", "method": "progress", "params": {"step": step, "of": 2}}), flush=True)
        count += p.get("n", 1)
        print("not a message, a log line", flush=True)
        print("added", p.get("n", 1), file=sys.stderr, flush=True)
        out = {"count": count, "pid": os.getpid()}
    elif m == "probe":
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9))
            net = "connected"
        except OSError as e:
            net = e.__class__.__name__
        out = {"uid": os.getuid(), "net": net, "root_writable": os.access("/usr", os.W_OK)}
    elif m == "sleep":
        while not os.path.exists("/gate/go"): time.sleep(0.02)
        out = "slept"
    elif m == "exit":
        sys.exit(3)
    print(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": out}), flush=True)
)PY";

// A skill that calls the skill its params name ("callee", which is
// told to call "then" in turn), then answers with what it got back
// (result or error).
constexpr char kCaller[] = R"PY(
import json, sys
req = json.loads(sys.stdin.readline())
p = req["params"]
print(json.dumps({"jsonrpc": "2.0", "id": "c1", "method": "skill.call",
                  "params": {"skill": p["callee"], "method": "add",
                             "params": {"n": 5, "callee": p.get("then", "counter")}}}), flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("id") == "c1":
        break
print(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": msg}), flush=True)
)PY";

// The skills fixture (skills_fixture.h) with a state directory (the
// audit trail) and these skills: counter, caller (which may call counter
// and itself) and secret.
class SkillSessions : public Skills {
 protected:
  void SetUp() override {
    Skills::SetUp();
    PutSkill("counter", "counter.py", kCounter, "");
    PutSkill("caller", "caller.py", kCaller, "calls: [counter@^1, caller]\n");
    PutSkill("secret", "secret.py", kCounter, "");
  }

  void PutSkill(const std::string& name, const std::string& entry, const std::string& script,
                const std::string& more) {
    Put(absl::StrCat(name, "/", entry), script);
    Put(absl::StrCat(name, "/skill.yaml"), absl::StrCat("name: ", name, "\nversion: 1.0.0\nentry: ", entry, "\n", more));
  }

  SocketDaemon& Start(const std::string& skills_more = "") {
    skills_more_ = skills_more;
    return Skills::Start({}, absl::StrCat(R"("sessions": {"state_dir": )", Quoted(state_.path()), "},"));
  }

  std::string Open(const std::string& more = "") {
    json::value r = Result("skill.session.open", absl::StrCat(R"({"skill": "counter")", more, "}"));
    return r.is_object() ? Str(r.at("skill_session")) : "";
  }
  size_t OpenSessions() {
    json::value r = Result("skill.session.list", "");
    return r.is_object() ? r.at("skill_sessions").as_array().size() : 999;
  }

  // Sends `line` on `client` and reads until the reply of `id`: the
  // notifications before it, in order, into `notes`.
  static json::value Exchange(DaemonClient& client, const std::string& line, int64_t id,
                              std::vector<json::value>* notes) {
    if (!client.Send(line)) return nullptr;
    for (int i = 0; i < 100; ++i) {
      std::optional<std::string> got = client.ReadLine(absl::Seconds(30));
      if (!got.has_value()) return nullptr;
      json::value v = json::parse(*got);
      if (v.as_object().contains("id") && v.at("id") == json::value(id)) return v;
      if (notes != nullptr) notes->push_back(std::move(v));
    }
    return nullptr;
  }

  TempDir state_;
};

TEST_F(SkillSessions, ACounterKeepsItsStateAcrossFiveCallsWithProgressFirst) {
  REQUIRE_HOST(Python3());
  ASSERT_TRUE(Start().up());
  const std::string key = Open();
  ASSERT_FALSE(key.empty());
  DaemonClient client(daemon_->socket());
  ASSERT_TRUE(client.connected());
  int64_t pid = 0;
  for (int n = 1; n <= 5; ++n) {
    std::vector<json::value> notes;
    const int64_t id = 100 + n;
    json::value reply = Exchange(
        client,
        RequestLine(id, "skill.call",
                    absl::StrCat(R"({"skill_session": )", Quoted(key), R"(, "method": "add", "params": {"n": 1}})")),
        id, &notes);
    ASSERT_TRUE(HasResult(reply)) << json::serialize(reply);
    const json::object& r = reply.at("result").as_object();
    EXPECT_EQ(r.at("result").at("count").as_int64(), n);  // the state kept between calls
    if (n == 1) pid = r.at("result").at("pid").as_int64();
    EXPECT_EQ(r.at("result").at("pid").as_int64(), pid);  // one process
    EXPECT_EQ(Str(r.at("skill_session")), key);
    EXPECT_EQ(Str(r.at("skill").at("name")), "counter");
    EXPECT_EQ(r.at("notifications").as_int64(), 2);
    EXPECT_EQ(Str(r.at("stdout_logs")), "not a message, a log line\n");
    EXPECT_TRUE(absl::StrContains(Str(r.at("logs")), "added 1")) << Str(r.at("logs"));
    ASSERT_EQ(notes.size(), 2u) << n;
    for (int step = 1; step <= 2; ++step) {
      const json::value& note = notes[step - 1];
      EXPECT_EQ(Str(note.at("method")), "skill.progress");
      EXPECT_EQ(Str(note.at("params").at("skill_session")), key);
      EXPECT_EQ(Str(note.at("params").at("method")), "progress");
      EXPECT_EQ(note.at("params").at("params").at("step").as_int64(), step);
      EXPECT_EQ(note.at("params").at("request_id").as_string().size(), 27u);  // 'q' and a ULID
    }
  }
  json::value listed = Result("skill.session.list", "");
  ASSERT_EQ(listed.at("skill_sessions").as_array().size(), 1u);
  EXPECT_EQ(listed.at("skill_sessions").as_array()[0].at("calls").as_int64(), 5);

  json::value closed = Result("skill.session.close", absl::StrCat(R"({"skill_session": )", Quoted(key), "}"));
  ASSERT_TRUE(closed.is_object());
  EXPECT_EQ(Str(closed.at("ended").at("reason")), "killed");
  EXPECT_TRUE(closed.at("ended").at("usage").as_object().contains("user_ms"));
  EXPECT_EQ(OpenSessions(), 0u);
  json::value after = Call("skill.call", absl::StrCat(R"({"skill_session": )", Quoted(key), R"(, "method": "add"})"));
  EXPECT_EQ(ErrorCode(after), -32004) << json::serialize(after);

  // Each call is audited, with its session, and so is the session's end
  // (newest first), with its process's usage.
  json::value audit = Result("audit.query", R"({"skill": "counter"})");
  ASSERT_EQ(audit.at("entries").as_array().size(), 6u) << json::serialize(audit);
  for (const json::value& entry : audit.at("entries").as_array()) EXPECT_EQ(Str(entry.at("skill_session")), key);
  const json::value& end = audit.at("entries").as_array()[0];
  EXPECT_EQ(Str(end.at("outcome")), "session_end") << json::serialize(end);
  EXPECT_EQ(Str(end.at("reason")), "closed");
  EXPECT_EQ(end.at("calls").as_int64(), 5);
  EXPECT_TRUE(end.at("usage").as_object().contains("user_ms")) << json::serialize(end);
}

TEST_F(SkillSessions, TheSessionsSandboxIsIsolatedAsAPooledOne) {
  REQUIRE_HOST(Python3());
  ASSERT_TRUE(Start().up());
  const std::string key = Open();
  json::value r = Result("skill.call", absl::StrCat(R"({"skill_session": )", Quoted(key), R"(, "method": "probe"})"));
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r.at("result").at("uid").as_int64(), 1000);
  EXPECT_NE(Str(r.at("result").at("net")), "connected");  // no network in the profile
  EXPECT_EQ(r.at("result").at("root_writable"), false);
  Result("skill.session.close", absl::StrCat(R"({"skill_session": )", Quoted(key), "}"));
}

TEST_F(SkillSessions, AnIdleSessionIsClosedByItsTimeout) {
  REQUIRE_HOST(Python3());
  ASSERT_TRUE(Start().up());
  const std::string key = Open(R"(, "idle_timeout_ms": 300)");
  ASSERT_FALSE(key.empty());
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {  // at most 30 s
    gone = OpenSessions() == 0;
    if (!gone) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(gone);
  json::value r = Call("skill.call", absl::StrCat(R"({"skill_session": )", Quoted(key), R"(, "method": "add"})"));
  EXPECT_EQ(ErrorCode(r), -32004);
  // The line is written once the process is closed, after the table let
  // the session go.
  bool logged = false;
  for (int i = 0; i < 300 && !logged; ++i) {  // at most 30 s
    logged = absl::StrContains(daemon_->process().StderrSoFar(), R"("event":"idle")");
    if (!logged) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(logged);
}

TEST_F(SkillSessions, BadParamsAreRefusedAndNothingStaysOpen) {
  REQUIRE_HOST(Python3());
  ASSERT_TRUE(Start(R"(, "sessions": {"max_sessions": 1, "max_idle_timeout_ms": 60000})").up());
  EXPECT_EQ(ErrorCode(Call("skill.session.open", R"({"skill": "absent"})")), -32004);
  EXPECT_EQ(ErrorCode(Call("skill.session.open", R"({"skill": "counter", "idle_timeout_ms": 60001})")), -32002);
  EXPECT_EQ(ErrorCode(Call("skill.session.open", R"({"skill": "counter", "workspace": "/tmp"})")), -32602);
  EXPECT_EQ(ErrorCode(Call("skill.session.open", R"({"skill": "counter", "timeout_ms": 60001})")), -32002);
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill_session": "k-none", "method": "add"})")), -32004);
  EXPECT_EQ(ErrorCode(Call("skill.session.close", R"({"skill_session": "k-none"})")), -32004);
  EXPECT_EQ(OpenSessions(), 0u);

  const std::string key = Open();
  EXPECT_EQ(ErrorCode(Call("skill.session.open", R"({"skill": "counter"})")), -32002);  // max_sessions
  const std::string in = absl::StrCat(R"({"skill_session": )", Quoted(key));
  EXPECT_EQ(ErrorCode(Call("skill.call", absl::StrCat(in, R"(, "argv": ["x"], "method": "add"})"))), -32602);
  EXPECT_EQ(ErrorCode(Call("skill.call", absl::StrCat(in, R"(, "method": "add", "timeout_ms": 60001})"))), -32002);

  // A call while another runs: busy, and the first is still answered.
  DaemonClient first(daemon_->socket());
  ASSERT_TRUE(first.Send(RequestLine(900, "skill.call", absl::StrCat(in, R"(, "method": "sleep"})"))));
  bool busy = false;
  for (int i = 0; i < 300 && !busy; ++i) {  // until the first holds it, at most 30 s
    json::value r = Call("skill.call", absl::StrCat(in, R"(, "method": "add"})"));
    busy = ErrorCode(r) == -32000;
    if (!busy) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(busy);
  ASSERT_TRUE(WriteFile(gate_.path() + "/go", ""));
  std::optional<std::string> slept = first.ReadLine(absl::Seconds(30));
  ASSERT_TRUE(slept.has_value());
  EXPECT_EQ(Str(json::parse(*slept).at("result").at("result")), "slept");
  ::unlink((gate_.path() + "/go").c_str());

  // A call that times out closes its session: what the skill holds no
  // longer matches the conversation.
  json::value late = Call("skill.call", absl::StrCat(in, R"(, "method": "sleep", "timeout_ms": 300})"));
  EXPECT_EQ(ErrorCode(late), -32007) << json::serialize(late);
  EXPECT_TRUE(absl::StrContains(ErrorMessage(late), "did not answer within")) << json::serialize(late);
  EXPECT_EQ(OpenSessions(), 0u);

  // A skill that exits unanswered: -32007 with its status, and closed.
  const std::string again = Open();
  json::value died =
      Call("skill.call", absl::StrCat(R"({"skill_session": )", Quoted(again), R"(, "method": "exit"})"));
  EXPECT_EQ(ErrorCode(died), -32007) << json::serialize(died);
  EXPECT_EQ(died.at("error").at("data").at("status").as_int64(), 3) << json::serialize(died);
  EXPECT_EQ(OpenSessions(), 0u);
}

TEST_F(SkillSessions, AOneShotCallStreamsItsProgress) {
  REQUIRE_HOST(Python3());
  ASSERT_TRUE(Start().up());
  DaemonClient client(daemon_->socket());
  std::vector<json::value> notes;
  json::value reply = Exchange(
      client, RequestLine(7, "skill.call", R"({"skill": "counter", "method": "add", "progress_token": "t-7"})"), 7,
      &notes);
  ASSERT_TRUE(HasResult(reply)) << json::serialize(reply);
  EXPECT_EQ(reply.at("result").at("notifications").as_int64(), 2);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[1].at("params").at("params").at("step").as_int64(), 2);
  EXPECT_FALSE(notes[0].at("params").as_object().contains("skill_session"));
  EXPECT_EQ(Str(notes[0].at("params").at("progress_token")), "t-7");  // the client's, to route them by
  json::value bad = Call("skill.call", R"({"skill": "counter", "method": "add", "progress_token": {"a": 1}})");
  EXPECT_EQ(ErrorCode(bad), -32602);
  EXPECT_TRUE(absl::StrContains(ErrorMessage(bad), "progress_token")) << json::serialize(bad);
}

TEST_F(SkillSessions, ASkillCallsTheSkillsItsManifestAllowsAndNoOthers) {
  REQUIRE_HOST(Python3());
  ASSERT_TRUE(Start(R"(, "max_call_depth": 1)").up());
  json::value ok = Result("skill.call", R"({"skill": "caller", "method": "go", "params": {"callee": "counter"}})");
  ASSERT_TRUE(ok.is_object());
  const json::value& got = ok.at("result");
  ASSERT_TRUE(got.as_object().contains("result")) << json::serialize(got);
  EXPECT_EQ(got.at("result").at("result").at("count").as_int64(), 5);  // the callee's answer, whole
  EXPECT_EQ(Str(got.at("result").at("skill").at("name")), "counter");
  EXPECT_EQ(ok.at("skill_calls").as_int64(), 1);
  const std::string callee_request = Str(got.at("result").at("request_id"));

  json::value refused = Result("skill.call", R"({"skill": "caller", "method": "go", "params": {"callee": "secret"}})");
  ASSERT_TRUE(refused.is_object());
  EXPECT_EQ(refused.at("result").at("error").at("code").as_int64(), -32008) << json::serialize(refused);
  EXPECT_TRUE(absl::StrContains(Str(refused.at("result").at("error").at("message")), "may not call secret@1.0.0"));

  // caller → caller is allowed by its manifest, but depth 1 is the limit.
  json::value deep = Result("skill.call", R"({"skill": "caller", "method": "go", "params": {"callee": "caller", "then": "counter"}})");
  ASSERT_TRUE(deep.is_object());
  // caller's answer → its skill.call's result → the inner caller's answer: refused.
  const json::value& inner = deep.at("result").at("result").at("result");
  EXPECT_EQ(inner.at("error").at("code").as_int64(), -32002) << json::serialize(deep);
  EXPECT_TRUE(absl::StrContains(json::serialize(deep), "skills.max_call_depth"));

  // The callee's audit line names its caller's request.
  json::value callee = Result("audit.query", absl::StrCat(R"({"request_id": )", Quoted(callee_request), "}"));
  ASSERT_EQ(callee.at("entries").as_array().size(), 1u) << json::serialize(callee);
  const json::value& line = callee.at("entries").as_array()[0];
  EXPECT_EQ(Str(line.at("skill").at("name")), "counter");
  EXPECT_EQ(Str(line.at("caller").at("skill").at("name")), "caller");
  json::value callers = Result("audit.query", R"({"skill": "caller"})");
  bool linked = false;
  for (const json::value& e : callers.at("entries").as_array()) {
    linked = linked || e.at("request_id") == line.at("caller").at("request_id");
  }
  EXPECT_TRUE(linked) << json::serialize(callers);
}

}  // namespace
}  // namespace cubicle::test_support

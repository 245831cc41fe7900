// exec.follow over the Unix socket: an execution's output reaches its
// follower as exec.output notifications while it still runs, in order,
// without a character split between two of them, then the reply is its
// end; a follow resumes from offsets; bad params are refused; a follower
// that leaves costs the execution nothing.
//
// The payload waits behind a gate the test opens (a file appearing in a
// directory bound into the sandbox), so "while it still runs" is an order
// of events, never a time.
#include <sys/stat.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

class ExecFollow : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    ::chmod(gate_.path().c_str(), 0755);  // the sandbox's user looks inside
    daemon_ = std::make_unique<SocketDaemon>(std::vector<std::string>{
        "--config",
        WriteConfig(dir_, absl::StrCat(R"({"profiles": {"shell": {"binds": [{"source": ")", gate_.path(),
                                       R"(", "dest": "/gate"}], "pool": {"min_idle": 1, "max_idle": 2}}}})"))});
  }
  void TearDown() override {
    daemon_.reset();  // stopped: every zygote and cgroup gone before the check
    HostHygieneTest::TearDown();
  }

  // exec.start of `script` (sh -c) that may wait for the gate; its id.
  std::string Start(DaemonClient& c, const std::string& script) {
    json::value started = c.CallJson(RequestLine(
        1, "exec.start",
        absl::StrCat(R"({"argv":["sh","-c",)", json::serialize(json::value(script)), R"(],"timeout_ms":60000})")));
    EXPECT_TRUE(started.is_object() && started.as_object().contains("result")) << json::serialize(started);
    if (!started.is_object() || !started.as_object().contains("result")) return "";
    return std::string(started.at("result").at("exec_id").as_string());
  }

  static std::string FollowLine(int64_t id, const std::string& exec_id, const std::string& more = "") {
    return RequestLine(id, "exec.follow", absl::StrCat(R"({"exec_id":")", exec_id, R"(")", more, "}"));
  }

  void OpenGate() { WriteFile(absl::StrCat(gate_.path(), "/open"), ""); }

  static constexpr const char* kWait = "while [ ! -e /gate/open ]; do sleep 0.02; done";

  TempDir dir_;
  TempDir gate_;
  std::unique_ptr<SocketDaemon> daemon_;
};

// What the notifications for one stream carried, with their offsets
// checked to follow on from each other.
struct Followed {
  std::string stdout_text, stderr_text;
  json::value reply;
  bool contiguous = true;
};

// Reads notifications until the reply of request `id` (each read bounded:
// a missing line fails the test, never hangs it), onto what `f` has.
void ReadUntilReply(DaemonClient& c, int64_t id, const std::string& exec_id, Followed* out) {
  Followed& f = *out;
  for (int i = 0; i < 10000; ++i) {
    std::optional<std::string> line = c.ReadLine(absl::Seconds(60));
    if (!line.has_value()) break;
    json::value v = ParseJson(*line);
    if (v.is_object() && v.as_object().contains("id")) {
      EXPECT_EQ(v.at("id").as_int64(), id);
      f.reply = v;
      break;
    }
    EXPECT_EQ(v.at("method").as_string(), "exec.output");
    const json::object& p = v.at("params").as_object();
    EXPECT_EQ(p.at("exec_id").as_string(), exec_id);
    const bool out = p.at("stream").as_string() == "stdout";
    std::string& text = out ? f.stdout_text : f.stderr_text;
    f.contiguous &= static_cast<size_t>(p.at("offset").as_int64()) == text.size();
    // Text, never data_base64: a piece that split "é" would not be UTF-8.
    EXPECT_TRUE(p.contains("data")) << *line;
    if (!p.contains("data")) continue;
    const std::string data(p.at("data").as_string());
    text += data;
  }
}

TEST_F(ExecFollow, OutputArrivesWhileItRunsThenTheEnd) {
  ASSERT_TRUE(daemon_->up());
  DaemonClient c(daemon_->socket());
  // "é" is written in two halves around the gate: no notification may
  // carry half a character.
  const std::string id = Start(c, absl::StrCat("echo one; printf 'h\\303'; ", kWait, "; printf '\\251 two\\n'; echo err >&2"));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(c.Send(FollowLine(2, id)));
  std::optional<std::string> first = c.ReadLine();
  ASSERT_TRUE(first.has_value());
  json::value note = ParseJson(*first);
  ASSERT_EQ(note.at("method").as_string(), "exec.output") << *first;
  EXPECT_EQ(std::string(note.at("params").at("data").as_string()).substr(0, 4), "one\n");
  // The gate is shut: it is still running, yet its first line is here.
  DaemonClient other(daemon_->socket());
  json::value status = other.CallJson(RequestLine(3, "exec.status", absl::StrCat(R"({"exec_id":")", id, R"("})")));
  EXPECT_EQ(status.at("result").at("state").as_string(), "running");
  OpenGate();
  Followed f;
  f.stdout_text = std::string(note.at("params").at("data").as_string());
  ReadUntilReply(c, 2, id, &f);
  ASSERT_TRUE(f.reply.is_object());
  const json::object& end = f.reply.at("result").as_object();
  EXPECT_EQ(end.at("state").as_string(), "done");
  EXPECT_EQ(end.at("result").at("exit_code").as_int64(), 0);
  EXPECT_EQ(f.stdout_text, "one\nhé two\n");
  EXPECT_EQ(f.stdout_text, end.at("result").at("stdout").as_string());
  EXPECT_EQ(f.stderr_text, "err\n");
  EXPECT_TRUE(f.contiguous);
}

TEST_F(ExecFollow, AFollowResumesFromItsOffsetsAndAnEndedOneAnswersAtOnce) {
  ASSERT_TRUE(daemon_->up());
  DaemonClient c(daemon_->socket());
  const std::string id = Start(c, "printf 'abcdef'; printf 'XYZ' >&2");
  ASSERT_FALSE(id.empty());
  json::value waited = c.CallJson(RequestLine(2, "exec.wait", absl::StrCat(R"({"exec_id":")", id, R"(","timeout_ms":30000})")));
  ASSERT_EQ(waited.at("result").at("state").as_string(), "done");
  // Ended: the rest from the offsets asked ("ef" from 4, "YZ" from 1),
  // then the reply, at once.
  ASSERT_TRUE(c.Send(FollowLine(4, id, R"(,"stdout_offset":4,"stderr_offset":1)")));
  std::vector<json::value> notes;
  json::value reply;
  for (int i = 0; i < 3; ++i) {
    json::value v = ParseJson(c.ReadLine().value_or(""));
    if (v.is_object() && v.as_object().contains("id")) {
      reply = v;
      break;
    }
    notes.push_back(v);
  }
  ASSERT_TRUE(reply.is_object());
  EXPECT_EQ(reply.at("result").at("state").as_string(), "done");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0].at("params").at("offset").as_int64(), 4);
  EXPECT_EQ(notes[0].at("params").at("data").as_string(), "ef");
  EXPECT_EQ(notes[1].at("params").at("offset").as_int64(), 1);
  EXPECT_EQ(notes[1].at("params").at("data").as_string(), "YZ");
}

TEST_F(ExecFollow, BadParamsAreRefusedAndTheDaemonServesOn) {
  ASSERT_TRUE(daemon_->up());
  DaemonClient c(daemon_->socket());
  struct Case {
    std::string params;
    int64_t code;
    std::string says;
  } cases[] = {
      {R"({"exec_id":"e-nope"})", -32004, "no execution 'e-nope'"},
      {R"({})", -32602, "exec_id"},
      {R"({"exec_id":"x","stdout_offset":-1})", -32602, "stdout_offset"},
      {R"({"exec_id":"x","stderr_offset":"0"})", -32602, "stderr_offset"},
      {R"({"exec_id":"x","follow":true})", -32602, "follow"},
  };
  int64_t n = 10;
  for (const Case& k : cases) {
    json::value reply = c.CallJson(RequestLine(++n, "exec.follow", k.params));
    ASSERT_TRUE(reply.is_object() && reply.as_object().contains("error")) << k.params;
    EXPECT_EQ(reply.at("error").at("code").as_int64(), k.code) << k.params;
    EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find(k.says), std::string::npos)
        << json::serialize(reply);
  }
  json::value health = c.CallJson(RequestLine(99, "health"));
  EXPECT_EQ(health.at("result").at("in_flight").as_int64(), 0) << "no refused follow is left in flight";
}

TEST_F(ExecFollow, AFollowerThatLeavesCostsTheExecutionNothing) {
  ASSERT_TRUE(daemon_->up());
  DaemonClient starter(daemon_->socket());
  const std::string id = Start(starter, absl::StrCat("echo before; ", kWait, "; echo after"));
  ASSERT_FALSE(id.empty());
  {
    DaemonClient follower(daemon_->socket());
    ASSERT_TRUE(follower.Send(FollowLine(2, id)));
    ASSERT_TRUE(follower.ReadLine().has_value());  // "before": it is following
  }  // gone mid-run
  OpenGate();
  json::value waited =
      starter.CallJson(RequestLine(3, "exec.wait", absl::StrCat(R"({"exec_id":")", id, R"(","timeout_ms":60000})")));
  const json::object& end = waited.at("result").as_object();
  EXPECT_EQ(end.at("state").as_string(), "done");
  EXPECT_EQ(end.at("result").at("reason").as_string(), "exited");
  EXPECT_EQ(end.at("result").at("stdout").as_string(), "before\nafter\n");
}

}  // namespace
}  // namespace cubicle::test_support

// The HTTP front's REST routes and streams, end to end over loopback on a
// daemon with sessions: a session's life through /sessions, raw file bytes
// in and out, errors with their codes and statuses, an execution's output
// streamed as NDJSON while it runs (REST and POST /rpc alike).
//
// A streamed payload waits for a file the test writes into the session's
// workspace from the host, so "while it runs" is an order of events,
// never a time.
#include <sys/stat.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/support/daemon_client.h"
#include "tests/support/http_client.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

const std::string kKey = "rest-0123456789abcdef0123456789abcdef";

using Headers = std::vector<std::pair<std::string, std::string>>;

Headers Auth(Headers more = {}) {
  more.emplace_back("Authorization", absl::StrCat("Bearer ", kKey));
  return more;
}

json::value Json(const std::optional<HttpReply>& reply) {
  if (!reply.has_value()) return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(reply->body, ec);
  return ec ? json::value(nullptr) : v;
}

class HttpRest : public SessionDaemonTest {
 protected:
  // A daemon with sessions on the socket and on HTTP (one bearer key); its
  // HTTP port.
  // `config`: config.json's text (default: SessionConfig(StateMembers())).
  uint16_t StartHttp(std::string config = "") {
    const std::string keys = dir_.Join("keys.json");
    WriteFile(keys, absl::StrCat(R"({"keys": [{"name": "rest", "key": ")", kKey, R"("}]})"));
    ::chmod(keys.c_str(), 0600);
    const std::string port_file = dir_.Join("port");
    if (config.empty()) config = SessionConfig(StateMembers());
    SocketDaemon& d = StartDaemon(config,
                                  {"--listen", "127.0.0.1:0", "--listen-port-file", port_file, "--keys-file", keys});
    if (!d.up()) return 0;
    int port = 0;
    for (int i = 0; i < 2000 && port == 0; ++i) {  // at most 20 s
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port)) absl::SleepFor(absl::Milliseconds(10));
    }
    return static_cast<uint16_t>(port);
  }

  // Opens the gate a streamed payload waits for: a file it finds in its
  // /workspace, written from the host into the session's tmpfs.
  void OpenGate() {
    std::vector<std::string> mounts = WorkspaceMountsUnder(state_);
    ASSERT_EQ(mounts.size(), 1u);
    ASSERT_TRUE(WriteFile(absl::StrCat(mounts[0], "/open"), ""));
  }

  static constexpr const char* kWait = "while [ ! -e /workspace/open ]; do sleep 0.02; done";
};

TEST_F(HttpRest, ASessionsLifeThroughTheRestRoutes) {
  const uint16_t port = StartHttp();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  std::optional<HttpReply> made = c.Request("POST", "/sessions", R"({"session":"rest1"})", Auth());
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ(made->status, 201) << made->body;
  EXPECT_EQ(Json(made).at("session"), "rest1");
  std::optional<HttpReply> again = c.Request("POST", "/sessions", R"({"session":"rest1"})", Auth());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->status, 200) << "a live session is returned as it is";

  const std::string bytes("hello\0bin\xff", 10);
  std::optional<HttpReply> put = c.Request("PUT", "/sessions/rest1/files/uploads/in%20put.bin", bytes, Auth());
  ASSERT_TRUE(put.has_value());
  EXPECT_EQ(put->status, 200) << put->body;
  std::optional<HttpReply> ran = c.Request(
      "POST", "/sessions/rest1/exec",
      R"({"argv":["sh","-c","wc -c < 'uploads/in put.bin' > outputs/n.txt; echo done"]})", Auth());
  ASSERT_TRUE(ran.has_value());
  ASSERT_EQ(ran->status, 200) << ran->body;
  json::value result = Json(ran);
  EXPECT_EQ(result.at("exit_code"), 0) << ran->body;
  EXPECT_EQ(result.at("stdout"), "done\n");
  EXPECT_EQ(result.at("outputs").at("files").at(0).at("path"), "outputs/n.txt") << ran->body;

  std::optional<HttpReply> got = c.Request("GET", "/sessions/rest1/files/outputs/n.txt", "", Auth());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->headers["content-type"], "application/octet-stream");
  EXPECT_EQ(got->body, "10\n");
  std::optional<HttpReply> raw = c.Request("GET", "/sessions/rest1/files/uploads/in%20put.bin", "", Auth());
  ASSERT_TRUE(raw.has_value());
  EXPECT_EQ(raw->body, bytes) << "binary bytes come back as they went in";

  std::optional<HttpReply> listed = c.Request("GET", "/sessions/rest1/files/?path=outputs", "", Auth());
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->status, 200) << listed->body;
  EXPECT_TRUE(absl::StrContains(listed->body, "n.txt")) << listed->body;

  std::optional<HttpReply> deleted = c.Request("DELETE", "/sessions/rest1/files/outputs/n.txt", "", Auth());
  ASSERT_TRUE(deleted.has_value());
  EXPECT_EQ(deleted->status, 200) << deleted->body;
  std::optional<HttpReply> gone = c.Request("GET", "/sessions/rest1/files/outputs/n.txt", "", Auth());
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->status, 404);
  EXPECT_EQ(Json(gone).at("error").at("code"), -32004) << gone->body;

  std::optional<HttpReply> info = c.Request("GET", "/sessions/rest1", "", Auth());
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->status, 200);
  std::optional<HttpReply> destroyed = c.Request("DELETE", "/sessions/rest1?archive=false", "", Auth());
  ASSERT_TRUE(destroyed.has_value());
  EXPECT_EQ(destroyed->status, 200) << destroyed->body;
  std::optional<HttpReply> after = c.Request("GET", "/sessions/rest1", "", Auth());
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->status, 404);
  EXPECT_TRUE(WorkspaceMountsUnder(state_).empty()) << "the workspace is unmounted";
}

TEST_F(HttpRest, BadRoutesAndParamsAreRefusedWithTheirStatusAndNothingIsMade) {
  const uint16_t port = StartHttp();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  ASSERT_EQ(c.Request("POST", "/sessions", R"({"session":"r2"})", Auth())->status, 201);
  struct Case {
    const char* method;
    std::string target, body;
    int status;
    int64_t code;
  } cases[] = {
      {"PATCH", "/sessions", "", 405, -32601},
      {"POST", "/sessions/r2", "", 405, -32601},
      {"GET", "/sessions/r2/nothing", "", 404, -32601},
      {"GET", "/sessions/r2/files/..%2Fetc%2Fpasswd", "", 400, -32602},  // a '/' hidden in a segment
      {"GET", "/sessions/r2/files/../state", "", 400, -32602},           // '..' is refused by the files API
      {"GET", "/sessions/r2/files/a%zz", "", 400, -32602},
      {"POST", "/sessions/r2/exec", "[1,2]", 400, -32602},
      {"POST", "/sessions/r2/exec", R"({"session":"other","argv":["true"]})", 400, -32602},
      {"POST", "/sessions/r2/exec", R"({"argv":"true"})", 400, -32602},
      {"DELETE", "/sessions/r2?archive=maybe", "", 400, -32602},
      {"GET", "/sessions/missing", "", 404, -32004},
      {"POST", "/sessions/missing/exec", R"({"argv":["true"]})", 404, -32004},
      {"PUT", "/sessions/r2/files/x?mode=999", "data", 400, -32602},
  };
  for (const Case& k : cases) {
    std::optional<HttpReply> reply = c.Request(k.method, k.target, k.body, Auth());
    ASSERT_TRUE(reply.has_value()) << k.target;
    EXPECT_EQ(reply->status, k.status) << k.method << " " << k.target << ": " << reply->body;
    json::value v = Json(reply);
    ASSERT_TRUE(v.is_object() && v.as_object().contains("error")) << reply->body;
    EXPECT_EQ(v.at("error").at("code"), k.code) << k.method << " " << k.target << ": " << reply->body;
  }
  std::optional<HttpReply> listed = c.Request("GET", "/sessions/r2/files/", "", Auth());
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->status, 200);
  json::value entries = Json(listed).at("entries");
  for (const json::value& e : entries.as_array()) {
    EXPECT_NE(e.at("path"), "x") << "a refused put wrote nothing";
  }
  std::optional<HttpReply> unauthenticated = c.Request("POST", "/sessions", "{}");
  ASSERT_TRUE(unauthenticated.has_value());
  EXPECT_EQ(unauthenticated->status, 401);
  std::optional<HttpReply> sessions = c.Request("GET", "/sessions", "", Auth());
  EXPECT_EQ(Json(sessions).at("sessions").as_array().size(), 1u) << sessions->body;
}

TEST_F(HttpRest, AnExecutionsOutputIsStreamedWhileItRuns) {
  const uint16_t port = StartHttp();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  ASSERT_EQ(c.Request("POST", "/sessions", R"({"session":"st"})", Auth())->status, 201);
  const std::string body = absl::StrCat(R"({"argv":["sh","-c","echo one; )", kWait, R"(; echo two; echo oops >&2"]})");
  ASSERT_TRUE(c.SendRaw(absl::StrCat("POST /sessions/st/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", kKey,
                                     "\r\nAccept: application/x-ndjson\r\nContent-Length: ", body.size(), "\r\n\r\n",
                                     body)));
  std::optional<HttpReply> head = c.ReadHead();
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-type"], "application/x-ndjson");
  EXPECT_EQ(head->headers["transfer-encoding"], "chunked");
  std::optional<std::string> first = c.ReadChunk();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Json(HttpReply{200, {}, *first}), json::parse(R"({"stream":"stdout","offset":0,"data":"one\n"})"));
  OpenGate();  // only now can it end: the line above came while it ran
  std::vector<json::value> lines;
  for (int i = 0; i < 100; ++i) {
    std::optional<std::string> chunk = c.ReadChunk();
    ASSERT_TRUE(chunk.has_value());
    if (chunk->empty()) break;
    lines.push_back(Json(HttpReply{200, {}, *chunk}));
  }
  ASSERT_GE(lines.size(), 2u);
  const json::object& end = lines.back().as_object();
  EXPECT_EQ(end.at("state"), "done");
  EXPECT_EQ(end.at("result").at("stdout"), "one\ntwo\n");
  EXPECT_EQ(end.at("result").at("session"), "st");
  std::string out = "one\n", err;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    (lines[i].at("stream") == "stdout" ? out : err) += std::string(lines[i].at("data").as_string());
  }
  EXPECT_EQ(out, "one\ntwo\n");
  EXPECT_EQ(err, "oops\n");
  // The connection is kept: the next request on it is answered.
  std::optional<HttpReply> next = c.Request("GET", "/sessions/st", "", Auth());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(Json(next).at("executing"), 0) << next->body;
}

// connections.line_timeout_ms bounds each read and write on the
// connection, never the daemon's work: a streamed answer may be silent
// between two lines for longer than it.
TEST_F(HttpRest, AStreamMaySitSilentLongerThanTheLineTimeout) {
  std::string config = SessionConfig(StateMembers());
  config.insert(1, R"("connections": {"line_timeout_ms": 300}, )");
  const uint16_t port = StartHttp(config);
  ASSERT_NE(port, 0);
  HttpClient c(port);
  ASSERT_EQ(c.Request("POST", "/sessions", R"({"session":"quiet"})", Auth())->status, 201);
  const std::string body = absl::StrCat(R"({"argv":["sh","-c","echo one; )", kWait, R"(; echo two"]})");
  ASSERT_TRUE(c.SendRaw(absl::StrCat("POST /sessions/quiet/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", kKey,
                                     "\r\nAccept: application/x-ndjson\r\nContent-Length: ", body.size(), "\r\n\r\n",
                                     body)));
  std::optional<HttpReply> head = c.ReadHead();
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  ASSERT_TRUE(c.ReadChunk().has_value());  // "one"
  absl::SleepFor(absl::Milliseconds(900));  // three line timeouts with nothing to write
  OpenGate();
  std::optional<json::value> end;
  for (int i = 0; i < 100; ++i) {
    std::optional<std::string> chunk = c.ReadChunk();
    ASSERT_TRUE(chunk.has_value()) << "the stream was cut off";
    if (chunk->empty()) break;
    end = Json(HttpReply{200, {}, *chunk});
  }
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->at("state"), "done");
  EXPECT_EQ(end->at("result").at("stdout"), "one\ntwo\n");
}

TEST_F(HttpRest, RpcStreamsNotificationsAsNdjsonOnlyWhenAsked) {
  const uint16_t port = StartHttp();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  json::value started = Json(c.Request(
      "POST", "/rpc", RpcBody(1, "exec.start", R"({"argv":["sh","-c","echo a; echo b >&2"]})"), Auth()));
  ASSERT_TRUE(started.as_object().contains("result")) << json::serialize(started);
  const std::string id(started.at("result").at("exec_id").as_string());
  const std::string follow = RpcBody(2, "exec.follow", absl::StrCat(R"({"exec_id":")", id, R"("})"));
  // Without the Accept header: one JSON reply, the notifications dropped.
  std::optional<HttpReply> plain = c.Request("POST", "/rpc", follow, Auth());
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->headers["content-type"], "application/json");
  EXPECT_EQ(Json(plain).at("result").at("state"), "done") << plain->body;
  // With it: each notification, then the reply, one JSON value per line.
  std::optional<HttpReply> streamed =
      c.Request("POST", "/rpc", follow, Auth({{"Accept", "application/x-ndjson"}}));
  ASSERT_TRUE(streamed.has_value());
  EXPECT_EQ(streamed->headers["content-type"], "application/x-ndjson");
  std::vector<std::string> lines = absl::StrSplit(absl::StripSuffix(streamed->body, "\n"), '\n');
  ASSERT_EQ(lines.size(), 3u) << streamed->body;
  EXPECT_EQ(Json(HttpReply{200, {}, lines[0]}).at("method"), "exec.output");
  EXPECT_EQ(Json(HttpReply{200, {}, lines[0]}).at("params").at("data"), "a\n");
  EXPECT_EQ(Json(HttpReply{200, {}, lines[1]}).at("params").at("stream"), "stderr");
  EXPECT_EQ(Json(HttpReply{200, {}, lines[2]}).at("id"), 2);
  EXPECT_EQ(Json(HttpReply{200, {}, lines[2]}).at("result").at("state"), "done");
}

}  // namespace
}  // namespace cubicle::test_support

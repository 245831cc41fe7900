// /mcp on `cubicle serve --listen`, in raw HTTP and JSON: MCP's streamable
// HTTP transport (2025-06-18) — sessions by Mcp-Session-Id, the headers it
// checks, JSON and SSE answers, keys and their scopes, DELETE, idle expiry
// and the bound on sessions — and what each leaves (an ended session's
// workspace archived and gone). Waits are bounds for failures; nothing
// asserts how long anything took.
#include <dirent.h>
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/support/daemon_client.h"
#include "tests/support/http_client.h"
#include "tests/support/mcp_client.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

const std::string kAgentKey = "agent-0123456789abcdef0123456789abcdef";
const std::string kOtherKey = "other-0123456789abcdef0123456789abcdef";
const std::string kSkillKey = "skill-0123456789abcdef0123456789abcdef";

using Headers = std::vector<std::pair<std::string, std::string>>;

json::value Json(const std::string& body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  return ec ? json::value(nullptr) : v;
}

// The messages of an SSE body: each event's data, parsed.
std::vector<json::value> Events(const std::string& body) {
  std::vector<json::value> out;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    for (absl::string_view line : absl::StrSplit(event, '\n')) {
      if (absl::ConsumePrefix(&line, "data: ")) out.push_back(Json(std::string(line)));
    }
  }
  return out;
}

class McpHttpTest : public SessionDaemonTest {
 protected:
  // A daemon with sessions, HTTP and three keys: two for anything, one for
  // skill.call alone; `mcp` the members of its "mcp" object.
  uint16_t Start(const std::string& mcp = "") {
    const std::string keys = dir_.Join("keys.json");
    WriteFile(keys, absl::StrCat(R"({"keys": [{"name": "agent", "key": ")", kAgentKey, R"("},
      {"name": "other", "key": ")", kOtherKey, R"("},
      {"name": "skills", "key": ")", kSkillKey, R"(", "methods": ["skill.call"]}]})"));
    ::chmod(keys.c_str(), 0600);
    std::string config = SessionConfig(StateMembers());
    if (!mcp.empty()) config = absl::StrCat(config.substr(0, config.rfind('}')), R"(, "mcp": {)", mcp, "}}");
    const std::string port_file = dir_.Join("port");
    SocketDaemon& d = StartDaemon(config, {"--listen", "127.0.0.1:0", "--listen-port-file", port_file, "--keys-file", keys});
    if (!d.up()) return 0;
    int port = 0;
    for (int i = 0; i < 2000 && port == 0; ++i) {  // at most 20 s
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port)) absl::SleepFor(absl::Milliseconds(10));
    }
    return static_cast<uint16_t>(port);
  }

  // A POST to /mcp with what a conforming client sends, and `more`.
  static HttpReply Post(HttpClient& c, const std::string& body, const std::string& session = "",
                        const std::string& key = kAgentKey, Headers more = {}) {
    // (HttpClient sends Content-Type: application/json with every POST.)
    Headers headers = {{"Authorization", "Bearer " + key}, {"Accept", "application/json, text/event-stream"}};
    if (!session.empty()) {
      headers.emplace_back("Mcp-Session-Id", session);
      headers.emplace_back("MCP-Protocol-Version", "2025-06-18");
    }
    headers.insert(headers.end(), more.begin(), more.end());
    return c.Request("POST", "/mcp", body, headers).value_or(HttpReply{});
  }

  // initialize and notifications/initialized; the session's id.
  static std::string Initialize(HttpClient& c, const std::string& key = kAgentKey) {
    HttpReply init = Post(c, McpInitialize(1), "", key);
    EXPECT_EQ(init.status, 200) << init.body;
    EXPECT_EQ(Json(init.body).at("result").at("protocolVersion"), "2025-06-18") << init.body;
    const std::string id = init.headers["mcp-session-id"];
    HttpReply ack = Post(c, R"({"jsonrpc":"2.0","method":"notifications/initialized"})", id, key);
    EXPECT_EQ(ack.status, 202);
    EXPECT_EQ(ack.body, "");
    return id;
  }

  static HttpReply Delete(HttpClient& c, const std::string& session, const std::string& key = kAgentKey) {
    return c.Request("DELETE", "/mcp", "", {{"Authorization", "Bearer " + key}, {"Mcp-Session-Id", session}})
        .value_or(HttpReply{});
  }

  // What STATE/sub holds.
  std::vector<std::string> Entries(const std::string& sub) const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir((state_ + "/" + sub).c_str())) {
      while (struct dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") out.push_back(name);
      }
      ::closedir(d);
    }
    return out;
  }
};

TEST_F(McpHttpTest, ASessionsLifeOverHttp) {
  const uint16_t port = Start();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  const std::string id = Initialize(c);
  ASSERT_EQ(id.size(), 64u) << "a 32-byte id in hex";
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;

  HttpReply list = Post(c, McpRequest(2, "tools/list"), id);
  EXPECT_EQ(list.status, 200);
  EXPECT_EQ(list.headers["content-type"], "application/json");
  EXPECT_EQ(Json(list.body).at("result").at("tools").as_array().size(), 6u) << list.body;

  HttpReply run = Post(c, McpToolCallLine(3, "run_shell", R"({"command":"echo hi > note.txt; cat note.txt"})"), id);
  ASSERT_EQ(run.status, 200) << run.body;
  const json::value result = Json(run.body).at("result");
  EXPECT_EQ(result.at("structuredContent").at("stdout"), "hi\n") << run.body;
  HttpReply read = Post(c, McpToolCallLine(4, "read_file", R"({"path":"note.txt"})"), id);
  EXPECT_EQ(Json(read.body).at("result").at("structuredContent").at("content"), "hi\n") << read.body;
  ASSERT_EQ(Entries("workspaces").size(), 1u);

  // DELETE ends it: archived, its workspace gone, its id unknown after.
  EXPECT_EQ(Delete(c, id).status, 200);
  EXPECT_EQ(Entries("workspaces"), std::vector<std::string>{});
  EXPECT_EQ(Entries("archives").size(), 1u);
  EXPECT_EQ(Post(c, McpRequest(5, "ping"), id).status, 404);
  EXPECT_EQ(Delete(c, id).status, 404);
}

TEST_F(McpHttpTest, ProgressComesAsServerSentEventsBeforeTheReply) {
  const uint16_t port = Start();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  const std::string id = Initialize(c);
  HttpReply run = Post(c,
                       McpToolCallLine(2, "run_shell", R"({"command":"for i in 1 2 3; do echo line $i; sleep 0.2; done"})",
                                       R"({"progressToken":7})"),
                       id);
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_EQ(run.headers["content-type"], "text/event-stream");
  EXPECT_EQ(run.headers["transfer-encoding"], "chunked");
  std::vector<json::value> events = Events(run.body);
  ASSERT_GE(events.size(), 2u) << run.body;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].at("method"), "notifications/progress") << run.body;
    EXPECT_EQ(events[i].at("params").at("progressToken"), 7);
  }
  EXPECT_EQ(events.back().at("id"), 2);
  EXPECT_EQ(events.back().at("result").at("structuredContent").at("stdout"), "line 1\nline 2\nline 3\n");
  // Without a token the same call is one JSON answer.
  HttpReply plain = Post(c, McpToolCallLine(3, "run_shell", R"({"command":"echo plain"})"), id);
  EXPECT_EQ(plain.headers["content-type"], "application/json");
  EXPECT_EQ(Delete(c, id).status, 200);
}

TEST_F(McpHttpTest, TheTransportsRulesAreEnforcedAndNothingIsMade) {
  const uint16_t port = Start();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  const std::string id = Initialize(c);
  // No session id, an unknown one, a version this server does not speak.
  EXPECT_EQ(Post(c, McpRequest(2, "tools/list")).status, 400);
  EXPECT_EQ(Post(c, McpRequest(2, "tools/list"), std::string(64, 'a')).status, 404);
  HttpReply version = Post(c, McpRequest(2, "tools/list"), id, kAgentKey, {{"MCP-Protocol-Version", "1999-01-01"}});
  EXPECT_EQ(version.status, 400) << version.body;
  // A client that does not take both kinds of answer, a body that is not JSON.
  HttpReply accept = c.Request("POST", "/mcp", McpRequest(2, "ping"),
                               {{"Authorization", "Bearer " + kAgentKey}, {"Accept", "application/json"},
                                {"Mcp-Session-Id", id}})
                         .value_or(HttpReply{});
  EXPECT_EQ(accept.status, 406);
  const std::string ping = McpRequest(2, "ping");
  ASSERT_TRUE(c.SendRaw(absl::StrCat("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ", kAgentKey,
                                     "\r\nAccept: application/json, text/event-stream\r\nContent-Type: text/plain\r\n"
                                     "Mcp-Session-Id: ", id, "\r\nContent-Length: ", ping.size(), "\r\n\r\n", ping)));
  EXPECT_EQ(c.ReadReply().value_or(HttpReply{}).status, 415);
  HttpReply junk = Post(c, "{not json", id);
  EXPECT_EQ(junk.status, 400);
  EXPECT_EQ(Json(junk.body).at("error").at("code"), -32700) << junk.body;
  EXPECT_EQ(Post(c, R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", id).status, 400);  // no batches
  // initialize again with a session id: refused; a bad one makes no session.
  EXPECT_EQ(Post(c, McpInitialize(3), id).status, 400);
  HttpReply bad_init = Post(c, McpRequest(4, "initialize", "{}"));
  EXPECT_EQ(Json(bad_init.body).at("error").at("code"), -32602) << bad_init.body;
  EXPECT_EQ(bad_init.headers.count("mcp-session-id"), 0u);
  // No stream the server opens by itself; other verbs are not allowed.
  std::optional<HttpReply> get = c.Request("GET", "/mcp", "", {{"Authorization", "Bearer " + kAgentKey},
                                                               {"Accept", "text/event-stream"}});
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->headers["allow"], "POST, DELETE");
  // Without a key, nothing; with another key, the session is not there.
  std::optional<HttpReply> anonymous =
      c.Request("POST", "/mcp", McpInitialize(5), {{"Accept", "application/json, text/event-stream"}});
  ASSERT_TRUE(anonymous.has_value());
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(Post(c, McpRequest(6, "tools/list"), id, kOtherKey).status, 404);
  EXPECT_EQ(Delete(c, id, kOtherKey).status, 404);
  // A page of another site (DNS rebinding) is refused; one from loopback is not.
  EXPECT_EQ(Post(c, McpRequest(7, "ping"), id, kAgentKey, {{"Origin", "http://evil.example"}}).status, 403);
  EXPECT_EQ(Post(c, McpRequest(8, "ping"), id, kAgentKey, {{"Origin", "http://localhost:6274"}}).status, 200);
  // Nothing above made a workspace.
  EXPECT_EQ(Entries("workspaces"), std::vector<std::string>{});
  EXPECT_EQ(Delete(c, id).status, 200);
}

TEST_F(McpHttpTest, AKeysScopeCoversTheCallsATriggers) {
  const uint16_t port = Start();
  ASSERT_NE(port, 0);
  HttpClient c(port);
  // A key for skill.call alone may talk MCP, but its tools need session.*,
  // exec.* and files.*: every tool call is a tool error, and nothing runs.
  const std::string id = Initialize(c, kSkillKey);
  HttpReply run = Post(c, McpToolCallLine(2, "run_shell", R"({"command":"touch /workspace/x"})"), id, kSkillKey);
  ASSERT_EQ(run.status, 200);
  const json::value result = Json(run.body).at("result");
  EXPECT_EQ(result.at("isError"), true) << run.body;
  EXPECT_TRUE(absl::StrContains(Str(result.at("content").as_array()[0].at("text")), "may not call session.create"))
      << run.body;
  EXPECT_EQ(Entries("workspaces"), std::vector<std::string>{});
  EXPECT_EQ(Delete(c, id, kSkillKey).status, 200);
}

TEST_F(McpHttpTest, AnIdleSessionEndsAndItsWorkspaceGoes) {
  const uint16_t port = Start(R"("idle_timeout_ms": 1000)");
  ASSERT_NE(port, 0);
  HttpClient c(port);
  const std::string id = Initialize(c);
  ASSERT_EQ(Post(c, McpToolCallLine(2, "write_file", R"({"path":"a.txt","content":"a"})"), id).status, 200);
  ASSERT_EQ(Entries("workspaces").size(), 1u);
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {  // at most 30 s
    absl::SleepFor(absl::Milliseconds(100));
    gone = Entries("workspaces").empty();
  }
  EXPECT_TRUE(gone) << "the idle session's workspace is still there";
  EXPECT_EQ(Post(c, McpRequest(3, "ping"), id).status, 404);
  EXPECT_EQ(Entries("archives").size(), 1u);
}

TEST_F(McpHttpTest, SessionsBeyondTheBoundAreRefused) {
  const uint16_t port = Start(R"("max_sessions": 1)");
  ASSERT_NE(port, 0);
  HttpClient c(port);
  const std::string id = Initialize(c);
  HttpReply second = Post(c, McpInitialize(2));
  EXPECT_EQ(second.status, 503) << second.body;
  EXPECT_TRUE(absl::StrContains(second.body, "mcp.max_sessions")) << second.body;
  EXPECT_EQ(Delete(c, id).status, 200);
  EXPECT_EQ(Post(c, McpInitialize(3)).status, 200);  // room again
}

}  // namespace
}  // namespace cubicle::test_support

// The MCP server's core (rpc/mcp_server.h, rpc/mcp_tools.h) without a
// daemon: a fake one answers the cubicle calls the tools make, and the test
// sees every line the session sends it.
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "rpc/config.h"
#include "rpc/jsonrpc.h"
#include "rpc/mcp_config.h"
#include "rpc/mcp_server.h"
#include "rpc/mcp_tools.h"

namespace cubicle::rpc {
namespace {
namespace json = boost::json;

// What the session sent about one message.
struct Sent {
  std::vector<json::value> notifications;
  std::optional<json::value> reply;
  bool dropped = false;  // the output went: nothing more comes
};

class RecordingOutput : public McpOutput {
 public:
  explicit RecordingOutput(std::shared_ptr<Sent> sent) : sent_(std::move(sent)) {}
  ~RecordingOutput() override { sent_->dropped = true; }
  void Notify(std::string line) override { sent_->notifications.push_back(json::parse(line)); }
  void Reply(std::string line) override { sent_->reply = json::parse(line); }

 private:
  std::shared_ptr<Sent> sent_;
};

// The daemon: each line recorded; answered at once by `answer` (a result,
// or an error object), or held when `answer` returns nullopt, for the test
// to answer later.
class FakeDaemon {
 public:
  using Answer = std::function<std::optional<json::value>(const std::string& method, const json::object& params)>;
  explicit FakeDaemon(Answer answer) : answer_(std::move(answer)) {}

  McpDaemonCall Call() {
    return [this](const std::string& line, std::function<void(std::string)> reply,
                  std::function<void(std::string)> notify) {
      json::object request = json::parse(line).as_object();
      const std::string method(request["method"].as_string());
      json::object params = request.contains("params") ? request["params"].as_object() : json::object();
      calls.push_back({method, params});
      std::optional<json::value> answer = answer_(method, params);
      if (!answer.has_value()) {
        held.push_back([reply, id = request["id"]](json::value result) { reply(Result(id, result)); });
        notifies.push_back(notify);
        return;
      }
      const json::object* o = answer->if_object();
      if (o != nullptr && o->contains("code")) {
        reply(ErrorReply(request["id"], Error{static_cast<int>(o->at("code").as_int64()),
                                              std::string(o->at("message").as_string()), nullptr}));
        return;
      }
      reply(Result(request["id"], *answer));
    };
  }

  std::vector<std::string> Methods() const {
    std::vector<std::string> out;
    for (const auto& [method, params] : calls) out.push_back(method);
    return out;
  }

  std::vector<std::pair<std::string, json::object>> calls;
  std::deque<std::function<void(json::value)>> held;
  std::deque<std::function<void(std::string)>> notifies;  // each held call's (null: none wanted)

 private:
  Answer answer_;
};

// A daemon whose session holds `files`, and whose runs exit with `exit_code`
// after writing `out.txt`.
std::optional<json::value> Workspace(const std::string& method, const json::object& params, int exit_code,
                                     int* lists) {
  if (method == "session.create") return json::object{{"session", "s1"}, {"created", true}};
  if (method == "files.list") {
    json::array entries;
    if ((*lists)++ % 2 == 1) entries.push_back(json::object{{"path", "out.txt"}, {"type", "file"}, {"size", 2}, {"mtime_ns", 1}});
    return json::object{{"path", ""}, {"entries", entries}};
  }
  if (method == "exec.start") return json::object{{"exec_id", "e1"}, {"state", "queued"}};
  if (method == "exec.follow") {
    return json::object{{"exec_id", "e1"},
                        {"state", "done"},
                        {"result", json::object{{"reason", "exited"}, {"exit_code", exit_code}, {"signal", nullptr},
                                                {"stdout", "hi\n"}, {"stderr", ""}, {"wall_ms", 3.5}}}};
  }
  if (method == "session.destroy") return json::object{{"destroyed", true}};
  (void)params;
  return json::object{{"code", kMethodNotFound}, {"message", "unexpected"}};
}

class McpSessionTest : public ::testing::Test {
 protected:
  void MakeSession(FakeDaemon::Answer answer, McpOptions options = {}) {
    daemon_ = std::make_unique<FakeDaemon>(std::move(answer));
    session_ = McpSession::Create(std::move(options), daemon_->Call());
  }

  std::shared_ptr<Sent> Send(const std::string& message) {
    auto sent = std::make_shared<Sent>();
    session_->Handle(ParseMcpMessage(message), std::make_shared<RecordingOutput>(sent));
    return sent;
  }

  void Initialize() {
    std::shared_ptr<Sent> sent = Send(
        R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
    ASSERT_TRUE(sent->reply.has_value());
    ASSERT_TRUE(sent->reply->as_object().contains("result")) << json::serialize(*sent->reply);
    Send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  }

  std::shared_ptr<Sent> CallTool(int id, const std::string& name, const std::string& arguments,
                                 const std::string& meta = "") {
    return Send(R"({"jsonrpc":"2.0","id":)" + std::to_string(id) + R"(,"method":"tools/call","params":{"name":")" +
                name + R"(","arguments":)" + arguments + meta + "}}");
  }

  static int ErrorCode(const Sent& sent) {
    return static_cast<int>(sent.reply->as_object().at("error").as_object().at("code").as_int64());
  }
  static const json::object& ResultOf(const Sent& sent) { return sent.reply->as_object().at("result").as_object(); }
  static bool IsError(const Sent& sent) {
    const json::value* e = ResultOf(sent).if_contains("isError");
    return e != nullptr && e->as_bool();
  }
  static std::string Text(const Sent& sent) {
    return std::string(ResultOf(sent).at("content").as_array()[0].as_object().at("text").as_string());
  }

  std::unique_ptr<FakeDaemon> daemon_;
  std::shared_ptr<McpSession> session_;
  int lists_ = 0;
};

TEST(McpMessageTest, TellsRequestsNotificationsResponsesAndJunkApart) {
  EXPECT_EQ(ParseMcpMessage(R"({"jsonrpc":"2.0","id":1,"method":"ping"})").kind, McpMessage::Kind::kRequest);
  EXPECT_EQ(ParseMcpMessage(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").kind,
            McpMessage::Kind::kNotification);
  EXPECT_EQ(ParseMcpMessage(R"({"jsonrpc":"2.0","id":7,"result":{}})").kind, McpMessage::Kind::kResponse);
  McpMessage batch = ParseMcpMessage(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])");
  ASSERT_EQ(batch.kind, McpMessage::Kind::kInvalid);
  EXPECT_EQ(batch.error->code, kInvalidRequest);
  McpMessage junk = ParseMcpMessage("{not json");
  ASSERT_EQ(junk.kind, McpMessage::Kind::kInvalid);
  EXPECT_EQ(junk.error->code, kParseError);
  McpMessage no_version = ParseMcpMessage(R"({"id":1,"method":"ping"})");
  ASSERT_EQ(no_version.kind, McpMessage::Kind::kInvalid);
  EXPECT_EQ(no_version.error->code, kInvalidRequest);
  EXPECT_TRUE(WantsProgress(ParseMcpMessage(
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"t"}}})")));
  EXPECT_FALSE(WantsProgress(ParseMcpMessage(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}})")));
}

TEST(McpVersionTest, AnswersTheClientsVersionIfKnownElseTheLatest) {
  EXPECT_EQ(NegotiateMcpVersion("2025-06-18"), "2025-06-18");
  EXPECT_EQ(NegotiateMcpVersion("2025-03-26"), "2025-03-26");
  EXPECT_EQ(NegotiateMcpVersion("2024-11-05"), "2024-11-05");
  EXPECT_EQ(NegotiateMcpVersion("2099-01-01"), "2025-06-18");
  EXPECT_EQ(NegotiateMcpVersion(""), "2025-06-18");
  EXPECT_FALSE(IsSupportedMcpVersion("1.0"));
}

TEST_F(McpSessionTest, InitializeNegotiatesAndAdvertisesTools) {
  MakeSession([](const std::string&, const json::object&) { return std::nullopt; });
  std::shared_ptr<Sent> sent = Send(
      R"({"jsonrpc":"2.0","id":"a","method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{}}})");
  const json::object& result = ResultOf(*sent);
  EXPECT_EQ(result.at("protocolVersion"), "2025-06-18");
  EXPECT_EQ(result.at("capabilities").at("tools").at("listChanged"), false);
  EXPECT_EQ(result.at("serverInfo").at("name"), "cubicle");
  EXPECT_EQ(sent->reply->at("id"), "a");
  EXPECT_EQ(session_->version(), "2025-06-18");
  // Once only.
  EXPECT_EQ(ErrorCode(*Send(R"({"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})")),
            kInvalidRequest);
  EXPECT_TRUE(daemon_->calls.empty());
}

TEST_F(McpSessionTest, RefusesRequestsBeforeInitializeButPing) {
  MakeSession([](const std::string&, const json::object&) { return std::nullopt; });
  EXPECT_EQ(ErrorCode(*Send(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})")), kInvalidRequest);
  EXPECT_EQ(ErrorCode(*CallTool(2, "run_shell", R"({"command":"true"})")), kInvalidRequest);
  EXPECT_TRUE(ResultOf(*Send(R"({"jsonrpc":"2.0","id":3,"method":"ping"})")).empty());
  EXPECT_EQ(ErrorCode(*Send(R"({"jsonrpc":"2.0","id":4,"method":"initialize","params":{}})")), kInvalidParams);
  EXPECT_EQ(session_->version(), "");
  EXPECT_TRUE(daemon_->calls.empty());
}

TEST_F(McpSessionTest, UnknownMethodsAndBadMessages) {
  MakeSession([](const std::string&, const json::object&) { return std::nullopt; });
  Initialize();
  EXPECT_EQ(ErrorCode(*Send(R"({"jsonrpc":"2.0","id":1,"method":"resources/list"})")), kMethodNotFound);
  EXPECT_EQ(ErrorCode(*Send("[1,2]")), kInvalidRequest);
  std::shared_ptr<Sent> junk = Send("{oops");
  EXPECT_EQ(ErrorCode(*junk), kParseError);
  EXPECT_TRUE(junk->reply->at("id").is_null());
  // A client's response and an unknown notification are taken silently.
  EXPECT_FALSE(Send(R"({"jsonrpc":"2.0","id":9,"result":{}})")->reply.has_value());
  EXPECT_FALSE(Send(R"({"jsonrpc":"2.0","method":"notifications/whatever"})")->reply.has_value());
  EXPECT_TRUE(daemon_->calls.empty());
}

TEST_F(McpSessionTest, ToolsListGivesEveryToolBothSchemas) {
  MakeSession([](const std::string&, const json::object&) { return std::nullopt; });
  Initialize();
  std::shared_ptr<Sent> sent = Send(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  const json::array& tools = ResultOf(*sent).at("tools").as_array();
  std::set<std::string> names;
  for (const json::value& t : tools) {
    const json::object& tool = t.as_object();
    names.insert(std::string(tool.at("name").as_string()));
    for (const char* schema : {"inputSchema", "outputSchema"}) {
      ASSERT_TRUE(tool.contains(schema)) << tool.at("name") << " " << schema;
      EXPECT_EQ(tool.at(schema).at("type"), "object");
      EXPECT_TRUE(tool.at(schema).as_object().contains("properties"));
    }
    EXPECT_FALSE(tool.at("description").as_string().empty());
  }
  EXPECT_EQ(names, (std::set<std::string>{"run_python", "run_shell", "read_file", "write_file", "list_files",
                                          "call_skill"}));
  // The run tools' results say what a caller needs without reading text.
  for (const json::value& t : tools) {
    if (t.at("name") != "run_python") continue;
    const json::array& required = t.at("outputSchema").at("required").as_array();
    for (const char* field : {"exit_code", "stdout", "stderr", "reason", "files_changed"}) {
      EXPECT_NE(std::find(required.begin(), required.end(), json::value(field)), required.end()) << field;
    }
    EXPECT_EQ(t.at("inputSchema").at("required").as_array()[0], "code");
  }
}

TEST_F(McpSessionTest, UnknownToolIsAProtocolErrorBadArgumentsAToolError) {
  MakeSession([this](const std::string& m, const json::object& p) { return Workspace(m, p, 0, &lists_); });
  Initialize();
  EXPECT_EQ(ErrorCode(*CallTool(1, "rm_rf", "{}")), kInvalidParams);
  EXPECT_EQ(ErrorCode(*Send(R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}})")), kInvalidParams);
  struct Case {
    std::string tool, arguments, names;
  };
  for (const Case& c : std::vector<Case>{{"run_python", "{}", "arguments.code"},
                                         {"run_python", R"({"code":1})", "arguments.code"},
                                         {"run_shell", R"({"command":"x","bogus":1})", "bogus"},
                                         {"run_shell", R"({"command":"x","timeout_ms":0})", "arguments.timeout_ms"},
                                         {"read_file", R"({"path":"/etc/passwd"})", "outside /workspace"},
                                         {"read_file", R"({"path":"/workspace"})", "arguments.path"},
                                         {"write_file", R"({"path":"a"})", "content"},
                                         {"write_file", R"({"path":"a","content":"x","content_base64":"eA=="})", "content"},
                                         {"write_file", R"({"path":"a","content_base64":"!!"})", "content_base64"},
                                         {"list_files", R"({"recursive":"yes"})", "arguments.recursive"},
                                         {"list_files", "[]", "arguments"}}) {
    std::shared_ptr<Sent> sent = CallTool(3, c.tool, c.arguments);
    ASSERT_TRUE(sent->reply.has_value()) << c.tool << " " << c.arguments;
    ASSERT_TRUE(sent->reply->as_object().contains("result")) << json::serialize(*sent->reply);
    EXPECT_TRUE(IsError(*sent)) << c.tool << " " << c.arguments;
    EXPECT_NE(Text(*sent).find(c.names), std::string::npos) << Text(*sent);
    EXPECT_FALSE(ResultOf(*sent).contains("structuredContent"));
  }
  // Nothing reached the daemon: no session was made for a call refused.
  EXPECT_TRUE(daemon_->calls.empty());
}

TEST_F(McpSessionTest, RunsInOneSessionAndTellsTheFilesChanged) {
  McpOptions options;
  options.profile = "python";
  options.python = {"python3", "-I"};
  MakeSession([this](const std::string& m, const json::object& p) { return Workspace(m, p, 0, &lists_); }, options);
  Initialize();
  std::shared_ptr<Sent> sent = CallTool(1, "run_python", R"j({"code":"print(1)","timeout_ms":5000})j");
  ASSERT_TRUE(sent->reply.has_value());
  EXPECT_FALSE(IsError(*sent)) << Text(*sent);
  const json::object& s = ResultOf(*sent).at("structuredContent").as_object();
  EXPECT_EQ(s.at("exit_code"), 0);
  EXPECT_EQ(s.at("stdout"), "hi\n");
  EXPECT_EQ(s.at("timed_out"), false);
  ASSERT_EQ(s.at("files_changed").as_array().size(), 1u);
  EXPECT_EQ(s.at("files_changed").as_array()[0].at("path"), "out.txt");
  EXPECT_EQ(s.at("files_changed").as_array()[0].at("change"), "created");
  EXPECT_EQ(daemon_->Methods(),
            (std::vector<std::string>{"session.create", "files.list", "exec.start", "exec.follow", "files.list"}));
  EXPECT_EQ(daemon_->calls[0].second.at("profile"), "python");
  const json::object& start = daemon_->calls[2].second;
  EXPECT_EQ(start.at("session"), "s1");
  EXPECT_EQ(start.at("argv"), (json::array{"python3", "-I", "-c", "print(1)"}));
  EXPECT_EQ(start.at("timeout_ms"), 5000);
  EXPECT_EQ(session_->workspace_key(), "s1");

  // The next call names the session it was given: the same workspace.
  daemon_->calls.clear();
  std::shared_ptr<Sent> shell = CallTool(2, "run_shell", R"({"command":"echo hi"})");
  ASSERT_TRUE(shell->reply.has_value());
  EXPECT_EQ(daemon_->calls[0].second.at("session"), "s1");
  EXPECT_EQ(daemon_->calls[2].second.at("argv"), (json::array{"/bin/sh", "-c", "echo hi"}));

  // Closing destroys it, archived by default.
  bool closed = false;
  session_->Close([&] { closed = true; }, /*cancel=*/true);
  EXPECT_TRUE(closed);
  EXPECT_EQ(daemon_->calls.back().first, "session.destroy");
  EXPECT_EQ(daemon_->calls.back().second.at("session"), "s1");
  EXPECT_EQ(daemon_->calls.back().second.at("archive"), true);
  EXPECT_TRUE(IsError(*CallTool(3, "run_shell", R"({"command":"true"})")));
}

TEST_F(McpSessionTest, AFailingPayloadIsAResultMarkedIsError) {
  MakeSession([this](const std::string& m, const json::object& p) { return Workspace(m, p, 3, &lists_); });
  Initialize();
  std::shared_ptr<Sent> sent = CallTool(1, "run_shell", R"({"command":"exit 3"})");
  EXPECT_TRUE(IsError(*sent));
  EXPECT_EQ(ResultOf(*sent).at("structuredContent").at("exit_code"), 3);
  EXPECT_NE(Text(*sent).find("exited with code 3"), std::string::npos) << Text(*sent);
}

TEST_F(McpSessionTest, DaemonErrorsAndRefusedKeysAreToolErrors) {
  McpOptions options;
  options.authorize = [](const std::string& method, const json::value&) -> std::optional<std::string> {
    if (method == "exec.start") return std::string("key 'k' may not call exec.start");
    return std::nullopt;
  };
  MakeSession(
      [](const std::string& m, const json::object&) -> std::optional<json::value> {
        if (m == "session.create") return json::object{{"session", "s1"}};
        if (m == "files.get") return json::object{{"code", kNotFound}, {"message", "no file 'nope.txt'"}};
        return json::object{{"path", ""}, {"entries", json::array()}};
      },
      options);
  Initialize();
  std::shared_ptr<Sent> read = CallTool(1, "read_file", R"({"path":"nope.txt"})");
  EXPECT_TRUE(IsError(*read));
  EXPECT_NE(Text(*read).find("no file 'nope.txt'"), std::string::npos);
  std::shared_ptr<Sent> run = CallTool(2, "run_shell", R"({"command":"true"})");
  EXPECT_TRUE(IsError(*run));
  EXPECT_NE(Text(*run).find("not allowed: key 'k' may not call exec.start"), std::string::npos) << Text(*run);
  for (const auto& [method, params] : daemon_->calls) EXPECT_NE(method, "exec.start");
}

TEST_F(McpSessionTest, CancelledRunIsKilledAndGetsNoReply) {
  MakeSession([this](const std::string& m, const json::object& p) -> std::optional<json::value> {
    if (m == "exec.follow") return std::nullopt;  // held: the run goes on
    if (m == "exec.cancel") return json::object{{"exec_id", "e1"}, {"state", "running"}};
    return Workspace(m, p, 0, &lists_);
  });
  Initialize();
  std::shared_ptr<Sent> sent = CallTool(5, "run_shell", R"({"command":"sleep 100"})");
  std::shared_ptr<Sent> queued = CallTool(6, "run_shell", R"({"command":"true"})");
  ASSERT_EQ(daemon_->held.size(), 1u);
  EXPECT_FALSE(session_->idle());
  // The queued one is dropped unanswered; the running one killed.
  Send(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6}})");
  EXPECT_TRUE(queued->dropped);
  EXPECT_FALSE(queued->reply.has_value());
  Send(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"user"}})");
  EXPECT_EQ(daemon_->calls.back().first, "exec.cancel");
  EXPECT_EQ(daemon_->calls.back().second.at("exec_id"), "e1");
  // The daemon says it ended (killed): no reply, and the session is idle.
  daemon_->held.front()(json::object{{"exec_id", "e1"},
                                     {"state", "done"},
                                     {"result", json::object{{"reason", "killed"}, {"exit_code", nullptr}}}});
  daemon_->held.clear();
  EXPECT_FALSE(sent->reply.has_value());
  EXPECT_TRUE(sent->dropped);
  EXPECT_TRUE(session_->idle());
}

TEST_F(McpSessionTest, ProgressFollowsTheOutputWhenAskedFor) {
  MakeSession([this](const std::string& m, const json::object& p) -> std::optional<json::value> {
    if (m == "exec.follow") return std::nullopt;
    return Workspace(m, p, 0, &lists_);
  });
  Initialize();
  // Without a token the daemon is asked for no notifications at all.
  std::shared_ptr<Sent> quiet = CallTool(1, "run_shell", R"({"command":"echo hi"})");
  ASSERT_EQ(daemon_->notifies.size(), 1u);
  EXPECT_EQ(daemon_->notifies.front(), nullptr);
  daemon_->held.front()(json::object{{"exec_id", "e1"}, {"state", "done"},
                                     {"result", json::object{{"reason", "exited"}, {"exit_code", 0}}}});
  daemon_->held.clear();
  daemon_->notifies.clear();
  EXPECT_TRUE(quiet->notifications.empty());

  std::shared_ptr<Sent> sent = CallTool(2, "run_shell", R"({"command":"echo hi"})", R"(,"_meta":{"progressToken":"tok"})");
  ASSERT_EQ(daemon_->notifies.size(), 1u) << json::serialize(*sent->reply);
  ASSERT_NE(daemon_->notifies.front(), nullptr);
  daemon_->notifies.front()(
      R"({"jsonrpc":"2.0","method":"exec.output","params":{"exec_id":"e1","stream":"stdout","offset":0,"data":"hello!"}})");
  ASSERT_EQ(sent->notifications.size(), 1u);
  const json::value& progress = sent->notifications[0];
  EXPECT_EQ(progress.at("method"), "notifications/progress");
  EXPECT_EQ(progress.at("params").at("progressToken"), "tok");
  EXPECT_EQ(progress.at("params").at("progress"), 6);
  EXPECT_EQ(progress.at("params").at("message"), "hello!");
  EXPECT_FALSE(sent->reply.has_value());
  daemon_->held.front()(json::object{{"exec_id", "e1"}, {"state", "done"},
                                     {"result", json::object{{"reason", "exited"}, {"exit_code", 0}}}});
  ASSERT_TRUE(sent->reply.has_value());
  // None after the reply: the token is no longer in use.
  daemon_->notifies.front()(
      R"({"jsonrpc":"2.0","method":"exec.output","params":{"exec_id":"e1","stream":"stdout","offset":6,"data":"late"}})");
  EXPECT_EQ(sent->notifications.size(), 1u);
}

TEST_F(McpSessionTest, CloseWithoutCancelLetsTheRunFinishFirst) {
  MakeSession([this](const std::string& m, const json::object& p) -> std::optional<json::value> {
    if (m == "exec.follow") return std::nullopt;
    return Workspace(m, p, 0, &lists_);
  });
  Initialize();
  std::shared_ptr<Sent> sent = CallTool(1, "run_shell", R"({"command":"true"})");
  bool closed = false;
  session_->Close([&] { closed = true; }, /*cancel=*/false);
  EXPECT_FALSE(closed);
  ASSERT_EQ(daemon_->held.size(), 1u);
  daemon_->held.front()(json::object{{"exec_id", "e1"}, {"state", "done"},
                                     {"result", json::object{{"reason", "exited"}, {"exit_code", 0}}}});
  EXPECT_TRUE(sent->reply.has_value());
  EXPECT_TRUE(closed);
  EXPECT_EQ(daemon_->calls.back().first, "session.destroy");
}

TEST_F(McpSessionTest, CloseBeforeAnyToolCallMakesNothing) {
  MakeSession([](const std::string&, const json::object&) { return std::nullopt; });
  Initialize();
  bool closed = false;
  session_->Close([&] { closed = true; }, /*cancel=*/true);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(daemon_->calls.empty());
  bool again = false;
  session_->Close([&] { again = true; }, /*cancel=*/true);
  EXPECT_TRUE(again);
}

TEST(McpToolsTest, WorkspacePaths) {
  EXPECT_EQ(*McpWorkspacePath("a/b.txt", false), "a/b.txt");
  EXPECT_EQ(*McpWorkspacePath("/workspace/a/b.txt", false), "a/b.txt");
  EXPECT_EQ(*McpWorkspacePath("/workspace/", true), "");
  EXPECT_EQ(*McpWorkspacePath(".", true), "");
  EXPECT_FALSE(McpWorkspacePath("/workspace", false).ok());
  EXPECT_FALSE(McpWorkspacePath("/workspaces/x", false).ok());
  EXPECT_FALSE(McpWorkspacePath("/etc/passwd", false).ok());
}

TEST(McpToolsTest, FilesChangedTellsCreatedModifiedDeleted) {
  McpListing before{{"same", {1, 10}}, {"grown", {1, 10}}, {"touched", {1, 10}}, {"gone", {5, 10}}};
  McpListing after{{"same", {1, 10}}, {"grown", {2, 10}}, {"touched", {1, 11}}, {"new", {3, 12}}};
  json::array changed = McpFilesChanged(before, after);
  ASSERT_EQ(changed.size(), 4u);
  EXPECT_EQ(changed[0], (json::object{{"path", "gone"}, {"change", "deleted"}}));
  EXPECT_EQ(changed[1], (json::object{{"path", "grown"}, {"change", "modified"}, {"size", 2}}));
  EXPECT_EQ(changed[2], (json::object{{"path", "new"}, {"change", "created"}, {"size", 3}}));
  EXPECT_EQ(changed[3].at("path"), "touched");
}

TEST(McpToolsTest, ReadFileGivesTextOrBase64) {
  json::object text = McpReadFileResult(json::object{{"path", "a"}, {"size", 2}, {"data", "aGk="}});
  EXPECT_EQ(text.at("structuredContent").at("content"), "hi");
  json::object binary = McpReadFileResult(json::object{{"path", "b"}, {"size", 2}, {"data", "/w=="}});
  EXPECT_EQ(binary.at("structuredContent").at("content_base64"), "/w==");
  EXPECT_FALSE(binary.at("structuredContent").as_object().contains("content"));
}

TEST(McpConfigTest, ReadsTheMcpObjectAndRefusesWhatDoesNotFit) {
  constexpr char kProfiles[] = R"("profiles": {"shell": {}, "python": {"interpreter": {"argv": ["python3", "-I"]}}})";
  absl::StatusOr<DaemonConfig> plain = ParseConfig(absl::StrCat("{", kProfiles, "}"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->mcp.profile, "");
  EXPECT_EQ(plain->mcp.max_sessions, 64u);
  EXPECT_EQ(plain->mcp.idle_timeout, absl::Minutes(30));
  // The sessions profile (python here) and its warm interpreter serve run_python.
  McpOptions options = McpOptionsFor(*plain);
  EXPECT_EQ(options.profile, "");
  EXPECT_EQ(options.python, (std::vector<std::string>{"python3", "-I"}));
  EXPECT_EQ(McpOptionsFor(*plain, "shell").python, (std::vector<std::string>{"python3"}));

  absl::StatusOr<DaemonConfig> set = ParseConfig(absl::StrCat(
      "{", kProfiles, R"(, "mcp": {"profile": "shell", "max_sessions": 3, "idle_timeout_ms": 60000}})"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->mcp.profile, "shell");
  EXPECT_EQ(set->mcp.max_sessions, 3u);
  EXPECT_EQ(set->mcp.idle_timeout, absl::Minutes(1));
  EXPECT_EQ(McpOptionsFor(*set).profile, "shell");

  for (const auto& [mcp, names] : std::vector<std::pair<std::string, std::string>>{
           {R"({"profile": "nope"})", "mcp.profile"},
           {R"({"max_sessions": 0})", "mcp.max_sessions"},
           {R"({"idle_timeout_ms": 10})", "mcp.idle_timeout_ms"},
           {R"({"idle": 1})", "idle"},
           {R"([])", "mcp"}}) {
    absl::StatusOr<DaemonConfig> bad = ParseConfig(absl::StrCat("{", kProfiles, R"(, "mcp": )", mcp, "}"));
    ASSERT_FALSE(bad.ok()) << mcp;
    EXPECT_TRUE(absl::StrContains(bad.status().message(), names)) << bad.status();
  }
}

}  // namespace
}  // namespace cubicle::rpc

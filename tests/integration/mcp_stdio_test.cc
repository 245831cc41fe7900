// `cubicle mcp` end to end over its stdin/stdout, in raw JSON: the
// lifecycle, the tools sharing one workspace, errors, cancellation, and
// what is left once it exits (nothing: no process, mount or temporary
// directory). Waits are bounds for failures; nothing asserts how long
// anything took.
#include <dirent.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <set>
#include <string>
#include <vector>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/mcp_client.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// A shell profile and a warm python one (the sessions profile, so the
// MCP one), each with limits so that every sandbox has a cgroup.
constexpr char kConfig[] = R"({"profiles": {
  "shell": {"limits": {"memory": "256M", "pids": 64}, "pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}},
  "python": {"limits": {"memory": "512M", "pids": 64}, "pool": {"min_idle": 1, "max_idle": 1, "max_total": 4},
             "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}}}})";

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
  }
  return out;
}

const json::object& ToolResult(const json::value& reply) { return reply.at("result").as_object(); }

bool IsError(const json::value& reply) {
  const json::value* e = ToolResult(reply).if_contains("isError");
  return e != nullptr && e->as_bool();
}

std::string Text(const json::value& reply) {
  return std::string(ToolResult(reply).at("content").as_array()[0].at("text").as_string());
}

class McpStdioTest : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    REQUIRE_HOST(Python3());
    if (IsRoot()) {
      // The workspaces' tmpfs mounts stay out of the table other tests compare.
      EnterPrivateMountNamespace();
      if (HasFatalFailure()) return;
    }
    tmp_ = dir_.Join("tmp");
    ASSERT_EQ(::mkdir(tmp_.c_str(), 0700), 0);
    // The repository's example skills, for call_skill.
    config_ = WriteConfig(dir_, absl::StrCat(R"({"skills": {"dir": ")", CUBICLE_FAKES, R"(/../../examples/skills"}, )",
                                             std::string(kConfig).substr(1)));
  }

  void TearDown() override {
    server_.reset();
    if (IsRoot()) {
      std::vector<std::string> left = MountsUnder(dir_.path());
      EXPECT_EQ(left, std::vector<std::string>{}) << "a mount outlived `cubicle mcp`";
      // What a failure left goes, so that dir_ can be removed.
      for (auto it = left.rbegin(); it != left.rend(); ++it) ::umount2(it->c_str(), MNT_DETACH);
    }
    HostHygieneTest::TearDown();
  }

  // `cubicle mcp --config CONFIG ARGS...`, its private state directory
  // made under tmp_ (TMPDIR), which the test then finds empty again.
  McpStdioServer& Start(std::vector<std::string> args = {}) {
    args.insert(args.begin(), {"--config", config_});
    server_ = std::make_unique<McpStdioServer>(args, std::vector<std::string>{"TMPDIR=" + tmp_},
                                               dir_.Join("stderr.log"));
    return *server_;
  }

  McpStdioServer& StartInitialized(std::vector<std::string> args = {}) {
    McpStdioServer& s = Start(std::move(args));
    json::value init = s.Call(0, McpInitialize(0));
    EXPECT_EQ(init.at("result").at("protocolVersion"), "2025-06-18") << json::serialize(init);
    EXPECT_TRUE(s.Send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"));
    return s;
  }

  // EOF, then its clean exit: the private state directory gone with it.
  void EndAndExpectNothingLeft() {
    server_->CloseInput();
    EXPECT_EQ(server_->Wait(), 0) << Stderr();
    EXPECT_EQ(Entries(tmp_), std::vector<std::string>{}) << "the private state directory outlived `cubicle mcp`";
  }

  std::string Stderr() const { return ReadFile(dir_.Join("stderr.log")); }

  TempDir dir_;
  std::string tmp_;
  std::string config_;
  std::unique_ptr<McpStdioServer> server_;
};

TEST_F(McpStdioTest, ToolsShareOneWorkspaceAndNothingOutlivesTheServer) {
  McpStdioServer& s = StartInitialized();
  ASSERT_TRUE(s.started());
  json::value list = s.Call(1, McpRequest(1, "tools/list"));
  std::set<std::string> names;
  for (const json::value& t : list.at("result").at("tools").as_array()) names.insert(std::string(t.at("name").as_string()));
  EXPECT_EQ(names, (std::set<std::string>{"run_python", "run_shell", "read_file", "write_file", "list_files",
                                          "call_skill"}));

  json::value run = s.Call(2, McpToolCallLine(2, "run_python",
                                              R"j({"code":"open('/workspace/out.txt','w').write('made by python'); print('ok')"})j"));
  ASSERT_FALSE(IsError(run)) << json::serialize(run) << Stderr();
  const json::object& result = ToolResult(run).at("structuredContent").as_object();
  EXPECT_EQ(result.at("exit_code"), 0);
  EXPECT_EQ(result.at("stdout"), "ok\n");
  ASSERT_EQ(result.at("files_changed").as_array().size(), 1u) << json::serialize(result);
  EXPECT_EQ(result.at("files_changed").as_array()[0].at("path"), "out.txt");
  EXPECT_EQ(result.at("files_changed").as_array()[0].at("change"), "created");

  // A later call sees the file: the same workspace.
  json::value read = s.Call(3, McpToolCallLine(3, "read_file", R"({"path":"out.txt"})"));
  ASSERT_FALSE(IsError(read)) << json::serialize(read);
  EXPECT_EQ(ToolResult(read).at("structuredContent").at("content"), "made by python");
  EXPECT_EQ(Text(read), "made by python");

  json::value write = s.Call(4, McpToolCallLine(4, "write_file", R"({"path":"/workspace/in/data.txt","content":"42"})"));
  ASSERT_FALSE(IsError(write)) << json::serialize(write);
  json::value cat = s.Call(5, McpToolCallLine(5, "run_shell", R"({"command":"cat in/data.txt; rm out.txt"})"));
  ASSERT_FALSE(IsError(cat)) << json::serialize(cat);
  EXPECT_EQ(ToolResult(cat).at("structuredContent").at("stdout"), "42");
  EXPECT_EQ(ToolResult(cat).at("structuredContent").at("files_changed"),
            (json::array{json::object{{"path", "out.txt"}, {"change", "deleted"}}}));

  json::value listed = s.Call(6, McpToolCallLine(6, "list_files", R"({"recursive":true})"));
  std::set<std::string> paths;
  for (const json::value& e : ToolResult(listed).at("structuredContent").at("entries").as_array()) {
    paths.insert(std::string(e.at("path").as_string()));
  }
  EXPECT_TRUE(paths.count("in/data.txt")) << json::serialize(listed);
  EXPECT_FALSE(paths.count("out.txt"));
  EndAndExpectNothingLeft();
}

TEST_F(McpStdioTest, AFailingPayloadIsAToolResultMarkedIsError) {
  McpStdioServer& s = StartInitialized();
  json::value failed = s.Call(1, McpToolCallLine(1, "run_shell", R"({"command":"echo oops >&2; exit 3"})"));
  ASSERT_TRUE(failed.as_object().contains("result")) << json::serialize(failed);
  EXPECT_TRUE(IsError(failed));
  EXPECT_EQ(ToolResult(failed).at("structuredContent").at("exit_code"), 3);
  EXPECT_EQ(ToolResult(failed).at("structuredContent").at("stderr"), "oops\n");
  EXPECT_TRUE(absl::StrContains(Text(failed), "exited with code 3")) << Text(failed);

  json::value timed = s.Call(2, McpToolCallLine(2, "run_python", R"j({"code":"import time; time.sleep(30)","timeout_ms":300})j"));
  EXPECT_TRUE(IsError(timed));
  EXPECT_EQ(ToolResult(timed).at("structuredContent").at("timed_out"), true) << json::serialize(timed);

  json::value missing = s.Call(3, McpToolCallLine(3, "read_file", R"({"path":"nope.txt"})"));
  EXPECT_TRUE(IsError(missing));
  EXPECT_FALSE(ToolResult(missing).contains("structuredContent"));
  EndAndExpectNothingLeft();
}

TEST_F(McpStdioTest, BadMessagesGetClearErrorsAndMakeNothing) {
  McpStdioServer& s = Start();
  // Before initialize: only ping.
  EXPECT_EQ(ErrorCode(s.Call(1, McpRequest(1, "tools/list"))), -32600);
  EXPECT_TRUE(HasResult(s.Call(2, McpRequest(2, "ping"))));
  ASSERT_TRUE(s.Send("this is not json"));
  json::value parse = ParseJson(s.ReadLine().value_or(""));
  EXPECT_EQ(ErrorCode(parse), -32700);
  EXPECT_TRUE(parse.at("id").is_null());
  json::value init = s.Call(3, McpInitialize(3, "1999-01-01"));
  EXPECT_EQ(init.at("result").at("protocolVersion"), "2025-06-18");  // the latest, for an unknown one
  ASSERT_TRUE(s.Send(R"([{"jsonrpc":"2.0","id":4,"method":"ping"}])"));
  EXPECT_EQ(ErrorCode(ParseJson(s.ReadLine().value_or(""))), -32600);  // no batches in 2025-06-18
  EXPECT_EQ(ErrorCode(s.Call(5, McpRequest(5, "prompts/list"))), -32601);
  EXPECT_EQ(ErrorCode(s.Call(6, McpToolCallLine(6, "format_disk", "{}"))), -32602);
  json::value bad = s.Call(7, McpToolCallLine(7, "run_shell", R"({"cmd":"ls"})"));
  EXPECT_TRUE(IsError(bad));
  EXPECT_TRUE(absl::StrContains(Text(bad), "cmd")) << Text(bad);
  json::value escape = s.Call(8, McpToolCallLine(8, "read_file", R"({"path":"/etc/shadow"})"));
  EXPECT_TRUE(IsError(escape));
  EXPECT_TRUE(absl::StrContains(Text(escape), "outside /workspace")) << Text(escape);
  EndAndExpectNothingLeft();
}

TEST_F(McpStdioTest, CancellationKillsTheRunAndSendsNoReply) {
  McpStdioServer& s = StartInitialized();
  ASSERT_TRUE(s.Send(McpToolCallLine(1, "run_shell", R"({"command":"sleep 250","timeout_ms":280000})")));
  // Pings do not queue behind tool calls: this one is answered while the
  // run is being started or runs; the cancel stops it either way.
  EXPECT_TRUE(HasResult(s.Call(2, McpRequest(2, "ping"))));
  ASSERT_TRUE(s.Send(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"test"}})"));
  // Tool calls run in order: this one's reply means the first has ended
  // (long before its sleep would have).
  ASSERT_TRUE(s.Send(McpToolCallLine(3, "run_shell", R"({"command":"echo after"})")));
  std::vector<json::value> before;
  json::value next = s.ReadReply(3, &before, absl::Seconds(120));
  ASSERT_FALSE(next.is_null()) << Stderr();
  EXPECT_EQ(ToolResult(next).at("structuredContent").at("stdout"), "after\n");
  for (const json::value& line : before) {
    EXPECT_FALSE(line.is_object() && line.as_object().contains("id")) << "a reply to the cancelled call: "
                                                                      << json::serialize(line);
  }
  EndAndExpectNothingLeft();
}

TEST_F(McpStdioTest, ProgressNotificationsCarryTheOutputAsItComes) {
  McpStdioServer& s = StartInitialized();
  ASSERT_TRUE(s.Send(McpToolCallLine(
      1, "run_python", R"j({"code":"import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)"})j",
      R"({"progressToken":"p-1"})")));
  std::vector<json::value> before;
  json::value reply = s.ReadReply(1, &before);
  ASSERT_FALSE(reply.is_null()) << Stderr();
  EXPECT_FALSE(IsError(reply)) << json::serialize(reply);
  EXPECT_EQ(ToolResult(reply).at("structuredContent").at("stdout"), "tick 0\ntick 1\ntick 2\n");
  int64_t last = 0;
  std::string seen;
  for (const json::value& note : before) {
    ASSERT_EQ(note.at("method"), "notifications/progress") << json::serialize(note);
    EXPECT_EQ(note.at("params").at("progressToken"), "p-1");
    const int64_t progress = note.at("params").at("progress").to_number<int64_t>();
    EXPECT_GT(progress, last);  // it only grows
    last = progress;
    seen += std::string(note.at("params").at("message").as_string());
  }
  ASSERT_FALSE(before.empty()) << "no progress before the reply";
  EXPECT_TRUE(absl::StrContains(seen, "tick 0")) << seen;
  EndAndExpectNothingLeft();
}

TEST_F(McpStdioTest, CallSkillAnswersAndReportsTheSkillsProgress) {
  McpStdioServer& s = StartInitialized();
  ASSERT_TRUE(s.Send(McpToolCallLine(1, "call_skill",
                                     R"j({"skill":"tally","method":"add","params":{"values":[2,4,6]}})j",
                                     R"({"progressToken":7})")));
  std::vector<json::value> before;
  json::value reply = s.ReadReply(1, &before);
  ASSERT_FALSE(reply.is_null()) << Stderr();
  EXPECT_FALSE(IsError(reply)) << json::serialize(reply);
  const json::value& structured = ToolResult(reply).at("structuredContent");
  EXPECT_EQ(structured.at("result").at("count").as_int64(), 3) << json::serialize(reply);
  EXPECT_EQ(structured.at("result").at("total").as_double(), 12.0);
  EXPECT_EQ(structured.at("skill").at("name"), "tally");
  ASSERT_EQ(before.size(), 3u) << "one progress notification per number the skill reported";
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].at("method"), "notifications/progress");
    EXPECT_EQ(before[i].at("params").at("progressToken"), 7);
    EXPECT_EQ(before[i].at("params").at("progress").to_number<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_TRUE(absl::StrContains(std::string(before[i].at("params").at("message").as_string()),
                                  absl::StrCat("\"done\":", i + 1)));
  }
  // A skill that is not there, and arguments that do not fit: tool errors.
  json::value absent = s.Call(2, McpToolCallLine(2, "call_skill", R"({"skill":"absent","method":"x"})"));
  EXPECT_TRUE(IsError(absent)) << json::serialize(absent);
  EXPECT_TRUE(absl::StrContains(Text(absent), "absent")) << Text(absent);
  json::value bad = s.Call(3, McpToolCallLine(3, "call_skill", R"({"skill":"tally","method":"add","params":3})"));
  EXPECT_TRUE(bad.as_object().contains("error") || IsError(bad)) << json::serialize(bad);
  EndAndExpectNothingLeft();
}

TEST_F(McpStdioTest, EofLetsQueuedCallsFinishFirst) {
  McpStdioServer& s = StartInitialized();
  ASSERT_TRUE(s.Send(McpToolCallLine(1, "run_shell", R"({"command":"echo one"})")));
  ASSERT_TRUE(s.Send(McpToolCallLine(2, "run_shell", R"({"command":"echo two"})")));
  s.CloseInput();
  json::value one = s.ReadReply(1);
  json::value two = s.ReadReply(2);
  ASSERT_FALSE(two.is_null()) << Stderr();
  EXPECT_EQ(ToolResult(one).at("structuredContent").at("stdout"), "one\n");
  EXPECT_EQ(ToolResult(two).at("structuredContent").at("stdout"), "two\n");
  EndAndExpectNothingLeft();
}

TEST_F(McpStdioTest, SigtermMidRunStillRemovesThePrivateStateDirectory) {
  // A drain that gives up at once: the run is killed, then the exit
  // removes the workspace its session left.
  config_ = WriteConfig(dir_, absl::StrCat(std::string(kConfig).substr(0, std::string(kConfig).rfind('}')),
                                           R"(, "shutdown": {"drain_timeout_ms": 0}})"));
  McpStdioServer& s = StartInitialized();
  ASSERT_TRUE(HasResult(s.Call(1, McpToolCallLine(1, "write_file", R"({"path":"a.txt","content":"x"})"))));
  ASSERT_TRUE(s.Send(McpToolCallLine(2, "run_shell", R"({"command":"sleep 250","timeout_ms":280000})")));
  EXPECT_TRUE(HasResult(s.Call(3, McpRequest(3, "ping"))));
  s.Signal(SIGTERM);
  std::optional<int> status = s.Wait(absl::Seconds(120));
  EXPECT_TRUE(status.has_value()) << Stderr();
  EXPECT_EQ(status.value_or(-1), 0) << Stderr();
  EXPECT_EQ(Entries(tmp_), std::vector<std::string>{}) << Stderr();
}

TEST_F(McpStdioTest, AGivenStateDirectoryKeepsTheArchive) {
  const std::string state = dir_.Join("state");
  ASSERT_EQ(::mkdir(state.c_str(), 0700), 0);
  McpStdioServer& s = StartInitialized({"--state-dir", state});
  ASSERT_FALSE(IsError(s.Call(1, McpToolCallLine(1, "write_file", R"({"path":"kept.txt","content":"kept"})"))));
  server_->CloseInput();
  EXPECT_EQ(server_->Wait(), 0) << Stderr();
  // The session was destroyed by the daemon's rules: archived, its
  // workspace gone.
  EXPECT_EQ(Entries(state + "/archives").size(), 1u);
  EXPECT_EQ(Entries(state + "/workspaces"), std::vector<std::string>{});
  EXPECT_EQ(Entries(tmp_), std::vector<std::string>{});
}

TEST_F(McpStdioTest, AnUnknownProfileIsRefusedBeforeAnythingIsMade) {
  McpStdioServer& s = Start({"--profile", "nope"});
  EXPECT_EQ(s.Wait(), 2);
  EXPECT_TRUE(absl::StrContains(Stderr(), "no profile named 'nope'")) << Stderr();
  EXPECT_EQ(Entries(tmp_), std::vector<std::string>{});
}

}  // namespace
}  // namespace cubicle::test_support

// The MCP server's core (docs/protocol.md, "MCP"): one MCP session — the
// lifecycle (initialize, ping), tools/list and tools/call — taking one
// message at a time from a front (rpc/mcp_stdio.h, rpc/mcp_http.h) and
// answering through that message's McpOutput. It reaches the daemon the way
// a client does, one cubicle JSON-RPC line at a time, in process: every
// tool is bound to one cubicle session, made on the first tool call and
// destroyed (archived by the daemon's rules) when the MCP session closes.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/strings/string_view.h"
#include "rpc/jsonrpc.h"

namespace cubicle::rpc {

// One cubicle JSON-RPC line to the daemon (Daemon::HandleLine): `reply`
// gets its reply line; `notify` each notification line sent about it
// meanwhile (exec.follow's exec.output).
using McpDaemonCall = std::function<void(const std::string& line, std::function<void(std::string)> reply,
                                         std::function<void(std::string)> notify)>;

struct McpOptions {
  // The cubicle session's profile; empty: the daemon's sessions profile.
  std::string profile;
  // run_python's command before "-c CODE": the profile's warm interpreter
  // where it is Python's, so that the call is served warm.
  std::vector<std::string> python = {"python3"};
  std::string server_version;
  // The workspace is archived when the MCP session ends (false: a
  // throw-away state directory's).
  bool archive = true;
  // Why the client may not make the daemon call (method, params) a tool
  // needs (an API key's scopes); nullopt when it may. Null: every call may.
  std::function<std::optional<std::string>(const std::string& method, const boost::json::value& params)> authorize;
};

// One incoming MCP message, read. MCP 2025-06-18 has no batches: an array
// is kInvalid.
struct McpMessage {
  enum class Kind { kRequest, kNotification, kResponse, kInvalid };
  Kind kind = Kind::kInvalid;
  Call call;                   // kRequest, kNotification
  std::optional<Error> error;  // kInvalid: answered ErrorReply(call.id, *error)
};
McpMessage ParseMcpMessage(absl::string_view text);

// Whether progress notifications may be sent about `message` before its
// reply (a tools/call with params._meta.progressToken).
bool WantsProgress(const McpMessage& message);

// Where the lines that answer one message go: notifications about it
// first, then its reply. Dropped when nothing more will come — without a
// reply for a cancelled request (the spec's "SHOULD NOT respond").
class McpOutput {
 public:
  virtual ~McpOutput() = default;
  virtual void Notify(std::string line) = 0;
  virtual void Reply(std::string line) = 0;
};

class McpToolCall;

class McpSession : public std::enable_shared_from_this<McpSession> {
 public:
  static std::shared_ptr<McpSession> Create(McpOptions options, McpDaemonCall daemon);
  ~McpSession();

  // Answers `message` through `out`, now or once its tool call has run.
  // Tool calls run one at a time, in the order they came (they share one
  // workspace). Thread-safe.
  void Handle(McpMessage message, std::shared_ptr<McpOutput> out);

  // Ends the session: with `cancel`, queued calls are dropped and the
  // running one's execution cancelled; without, they run to their end.
  // Then the cubicle session is destroyed and `done` called (on whatever
  // thread finished last). Later tool calls are tool errors.
  void Close(std::function<void()> done, bool cancel);

  // No tool call queued or running.
  bool idle() const;
  // The version initialize agreed; empty before it.
  std::string version() const;

  // The cubicle session the tools use ("" until the first tool call).
  std::string workspace_key() const;

 private:
  friend class McpToolCall;
  McpSession(McpOptions options, McpDaemonCall daemon);

  void Answer(const Call& call, std::shared_ptr<McpOutput> out);
  Expected<boost::json::value> Initialize(const boost::json::value& params);
  void Notice(const Call& call);
  void CallTool(const Call& call, std::shared_ptr<McpOutput> out);
  void Cancel(const boost::json::value& request_id);
  // The next queued call, when none runs.
  void RunNext();
  // The running call's end; `result` null when it was cancelled.
  void Finished(const std::shared_ptr<McpToolCall>& call, std::optional<boost::json::object> result);
  // Once closing and no call is left: the workspace destroyed, the
  // closers told.
  void DestroyWhenDone();
  void DestroyWorkspace();

  const McpOptions options_;
  const McpDaemonCall daemon_;
  mutable std::mutex mu_;
  std::string version_;
  std::string key_;  // the cubicle session's
  std::deque<std::shared_ptr<McpToolCall>> queue_;
  std::shared_ptr<McpToolCall> running_;
  bool closing_ = false;
  bool destroying_ = false;
  bool destroyed_ = false;  // closed, the workspace gone
  std::vector<std::function<void()>> closers_;
};

}  // namespace cubicle::rpc

// One tools/call of an MCP session (rpc/mcp_server.h), run against the
// daemon as a chain of cubicle calls, each step a named function: the
// workspace made sure of, then the tool's own calls, then the result.
// Internal to rpc/mcp_*.cc.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/time/time.h"
#include "rpc/jsonrpc.h"
#include "rpc/mcp_server.h"
#include "rpc/mcp_tools.h"

namespace cubicle::rpc {

class McpToolCall : public std::enable_shared_from_this<McpToolCall> {
 public:
  McpToolCall(std::shared_ptr<McpSession> session, Call call, McpToolArgs args, std::shared_ptr<McpOutput> out);

  // Runs it; the session hears of its end (McpSession::Finished).
  void Start();
  // Stops it: a run's execution is cancelled (exec.cancel); its end then
  // sends no reply. Thread-safe; may come before Start.
  void Cancel();

  const Call& call() const { return call_; }
  const std::shared_ptr<McpOutput>& out() const { return out_; }

 private:
  using Then = std::function<void(Expected<boost::json::value>)>;
  // One daemon call, its reply parsed; refused without a call when the
  // client may not make it (McpOptions::authorize).
  void Daemon(const std::string& method, boost::json::object params, Then then,
              std::function<void(const boost::json::object&)> on_notification = {});
  // session.create of the bound key: made the first time, found as it is
  // later, restored from its archive if the daemon reaped it meanwhile.
  void EnsureWorkspace(std::function<void()> then);
  void Dispatch();
  // run_python, run_shell: listed, started, followed (its output the
  // progress), listed again.
  void ListBefore();
  void StartRun(McpListing before);
  void FollowRun(McpListing before);
  void ListAfter(McpListing before, boost::json::value run);
  void Progress(const boost::json::object& output);
  void CallSkill();
  void SkillProgress(const boost::json::object& note);
  // read_file, write_file, list_files: one files.* call each.
  void FilesCall(const std::string& method, boost::json::object params,
                 boost::json::object (*shape)(const boost::json::value&));
  // The end: its result to the session (nothing when cancelled).
  void Finish(boost::json::object result);
  void Fail(const Error& error);
  std::vector<std::string> RunArgv() const;

  const std::shared_ptr<McpSession> session_;
  const Call call_;
  const McpToolArgs args_;
  const std::shared_ptr<McpOutput> out_;
  boost::json::value progress_token_;  // null: no progress wanted
  std::string key_;                    // the cubicle session
  std::mutex mu_;
  bool cancelled_ = false;
  bool finished_ = false;
  std::string exec_id_;  // a run's, once started
  // Progress: the bytes of output seen so far, and when it was last sent.
  uint64_t progress_ = 0;
  absl::Time last_progress_ = absl::InfinitePast();
};

}  // namespace cubicle::rpc

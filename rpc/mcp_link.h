// How an MCP front's sessions reach the daemon in process (rpc/mcp_server.h
// McpDaemonCall), through a gate the front closes when it goes: a session
// whose tool call is still between two steps then gets an error at once,
// never a call into a daemon being torn down.
#pragma once

#include <memory>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>

#include "rpc/daemon.h"
#include "rpc/jsonrpc.h"
#include "rpc/mcp_server.h"

namespace cubicle::rpc {

class McpLinkGate {
 public:
  // Calls nothing more once this returns; waits for the calls in progress
  // (a call in progress may itself call: that one is refused).
  void Close() {
    std::unique_lock<std::mutex> lock(mu_);
    open_ = false;
    idle_.wait(lock, [&] { return active_ == 0; });
  }

  // `call` while open; false when closed.
  template <typename F>
  bool Run(F&& call) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!open_) return false;
      ++active_;
    }
    std::forward<F>(call)();
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0) idle_.notify_all();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable idle_;
  bool open_ = true;
  size_t active_ = 0;
};

inline McpDaemonCall InProcessMcpLink(Daemon* daemon, std::shared_ptr<McpLinkGate> gate) {
  return [daemon, gate = std::move(gate)](const std::string& line, std::function<void(std::string)> reply,
                                          std::function<void(std::string)> notify) {
    Origin origin;
    origin.notify = std::move(notify);
    const bool called = gate->Run([&] { (void)daemon->HandleLine(line, reply, origin); });
    if (!called) reply(ErrorReply(nullptr, Error{kShuttingDown, "the MCP server is shutting down", nullptr}));
  };
}

}  // namespace cubicle::rpc

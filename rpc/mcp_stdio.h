// `cubicle mcp`: one MCP session on the process's stdin/stdout (MCP's stdio
// transport: one JSON-RPC message per line, nothing else on stdout), served
// by a daemon in this process (Daemon::Serve with this as its front).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rpc/daemon.h"
#include "rpc/mcp_link.h"
#include "rpc/mcp_server.h"

namespace cubicle::rpc {

class McpStdio : public ServeFront {
 public:
  // Reads stdin on a thread of its own. At EOF the session is closed —
  // its run cancelled, its workspace destroyed — and then `end` is called.
  McpStdio(Daemon* daemon, McpOptions options, size_t max_line, std::function<void()> end,
           std::function<void(const std::string&)> warn);
  // Stops reading; nothing is written to stdout after it returns.
  ~McpStdio() override;
  McpStdio(const McpStdio&) = delete;
  McpStdio& operator=(const McpStdio&) = delete;

  // Where the session's lines go: stdout, one line each, until closed.
  class Writer;

 private:
  struct CloseWait;
  void Read();
  void Take(const std::string& line);
  void CloseSession();

  std::shared_ptr<McpLinkGate> gate_ = std::make_shared<McpLinkGate>();
  std::shared_ptr<Writer> writer_;
  std::shared_ptr<McpSession> session_;
  std::shared_ptr<CloseWait> close_;
  size_t max_line_;
  std::function<void()> end_;
  std::function<void(const std::string&)> warn_;
  int wake_[2] = {-1, -1};
  std::thread reader_;
};

}  // namespace cubicle::rpc

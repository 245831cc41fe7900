// `cubicle mcp` from a test: the server spawned with its stdin and stdout on
// one socket of ours, so that the test writes messages and reads replies
// one at a time with bounded waits, and ends its input (EOF) when it likes.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/time/time.h"
#include "base/unique_fd.h"

namespace cubicle::test_support {

class McpStdioServer {
 public:
  // `cubicle mcp ARGS...`, its environment this process's with `env`
  // ("NAME=value") replacing or adding; stderr goes to `stderr_path`.
  McpStdioServer(const std::vector<std::string>& args, const std::vector<std::string>& env,
                 const std::string& stderr_path);
  ~McpStdioServer();  // killed (SIGKILL) and reaped if still running
  McpStdioServer(const McpStdioServer&) = delete;
  McpStdioServer& operator=(const McpStdioServer&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  bool Send(const std::string& line);
  // The next line, waiting at most `limit`; nullopt at EOF or when none came.
  std::optional<std::string> ReadLine(absl::Duration limit = absl::Seconds(60));
  // The next message whose "id" is `id`, the lines before it kept in
  // `*skipped` (notifications); null when none came within `limit`.
  boost::json::value ReadReply(const boost::json::value& id, std::vector<boost::json::value>* skipped = nullptr,
                               absl::Duration limit = absl::Seconds(60));
  // Send, then ReadReply.
  boost::json::value Call(const boost::json::value& id, const std::string& line);
  // EOF on its stdin.
  void CloseInput();
  // Its exit status once it has exited (at most `limit`; then SIGKILL and
  // nullopt). A signal's death is 128 + the signal.
  std::optional<int> Wait(absl::Duration limit = absl::Seconds(60));
  void Signal(int sig) const;

 private:
  pid_t pid_ = -1;
  UniqueFd fd_;
  std::string buffered_;
  bool eof_ = false;
};

// An MCP request line.
std::string McpRequest(int64_t id, const std::string& method, const std::string& params = "");
// A tools/call line for `tool` with `arguments` (JSON text); `meta` the
// "_meta" member's value, if any.
std::string McpToolCallLine(int64_t id, const std::string& tool, const std::string& arguments,
                            const std::string& meta = "");
// The initialize request every session starts with.
std::string McpInitialize(int64_t id, const std::string& version = "2025-06-18");

}  // namespace cubicle::test_support

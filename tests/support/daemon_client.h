// `cubicle serve` on a Unix socket, from a test: a client that sends lines
// and reads reply lines with bounded waits (so that a test can assert the
// order replies come in without timing anything), and a daemon process
// started with a configuration, optionally under a file limit.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {

// A stream socket's two chores, for this client and tests/support/http_client.h:
// all of `bytes` written (no SIGPIPE; false once the peer is gone), and
// what is there appended to `*into`, waiting at most `limit` for something
// (false at EOF, which sets `*eof`, on an error, or when nothing came).
bool SendAll(int fd, absl::string_view bytes);
bool ReadSome(int fd, absl::Duration limit, std::string* into, bool* eof);

// One connection: request lines out, reply lines in.
class DaemonClient {
 public:
  explicit DaemonClient(const std::string& path);
  bool connected() const { return connected_; }
  // Writes `line` and "\n"; false if the write failed.
  bool Send(const std::string& line);
  // Writes these bytes as they are (half a line, say).
  bool SendRaw(absl::string_view bytes);
  // shutdown(SHUT_WR): no more requests, replies still wanted.
  void ShutdownWrite();
  // The next line, waiting at most `limit` (a bound for failures only);
  // nullopt at EOF or when none came in time.
  std::optional<std::string> ReadLine(absl::Duration limit = absl::Seconds(60));
  // Whether a line, or EOF, is there to read now (no waiting).
  bool HasReply();
  // Whether the daemon closed the connection (EOF within `limit`), after
  // any lines still to read.
  bool ClosedByPeer(absl::Duration limit = absl::Seconds(60));
  // Send, then ReadLine; "" when no reply came.
  std::string Call(const std::string& line);
  // The same, parsed; null when it was not JSON.
  boost::json::value CallJson(const std::string& line);
  void Close() { fd_.reset(); }

 private:
  bool Fill(absl::Duration limit);
  UniqueFd fd_;
  bool connected_ = false;
  bool eof_ = false;
  std::string buffered_;
};

// `line` parsed; null when it is not JSON.
boost::json::value ParseJson(absl::string_view line);

// A request line: {"jsonrpc":"2.0","id":ID,"method":METHOD,"params":PARAMS}
// (PARAMS as JSON text, left out when empty).
std::string RequestLine(int64_t id, absl::string_view method, absl::string_view params = "");

// `cubicle serve --socket DIR/rpc.sock FLAGS...`, up once its socket
// accepts a connection.
class SocketDaemon {
 public:
  struct Options {
    std::vector<std::string> flags;    // e.g. {"--config", path}
    std::optional<int> nofile;         // RLIMIT_NOFILE, soft and hard, for the daemon
    std::vector<std::string> env;      // added to ours, e.g. {"CUBICLE_LOG_LEVEL=info"}
  };
  SocketDaemon() : SocketDaemon(Options{}) {}
  explicit SocketDaemon(std::vector<std::string> flags) : SocketDaemon(Options{std::move(flags), std::nullopt}) {}
  explicit SocketDaemon(Options options);

  bool up() const { return up_; }
  pid_t pid() const { return process_->pid(); }
  const std::string& socket() const { return socket_; }
  RunningProcess& process() { return *process_; }
  // A call on a connection of its own, its reply past any notifications;
  // null when no JSON reply came.
  boost::json::value Call(const std::string& line);
  // SIGTERM, then the exit.
  ProcessRun Stop();

 private:
  TempDir dir_;
  std::string socket_;
  std::unique_ptr<RunningProcess> process_;
  bool up_ = false;
};

// A client of another user on the socket, in a child process that drops
// to `uid` (root only): the lines it got back ("" when none), or "EOF"
// when the daemon closed the connection after them.
std::string AsUser(const std::string& socket, uid_t uid, const std::vector<std::string>& lines);

// Directories under /sys/fs/cgroup (any hierarchy) of the groups that
// process `pid` made: cgroups/ names them "cubicle-PID-N" ("-dev-N").
std::vector<std::string> CgroupsMadeBy(pid_t pid);
// Those of every process in `makers` (a daemon and its fork servers).
std::vector<std::string> CgroupsMadeBy(const std::vector<pid_t>& makers);

// `text` as config.json in `dir`; its path.
std::string WriteConfig(const TempDir& dir, const std::string& text);

}  // namespace cubicle::test_support

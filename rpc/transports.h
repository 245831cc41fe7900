// The daemon's transports (docs/protocol.md): its own stdin/stdout, and a
// Unix socket on Boost.Asio. Each hands the lines it reads to
// Daemon::HandleLine and writes the replies back, one per line.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/api_keys.h"
#include "rpc/daemon.h"
#include "rpc/in_flight.h"

namespace cubicle::rpc {

// The stdio transport: readers (stdin may be a pipe, a tty or a file,
// which epoll cannot watch) and serialized blocking writes to stdout.
//
// Two reader threads take turns reading. The one reading hands each line
// to the daemon (control requests are answered there and then); a sandbox
// run that would be the only execution running or waiting comes back as
// work to run on this thread (Origin::may_run_here),
// which runs it while still holding the turn, with stdin watched from the
// sandbox's wait: only if another line comes meanwhile is the turn passed
// to the other thread, which reads on. A lone request so runs on the
// thread that read it, awake, instead of waiting for a worker's wake-up,
// and no other thread wakes at all unless there is something to read.
class StdioTransport {
 public:
  // `on_eof` is called (on a reader thread) when stdin ends.
  StdioTransport(Daemon* daemon, size_t max_line, std::function<void()> on_eof);
  // Stops reading; waits for a request a reader runs itself.
  ~StdioTransport();
  StdioTransport(const StdioTransport&) = delete;
  StdioTransport& operator=(const StdioTransport&) = delete;

 private:
  void Write(const std::string& reply);
  void Take();
  Daemon::Work Read();
  Daemon::Work Stop(bool eof);

  Daemon* daemon_;
  size_t max_line_;
  std::function<void()> on_eof_;
  int wake_[2] = {-1, -1};
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable turn_;
  bool reading_ = false;  // a reader has the turn
  bool done_ = false;     // stdin ended or the transport is shutting down
  std::string pending_;   // read, not yet a whole line
  size_t scanned_ = 0;    // the bytes of pending_ known to hold no newline
  bool discarding_ = false;
  std::thread readers_[2];
};

using UnixAcceptor = boost::asio::local::stream_protocol::acceptor;

// A listening Unix socket at `path` (a stale socket there is replaced),
// created under a umask so that it is never reachable with wider
// permissions than `mode`, even between bind and chmod.
// A Unix socket listening already (socket activation), taken over.
absl::StatusOr<std::unique_ptr<UnixAcceptor>> AdoptUnix(boost::asio::io_context& io, int listening_fd);

absl::StatusOr<std::unique_ptr<UnixAcceptor>> ListenUnix(boost::asio::io_context& io, const std::string& path,
                                                         uint32_t mode);

// How the socket treats its clients (docs/config.md, "connections").
struct SocketLimits {
  size_t max_line = 4 << 20;
  absl::Duration line_timeout = absl::Seconds(30);              // from a line's first byte to its end
  absl::Duration idle_timeout = absl::InfiniteDuration();       // silence with nothing in flight
  uint64_t max_connections = 1024;                              // rpc/fd_budget.h
  OnDisconnect on_disconnect = OnDisconnect::kCancel;
  // Who may connect (SO_PEERCRED): the daemon's own user and root always,
  // with every right; another user only with a "uid" entry in the keys
  // file, scoped by it (docs/protocol.md, "Authentication"). Null: no keys
  // file, and the socket's mode alone decides.
  std::shared_ptr<const ApiKeys> peers;
};

// Serves each client of the socket until Close: lines in, replies out, in
// any order. Accepting never stops for a lack of descriptors (it is
// retried), and a client beyond max_connections is told so and closed.
class SocketListener {
 public:
  SocketListener(Daemon* daemon, std::unique_ptr<UnixAcceptor> acceptor, const SocketLimits& limits,
                 std::function<void(const std::string&)> warn);
  ~SocketListener();
  SocketListener(const SocketListener&) = delete;
  SocketListener& operator=(const SocketListener&) = delete;

  void Start();
  // Stops accepting; connections open go on (their replies still go out).
  void Close();
  // Who may connect from now on (a reload); a connection open keeps the
  // scope it was accepted with. On the io thread.
  void SetPeers(std::shared_ptr<const ApiKeys> peers) { limits_.peers = std::move(peers); }

 private:
  Daemon* daemon_;
  std::unique_ptr<UnixAcceptor> acceptor_;
  SocketLimits limits_;
  std::function<void(const std::string&)> warn_;
  boost::asio::steady_timer retry_;
  bool retrying_ = false;
  std::shared_ptr<std::atomic<size_t>> open_ = std::make_shared<std::atomic<size_t>>(0);
};

}  // namespace cubicle::rpc

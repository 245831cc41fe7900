// Serving the operator metrics (rpc/metrics.h) while the daemon runs: a
// Unix socket or a TCP address that answers every connection with one
// HTTP/1.0 response, or a file rewritten atomically every 5 s
// (node_exporter's textfile collector).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/statusor.h"
#include "rpc/metrics.h"
#include "rpc/transports.h"

namespace cubicle::rpc {

class MetricsServer {
 public:
  // Starts on `io`. `text` renders the metrics when asked (Daemon::MetricsText);
  // `warn` hears of a file that could not be written.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(boost::asio::io_context& io, const MetricsTarget& target,
                                                              uint32_t socket_mode, std::function<std::string()> text,
                                                              std::function<void(const std::string&)> warn);
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Stops accepting, or rewriting the file. On the io thread.
  void Stop();
  // Once the io loop has ended: removes the socket, or writes the file's
  // final counts.
  void Finish();
  // The TCP port bound (tcp:ADDR:0 binds an ephemeral one); 0 otherwise.
  uint16_t port() const;

 private:
  MetricsServer(boost::asio::io_context& io, MetricsTarget target, std::function<std::string()> text,
                std::function<void(const std::string&)> warn);
  void RewriteFile();

  MetricsTarget target_;
  std::function<std::string()> text_;
  std::function<void(const std::string&)> warn_;
  std::unique_ptr<UnixAcceptor> acceptor_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> tcp_;
  boost::asio::steady_timer timer_;
  bool stopped_ = false;
};

}  // namespace cubicle::rpc

// The HTTP/1.1 front of `cubicle serve --listen ADDR:PORT` (docs/protocol.md,
// "HTTP"): JSON-RPC over POST /rpc (one JSON reply, or NDJSON with the
// notifications streamed), the REST routes of rpc/http_routes.h, and
// /healthz, /readyz, /metrics for orchestrators and scrapers, with bearer
// keys or signatures (rpc/http_auth.h) in front of everything but
// /healthz. One io thread (Beast over Asio) reads and writes every
// connection; answers the daemon gives on other threads are posted back
// to it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/api_keys.h"
#include "rpc/in_flight.h"

namespace cubicle::rpc {

// "127.0.0.1:8080", "[::1]:0", "localhost:8080" (taken as 127.0.0.1: no
// resolver is asked, so that what is bound is what was written).
absl::StatusOr<boost::asio::ip::tcp::endpoint> ParseListenAddress(const std::string& spec);
// The address a listening socket is bound to (a socket systemd passed).
absl::StatusOr<boost::asio::ip::tcp::endpoint> LocalEndpoint(int listening_fd);

struct HttpLimits {
  size_t max_header_bytes = 16 << 10;  // beyond: 431
  size_t max_body_bytes = 4 << 20;     // beyond: 413 (the daemon's line limit)
  // For a whole request (head and body) from its first byte, and for an
  // idle keep-alive connection between requests; past it the connection
  // is closed (a slow-loris client holds nothing for long).
  absl::Duration read_timeout = absl::Seconds(30);
  uint64_t max_connections = 1024;  // beyond: 503, closed
  // What a client's disconnect does to its requests (a half-close counts:
  // over TCP it cannot be told from a close).
  OnDisconnect on_disconnect = OnDisconnect::kCancel;
};

// One JSON-RPC line for the daemon, and where its answers go (either may
// be called on another thread).
struct HttpCall {
  std::string line;
  // The reply; dropped unanswered when there is none (notifications).
  std::function<void(std::string)> reply;
  // Notification lines (exec.output); null: the client wants none.
  std::function<void(std::string)> notify;
  // The client's connection: its disconnect stops what it tracks.
  std::shared_ptr<Connection> connection;
  // The name of the key the request proved ("" without keys): who asked,
  // in the request log and the skill audit.
  std::string key_name;
};

// A request for a route served outside the front (MCP's /mcp,
// rpc/mcp_http.h), authenticated already.
struct HttpRouteRequest {
  std::string verb;  // "POST", "GET", "DELETE"...
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::shared_ptr<const ApiKey> key;  // null without keys
};

// Its answer: one whole response, or a chunked stream of pieces. Any
// thread; each call is carried out on the connection's io thread, in
// order. Dropped without an answer: 500.
class HttpRouteAnswer {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;
  virtual ~HttpRouteAnswer() = default;
  virtual void Respond(int status, const std::string& content_type, std::string body, Headers headers = {}) = 0;
  virtual void StartStream(const std::string& content_type, Headers headers = {}) = 0;
  virtual void StreamPiece(std::string bytes) = 0;
  virtual void EndStream() = 0;
};

// What the front asks of the daemon.
struct HttpBackend {
  std::function<void(HttpCall)> rpc;
  std::function<std::string()> metrics;
  // {"ready": bool, ...why}: /readyz's body.
  std::function<boost::json::object()> readiness;
  // For keys scoped to profiles: the profile a call would use.
  ProfileOf profile_of;
  // Counts a request refused at the door (RequestMetrics::Rejected):
  // "unauthenticated", "forbidden", "too_many_connections". May be null.
  std::function<void(absl::string_view reason)> rejected;
  // /mcp (rpc/mcp_http.h); null: no such endpoint.
  std::function<void(HttpRouteRequest, std::shared_ptr<HttpRouteAnswer>)> mcp;
};

class HttpFront {
 public:
  // Listening on `endpoint` once this returns (port 0: an ephemeral one,
  // see port()). `keys` null: no authentication.
  static absl::StatusOr<std::unique_ptr<HttpFront>> Start(boost::asio::io_context& io,
                                                          const boost::asio::ip::tcp::endpoint& endpoint,
                                                          const HttpLimits& limits,
                                                          std::shared_ptr<const ApiKeys> keys, HttpBackend backend,
                                                          std::function<void(const std::string&)> warn);
  // The same on a socket listening already (socket activation), which the
  // front takes over.
  static absl::StatusOr<std::unique_ptr<HttpFront>> Adopt(boost::asio::io_context& io, int listening_fd,
                                                          const HttpLimits& limits,
                                                          std::shared_ptr<const ApiKeys> keys, HttpBackend backend,
                                                          std::function<void(const std::string&)> warn);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  uint16_t port() const { return port_; }
  // Stops accepting; open connections go on. On the io thread.
  void Close();
  // The keys requests read from now on are checked against (a reload);
  // null: no authentication. On the io thread, between requests.
  void SetKeys(std::shared_ptr<const ApiKeys> keys);

  struct Shared;  // what connections share with the front (rpc/http_front.cc)

 private:
  HttpFront(boost::asio::io_context& io, std::shared_ptr<Shared> shared);
  void Accept();

  std::shared_ptr<Shared> shared_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  bool retrying_ = false;
  uint16_t port_ = 0;
};

}  // namespace cubicle::rpc

// /mcp on the HTTP front: MCP's streamable HTTP transport (revision
// 2025-06-18) over the core of rpc/mcp_server.h. Each MCP session is made
// by an initialize, named by the Mcp-Session-Id it is answered with, bound
// to the key that made it, and ended by DELETE or by idling past
// McpConfig::idle_timeout. A request is answered with application/json,
// or with text/event-stream when it asked for progress; notifications and
// responses from the client get 202. There is no GET stream (405).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/time/time.h"
#include "rpc/api_keys.h"
#include "rpc/http_front.h"
#include "rpc/mcp_config.h"
#include "rpc/mcp_link.h"
#include "rpc/mcp_server.h"

namespace cubicle::rpc {

class McpHttp : public std::enable_shared_from_this<McpHttp> {
 public:
  // `options` the sessions' (profile, python argv, version). Call Start
  // once made.
  McpHttp(boost::asio::io_context& io, const McpConfig& config, McpOptions options, Daemon* daemon,
          std::function<void(const std::string&)> warn);
  // Arms the idle sweep.
  void Start();
  // At the teardown: the sweep stops, nothing reaches the daemon any
  // more, the sessions are dropped (their workspaces stay, as ordinary
  // sessions that the daemon reaps by their idle TTL).
  void Stop();

  // One request on /mcp (the io thread).
  void Serve(HttpRouteRequest request, std::shared_ptr<HttpRouteAnswer> answer);

  size_t sessions() const;

  struct Entry;  // one MCP session's bookkeeping (rpc/mcp_http.cc)

 private:
  void Post(HttpRouteRequest& request, const std::shared_ptr<HttpRouteAnswer>& answer);
  void Delete(const HttpRouteRequest& request, const std::shared_ptr<HttpRouteAnswer>& answer);
  // The session a request names, or why not (the answer given).
  std::shared_ptr<Entry> Find(const HttpRouteRequest& request, const std::shared_ptr<HttpRouteAnswer>& answer);
  std::shared_ptr<Entry> Open(const HttpRouteRequest& request, const std::shared_ptr<HttpRouteAnswer>& answer);
  McpOptions OptionsFor(const std::shared_ptr<const ApiKey>& key) const;
  void Sweep();

  boost::asio::steady_timer sweep_;
  const McpConfig config_;
  const McpOptions options_;
  const std::shared_ptr<McpLinkGate> gate_ = std::make_shared<McpLinkGate>();
  const McpDaemonCall daemon_;
  const ProfileOf profile_of_;
  const std::function<void(const std::string&)> warn_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> sessions_;  // by Mcp-Session-Id
  bool stopped_ = false;
};

}  // namespace cubicle::rpc

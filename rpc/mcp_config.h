// "mcp" in the daemon's config (docs/config.md): the MCP server's profile
// and, over HTTP (/mcp), how many MCP sessions may be open and how long an
// idle one lives.
#pragma once

#include <cstddef>
#include <string>

#include <boost/json/value.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cubicle::rpc {

struct McpConfig {
  // The profile of an MCP session's workspace and runs; empty: the
  // sessions profile (sessions.profile).
  std::string profile;
  size_t max_sessions = 64;
  // An HTTP MCP session unused this long (no request, no call running) is
  // ended as a DELETE would end it.
  absl::Duration idle_timeout = absl::Minutes(30);
};

// Reads the "mcp" object into `out`; errors name the JSON path.
absl::Status ParseMcpConfig(const boost::json::value& v, McpConfig* out);

struct DaemonConfig;
struct McpOptions;
// The options of an MCP session served by a daemon of `config`: its
// profile (`profile`, else mcp.profile; empty: the sessions profile), and
// run_python's command — that profile's warm interpreter where it is
// Python's (the call is then served warm), else python3.
McpOptions McpOptionsFor(const DaemonConfig& config, const std::string& profile = "");

}  // namespace cubicle::rpc

#include "rpc/mcp_config.h"

#include "absl/strings/match.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "rpc/config.h"
#include "rpc/mcp_server.h"

namespace cubicle::rpc {

absl::Status ParseMcpConfig(const boost::json::value& v, McpConfig* out) {
  CUBICLE_ASSIGN_OR_RETURN(json_read::Object o,
                           json_read::Object::Open(v, "mcp", {"profile", "max_sessions", "idle_timeout_ms"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("profile", &out->profile, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_sessions", &out->max_sessions, 1, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(o.Read("idle_timeout_ms", &out->idle_timeout, json_read::MillisIn(1000, json_read::kYearMs)));
  return absl::OkStatus();
}

McpOptions McpOptionsFor(const DaemonConfig& config, const std::string& profile) {
  McpOptions options;
  options.profile = profile.empty() ? config.mcp.profile : profile;
  options.server_version = "0.1.0";  // the daemon's, as health says it
  auto it = config.profiles.find(options.profile.empty() ? config.sessions.default_profile : options.profile);
  if (it != config.profiles.end() && it->second.interpreter.has_value() && !it->second.interpreter->argv.empty()) {
    const std::string& exe = it->second.interpreter->argv.front();
    if (absl::StartsWith(exe.substr(exe.rfind('/') + 1), "python")) options.python = it->second.interpreter->argv;
  }
  return options;
}

}  // namespace cubicle::rpc

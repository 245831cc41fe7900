#include "rpc/mcp_config.h"

#include "base/json_reader.h"
#include "base/status.h"

namespace cubicle::rpc {

absl::Status ParseMcpConfig(const boost::json::value& v, McpConfig* out) {
  CUBICLE_ASSIGN_OR_RETURN(json_read::Object o,
                           json_read::Object::Open(v, "mcp", {"profile", "max_sessions", "idle_timeout_ms"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("profile", &out->profile, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_sessions", &out->max_sessions, 1, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(o.Read("idle_timeout_ms", &out->idle_timeout, json_read::MillisIn(1000, json_read::kYearMs)));
  return absl::OkStatus();
}

}  // namespace cubicle::rpc

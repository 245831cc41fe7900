#include "rpc/session_config.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_reader.h"
#include "base/status.h"

namespace cubicle::rpc {
namespace {

using json_read::Error;
using json_read::Object;

// "UID:GID", both numbers below 2^32-1.
absl::Status ParseOwner(const boost::json::value& v, absl::string_view path, SessionsConfig* out) {
  CUBICLE_ASSIGN_OR_RETURN(std::string text, json_read::String(v, path));
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  uint32_t uid = 0, gid = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &uid) || !absl::SimpleAtoi(parts[1], &gid) ||
      uid == UINT32_MAX || gid == UINT32_MAX) {
    return Error(path, absl::StrCat("'", text, "' is not UID:GID"));
  }
  out->workspace_uid = uid;
  out->workspace_gid = gid;
  return absl::OkStatus();
}

absl::Status CheckBounds(const SessionsConfig& c) {
  if (c.idle_ttl > c.max_idle_ttl) {
    return Error("sessions.idle_ttl_ms", "is above sessions.max_idle_ttl_ms");
  }
  if (c.workspace_bytes > c.max_workspace_bytes) {
    return Error("sessions.workspace_bytes", "is above sessions.max_workspace_bytes");
  }
  if (!c.state_dir.empty() && c.state_dir.front() != '/') {
    return Error("sessions.state_dir", absl::StrCat("'", c.state_dir, "' must be an absolute path"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseSessionsConfig(const boost::json::value& v, SessionsConfig* out) {
  CUBICLE_ASSIGN_OR_RETURN(
      Object o, Object::Open(v, "sessions",
                             {"state_dir", "profile", "max_sessions", "idle_ttl_ms", "max_idle_ttl_ms",
                              "max_lifetime_ms", "workspace_bytes", "max_workspace_bytes", "workspace_owner",
                              "output_bytes", "archive", "archive_max_bytes", "max_file_bytes", "max_output_files",
                              "max_output_bytes", "keep_executions_ms"}));
  const auto millis = json_read::MillisIn(1000, json_read::kYearMs);
  CUBICLE_RETURN_IF_ERROR(o.Read("state_dir", &out->state_dir, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.Read("profile", &out->default_profile, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_sessions", &out->max_sessions, 1, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(o.Read("idle_ttl_ms", &out->idle_ttl, millis));
  CUBICLE_RETURN_IF_ERROR(o.Read("max_idle_ttl_ms", &out->max_idle_ttl, millis));
  CUBICLE_RETURN_IF_ERROR(o.Read("max_lifetime_ms", &out->max_lifetime, millis));
  CUBICLE_RETURN_IF_ERROR(o.Read("workspace_bytes", &out->workspace_bytes, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("max_workspace_bytes", &out->max_workspace_bytes, json_read::PositiveSize));
  if (const boost::json::value* owner = o.Find("workspace_owner")) {
    CUBICLE_RETURN_IF_ERROR(ParseOwner(*owner, o.PathOf("workspace_owner"), out));
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("output_bytes", &out->output_bytes, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("archive", &out->archive, json_read::Bool));
  CUBICLE_RETURN_IF_ERROR(o.Read("archive_max_bytes", &out->archive_max_bytes, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("max_file_bytes", &out->max_file_bytes, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_output_files", &out->max_output_files, 0, 100000));
  CUBICLE_RETURN_IF_ERROR(o.Read("max_output_bytes", &out->max_output_bytes, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("keep_executions_ms", &out->keep_executions, millis));
  return CheckBounds(*out);
}

}  // namespace cubicle::rpc

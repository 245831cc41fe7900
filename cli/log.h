// Logs: JSON lines on stderr via spdlog ({"ts":..., "level":..., "msg":...}).
// stdout belongs to the payload (and later to the JSON-RPC transport). The
// logger is made at the first line logged; CUBICLE_LOG_LEVEL (warn by
// default) is read then.
#pragma once

#include <boost/json/object.hpp>

#include "absl/strings/string_view.h"

namespace cubicle::cli {

inline constexpr char kLogLevelEnv[] = "CUBICLE_LOG_LEVEL";

void LogWarning(absl::string_view message);
void LogInfo(absl::string_view message);
// An info line `{"ts", "level", "msg": EVENT, EVENT: FIELDS}` (a request's
// facts, say), when info is logged at all.
void LogEvent(absl::string_view event, const boost::json::object& fields);
bool LogsInfo();

}  // namespace cubicle::cli

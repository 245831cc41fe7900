// Logs: JSON lines via spdlog ({"ts":..., "level":..., "msg":...}), on
// stderr unless the daemon's config names a file. stdout belongs to the
// payload (and to the JSON-RPC transport). The logger is made at the first
// line logged; CUBICLE_LOG_LEVEL (warn by default) is read then.
//
// Under systemd, when stderr is the journal's stream (JOURNAL_STREAM names
// it), each line starts with its syslog priority ("<4>"), which journald
// takes as the entry's priority and strips: `journalctl -p warning` works
// and the stored message is still the JSON line.
#pragma once

#include <string>

#include <boost/json/object.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cubicle::cli {

inline constexpr char kLogLevelEnv[] = "CUBICLE_LOG_LEVEL";

void LogWarning(absl::string_view message);
void LogInfo(absl::string_view message);
// An info line `{"ts", "level", "msg": EVENT, EVENT: FIELDS}` (a request's
// facts, say), when info is logged at all.
void LogEvent(absl::string_view event, const boost::json::object& fields);
bool LogsInfo();

// The daemon's "log" settings (rpc::LogSettings), applied at start and at
// every reload. `level` ("" keeps the current one) is overridden by
// CUBICLE_LOG_LEVEL when that is set. `destination` is "stderr" or an
// absolute file path, opened for appending (0640) — and opened again on
// every call, so that SIGHUP after logrotate moves the file on. On an
// error nothing changes.
absl::Status ConfigureLog(const std::string& level, const std::string& destination);

// Whether `level` is a level name ConfigureLog takes: trace, debug, info,
// warn, error, critical, off.
bool IsLogLevel(absl::string_view level);

}  // namespace cubicle::cli

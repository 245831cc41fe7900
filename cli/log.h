// Logs: JSON lines on stderr via spdlog ({"ts":..., "level":..., "msg":...}).
// stdout belongs to the payload (and later to the JSON-RPC transport).
#pragma once

#include "absl/strings/string_view.h"

namespace cubicle::cli {

void InitLogging();
void LogWarning(absl::string_view message);
void LogInfo(absl::string_view message);

}  // namespace cubicle::cli

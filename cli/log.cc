#include "cli/log.h"

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace cubicle::cli {
namespace {

// spdlog formats the envelope; the message is already a JSON string literal.
std::string Quote(absl::string_view message) {
  return boost::json::serialize(boost::json::string(message.data(), message.size()));
}

}  // namespace

void InitLogging() {
  auto logger = spdlog::stderr_logger_st("cubicle");
  logger->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":%v})",
                      spdlog::pattern_time_type::utc);
  const char* level = std::getenv("CUBICLE_LOG_LEVEL");
  logger->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

void LogWarning(absl::string_view message) { spdlog::warn("{}", Quote(message)); }
void LogInfo(absl::string_view message) { spdlog::info("{}", Quote(message)); }

}  // namespace cubicle::cli

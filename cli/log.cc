#include "cli/log.h"

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>

namespace cubicle::cli {
namespace {

// spdlog formats the envelope; the message is already a JSON string literal.
std::string Quote(absl::string_view message) {
  return boost::json::serialize(boost::json::string(message.data(), message.size()));
}

// Made by the first line logged, not at start: building the logger and its
// pattern costs a cold `cubicle run` ~0.25 ms that it almost never logs in.
// A function-local static, so the daemon's threads may race to it.
spdlog::logger& Logger() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto made = std::make_shared<spdlog::logger>("cubicle", std::make_shared<spdlog::sinks::stderr_sink_st>());
    made->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":%v})", spdlog::pattern_time_type::utc);
    const char* level = std::getenv(kLogLevelEnv);
    made->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
    return made;
  }();
  return *logger;
}

}  // namespace

void LogWarning(absl::string_view message) { Logger().warn("{}", Quote(message)); }
bool LogsInfo() { return Logger().should_log(spdlog::level::info); }

void LogEvent(absl::string_view event, const boost::json::object& fields) {
  spdlog::logger& logger = Logger();
  if (!logger.should_log(spdlog::level::info)) return;
  // The pattern's message slot holds JSON text: the event's name, then its
  // fields as a member of the line.
  logger.info("{},{}:{}", Quote(event), Quote(event), boost::json::serialize(fields));
}

void LogInfo(absl::string_view message) {
  spdlog::logger& logger = Logger();
  if (logger.should_log(spdlog::level::info)) logger.info("{}", Quote(message));
}

}  // namespace cubicle::cli

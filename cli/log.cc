#include "cli/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace cubicle::cli {
namespace {

// spdlog formats the envelope; the message is already a JSON string literal.
std::string Quote(absl::string_view message) {
  return boost::json::serialize(boost::json::string(message.data(), message.size()));
}

// Whether stderr is the journal's stream: systemd sets JOURNAL_STREAM to
// "DEV:INODE" of the stream it connected (systemd.exec(5)); a stderr
// redirected elsewhere by the unit's child keeps the variable but not the
// inode.
bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  std::pair<std::string, std::string> parts = absl::StrSplit(stream, absl::MaxSplits(':', 1));
  uint64_t dev = 0, ino = 0;
  struct stat st;
  return absl::SimpleAtoi(parts.first, &dev) && absl::SimpleAtoi(parts.second, &ino) && ::fstat(2, &st) == 0 &&
         static_cast<uint64_t>(st.st_dev) == dev && static_cast<uint64_t>(st.st_ino) == ino;
}

int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return 2;
    case spdlog::level::err: return 3;
    case spdlog::level::warn: return 4;
    case spdlog::level::info: return 6;
    default: return 7;
  }
}

// One write(2) per line, to stderr or to a file opened for appending, so
// lines from several threads (and a forked gateway sharing the file) never
// interleave within a line. The file can be swapped under the sink's lock.
class FdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  FdSink() : journal_(StderrIsJournal()) {}

  // Takes `file` (or stderr when it is not valid) for the lines to come.
  void Use(UniqueFd file) {
    std::lock_guard<std::mutex> lock(mutex_);
    file_ = std::move(file);
    journal_ = !file_.valid() && StderrIsJournal();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    if (journal_) fmt::format_to(std::back_inserter(line), "<{}>", SyslogPriority(msg.level));
    formatter_->format(msg, line);
    const int fd = file_.valid() ? file_.get() : 2;
    size_t done = 0;
    while (done < line.size()) {
      ssize_t n = ::write(fd, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // nowhere left to say so
      done += static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  UniqueFd file_;
  bool journal_;
};

struct Log {
  std::shared_ptr<FdSink> sink;
  std::shared_ptr<spdlog::logger> logger;
};

// Made by the first line logged, not at start: building the logger and its
// pattern costs a cold `cubicle run` ~0.25 ms that it almost never logs in.
// A function-local static, so the daemon's threads may race to it.
Log& TheLog() {
  static Log log = [] {
    Log made;
    made.sink = std::make_shared<FdSink>();
    made.logger = std::make_shared<spdlog::logger>("cubicle", made.sink);
    made.logger->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":%v})", spdlog::pattern_time_type::utc);
    const char* level = std::getenv(kLogLevelEnv);
    made.logger->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
    return made;
  }();
  return log;
}

spdlog::logger& Logger() { return *TheLog().logger; }

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

bool IsLogLevel(absl::string_view level) {
  for (const char* name : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (level == name) return true;
  }
  return false;
}

absl::Status ConfigureLog(const std::string& level, const std::string& destination) {
  if (!level.empty() && !IsLogLevel(level)) {
    return absl::InvalidArgumentError(absl::StrCat("log level '", level, "': expected trace, debug, info, warn, error, "
                                                   "critical or off"));
  }
  UniqueFd file;
  if (!destination.empty() && destination != "stderr") {
    if (destination[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("log destination '", destination, "': expected \"stderr\" or an absolute file path"));
    }
    file.reset(::open(destination.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640));
    if (!file.valid()) return ErrnoStatus(errno, absl::StrCat("log destination: open(", destination, ")"));
  }
  Log& log = TheLog();
  log.sink->Use(std::move(file));
  if (std::getenv(kLogLevelEnv) == nullptr && !level.empty()) log.logger->set_level(spdlog::level::from_str(level));
  return absl::OkStatus();
}

}  // namespace cubicle::cli

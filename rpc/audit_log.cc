#include "rpc/audit_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "sessions/digest.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr char kFileName[] = "audit.jsonl";

// The rest of `fd`'s file, from its current offset.
absl::StatusOr<std::string> ReadAll(int fd, const std::string& path) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

bool Matches(const json::object& line, const AuditFilter& f) {
  if (!f.request_id.empty()) {
    const json::value* id = line.if_contains("request_id");
    if (id == nullptr || !id->is_string() || id->as_string() != f.request_id) return false;
  }
  if (!f.skill.empty()) {
    const json::value* skill = line.if_contains("skill");
    const json::object* s = skill == nullptr ? nullptr : skill->if_object();
    if (s == nullptr) return false;
    auto is = [&](const char* key) {
      const json::value* v = s->if_contains(key);
      return v != nullptr && v->is_string() && v->as_string() == f.skill;
    };
    if (!is("name") && !is("id")) return false;
  }
  if (f.since != absl::InfinitePast() || f.until != absl::InfiniteFuture()) {
    const json::value* ts = line.if_contains("ts");
    absl::Time at;
    std::string err;
    if (ts == nullptr || !ts->is_string() || !absl::ParseTime(absl::RFC3339_full, std::string(ts->as_string()), &at, &err)) {
      return false;
    }
    if (at < f.since || at > f.until) return false;
  }
  return true;
}

}  // namespace

std::string JsonSha256(const json::value& value) { return sessions::Sha256Hex(json::serialize(value)); }

AuditLog::AuditLog(std::string dir, AuditOptions options)
    : dir_(std::move(dir)), path_(absl::StrCat(dir_, "/", kFileName)), options_(options) {}

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& dir, AuditOptions options) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("mkdir(", dir, ")"));
  std::unique_ptr<AuditLog> log(new AuditLog(dir, options));
  std::lock_guard<std::mutex> lock(log->mu_);
  CUBICLE_RETURN_IF_ERROR(log->OpenCurrentLocked());
  return log;
}

absl::Status AuditLog::OpenCurrentLocked() {
  fd_.reset(::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd_) return ErrnoStatus(errno, absl::StrCat("open(", path_, ")"));
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", path_, ")"));
  size_ = static_cast<uint64_t>(st.st_size);
  return absl::OkStatus();
}

std::string AuditLog::Rotated(size_t n) const { return absl::StrCat(path_, ".", n); }

// audit.jsonl.(keep-1) → .keep (over the oldest), ..., audit.jsonl → .1,
// then a new audit.jsonl.
absl::Status AuditLog::RotateLocked() {
  for (size_t n = options_.keep; n > 1; --n) {
    if (::rename(Rotated(n - 1).c_str(), Rotated(n).c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("rename(", Rotated(n - 1), ")"));
    }
  }
  if (options_.keep == 0) {
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unlink(", path_, ")"));
  } else if (::rename(path_.c_str(), Rotated(1).c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("rename(", path_, ")"));
  }
  return OpenCurrentLocked();
}

absl::Status AuditLog::Append(json::object line) {
  // A writer that stamped the line itself (the skill audit, whose history
  // read the line before it was appended) keeps its time: a rebuild from
  // the trail then reads the same one.
  if (!line.contains("ts")) line["ts"] = absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone());
  std::string text = json::serialize(line);
  text.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  if (size_ > 0 && size_ + text.size() > options_.max_file_bytes) CUBICLE_RETURN_IF_ERROR(RotateLocked());
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd_.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(n < 0 ? errno : EIO, absl::StrCat("write(", path_, ")"));
    done += static_cast<size_t>(n);
  }
  size_ += text.size();
  return absl::OkStatus();
}

absl::Status AuditLog::ForEachNewestFirst(const std::function<bool(const json::object&)>& each,
                                          size_t max_lines) const {
  // The files are opened together, newest first, while no rotation runs,
  // then read without holding up the calls being audited: a rotation
  // meanwhile renames them, and what was opened is still what is read.
  std::vector<std::pair<std::string, UniqueFd>> files;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t n = 0; n <= options_.keep; ++n) {
      std::string path = n == 0 ? path_ : Rotated(n);
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!fd && errno == ENOENT) continue;
      if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
      files.emplace_back(std::move(path), std::move(fd));
    }
  }
  size_t read = 0;
  for (const auto& [path, fd] : files) {
    CUBICLE_ASSIGN_OR_RETURN(std::string text, ReadAll(fd.get(), path));
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
      if (read++ >= max_lines) return absl::OkStatus();
      boost::system::error_code ec;
      json::value v = json::parse(json::string_view(it->data(), it->size()), ec);
      if (ec || !v.is_object()) continue;
      if (!each(v.as_object())) return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<json::object>> AuditLog::Query(const AuditFilter& filter) const {
  std::vector<json::object> out;
  CUBICLE_RETURN_IF_ERROR(ForEachNewestFirst([&](const json::object& line) {
    if (!Matches(line, filter)) return true;
    out.push_back(line);
    return out.size() < filter.limit;
  }));
  return out;
}

}  // namespace cubicle::rpc

// The skill audit trail (docs/skills.md, "Audit"): one JSON line per
// skill.call, appended to <state dir>/audit/audit.jsonl and rotated by
// size (audit.jsonl.1 the newest rotated file, up to `keep` of them), and
// read back by audit.query. It is the record a platform reproduces a call
// from: which skill (id, version), what went in and came out (SHA-256 of
// each), who asked, when, how it ended and what it used.
//
// Lines are appended with one write(2) each to a file opened O_APPEND, so a
// reader never sees half a line from a live daemon; they are not fsync'ed
// one by one (a crash of the machine, not of the daemon, can lose the last
// ones). The daemon writes; nothing here rewrites or deletes a line except
// rotation, which drops the oldest file past `keep`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"

namespace cubicle::rpc {

struct AuditOptions {
  uint64_t max_file_bytes = 64ull << 20;  // rotated past this
  size_t keep = 8;                         // rotated files kept
};

// What audit.query selects; every set field must match.
struct AuditFilter {
  std::string skill;       // a skill's name or id (argv calls: "")
  std::string request_id;  // the daemon's request id (q…)
  absl::Time since = absl::InfinitePast();
  absl::Time until = absl::InfiniteFuture();
  size_t limit = 100;  // the newest `limit` matches, newest first
};

class AuditLog {
 public:
  // Opens (making it, 0700) `dir` and its current file (0600).
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& dir, AuditOptions options = {});

  // Appends `line` (its "ts" is set here unless it has one), rotating
  // first when the file would pass max_file_bytes. Thread-safe.
  absl::Status Append(boost::json::object line);

  // The matching lines, newest first, from the current file and then the
  // rotated ones, stopping at `filter.limit`. A line that does not parse
  // (a torn last line after a machine crash) is skipped.
  absl::StatusOr<std::vector<boost::json::object>> Query(const AuditFilter& filter) const;

  // Each line that parses, newest first, until `each` returns false or
  // `max_lines` lines have been read.
  absl::Status ForEachNewestFirst(const std::function<bool(const boost::json::object&)>& each,
                                  size_t max_lines = SIZE_MAX) const;

  const std::string& path() const { return path_; }

 private:
  AuditLog(std::string dir, AuditOptions options);
  absl::Status OpenCurrentLocked();
  absl::Status RotateLocked();
  std::string Rotated(size_t n) const;  // audit.jsonl.N

  const std::string dir_;
  const std::string path_;
  const AuditOptions options_;
  mutable std::mutex mu_;
  UniqueFd fd_;
  uint64_t size_ = 0;
};

// The lowercase hex SHA-256 of `value` serialized compactly (Boost.JSON:
// no spaces, members in the order given, which is the order they came in):
// how the audit hashes params and results. "" where libcrypto is missing.
std::string JsonSha256(const boost::json::value& value);

}  // namespace cubicle::rpc

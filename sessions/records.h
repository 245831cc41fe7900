// The daemon's durable records (DESIGN §6a): sessions and managed
// executions in SQLite (STATE/records.db), so that after `cubicle serve` is
// killed and restarted live sessions are found again, ended executions still
// answer, running ones are reported lost, and idempotency keys hold for
// their window. JSON documents (requests, results, options) are stored as
// opaque text; nothing here parses them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace cubicle::sessions {

namespace sqlite {
class Connection;
}  // namespace sqlite

inline constexpr int kRecordsSchemaVersion = 1;

struct SessionRecord {
  std::string key;
  std::string profile;
  int64_t created_ms = 0, last_used_ms = 0, idle_ttl_ms = 0, expires_ms = 0 /*max lifetime deadline*/;
  std::string state;      // "live" | "archived"
  std::string workspace;  // host path
  std::string options;    // opaque JSON text
};

struct ExecRecord {
  std::string id;
  std::string session;  // "" when none
  std::string key;      // idempotency key, "" when none
  std::string state;    // queued|running|done|cancelled|lost
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0;
  std::string request;  // opaque JSON text
  std::string result;   // opaque JSON text, "" until ended
};

// Every error names what the statement was for and SQLite's words for what
// went wrong; SQLITE_FULL is ResourceExhausted, SQLITE_BUSY/LOCKED
// Unavailable, a corrupt or foreign file DataLoss. A state outside the lists
// above, or an empty id or key where one is needed, is InvalidArgument.
class Records {  // thread-safe (one connection, a mutex)
 public:
  // Opens or creates the database (mode 0600, as are its -wal and -shm),
  // bringing an older schema up to kRecordsSchemaVersion. A database written
  // by a newer cubicle is FailedPrecondition naming both versions, and is
  // left as it was.
  static absl::StatusOr<std::unique_ptr<Records>> Open(const std::string& db_path);
  ~Records();
  Records(const Records&) = delete;
  Records& operator=(const Records&) = delete;

  absl::Status PutSession(const SessionRecord&);  // insert or replace
  absl::StatusOr<std::optional<SessionRecord>> GetSession(absl::string_view key);
  absl::StatusOr<std::vector<SessionRecord>> ListSessions();  // by key
  absl::Status RemoveSession(absl::string_view key);           // NotFound if absent

  // Insert or replace. A key the record carries names it in FindKey unless
  // a newer execution already holds that key; use PutExecIfKeyFree to claim
  // a key without racing another request.
  absl::Status PutExec(const ExecRecord&);
  // Inserts `exec` unless an execution created at or after `key_since_ms`
  // holds exec.key, in one transaction; returns the id that holds the key
  // now: exec.id if it was free, the earlier execution's otherwise (then
  // nothing is written). One key names one execution at a time.
  absl::StatusOr<std::string> PutExecIfKeyFree(const ExecRecord& exec, int64_t key_since_ms);
  // `state` one of done|cancelled|lost. NotFound if no such execution.
  absl::Status EndExec(absl::string_view id, absl::string_view state, int64_t finished_ms,
                       absl::string_view result);
  // `state` queued or running. NotFound if no such execution.
  absl::Status SetExecState(absl::string_view id, absl::string_view state, int64_t started_ms);
  absl::StatusOr<std::optional<ExecRecord>> GetExec(absl::string_view id);
  // Newest first (by id); `session` empty: all; at most `limit`;
  // `before_id` (exclusive) pages.
  absl::StatusOr<std::vector<ExecRecord>> ListExecs(absl::string_view session, size_t limit,
                                                    absl::string_view before_id = "");
  // The execution a key started at or after `since_ms`, if any.
  absl::StatusOr<std::optional<std::string>> FindKey(absl::string_view key, int64_t since_ms);
  // After a restart: every queued or running execution becomes "lost",
  // finished at `now_ms`, with `result`; returns how many.
  absl::StatusOr<size_t> MarkUnfinishedLost(int64_t now_ms, absl::string_view result);
  // Drops ended executions finished before `before_ms`, keeping at most
  // `keep` newest ended ones (by finished time); returns how many dropped.
  // A dropped execution's key is free again, so `before_ms` should not be
  // later than the start of the idempotency window.
  absl::StatusOr<size_t> ForgetEnded(int64_t before_ms, size_t keep);

 private:
  explicit Records(std::unique_ptr<sqlite::Connection> conn);
  absl::Status UpsertExecLocked(const ExecRecord& exec, bool take_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<std::string>> FindKeyLocked(absl::string_view key, int64_t since_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<sqlite::Connection> conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cubicle::sessions

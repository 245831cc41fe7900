#include "sessions/records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sessions/sqlite.h"

namespace cubicle::sessions {
namespace {

using sqlite::Query;
using sqlite::Sql;

// Version 1. exec_keys is the idempotency keys' unique constraint: its
// primary key lets one key name one execution at a time, whatever the
// window; execs.key keeps what the request carried.
constexpr char kSchemaV1[] = R"sql(
CREATE TABLE sessions(
  key TEXT PRIMARY KEY NOT NULL,
  profile TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  last_used_ms INTEGER NOT NULL,
  idle_ttl_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  state TEXT NOT NULL,
  workspace TEXT NOT NULL,
  options TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE execs(
  id TEXT PRIMARY KEY NOT NULL,
  session TEXT NOT NULL,
  key TEXT NOT NULL,
  state TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  request TEXT NOT NULL,
  result TEXT NOT NULL
);
CREATE INDEX execs_by_session ON execs(session, id);
CREATE INDEX execs_by_state ON execs(state, finished_ms);
CREATE TABLE exec_keys(
  key TEXT PRIMARY KEY NOT NULL,
  id TEXT NOT NULL REFERENCES execs(id) ON DELETE CASCADE,
  created_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX exec_keys_by_id ON exec_keys(id);
)sql";

using Migration = absl::Status (*)(sqlite::Connection&);

absl::Status CreateV1(sqlite::Connection& conn) { return conn.Exec(kSchemaV1, "create the version 1 schema"); }

// kMigrations[v] takes a database at version v to v + 1.
constexpr Migration kMigrations[] = {CreateV1};
static_assert(std::size(kMigrations) == kRecordsSchemaVersion);

#define CUBICLE_SESSION_COLUMNS "key, profile, created_ms, last_used_ms, idle_ttl_ms, expires_ms, state, workspace, options"
#define CUBICLE_EXEC_COLUMNS "id, session, key, state, created_ms, started_ms, finished_ms, request, result"
#define CUBICLE_ENDED "('done', 'cancelled', 'lost')"

constexpr Sql kUserVersion = {"read the schema version", "PRAGMA user_version"};
constexpr Sql kPutSession = {"put session",
                             "INSERT OR REPLACE INTO sessions(" CUBICLE_SESSION_COLUMNS
                             ") VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)"};
constexpr Sql kGetSession = {"get session", "SELECT " CUBICLE_SESSION_COLUMNS " FROM sessions WHERE key = ?"};
constexpr Sql kListSessions = {"list sessions", "SELECT " CUBICLE_SESSION_COLUMNS " FROM sessions ORDER BY key"};
constexpr Sql kRemoveSession = {"remove session", "DELETE FROM sessions WHERE key = ?"};
// An upsert, not INSERT OR REPLACE: replacing deletes the row, which would
// cascade to the key it holds.
constexpr Sql kPutExec = {"put execution",
                          "INSERT INTO execs(" CUBICLE_EXEC_COLUMNS
                          ") VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                          "session = excluded.session, key = excluded.key, state = excluded.state, "
                          "created_ms = excluded.created_ms, started_ms = excluded.started_ms, "
                          "finished_ms = excluded.finished_ms, request = excluded.request, result = excluded.result"};
constexpr Sql kOfferKey = {"record the execution's key",
                           "INSERT INTO exec_keys(key, id, created_ms) VALUES(?, ?, ?) ON CONFLICT(key) DO UPDATE "
                           "SET id = excluded.id, created_ms = excluded.created_ms "
                           "WHERE excluded.created_ms >= exec_keys.created_ms"};
constexpr Sql kDropOtherKeys = {"release the execution's former key",
                                "DELETE FROM exec_keys WHERE id = ? AND key <> ?"};
constexpr Sql kTakeKey = {"claim the key", "INSERT OR REPLACE INTO exec_keys(key, id, created_ms) VALUES(?, ?, ?)"};
constexpr Sql kFindKey = {"find key", "SELECT id FROM exec_keys WHERE key = ? AND created_ms >= ?"};
constexpr Sql kEndExec = {"end execution", "UPDATE execs SET state = ?, finished_ms = ?, result = ? WHERE id = ?"};
constexpr Sql kSetExecState = {"set execution state", "UPDATE execs SET state = ?, started_ms = ? WHERE id = ?"};
constexpr Sql kGetExec = {"get execution", "SELECT " CUBICLE_EXEC_COLUMNS " FROM execs WHERE id = ?"};
constexpr Sql kListAll = {"list executions", "SELECT " CUBICLE_EXEC_COLUMNS
                                             " FROM execs WHERE id < ? ORDER BY id DESC LIMIT ?"};
constexpr Sql kListAllFirst = {"list executions",
                               "SELECT " CUBICLE_EXEC_COLUMNS " FROM execs ORDER BY id DESC LIMIT ?"};
constexpr Sql kListSession = {"list the session's executions",
                              "SELECT " CUBICLE_EXEC_COLUMNS
                              " FROM execs WHERE session = ? AND id < ? ORDER BY id DESC LIMIT ?"};
constexpr Sql kListSessionFirst = {"list the session's executions",
                                   "SELECT " CUBICLE_EXEC_COLUMNS
                                   " FROM execs WHERE session = ? ORDER BY id DESC LIMIT ?"};
constexpr Sql kMarkLost = {"mark unfinished executions lost",
                           "UPDATE execs SET state = 'lost', finished_ms = ?, result = ? "
                           "WHERE state IN ('queued', 'running')"};
constexpr Sql kForgetEnded = {"forget ended executions",
                              "DELETE FROM execs WHERE state IN " CUBICLE_ENDED
                              " AND (finished_ms < ?1 OR id NOT IN (SELECT id FROM execs WHERE state IN " CUBICLE_ENDED
                              " ORDER BY finished_ms DESC, id DESC LIMIT ?2))"};

absl::Status CheckState(absl::string_view state, std::initializer_list<absl::string_view> allowed,
                        absl::string_view what) {
  for (absl::string_view ok : allowed) {
    if (state == ok) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " state '", state, "' is not one of ",
                                                 absl::StrJoin(allowed, "|")));
}

absl::Status CheckSession(const SessionRecord& s) {
  if (s.key.empty()) return absl::InvalidArgumentError("session key is empty");
  return CheckState(s.state, {"live", "archived"}, "session");
}

absl::Status CheckExec(const ExecRecord& e) {
  if (e.id.empty()) return absl::InvalidArgumentError("execution id is empty");
  return CheckState(e.state, {"queued", "running", "done", "cancelled", "lost"}, "execution");
}

int64_t AsLimit(size_t n) {
  return n > static_cast<size_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                       : static_cast<int64_t>(n);
}

SessionRecord ReadSession(const Query& q) {
  SessionRecord s;
  s.key = q.Text(0);
  s.profile = q.Text(1);
  s.created_ms = q.Int(2);
  s.last_used_ms = q.Int(3);
  s.idle_ttl_ms = q.Int(4);
  s.expires_ms = q.Int(5);
  s.state = q.Text(6);
  s.workspace = q.Text(7);
  s.options = q.Text(8);
  return s;
}

ExecRecord ReadExec(const Query& q) {
  ExecRecord e;
  e.id = q.Text(0);
  e.session = q.Text(1);
  e.key = q.Text(2);
  e.state = q.Text(3);
  e.created_ms = q.Int(4);
  e.started_ms = q.Int(5);
  e.finished_ms = q.Int(6);
  e.request = q.Text(7);
  e.result = q.Text(8);
  return e;
}

// Steps `q` to the end (bounded by its LIMIT or the table), reading each row.
template <typename Row, typename Read>
absl::StatusOr<std::vector<Row>> ReadAll(Query& q, Read read) {
  std::vector<Row> rows;
  for (;;) {
    CUBICLE_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return rows;
    rows.push_back(read(q));
  }
}

}  // namespace

namespace {

constexpr int kBusyTimeoutMs = 5000;
constexpr Sql kJournalMode = {"set the journal mode", "PRAGMA journal_mode = WAL"};

// SQLite gives a database's -wal and -shm files the database file's mode,
// so making that 0600 first keeps all three private.
absl::Status CreatePrivate(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return ErrnoStatus(errno, "create");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "fstat");
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError("not a regular file");
  if ((st.st_mode & 077) != 0 && ::fchmod(fd.get(), 0600) != 0) return ErrnoStatus(errno, "chmod 0600");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> UserVersion(sqlite::Connection& conn) {
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn.Use(kUserVersion));
  CUBICLE_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Int(0) : 0;
}

// WAL with synchronous=NORMAL: COMMIT returns once the transaction is
// written to the WAL file, i.e. in the kernel's page cache, so a killed
// process — the daemon's failure mode — loses nothing it committed. What it
// does not survive is the machine losing power or the kernel crashing: the
// last commits may be lost (the database stays consistent). synchronous=FULL
// would survive that too, at an fsync per commit.
absl::Status Configure(sqlite::Connection& conn) {
  sqlite3_busy_timeout(conn.get(), kBusyTimeoutMs);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn.Use(kJournalMode));
  CUBICLE_ASSIGN_OR_RETURN(bool row, q.Step());
  std::string mode = row ? q.Text(0) : "";
  if (mode != "wal") {
    return absl::FailedPreconditionError(absl::StrCat("set the journal mode: SQLite kept '", mode,
                                                      "' instead of 'wal' (does the file system offer shared memory?)"));
  }
  CUBICLE_RETURN_IF_ERROR(conn.Exec("PRAGMA synchronous = NORMAL", "set synchronous"));
  return conn.Exec("PRAGMA foreign_keys = ON", "turn on foreign keys");
}

absl::Status Migrate(sqlite::Connection& conn) {
  CUBICLE_ASSIGN_OR_RETURN(sqlite::Transaction txn, sqlite::Transaction::Begin(conn));
  // Read again under the write lock, in case another process migrated first.
  CUBICLE_ASSIGN_OR_RETURN(int64_t version, UserVersion(conn));
  if (version >= kRecordsSchemaVersion) return absl::OkStatus();
  for (int64_t v = version; v < kRecordsSchemaVersion; ++v) CUBICLE_RETURN_IF_ERROR(kMigrations[v](conn));
  std::string set = absl::StrCat("PRAGMA user_version = ", kRecordsSchemaVersion);
  CUBICLE_RETURN_IF_ERROR(conn.Exec(set.c_str(), "record the schema version"));
  return txn.Commit();
}

absl::StatusOr<std::unique_ptr<sqlite::Connection>> Connect(const std::string& path) {
  CUBICLE_RETURN_IF_ERROR(CreatePrivate(path));
  // NOMUTEX: Records serializes every call itself.
  CUBICLE_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Connection> conn,
                           sqlite::Connection::Open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                                                              SQLITE_OPEN_NOFOLLOW));
  // Before anything that could write: a newer schema is left as it was.
  CUBICLE_ASSIGN_OR_RETURN(int64_t version, UserVersion(*conn));
  if (version > kRecordsSchemaVersion || version < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "written by records schema version %d; this cubicle knows versions up to %d (run the cubicle that wrote "
        "it, or move the file aside)",
        version, kRecordsSchemaVersion));
  }
  CUBICLE_RETURN_IF_ERROR(Configure(*conn));
  if (version < kRecordsSchemaVersion) CUBICLE_RETURN_IF_ERROR(Migrate(*conn));
  return conn;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Records>> Records::Open(const std::string& db_path) {
  if (db_path.empty()) return absl::InvalidArgumentError("records database path is empty");
  auto conn = Connect(db_path);
  if (!conn.ok()) {
    return absl::Status(conn.status().code(), absl::StrCat("records ", db_path, ": ", conn.status().message()));
  }
  return std::unique_ptr<Records>(new Records(std::move(*conn)));
}

Records::Records(std::unique_ptr<sqlite::Connection> conn) : conn_(std::move(conn)) {}
Records::~Records() = default;

absl::Status Records::PutSession(const SessionRecord& s) {
  CUBICLE_RETURN_IF_ERROR(CheckSession(s));
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kPutSession));
  return q.Bind(s.key)
      .Bind(s.profile)
      .Bind(s.created_ms)
      .Bind(s.last_used_ms)
      .Bind(s.idle_ttl_ms)
      .Bind(s.expires_ms)
      .Bind(s.state)
      .Bind(s.workspace)
      .Bind(s.options)
      .Run();
}

absl::StatusOr<std::optional<SessionRecord>> Records::GetSession(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kGetSession));
  CUBICLE_ASSIGN_OR_RETURN(bool row, q.Bind(key).Step());
  if (!row) return std::optional<SessionRecord>();
  return std::optional<SessionRecord>(ReadSession(q));
}

absl::StatusOr<std::vector<SessionRecord>> Records::ListSessions() {
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kListSessions));
  return ReadAll<SessionRecord>(q, ReadSession);
}

absl::Status Records::RemoveSession(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kRemoveSession));
  CUBICLE_RETURN_IF_ERROR(q.Bind(key).Run());
  if (q.Changes() == 0) return absl::NotFoundError(absl::StrCat("remove session: no session '", key, "'"));
  return absl::OkStatus();
}

absl::Status Records::UpsertExecLocked(const ExecRecord& e, bool take_key) {
  CUBICLE_ASSIGN_OR_RETURN(Query put, conn_->Use(kPutExec));
  CUBICLE_RETURN_IF_ERROR(put.Bind(e.id)
                              .Bind(e.session)
                              .Bind(e.key)
                              .Bind(e.state)
                              .Bind(e.created_ms)
                              .Bind(e.started_ms)
                              .Bind(e.finished_ms)
                              .Bind(e.request)
                              .Bind(e.result)
                              .Run());
  CUBICLE_ASSIGN_OR_RETURN(Query drop, conn_->Use(kDropOtherKeys));
  CUBICLE_RETURN_IF_ERROR(drop.Bind(e.id).Bind(e.key).Run());
  if (e.key.empty()) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(Query key, conn_->Use(take_key ? kTakeKey : kOfferKey));
  return key.Bind(e.key).Bind(e.id).Bind(e.created_ms).Run();
}

absl::Status Records::PutExec(const ExecRecord& e) {
  CUBICLE_RETURN_IF_ERROR(CheckExec(e));
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(sqlite::Transaction txn, sqlite::Transaction::Begin(*conn_));
  CUBICLE_RETURN_IF_ERROR(UpsertExecLocked(e, /*take_key=*/false));
  return txn.Commit();
}

absl::StatusOr<std::string> Records::PutExecIfKeyFree(const ExecRecord& e, int64_t key_since_ms) {
  CUBICLE_RETURN_IF_ERROR(CheckExec(e));
  if (e.key.empty()) return absl::InvalidArgumentError("put execution if its key is free: the key is empty");
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(sqlite::Transaction txn, sqlite::Transaction::Begin(*conn_));
  CUBICLE_ASSIGN_OR_RETURN(std::optional<std::string> holder, FindKeyLocked(e.key, key_since_ms));
  if (holder.has_value()) return *holder;  // rolled back: nothing was written
  CUBICLE_RETURN_IF_ERROR(UpsertExecLocked(e, /*take_key=*/true));
  CUBICLE_RETURN_IF_ERROR(txn.Commit());
  return e.id;
}

absl::Status Records::EndExec(absl::string_view id, absl::string_view state, int64_t finished_ms,
                              absl::string_view result) {
  CUBICLE_RETURN_IF_ERROR(CheckState(state, {"done", "cancelled", "lost"}, "ended execution"));
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kEndExec));
  CUBICLE_RETURN_IF_ERROR(q.Bind(state).Bind(finished_ms).Bind(result).Bind(id).Run());
  if (q.Changes() == 0) return absl::NotFoundError(absl::StrCat("end execution: no execution '", id, "'"));
  return absl::OkStatus();
}

absl::Status Records::SetExecState(absl::string_view id, absl::string_view state, int64_t started_ms) {
  CUBICLE_RETURN_IF_ERROR(CheckState(state, {"queued", "running"}, "unfinished execution"));
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kSetExecState));
  CUBICLE_RETURN_IF_ERROR(q.Bind(state).Bind(started_ms).Bind(id).Run());
  if (q.Changes() == 0) return absl::NotFoundError(absl::StrCat("set execution state: no execution '", id, "'"));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ExecRecord>> Records::GetExec(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kGetExec));
  CUBICLE_ASSIGN_OR_RETURN(bool row, q.Bind(id).Step());
  if (!row) return std::optional<ExecRecord>();
  return std::optional<ExecRecord>(ReadExec(q));
}

absl::StatusOr<std::vector<ExecRecord>> Records::ListExecs(absl::string_view session, size_t limit,
                                                           absl::string_view before_id) {
  // Four statements rather than "(? = '' OR …)", so that each uses its index.
  const Sql& sql = session.empty() ? (before_id.empty() ? kListAllFirst : kListAll)
                                   : (before_id.empty() ? kListSessionFirst : kListSession);
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(sql));
  if (!session.empty()) q.Bind(session);
  if (!before_id.empty()) q.Bind(before_id);
  q.Bind(AsLimit(limit));
  return ReadAll<ExecRecord>(q, ReadExec);
}

absl::StatusOr<std::optional<std::string>> Records::FindKeyLocked(absl::string_view key, int64_t since_ms) {
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kFindKey));
  CUBICLE_ASSIGN_OR_RETURN(bool row, q.Bind(key).Bind(since_ms).Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(q.Text(0));
}

absl::StatusOr<std::optional<std::string>> Records::FindKey(absl::string_view key, int64_t since_ms) {
  if (key.empty()) return absl::InvalidArgumentError("find key: the key is empty");
  absl::MutexLock lock(&mu_);
  return FindKeyLocked(key, since_ms);
}

absl::StatusOr<size_t> Records::MarkUnfinishedLost(int64_t now_ms, absl::string_view result) {
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kMarkLost));
  CUBICLE_RETURN_IF_ERROR(q.Bind(now_ms).Bind(result).Run());
  return q.Changes();
}

absl::StatusOr<size_t> Records::ForgetEnded(int64_t before_ms, size_t keep) {
  absl::MutexLock lock(&mu_);
  CUBICLE_ASSIGN_OR_RETURN(Query q, conn_->Use(kForgetEnded));
  CUBICLE_RETURN_IF_ERROR(q.Bind(before_ms).Bind(AsLimit(keep)).Run());
  return q.Changes();
}

}  // namespace cubicle::sessions

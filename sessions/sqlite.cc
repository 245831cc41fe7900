#include "sessions/sqlite.h"


#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace cubicle::sessions::sqlite {
namespace {

absl::string_view CodeName(int primary) {
  switch (primary) {
#define CUBICLE_SQLITE_CASE(c) \
  case c:                      \
    return #c;
    CUBICLE_SQLITE_CASE(SQLITE_ERROR) CUBICLE_SQLITE_CASE(SQLITE_INTERNAL) CUBICLE_SQLITE_CASE(SQLITE_PERM)
    CUBICLE_SQLITE_CASE(SQLITE_ABORT) CUBICLE_SQLITE_CASE(SQLITE_BUSY) CUBICLE_SQLITE_CASE(SQLITE_LOCKED)
    CUBICLE_SQLITE_CASE(SQLITE_NOMEM) CUBICLE_SQLITE_CASE(SQLITE_READONLY) CUBICLE_SQLITE_CASE(SQLITE_INTERRUPT)
    CUBICLE_SQLITE_CASE(SQLITE_IOERR) CUBICLE_SQLITE_CASE(SQLITE_CORRUPT) CUBICLE_SQLITE_CASE(SQLITE_NOTFOUND)
    CUBICLE_SQLITE_CASE(SQLITE_FULL) CUBICLE_SQLITE_CASE(SQLITE_CANTOPEN) CUBICLE_SQLITE_CASE(SQLITE_PROTOCOL)
    CUBICLE_SQLITE_CASE(SQLITE_SCHEMA) CUBICLE_SQLITE_CASE(SQLITE_TOOBIG) CUBICLE_SQLITE_CASE(SQLITE_CONSTRAINT)
    CUBICLE_SQLITE_CASE(SQLITE_MISMATCH) CUBICLE_SQLITE_CASE(SQLITE_MISUSE) CUBICLE_SQLITE_CASE(SQLITE_NOLFS)
    CUBICLE_SQLITE_CASE(SQLITE_AUTH) CUBICLE_SQLITE_CASE(SQLITE_RANGE) CUBICLE_SQLITE_CASE(SQLITE_NOTADB)
#undef CUBICLE_SQLITE_CASE
    default:
      return "SQLITE";
  }
}

absl::StatusCode CodeFor(int primary) {
  switch (primary) {
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_CONSTRAINT:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status Error(sqlite3* db, int rc, absl::string_view purpose) {
  int primary = rc & 0xff;
  // The connection's message is specific ("UNIQUE constraint failed: …")
  // when it describes this error; otherwise the code's generic text.
  const char* text = db != nullptr && (sqlite3_errcode(db) & 0xff) == primary ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string msg = absl::StrCat(purpose, ": ", CodeName(primary), ": ", text);
  int err = db != nullptr ? sqlite3_system_errno(db) : 0;
  if (err != 0 && (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_FULL)) {
    absl::StrAppend(&msg, " (", ErrnoName(err), ")");
  }
  return absl::Status(CodeFor(primary), msg);
}

Query::Query(Query&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      purpose_(other.purpose_),
      next_(other.next_),
      bind_rc_(other.bind_rc_) {}

Query::~Query() {
  if (stmt_ == nullptr) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

Query& Query::Bind(absl::string_view text) {
  // An empty view's data() may be null, which SQLite would bind as NULL.
  const char* data = text.empty() ? "" : text.data();
  int rc = sqlite3_bind_text64(stmt_, next_++, data, text.size(), SQLITE_STATIC, SQLITE_UTF8);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Query& Query::Bind(int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, next_++, value);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

absl::StatusOr<bool> Query::Step() {
  if (bind_rc_ != SQLITE_OK) return Error(db_, bind_rc_, purpose_);
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return Error(db_, rc, purpose_);
}

absl::Status Query::Run() {
  CUBICLE_ASSIGN_OR_RETURN(bool row, Step());
  if (row) return absl::InternalError(absl::StrCat(purpose_, ": returned a row where none was expected"));
  return absl::OkStatus();
}

std::string Query::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  // A handle comes back even when opening fails; it must still be closed.
  std::unique_ptr<Connection> conn(new Connection(raw));
  if (rc != SQLITE_OK) return Error(raw, rc, absl::StrCat("open ", path));
  sqlite3_extended_result_codes(raw, 1);
  return conn;
}

absl::StatusOr<Query> Connection::Use(const Sql& sql) {
  StmtPtr& stmt = cache_[&sql];
  if (stmt == nullptr) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v3(db_.get(), sql.text, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(raw);
      return Error(db_.get(), rc, absl::StrCat("prepare to ", sql.purpose));
    }
    stmt.reset(raw);
  }
  return Query(db_.get(), stmt.get(), sql.purpose);
}

absl::Status Connection::Exec(const char* text, absl::string_view purpose) {
  int rc = sqlite3_exec(db_.get(), text, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(db_.get(), rc, purpose);
  return absl::OkStatus();
}

namespace {
constexpr Sql kBegin = {"begin a transaction", "BEGIN IMMEDIATE"};
constexpr Sql kCommit = {"commit", "COMMIT"};
constexpr Sql kRollback = {"roll back", "ROLLBACK"};
}  // namespace

absl::StatusOr<Transaction> Transaction::Begin(Connection& conn) {
  CUBICLE_ASSIGN_OR_RETURN(Query begin, conn.Use(kBegin));
  CUBICLE_RETURN_IF_ERROR(begin.Run());
  return Transaction(&conn);
}

absl::Status Transaction::Commit() {
  CUBICLE_ASSIGN_OR_RETURN(Query commit, conn_->Use(kCommit));
  CUBICLE_RETURN_IF_ERROR(commit.Run());
  conn_ = nullptr;
  return absl::OkStatus();
}

Transaction::~Transaction() {
  // A failed COMMIT may already have rolled back; then there is nothing to undo.
  if (conn_ == nullptr || sqlite3_get_autocommit(conn_->get())) return;
  auto rollback = conn_->Use(kRollback);
  if (rollback.ok()) (void)rollback->Run();
}

}  // namespace cubicle::sessions::sqlite

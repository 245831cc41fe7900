// A thin RAII layer over SQLite for sessions/records.cc: the connection and
// its cached prepared statements, one use of a statement, a transaction,
// and SQLite's result codes as absl::Status. Host side, not thread-safe:
// the caller serializes (Records holds a mutex).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::sessions::sqlite {

// What a statement is for (named in its errors) and its text. Statements
// are cached by the address of their Sql, so each is a static constant.
struct Sql {
  const char* purpose;
  const char* text;
};

// `rc` as a Status naming `purpose`, SQLite's code and message and, for an
// I/O error, the errno behind it. SQLITE_FULL is ResourceExhausted,
// BUSY/LOCKED Unavailable, CORRUPT/NOTADB DataLoss, READONLY/PERM/AUTH
// PermissionDenied, CONSTRAINT FailedPrecondition; the rest Internal.
absl::Status Error(sqlite3* db, int rc, absl::string_view purpose);

struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// One use of a cached statement: binds parameters in order, steps, reads
// columns, and resets the statement when destroyed, so that an unfinished
// read does not keep its snapshot (and the WAL) pinned.
class Query {
 public:
  Query(sqlite3* db, sqlite3_stmt* stmt, absl::string_view purpose) : db_(db), stmt_(stmt), purpose_(purpose) {}
  Query(Query&& other) noexcept;
  Query& operator=(Query&&) = delete;
  Query(const Query&) = delete;
  ~Query();

  // The text must outlive this Query (it is bound without a copy).
  Query& Bind(absl::string_view text);
  Query& Bind(int64_t value);
  absl::StatusOr<bool> Step();  // true: a row is ready to read
  absl::Status Run();           // steps once, expecting no row
  std::string Text(int column) const;
  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  size_t Changes() const { return static_cast<size_t>(sqlite3_changes64(db_)); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  absl::string_view purpose_;
  int next_ = 1;
  int bind_rc_ = SQLITE_OK;
};

class Connection {
 public:
  // sqlite3_open_v2 with `flags`; errors name `path`.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path, int flags);

  sqlite3* get() const { return db_.get(); }
  // `sql`'s statement, prepared on first use and kept for the connection's life.
  absl::StatusOr<Query> Use(const Sql& sql);
  // Runs `text` (one or more statements, no parameters) uncached: for
  // schema changes and pragmas that run once.
  absl::Status Exec(const char* text, absl::string_view purpose);

 private:
  struct Closer {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
  };
  explicit Connection(sqlite3* db) : db_(db) {}

  std::unique_ptr<sqlite3, Closer> db_;
  std::unordered_map<const Sql*, StmtPtr> cache_;  // declared after db_: finalized before it closes
};

// BEGIN IMMEDIATE: the write lock is taken at the start, so a transaction
// that reads then writes cannot fail half-way with SQLITE_BUSY. Rolled back
// unless Commit succeeds.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Connection& conn);
  Transaction(Transaction&& other) noexcept : conn_(std::exchange(other.conn_, nullptr)) {}
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  absl::Status Commit();

 private:
  explicit Transaction(Connection* conn) : conn_(conn) {}
  Connection* conn_;
};

}  // namespace cubicle::sessions::sqlite

// A thin SQLite wrapper shared by the cache index and the job store: one connection in
// WAL mode with synchronous=FULL (a committed transaction survives kill -9 and power
// loss), prepared statements with typed binds, and Status errors naming the SQL.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln {

class Statement {
 public:
  Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }
  ~Statement();
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view text);
  Statement& BindBlob(int index, std::string_view bytes);
  // true: a row is ready; false: done. Errors are returned through status().
  bool Step();
  absl::Status status() const { return status_; }
  // Runs to completion (for INSERT/UPDATE/DELETE).
  absl::Status Run();
  int64_t Int(int column) const;
  double Real(int column) const;
  std::string Text(int column) const;
  bool IsNull(int column) const;

 private:
  friend class SqliteDb;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  absl::Status status_;
};

class SqliteDb {
 public:
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path);
  ~SqliteDb();
  absl::Status Exec(const std::string& sql);
  // An invalid statement is a programming error: it aborts with the SQL and message.
  Statement Prepare(const std::string& sql);
  int64_t Changes() const;
  // Callers hold this around a statement sequence (and around BEGIN ... COMMIT).
  std::mutex& mutex() { return mutex_; }
  const std::string& path() const { return path_; }

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
  std::mutex mutex_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back when not committed.
class Transaction {
 public:
  explicit Transaction(SqliteDb& db);
  ~Transaction();
  absl::Status Commit();
  absl::Status status() const { return begin_status_; }

 private:
  SqliteDb& db_;
  absl::Status begin_status_;
  bool done_ = false;
};

}  // namespace kiln

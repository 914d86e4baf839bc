// SqliteDb: see sqlite_db.h.
#include "kiln/common/sqlite_db.h"

#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kiln {

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement& Statement::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}
Statement& Statement::Bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}
Statement& Statement::Bind(int index, std::string_view text) {
  sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}
Statement& Statement::BindBlob(int index, std::string_view bytes) {
  sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  return *this;
}

bool Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE && status_.ok()) {
    status_ = absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_), " in: ", sqlite3_sql(stmt_)));
  }
  return false;
}

absl::Status Statement::Run() {
  while (Step()) {
  }
  return status_;
}

int64_t Statement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::Real(int column) const { return sqlite3_column_double(stmt_, column); }
bool Statement::IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
std::string Statement::Text(int column) const {
  const void* bytes = sqlite3_column_blob(stmt_, column);
  int size = sqlite3_column_bytes(stmt_, column);
  return bytes == nullptr ? std::string() : std::string(static_cast<const char*>(bytes), static_cast<size_t>(size));
}

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open database ", path, ": ", message));
  }
  std::unique_ptr<SqliteDb> out(new SqliteDb(db, path));
  sqlite3_busy_timeout(db, 10000);
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"}) {
    if (auto s = out->Exec(pragma); !s.ok()) return s;
  }
  return out;
}

SqliteDb::~SqliteDb() { sqlite3_close(db_); }

absl::Status SqliteDb::Exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status s =
        absl::InternalError(absl::StrCat("sqlite ", path_, ": ", error != nullptr ? error : "?", " in: ", sql));
    sqlite3_free(error);
    return s;
  }
  return absl::OkStatus();
}

Statement SqliteDb::Prepare(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    std::fprintf(stderr, "kiln: internal error: bad SQL (%s): %s\n", sqlite3_errmsg(db_), sql.c_str());
    std::abort();
  }
  return Statement(db_, stmt);
}

int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

Transaction::Transaction(SqliteDb& db) : db_(db) { begin_status_ = db_.Exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_ && begin_status_.ok()) db_.Exec("ROLLBACK").IgnoreError();
}

absl::Status Transaction::Commit() {
  done_ = true;
  if (!begin_status_.ok()) return begin_status_;
  return db_.Exec("COMMIT");
}

}  // namespace kiln

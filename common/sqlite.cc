#include "common/sqlite.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace calleval::db {
namespace {

// A write batch larger than this gains nothing and holds readers' WAL checkpoint back.
constexpr size_t kMaxBatch = 512;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Statement

Statement::~Statement() {
  if (stmt_ == nullptr) return;
  if (owned_) {
    sqlite3_finalize(stmt_);
  } else {
    conn_->Release(stmt_);
  }
}

Statement& Statement::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, absl::string_view value) {
  sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Statement& Statement::BindBlob(int index, absl::string_view value) {
  sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return conn_->ErrorStatus(rc, sqlite3_sql(stmt_));
}

absl::Status Statement::Run() {
  while (true) {
    ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return absl::OkStatus();
  }
}

bool Statement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::Int64(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::Double(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::Text(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_blob(stmt_, column));
  int size = sqlite3_column_bytes(stmt_, column);
  return text == nullptr ? std::string() : std::string(text, size);
}

std::optional<std::string> Statement::OptionalText(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Text(column);
}

std::optional<int64_t> Statement::OptionalInt64(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Int64(column);
}

std::optional<double> Statement::OptionalDouble(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Double(column);
}

// ---------------------------------------------------------------------------------------------
// Connection

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path,
                                                             bool read_only) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_NOMUTEX |
              (read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open database ", path, ": ", message));
  }
  sqlite3_extended_result_codes(db, 1);
  // Writers wait for each other across processes (callevalctl while the server runs).
  sqlite3_busy_timeout(db, 10000);
  auto conn = std::unique_ptr<Connection>(new Connection(db));
  RETURN_IF_ERROR(conn->Exec("PRAGMA foreign_keys=ON"));
  return conn;
}

Connection::~Connection() {
  for (auto& [sql, cached] : cache_) sqlite3_finalize(cached.stmt);
  sqlite3_close_v2(db_);
}

absl::StatusOr<Statement> Connection::Prepare(absl::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it != cache_.end() && !it->second.in_use) {
    it->second.in_use = true;
    return Statement(it->second.stmt, this, /*owned=*/false);
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return ErrorStatus(rc, sql);
  if (it != cache_.end()) return Statement(stmt, this, /*owned=*/true);
  auto [inserted, ok] = cache_.emplace(std::string(sql), Cached{stmt, true});
  by_stmt_[stmt] = &inserted->second;
  return Statement(stmt, this, /*owned=*/false);
}

void Connection::Release(sqlite3_stmt* stmt) {
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  auto it = by_stmt_.find(stmt);
  if (it != by_stmt_.end()) it->second->in_use = false;
}

absl::Status Connection::Exec(absl::string_view sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errstr(rc);
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message, " in: ", sql.substr(0, 200)));
  }
  return absl::OkStatus();
}

absl::Status Connection::ErrorStatus(int rc, absl::string_view context) const {
  std::string message =
      absl::StrCat("sqlite: ", sqlite3_errmsg(db_), " (", rc, ") in: ", context.substr(0, 200));
  int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return absl::UnavailableError(message);
  if (primary == SQLITE_CONSTRAINT) return absl::AlreadyExistsError(message);
  return absl::InternalError(message);
}

// ---------------------------------------------------------------------------------------------
// Database

struct Database::PendingWrite {
  const WriteFn* fn;
  absl::Status status;
  bool done = false;
};

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path,
                                                         const std::vector<Migration>& migrations,
                                                         Options options) {
  auto db = std::unique_ptr<Database>(new Database());
  db->path_ = path;
  db->options_ = options;
  ASSIGN_OR_RETURN(db->writer_, Connection::Open(path, /*read_only=*/false));
  Connection& w = *db->writer_;
  RETURN_IF_ERROR(w.Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(
      w.Exec(options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));

  // Migrations run in one exclusive transaction so two processes starting together do not
  // both apply them.
  RETURN_IF_ERROR(w.Exec("BEGIN EXCLUSIVE"));
  absl::Status migrated = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto version_stmt, w.Prepare("PRAGMA user_version"));
    ASSIGN_OR_RETURN(bool row, version_stmt.Step());
    int64_t version = row ? version_stmt.Int64(0) : 0;
    for (const Migration& m : migrations) {
      if (m.version <= version) continue;
      RETURN_IF_ERROR(w.Exec(m.sql));
      RETURN_IF_ERROR(w.Exec(absl::StrCat("PRAGMA user_version=", m.version)));
      version = m.version;
    }
    return absl::OkStatus();
  }();
  if (!migrated.ok()) {
    w.Exec("ROLLBACK").IgnoreError();
    return migrated;
  }
  RETURN_IF_ERROR(w.Exec("COMMIT"));
  return db;
}

absl::Status Database::Write(const WriteFn& fn) {
  PendingWrite self{&fn};
  absl::MutexLock lock(&write_mu_);
  write_queue_.push_back(&self);
  struct Waiter {
    PendingWrite* self;
    Database* db;
    static bool Ready(Waiter* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return w->self->done || !w->db->leader_active_;
    }
  } waiter{&self, this};
  while (true) {
    write_mu_.Await(absl::Condition(&Waiter::Ready, &waiter));
    if (self.done) return self.status;
    // No commit is in progress: lead one for everything queued so far (including self).
    leader_active_ = true;
    std::vector<PendingWrite*> batch;
    while (!write_queue_.empty() && batch.size() < kMaxBatch) {
      batch.push_back(write_queue_.front());
      write_queue_.pop_front();
    }
    write_mu_.Unlock();
    CommitBatch(batch);
    write_mu_.Lock();
    for (PendingWrite* p : batch) p->done = true;
    leader_active_ = false;
  }
}

void Database::CommitBatch(std::vector<PendingWrite*>& batch) {
  Connection& w = *writer_;
  absl::Status begun = w.Exec("BEGIN IMMEDIATE");
  if (!begun.ok()) {
    for (PendingWrite* p : batch) p->status = begun;
    return;
  }
  for (PendingWrite* p : batch) {
    absl::Status s = w.Exec("SAVEPOINT w");
    if (s.ok()) {
      p->status = (*p->fn)(w);
      s = p->status.ok() ? w.Exec("RELEASE w") : w.Exec("ROLLBACK TO w; RELEASE w");
    }
    if (!s.ok() && p->status.ok()) p->status = s;
  }
  absl::Status committed = w.Exec("COMMIT");
  if (!committed.ok()) {
    w.Exec("ROLLBACK").IgnoreError();
    for (PendingWrite* p : batch) {
      if (p->status.ok()) p->status = committed;
    }
  }
}

absl::Status Database::Read(const ReadFn& fn) {
  std::unique_ptr<Connection> conn;
  {
    absl::MutexLock lock(&read_mu_);
    if (!idle_readers_.empty()) {
      conn = std::move(idle_readers_.back());
      idle_readers_.pop_back();
    }
  }
  if (conn == nullptr) {
    ASSIGN_OR_RETURN(conn, Connection::Open(path_, /*read_only=*/true));
  }
  // A read transaction keeps every statement of `fn` on one snapshot.
  auto run = [&](absl::string_view sql) -> absl::Status {
    ASSIGN_OR_RETURN(Statement stmt, conn->Prepare(sql));
    return stmt.Run();
  };
  absl::Status status = run("BEGIN");
  if (status.ok()) {
    status = fn(*conn);
    absl::Status ended = run("COMMIT");
    if (status.ok()) status = ended;
  }
  absl::MutexLock lock(&read_mu_);
  if (idle_readers_.size() < static_cast<size_t>(options_.readers)) {
    idle_readers_.push_back(std::move(conn));
  }
  return status;
}

}  // namespace calleval::db

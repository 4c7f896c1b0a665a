// The SQLite backend of common/database.h.
//
// One file per installation, WAL mode. Reads run on a small pool of reader connections; writes
// go through one writer connection per process with group commit: concurrent Write() calls are
// gathered into a single BEGIN IMMEDIATE ... COMMIT (each inside its own SAVEPOINT, so one
// failing write does not undo the others). With synchronous=FULL every acknowledged write is on
// disk, and the fsync is shared by everything committed together, which is what lets durable
// ingests go far past one fsync per request.

#include <sqlite3.h>

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/database.h"
#include "common/status_macros.h"

namespace calleval::db {
namespace {

// A write batch larger than this gains nothing and holds readers' WAL checkpoint back.
constexpr size_t kMaxBatch = 512;

class SqliteConnection;

class SqliteStatement final : public StatementImpl {
 public:
  SqliteStatement(sqlite3_stmt* stmt, SqliteConnection* conn, bool owned)
      : stmt_(stmt), conn_(conn), owned_(owned) {}
  ~SqliteStatement() override { sqlite3_finalize(stmt_); }

  void BindInt64(int index, int64_t value) override { sqlite3_bind_int64(stmt_, index, value); }
  void BindDouble(int index, double value) override { sqlite3_bind_double(stmt_, index, value); }
  void BindText(int index, absl::string_view value) override {
    sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  }
  void BindBlob(int index, absl::string_view value) override {
    sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT);
  }
  void BindNull(int index) override { sqlite3_bind_null(stmt_, index); }
  absl::StatusOr<bool> Step() override;
  bool IsNull(int column) const override {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  }
  int64_t Int64(int column) const override { return sqlite3_column_int64(stmt_, column); }
  double Double(int column) const override { return sqlite3_column_double(stmt_, column); }
  std::string Text(int column) const override {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_blob(stmt_, column));
    const int size = sqlite3_column_bytes(stmt_, column);
    return text == nullptr ? std::string() : std::string(text, size);
  }
  void Release() override {
    if (owned_) {
      delete this;
      return;
    }
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    in_use_ = false;
  }

  bool in_use() const { return in_use_; }
  void set_in_use() { in_use_ = true; }

 private:
  sqlite3_stmt* stmt_;
  SqliteConnection* conn_;
  // Prepared because the cached one was in use: deleted instead of returned.
  bool owned_;
  bool in_use_ = false;
};

class SqliteConnection final : public Connection {
 public:
  static absl::StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path,
                                                                bool read_only);
  ~SqliteConnection() override {
    cache_.clear();  // finalizes every cached statement before the connection closes
    sqlite3_close_v2(db_);
  }

  absl::StatusOr<Statement> Prepare(absl::string_view sql) override;
  absl::Status Exec(absl::string_view sql) override;
  int64_t LastInsertRowId() override { return sqlite3_last_insert_rowid(db_); }
  int Changes() const override { return sqlite3_changes(db_); }
  Backend backend() const override { return Backend::kSqlite; }

  absl::Status ErrorStatus(int rc, absl::string_view context) const;

 private:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}

  sqlite3* db_;
  absl::flat_hash_map<std::string, std::unique_ptr<SqliteStatement>> cache_;
};

absl::StatusOr<bool> SqliteStatement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return conn_->ErrorStatus(rc, sqlite3_sql(stmt_));
}

absl::StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(const std::string& path,
                                                                         bool read_only) {
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_NOMUTEX | (read_only ? SQLITE_OPEN_READONLY
                                                     : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open database ", path, ": ", message));
  }
  sqlite3_extended_result_codes(db, 1);
  // Writers wait for each other across processes (callevalctl while the server runs).
  sqlite3_busy_timeout(db, 10000);
  auto conn = std::unique_ptr<SqliteConnection>(new SqliteConnection(db));
  RETURN_IF_ERROR(conn->Exec("PRAGMA foreign_keys=ON"));
  return conn;
}

absl::StatusOr<Statement> SqliteConnection::Prepare(absl::string_view sql) {
  RETURN_IF_ERROR(TakeStatement(sql));
  auto it = cache_.find(sql);  // no copy of the text: a lookup by string_view
  if (it != cache_.end() && !it->second->in_use()) {
    it->second->set_in_use();
    return Statement(it->second.get());
  }
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return ErrorStatus(rc, sql);
  if (it != cache_.end()) return Statement(new SqliteStatement(stmt, this, /*owned=*/true));
  auto cached = std::make_unique<SqliteStatement>(stmt, this, /*owned=*/false);
  cached->set_in_use();
  SqliteStatement* raw = cached.get();
  cache_.emplace(std::string(sql), std::move(cached));
  return Statement(raw);
}

absl::Status SqliteConnection::Exec(absl::string_view sql) {
  RETURN_IF_ERROR(TakeStatement(sql));
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errstr(rc);
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message, " in: ", sql.substr(0, 200)));
  }
  return absl::OkStatus();
}

absl::Status SqliteConnection::ErrorStatus(int rc, absl::string_view context) const {
  std::string message =
      absl::StrCat("sqlite: ", sqlite3_errmsg(db_), " (", rc, ") in: ", context.substr(0, 200));
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return absl::UnavailableError(message);
  if (primary == SQLITE_CONSTRAINT) return absl::AlreadyExistsError(message);
  return absl::InternalError(message);
}

class SqliteDatabase final : public Database {
 public:
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                        const std::vector<Migration>& migrations,
                                                        const Options& options);

  using Database::Write;
  // One writer: every transaction is serializable, whatever `options` ask.
  absl::Status Write(const WriteFn& fn, const WriteOptions& options) override;
  using Database::Read;
  absl::Status Read(const ReadFn& fn, const ReadOptions& options) override;
  Backend backend() const override { return Backend::kSqlite; }
  const std::string& path() const override { return path_; }

 private:
  struct PendingWrite {
    const WriteFn* fn;
    absl::Status status;
    bool done = false;
    bool single_statement = false;
  };
  SqliteDatabase() = default;
  void CommitBatch(std::vector<PendingWrite*>& batch);

  std::string path_;
  std::unique_ptr<SqliteConnection> writer_;

  absl::Mutex write_mu_;
  std::deque<PendingWrite*> write_queue_ ABSL_GUARDED_BY(write_mu_);
  bool leader_active_ ABSL_GUARDED_BY(write_mu_) = false;

  absl::Mutex read_mu_;
  std::vector<std::unique_ptr<SqliteConnection>> idle_readers_ ABSL_GUARDED_BY(read_mu_);
  Options options_;
};

absl::StatusOr<std::unique_ptr<Database>> SqliteDatabase::Open(
    const std::string& path, const std::vector<Migration>& migrations, const Options& options) {
  auto db = std::unique_ptr<SqliteDatabase>(new SqliteDatabase());
  db->path_ = path;
  db->options_ = options;
  ASSIGN_OR_RETURN(db->writer_, SqliteConnection::Open(path, /*read_only=*/false));
  SqliteConnection& w = *db->writer_;
  RETURN_IF_ERROR(w.Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(
      w.Exec(options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));

  // Migrations run in one exclusive transaction so two processes starting together do not
  // both apply them.
  RETURN_IF_ERROR(w.Exec("BEGIN EXCLUSIVE"));
  absl::Status migrated = [&]() -> absl::Status {
    int64_t version = 0;
    {
      // Released before the migrations run: a statement still stepping would make a migration's
      // DROP TABLE fail with "database table is locked".
      ASSIGN_OR_RETURN(auto version_stmt, w.Prepare("PRAGMA user_version"));
      ASSIGN_OR_RETURN(bool row, version_stmt.Step());
      if (row) version = version_stmt.Int64(0);
    }
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
  return std::unique_ptr<Database>(std::move(db));
}

absl::Status SqliteDatabase::Write(const WriteFn& fn, const WriteOptions& options) {
  static telemetry::Histogram& durations = TransactionDurations("sqlite", "write");
  telemetry::ScopedTimer timer(durations);
  // SQLite has one writer, serializable whatever is asked; a single-statement write keeps its
  // limit so that it fails here as it would on PostgreSQL.
  PendingWrite self{&fn};
  self.single_statement = options.isolation == Isolation::kSingleStatement;
  absl::MutexLock lock(&write_mu_);
  write_queue_.push_back(&self);
  struct Waiter {
    PendingWrite* self;
    SqliteDatabase* db;
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

void SqliteDatabase::CommitBatch(std::vector<PendingWrite*>& batch) {
  SqliteConnection& w = *writer_;
  absl::Status begun = w.Exec("BEGIN IMMEDIATE");
  if (!begun.ok()) {
    for (PendingWrite* p : batch) p->status = begun;
    return;
  }
  for (PendingWrite* p : batch) {
    absl::Status s = w.Exec("SAVEPOINT w");
    if (s.ok()) {
      w.LimitToOneStatement(p->single_statement);
      p->status = (*p->fn)(w);
      w.LimitToOneStatement(false);
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

absl::Status SqliteDatabase::Read(const ReadFn& fn, const ReadOptions& options) {
  static telemetry::Histogram& durations = TransactionDurations("sqlite", "read");
  telemetry::ScopedTimer timer(durations);
  std::unique_ptr<SqliteConnection> conn;
  {
    absl::MutexLock lock(&read_mu_);
    if (!idle_readers_.empty()) {
      conn = std::move(idle_readers_.back());
      idle_readers_.pop_back();
    }
  }
  if (conn == nullptr) {
    ASSIGN_OR_RETURN(conn, SqliteConnection::Open(path_, /*read_only=*/true));
  }
  absl::Status status;
  if (options.single_statement) {
    // One statement is its own transaction, on one snapshot.
    conn->LimitToOneStatement(true);
    status = fn(*conn);
    conn->LimitToOneStatement(false);
  } else {
    // A read transaction keeps every statement of `fn` on one snapshot.
    auto run = [&](absl::string_view sql) -> absl::Status {
      ASSIGN_OR_RETURN(Statement stmt, conn->Prepare(sql));
      return stmt.Run();
    };
    status = run("BEGIN");
    if (status.ok()) {
      status = fn(*conn);
      absl::Status ended = run("COMMIT");
      if (status.ok()) status = ended;
    }
  }
  absl::MutexLock lock(&read_mu_);
  if (idle_readers_.size() < static_cast<size_t>(options_.readers)) {
    idle_readers_.push_back(std::move(conn));
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> OpenSqlite(const std::string& path,
                                                     const std::vector<Migration>& migrations,
                                                     const Database::Options& options) {
  return SqliteDatabase::Open(path, migrations, options);
}

}  // namespace calleval::db

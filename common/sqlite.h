#pragma once

// SQLite access shared by every store.
//
// One file per installation, WAL mode. Reads run on a small pool of reader connections; writes
// go through one writer connection per process with group commit: concurrent Write() calls are
// gathered into a single BEGIN IMMEDIATE ... COMMIT (each inside its own SAVEPOINT, so one
// failing write does not undo the others). With synchronous=FULL every acknowledged write is on
// disk, and the fsync is shared by everything committed together, which is what lets durable
// ingests go far past one fsync per request.

#include <sqlite3.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace calleval::db {

class Connection;

// A prepared statement borrowed from a connection's cache; reset and unbound when it goes out
// of scope. Bind indexes are 1-based as in SQLite; column indexes are 0-based.
class Statement {
 public:
  Statement(Statement&& other) noexcept
      : stmt_(other.stmt_), conn_(other.conn_), owned_(other.owned_) {
    other.stmt_ = nullptr;
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Statement& Bind(int index, double value);
  Statement& Bind(int index, absl::string_view value);
  Statement& Bind(int index, const char* value) { return Bind(index, absl::string_view(value)); }
  Statement& Bind(int index, const std::string& value) {
    return Bind(index, absl::string_view(value));
  }
  Statement& BindBlob(int index, absl::string_view value);
  Statement& BindNull(int index);
  template <typename T>
  Statement& Bind(int index, const std::optional<T>& value) {
    return value ? Bind(index, *value) : BindNull(index);
  }

  // Advances: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows to completion.
  absl::Status Run();

  bool IsNull(int column) const;
  int64_t Int64(int column) const;
  double Double(int column) const;
  std::string Text(int column) const;
  std::optional<std::string> OptionalText(int column) const;
  std::optional<int64_t> OptionalInt64(int column) const;
  std::optional<double> OptionalDouble(int column) const;

 private:
  friend class Connection;
  Statement(sqlite3_stmt* stmt, Connection* conn, bool owned)
      : stmt_(stmt), conn_(conn), owned_(owned) {}
  sqlite3_stmt* stmt_;
  Connection* conn_;
  // A statement prepared because the cached one was in use; finalized instead of returned.
  bool owned_;
};

class Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path, bool read_only);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Returns the cached prepared statement for `sql`, compiling it on first use. While one
  // Statement for a text is alive, preparing the same text again gives a separate statement.
  absl::StatusOr<Statement> Prepare(absl::string_view sql);
  // Executes one or more statements without results.
  absl::Status Exec(absl::string_view sql);

  int64_t LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
  int Changes() const { return sqlite3_changes(db_); }
  sqlite3* raw() { return db_; }

  absl::Status ErrorStatus(int rc, absl::string_view context) const;

 private:
  friend class Statement;
  struct Cached {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  explicit Connection(sqlite3* db) : db_(db) {}
  void Release(sqlite3_stmt* stmt);

  sqlite3* db_;
  std::unordered_map<std::string, Cached> cache_;
  std::unordered_map<sqlite3_stmt*, Cached*> by_stmt_;
};

// One schema migration: applied in order, once, tracked by PRAGMA user_version.
struct Migration {
  int version;
  std::string sql;
};

class Database {
 public:
  struct Options {
    int readers = 4;
    // FULL makes every acknowledged write durable; tests may relax it.
    bool synchronous_full = true;
  };

  // Opens (creating if needed) the database file and applies `migrations`.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                        const std::vector<Migration>& migrations,
                                                        Options options);
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                        const std::vector<Migration>& migrations) {
    return Open(path, migrations, Options());
  }

  using WriteFn = std::function<absl::Status(Connection&)>;
  using ReadFn = std::function<absl::Status(Connection&)>;

  // Runs `fn` inside a write transaction (group-committed with concurrent writers). A non-OK
  // status from `fn` rolls back only its own changes and is returned as is.
  absl::Status Write(const WriteFn& fn);
  // Runs `fn` on a reader connection (a consistent snapshot for the duration of fn).
  absl::Status Read(const ReadFn& fn);

  const std::string& path() const { return path_; }

 private:
  struct PendingWrite;
  Database() = default;
  void CommitBatch(std::vector<PendingWrite*>& batch);

  std::string path_;
  std::unique_ptr<Connection> writer_;

  absl::Mutex write_mu_;
  std::deque<PendingWrite*> write_queue_ ABSL_GUARDED_BY(write_mu_);
  bool leader_active_ ABSL_GUARDED_BY(write_mu_) = false;

  absl::Mutex read_mu_;
  std::vector<std::unique_ptr<Connection>> idle_readers_ ABSL_GUARDED_BY(read_mu_);
  Options options_;
};

// Runs `fn` in a write transaction and returns what it produced.
template <typename T>
absl::StatusOr<T> WriteResult(Database& db,
                              const std::function<absl::StatusOr<T>(Connection&)>& fn) {
  std::optional<T> out;
  absl::Status status = db.Write([&](Connection& c) -> absl::Status {
    auto r = fn(c);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return std::move(*out);
}

template <typename T>
absl::StatusOr<T> ReadResult(Database& db,
                             const std::function<absl::StatusOr<T>(Connection&)>& fn) {
  std::optional<T> out;
  absl::Status status = db.Read([&](Connection& c) -> absl::Status {
    auto r = fn(c);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return std::move(*out);
}

}  // namespace calleval::db

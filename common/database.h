#pragma once

// The database layer every store uses: one narrow interface, two backends.
//
//  * SQLite (common/sqlite.cc), the embedded default: one file, WAL, a single writer connection
//    with group commit, readers on a small pool.
//  * PostgreSQL (common/postgres.cc), for installations whose roles run on several nodes: a
//    pool of libpq connections, writes in SERIALIZABLE transactions retried on serialization
//    failures and deadlocks, statement timeouts. Queue claims are the exception: they run READ
//    COMMITTED and lock the row they take (WriteOptions, Connection::ForUpdateSkipLocked).
//
// Stores write SQL once, in the dialect both accept: `?` and `?NNN` parameters (rewritten to
// `$n` for PostgreSQL), no backend-specific functions. Schema migrations are the exception and
// carry one text per backend.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/telemetry.h"

namespace calleval::db {

enum class Backend { kSqlite, kPostgres };

// How a write transaction is isolated from concurrent ones. SQLite has one writer, which is
// serializable whatever is asked; the choice matters on PostgreSQL only.
enum class Isolation {
  // The default: every write behaves as if the writes ran one at a time, as on SQLite. A
  // transaction that loses a conflict is run again.
  kSerializable,
  // Each statement sees what was committed when it started; nothing is detected for the
  // transaction as a whole. For queue claims, which pick their row with ForUpdateSkipLocked()
  // and lock every other row whose read decides what they write (ForUpdate()): under
  // SERIALIZABLE, workers claiming from one queue at once conflict with each other and retry.
  kReadCommitted,
  // One statement and nothing else: PostgreSQL runs it on its own, outside any BEGIN and
  // COMMIT, as atomic as every statement is there, in one round trip where a transaction
  // takes two. A second statement fails (kFailedPrecondition) without being sent: a mistake in
  // the store, after which the first has committed on PostgreSQL and is rolled back on SQLite.
  // For the hot writes written as one statement (an ingest's call and its planned metrics).
  kSingleStatement,
};

struct WriteOptions {
  Isolation isolation = Isolation::kSerializable;
};

struct ReadOptions {
  // The read runs one statement, which sees one snapshot of its own: no BEGIN and no COMMIT
  // (PostgreSQL's round trips, SQLite's two steps). A second statement fails
  // (kFailedPrecondition) without being sent. For the hot point reads.
  bool single_statement = false;
};
// A read of one statement (ReadOptions::single_statement).
inline constexpr ReadOptions kSingleStatementRead{/*single_statement=*/true};

// What a backend implements for one prepared statement. Bind indexes are 1-based, column
// indexes 0-based.
class StatementImpl {
 public:
  virtual ~StatementImpl() = default;
  virtual void BindInt64(int index, int64_t value) = 0;
  virtual void BindDouble(int index, double value) = 0;
  virtual void BindText(int index, absl::string_view value) = 0;
  virtual void BindBlob(int index, absl::string_view value) = 0;
  virtual void BindNull(int index) = 0;
  virtual absl::StatusOr<bool> Step() = 0;
  virtual bool IsNull(int column) const = 0;
  virtual int64_t Int64(int column) const = 0;
  virtual double Double(int column) const = 0;
  // Text and blob columns as bytes; numbers as their decimal text.
  virtual std::string Text(int column) const = 0;
  // The Statement using it is done: reset it for the connection's cache, or delete it.
  virtual void Release() = 0;
};

// A prepared statement borrowed from a connection; reset (or freed) when it goes out of scope.
class Statement {
 public:
  explicit Statement(StatementImpl* impl) : impl_(impl) {}
  Statement(Statement&& other) noexcept : impl_(std::exchange(other.impl_, nullptr)) {}
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& operator=(Statement&&) = delete;
  ~Statement() {
    if (impl_ != nullptr) impl_->Release();
  }

  Statement& Bind(int index, int64_t value) {
    impl_->BindInt64(index, value);
    return *this;
  }
  Statement& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Statement& Bind(int index, double value) {
    impl_->BindDouble(index, value);
    return *this;
  }
  Statement& Bind(int index, absl::string_view value) {
    impl_->BindText(index, value);
    return *this;
  }
  Statement& Bind(int index, const char* value) { return Bind(index, absl::string_view(value)); }
  Statement& Bind(int index, const std::string& value) {
    return Bind(index, absl::string_view(value));
  }
  Statement& BindBlob(int index, absl::string_view value) {
    impl_->BindBlob(index, value);
    return *this;
  }
  Statement& BindNull(int index) {
    impl_->BindNull(index);
    return *this;
  }
  template <typename T>
  Statement& Bind(int index, const std::optional<T>& value) {
    return value ? Bind(index, *value) : BindNull(index);
  }

  // Advances: true when a row is available, false when done.
  absl::StatusOr<bool> Step() { return impl_->Step(); }
  // Runs a statement that returns no rows to completion.
  absl::Status Run();
  // Runs an `INSERT ... RETURNING id` of one row to completion and returns the id. Prefer it
  // to Connection::LastInsertRowId(): the id comes back with the insert (SQLite has RETURNING
  // since 3.35), where lastval() costs PostgreSQL three more round trips.
  absl::StatusOr<int64_t> RunReturningId();

  bool IsNull(int column) const { return impl_->IsNull(column); }
  int64_t Int64(int column) const { return impl_->Int64(column); }
  double Double(int column) const { return impl_->Double(column); }
  std::string Text(int column) const { return impl_->Text(column); }
  std::optional<std::string> OptionalText(int column) const;
  std::optional<int64_t> OptionalInt64(int column) const;
  std::optional<double> OptionalDouble(int column) const;

 private:
  StatementImpl* impl_;
};

// One connection, inside a transaction while a store's function runs on it.
class Connection {
 public:
  virtual ~Connection() = default;
  // Returns the cached prepared statement for `sql`, compiling it on first use. While one
  // Statement for a text is alive, preparing the same text again gives a separate statement.
  virtual absl::StatusOr<Statement> Prepare(absl::string_view sql) = 0;
  // Executes one or more statements without parameters or results.
  virtual absl::Status Exec(absl::string_view sql) = 0;
  // The id given to the row the last INSERT on this connection created (an INTEGER PRIMARY KEY
  // in SQLite, an identity column's sequence in PostgreSQL); 0 when there is none. On
  // PostgreSQL it takes three round trips: Statement::RunReturningId() takes none.
  virtual int64_t LastInsertRowId() = 0;
  // Rows changed by the last INSERT, UPDATE or DELETE.
  virtual int Changes() const = 0;
  virtual Backend backend() const = 0;

  // Appended to a SELECT whose rows the transaction goes on to change: " FOR UPDATE" on
  // PostgreSQL, so that under READ COMMITTED the rows read cannot change before the write (and
  // the read waits for, then sees, a concurrent writer's commit); nothing on SQLite, whose one
  // writer already excludes every other.
  absl::string_view ForUpdate() const;
  // Appended to the SELECT that claims a queue's next row: " FOR UPDATE SKIP LOCKED" on
  // PostgreSQL, so that concurrent claimers each lock a different row instead of all waiting
  // for, or conflicting over, the first; nothing on SQLite.
  absl::string_view ForUpdateSkipLocked() const;

  // For a single-statement read or write (ReadOptions::single_statement,
  // Isolation::kSingleStatement): the backends allow the function one Prepare() or Exec(), and
  // refuse the next before it reaches the database. Unlimited when off.
  void LimitToOneStatement(bool on) {
    statements_left_ = on ? 1 : -1;
  }

 protected:
  // Counts a statement against the limit: kFailedPrecondition once it is spent.
  absl::Status TakeStatement(absl::string_view sql) {
    if (statements_left_ == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("a single-statement transaction ran a second statement: ", sql.substr(0, 200)));
    }
    if (statements_left_ > 0) --statements_left_;
    return absl::OkStatus();
  }

 private:
  int statements_left_ = -1;
};

// One schema migration, applied in order, once. `sql` is SQLite's text, `postgres_sql`
// PostgreSQL's; a database refuses to open when its backend's text is missing.
struct Migration {
  int version;
  std::string sql;
  std::string postgres_sql;
};

class Database {
 public:
  struct Options {
    // SQLite: idle reader connections kept.
    int readers = 4;
    // SQLite: FULL makes every acknowledged write durable; tests may relax it.
    bool synchronous_full = true;
    // PostgreSQL: connections in the pool, and how long a request waits for one.
    int pool_size = 16;
    absl::Duration pool_wait = absl::Seconds(30);
    // PostgreSQL: every statement is cancelled by the server after this long.
    absl::Duration statement_timeout = absl::Seconds(30);
    // PostgreSQL: a write transaction that loses a serialization conflict or a deadlock is run
    // again, at most this many times in all.
    int max_attempts = 8;
  };

  // Opens the database named by `url` and applies `migrations`:
  //   sqlite://PATH or a plain PATH   the SQLite file (created when missing);
  //   postgres://... postgresql://... a PostgreSQL database (libpq's URI form).
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& url,
                                                        const std::vector<Migration>& migrations,
                                                        Options options);
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& url,
                                                        const std::vector<Migration>& migrations) {
    return Open(url, migrations, Options());
  }

  virtual ~Database() = default;

  using WriteFn = std::function<absl::Status(Connection&)>;
  using ReadFn = std::function<absl::Status(Connection&)>;

  // Runs `fn` inside a write transaction. A non-OK status from `fn` rolls back its changes and
  // is returned as is. `fn` may run more than once (PostgreSQL retries a transaction that lost
  // a conflict or a deadlock), so it must not act outside the database.
  virtual absl::Status Write(const WriteFn& fn, const WriteOptions& options) = 0;
  absl::Status Write(const WriteFn& fn) { return Write(fn, WriteOptions()); }
  // Runs `fn` in a read-only transaction (one consistent snapshot for the duration of fn).
  virtual absl::Status Read(const ReadFn& fn, const ReadOptions& options) = 0;
  absl::Status Read(const ReadFn& fn) { return Read(fn, ReadOptions()); }

  virtual Backend backend() const = 0;
  // The SQLite file, or the PostgreSQL URL without its password.
  virtual const std::string& path() const = 0;
};

namespace internal {
// Runs `fn` through `run` (a call of Database::Write or Database::Read) and returns what it
// produced.
template <typename T, typename Run>
absl::StatusOr<T> RunForResult(const Run& run,
                               const std::function<absl::StatusOr<T>(Connection&)>& fn) {
  std::optional<T> out;
  absl::Status status = run([&](Connection& c) -> absl::Status {
    auto r = fn(c);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return std::move(*out);
}
}  // namespace internal

// Runs `fn` in a write transaction and returns what it produced.
template <typename T>
absl::StatusOr<T> WriteResult(Database& db, const WriteOptions& options,
                              const std::function<absl::StatusOr<T>(Connection&)>& fn) {
  return internal::RunForResult<T>(
      [&](const Database::WriteFn& write) { return db.Write(write, options); }, fn);
}
template <typename T>
absl::StatusOr<T> WriteResult(Database& db,
                              const std::function<absl::StatusOr<T>(Connection&)>& fn) {
  return WriteResult<T>(db, WriteOptions(), fn);
}

// Runs `fn` in a read-only transaction and returns what it produced.
template <typename T>
absl::StatusOr<T> ReadResult(Database& db, const ReadOptions& options,
                             const std::function<absl::StatusOr<T>(Connection&)>& fn) {
  return internal::RunForResult<T>(
      [&](const Database::ReadFn& read) { return db.Read(read, options); }, fn);
}
template <typename T>
absl::StatusOr<T> ReadResult(Database& db,
                             const std::function<absl::StatusOr<T>(Connection&)>& fn) {
  return ReadResult<T>(db, ReadOptions(), fn);
}

// The SQLite and PostgreSQL implementations behind Database::Open.
// The operators' histogram of transactions (calleval_db_transaction_duration_seconds): one
// Write or Read with its retries, by backend ("sqlite", "postgres") and kind ("write",
// "read").
telemetry::Histogram& TransactionDurations(absl::string_view backend, absl::string_view kind);

absl::StatusOr<std::unique_ptr<Database>> OpenSqlite(const std::string& path,
                                                     const std::vector<Migration>& migrations,
                                                     const Database::Options& options);
absl::StatusOr<std::unique_ptr<Database>> OpenPostgres(const std::string& url,
                                                       const std::vector<Migration>& migrations,
                                                       const Database::Options& options);

// `sql` with SQLite's `?` and `?NNN` parameters written as PostgreSQL's `$n` (string literals,
// quoted identifiers and comments left alone). `count`, when given, receives the highest n.
std::string ToPostgresParameters(absl::string_view sql, int* count = nullptr);

}  // namespace calleval::db

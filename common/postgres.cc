// The PostgreSQL backend of common/database.h, on libpq.
//
// A bounded pool of connections. Write() runs the store's function in a SERIALIZABLE
// transaction: the stores were written against SQLite's single writer, where a transaction
// never sees another commit between its reads and its writes, and SERIALIZABLE gives them the
// same guarantee; a transaction that loses a conflict (SQLSTATE 40001) or a deadlock (40P01) is
// rolled back and run again, a bounded number of times. Queue claims ask for READ COMMITTED
// instead and take their row with FOR UPDATE SKIP LOCKED, so workers claiming at once take
// different rows rather than conflicting over the first (database.h, Isolation). Read() runs in
// a READ ONLY REPEATABLE READ transaction, one snapshot like SQLite's readers. Statements are
// prepared once per connection and results come back in binary, decoded by column type.
// Round trips are what a request pays for on PostgreSQL (each one wakes the server's backend
// and this thread), so a transaction's BEGIN travels with its first statement in one pipeline,
// and a read's COMMIT is sent without waiting for its answer, which the connection's next
// command reads: a one-statement read waits for one round trip, not three.

#include <arpa/inet.h>
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/database.h"
#include "common/status_macros.h"

namespace calleval::db {
namespace {

// Type OIDs (src/include/catalog/pg_type.dat): the ones a store's columns have.
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;
constexpr Oid kInt4Oid = 23;
constexpr Oid kFloat4Oid = 700;
constexpr Oid kFloat8Oid = 701;
constexpr Oid kNumericOid = 1700;
constexpr Oid kJsonbOid = 3802;

// Migrations of concurrent processes wait for each other on this advisory lock.
constexpr int64_t kMigrationLock = 0x63616c6c6576616c;  // "calleval" in ASCII

struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, PgResultDeleter>;

uint64_t ReadBigEndian(const char* bytes, int size) {
  uint64_t v = 0;
  for (int i = 0; i < size; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  return v;
}

// A NUMERIC in binary form (int16 digit count, weight, sign, display scale, then base-10000
// digits): what SUM() and AVG() of integers return. As a long double, exact for integers up
// to 2^64.
long double NumericValue(const char* v, int size) {
  if (size < 8) return 0;
  const int ndigits = static_cast<int16_t>(ReadBigEndian(v, 2));
  const int weight = static_cast<int16_t>(ReadBigEndian(v + 2, 2));
  const uint16_t sign = static_cast<uint16_t>(ReadBigEndian(v + 4, 2));
  if (sign == 0xC000) return std::nanl("");
  if (sign == 0xD000) return HUGE_VALL;
  if (sign == 0xF000) return -HUGE_VALL;
  long double value = 0;
  for (int i = 0; i < ndigits && 8 + 2 * i + 2 <= size; ++i) {
    const int digit = static_cast<int16_t>(ReadBigEndian(v + 8 + 2 * i, 2));
    value += digit * std::pow(10000.0L, weight - i);
  }
  return sign == 0x4000 ? -value : value;
}

bool Retryable(absl::string_view sqlstate) {
  return sqlstate == "40001" || sqlstate == "40P01";
}

class PgConnection;

class PgStatement final : public StatementImpl {
 public:
  PgStatement(PgConnection* conn, std::string name, std::string sql, int params, bool owned)
      : conn_(conn), name_(std::move(name)), sql_(std::move(sql)), owned_(owned) {
    values_.resize(params);
    formats_.assign(params, 0);
  }

  void BindInt64(int index, int64_t value) override { Set(index, absl::StrCat(value), 0); }
  void BindDouble(int index, double value) override {
    // Shortest text that reads back as the same double.
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.17g", value);
    Set(index, buffer, 0);
  }
  void BindText(int index, absl::string_view value) override { Set(index, value, 0); }
  void BindBlob(int index, absl::string_view value) override { Set(index, value, 1); }
  void BindNull(int index) override {
    if (index >= 1 && index <= static_cast<int>(values_.size())) values_[index - 1].reset();
  }
  absl::StatusOr<bool> Step() override;
  bool IsNull(int column) const override {
    return Valid(column) == nullptr || PQgetisnull(result_.get(), row_, column);
  }
  int64_t Int64(int column) const override;
  double Double(int column) const override;
  std::string Text(int column) const override;
  void Release() override;

  bool in_use() const { return in_use_; }
  void set_in_use() { in_use_ = true; }

 private:
  void Set(int index, absl::string_view value, int format) {
    if (index < 1 || index > static_cast<int>(values_.size())) return;
    values_[index - 1] = std::string(value);
    formats_[index - 1] = format;
  }
  // The result when `column` of the current row exists, else nullptr.
  const PGresult* Valid(int column) const {
    if (result_ == nullptr || row_ < 0 || row_ >= PQntuples(result_.get()) || column < 0 ||
        column >= PQnfields(result_.get())) {
      return nullptr;
    }
    return result_.get();
  }

  PgConnection* conn_;
  // Empty for a statement run unprepared (a second use of a text while the first is alive).
  std::string name_;
  std::string sql_;
  bool owned_;
  bool in_use_ = false;
  std::vector<std::optional<std::string>> values_;
  std::vector<int> formats_;
  Result result_;
  int row_ = -1;
};

class PgConnection final : public Connection {
 public:
  static absl::StatusOr<std::unique_ptr<PgConnection>> Open(const std::string& url,
                                                            absl::Duration statement_timeout);
  ~PgConnection() override {
    cache_.clear();
    PQfinish(conn_);
  }

  absl::StatusOr<Statement> Prepare(absl::string_view sql) override;
  absl::Status Exec(absl::string_view sql) override;
  int64_t LastInsertRowId() override;
  int Changes() const override { return changes_; }
  Backend backend() const override { return Backend::kPostgres; }

  PGconn* raw() { return conn_; }
  bool broken() const { return PQstatus(conn_) != CONNECTION_OK; }

  // Starts a transaction with `begin`, which is sent with the transaction's first statement,
  // in the same round trip, rather than on its own. `begin` must outlive the transaction.
  void Begin(const char* begin) {
    pending_begin_ = begin;
    began_ = false;
  }
  // Whether the server has seen the BEGIN of the current transaction. A connection that broke
  // before it did (a pooled connection the server closed) ran nothing of the transaction.
  bool began() const { return began_; }
  // Ends the transaction with COMMIT or ROLLBACK; nothing to send when no statement ran.
  absl::Status End(const char* end) {
    if (std::exchange(pending_begin_, nullptr) != nullptr) return absl::OkStatus();
    return Exec(end);
  }
  // Ends a read-only transaction whose results are all in: sends COMMIT without waiting for
  // the answer, which the connection's next command reads first (Settle). Nothing the reader
  // got depends on it, and the server ends the transaction, snapshot and all, as the COMMIT
  // arrives, so a connection idle in the pool holds nothing back.
  void EndReadOnly() {
    if (std::exchange(pending_begin_, nullptr) != nullptr) return;
    if (PQsendQuery(conn_, "COMMIT") == 1 && PQflush(conn_) == 0) {
      commit_in_flight_ = true;
    } else {
      Exec("COMMIT").IgnoreError();
    }
  }
  bool commit_in_flight() const { return commit_in_flight_; }
  // Reads the answer to a COMMIT sent by EndReadOnly, if one is due.
  void Settle() {
    if (!std::exchange(commit_in_flight_, false)) return;
    while (PGresult* r = PQgetResult(conn_)) PQclear(r);
    // A COMMIT that failed on a live connection would leave the next transaction inside this
    // one (BEGIN only warns then).
    if (!broken() && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      Result(PQexec(conn_, "ROLLBACK"));
    }
  }
  // Runs a statement (prepared as `name`, or `sql` unprepared when `name` is empty) with
  // results in binary, preceded by the deferred BEGIN if there is one. Returns what
  // PQexecPrepared would: the BEGIN's result instead when the BEGIN failed.
  PGresult* Execute(const std::string& name, const std::string& sql, int n,
                    const char* const* values, const int* lengths, const int* formats);
  // The SQLSTATE of the last failed command since the last ClearError(), "" if none.
  const std::string& last_sqlstate() const { return last_sqlstate_; }
  void ClearError() { last_sqlstate_.clear(); }

  // A status for a failed result (or a failed call without one), remembering its SQLSTATE.
  absl::Status ErrorStatus(const PGresult* result, absl::string_view context);
  void set_changes(int n) { changes_ = n; }

 private:
  explicit PgConnection(PGconn* conn) : conn_(conn) {}

  PGconn* conn_;
  absl::flat_hash_map<std::string, std::unique_ptr<PgStatement>> cache_;
  const char* pending_begin_ = nullptr;
  bool began_ = false;
  bool commit_in_flight_ = false;
  int next_name_ = 0;
  int changes_ = 0;
  std::string last_sqlstate_;
};

absl::StatusOr<bool> PgStatement::Step() {
  if (result_ == nullptr) {
    std::vector<const char*> values(values_.size());
    std::vector<int> lengths(values_.size());
    for (size_t i = 0; i < values_.size(); ++i) {
      values[i] = values_[i] ? values_[i]->data() : nullptr;
      lengths[i] = values_[i] ? static_cast<int>(values_[i]->size()) : 0;
    }
    PGresult* r = conn_->Execute(name_, sql_, static_cast<int>(values_.size()), values.data(),
                                 lengths.data(), formats_.data());
    result_.reset(r);
    const ExecStatusType status = r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      absl::Status error = conn_->ErrorStatus(r, sql_);
      result_.reset();
      return error;
    }
    int changed = 0;
    if (!absl::SimpleAtoi(PQcmdTuples(r), &changed)) changed = 0;
    conn_->set_changes(changed);
    row_ = -1;
  }
  ++row_;
  return row_ < PQntuples(result_.get());
}

PGresult* PgConnection::Execute(const std::string& name, const std::string& sql, int n,
                                const char* const* values, const int* lengths, const int* formats) {
  auto send = [&] {
    return name.empty() ? PQsendQueryParams(conn_, sql.c_str(), n, nullptr, values, lengths,
                                            formats, /*resultFormat=*/1)
                        : PQsendQueryPrepared(conn_, name.c_str(), n, values, lengths, formats,
                                              /*resultFormat=*/1);
  };
  Settle();
  const char* begin = std::exchange(pending_begin_, nullptr);
  if (begin == nullptr) {
    return name.empty() ? PQexecParams(conn_, sql.c_str(), n, nullptr, values, lengths, formats,
                                       /*resultFormat=*/1)
                        : PQexecPrepared(conn_, name.c_str(), n, values, lengths, formats,
                                         /*resultFormat=*/1);
  }
  // BEGIN and the statement in one pipeline: one round trip where they took two. If BEGIN
  // fails, the server skips the statement (PGRES_PIPELINE_ABORTED) and its error is BEGIN's.
  Result begin_result;
  Result result;
  if (PQenterPipelineMode(conn_) == 1) {
    if (PQsendQueryParams(conn_, begin, 0, nullptr, nullptr, nullptr, nullptr, 0) == 1 &&
        send() == 1 && PQpipelineSync(conn_) == 1) {
      // Each query's results end with a null; the pipeline ends with PGRES_PIPELINE_SYNC.
      // Two nulls in a row mean the connection gave out before that.
      int nulls = 0;
      while (nulls < 2) {
        PGresult* r = PQgetResult(conn_);
        if (r == nullptr) {
          ++nulls;
          continue;
        }
        nulls = 0;
        if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
          PQclear(r);
          break;
        }
        if (begin_result == nullptr) {
          begin_result.reset(r);
        } else if (result == nullptr) {
          result.reset(r);
        } else {
          PQclear(r);
        }
      }
    }
    PQexitPipelineMode(conn_);
  }
  began_ = begin_result != nullptr && PQresultStatus(begin_result.get()) == PGRES_COMMAND_OK;
  if (!began_) return begin_result.release();
  return result.release();
}

int64_t PgStatement::Int64(int column) const {
  const PGresult* r = Valid(column);
  if (r == nullptr || PQgetisnull(r, row_, column)) return 0;
  const char* v = PQgetvalue(r, row_, column);
  const int size = PQgetlength(r, row_, column);
  switch (PQftype(r, column)) {
    case kInt8Oid:
      return static_cast<int64_t>(ReadBigEndian(v, 8));
    case kInt4Oid:
      return static_cast<int32_t>(ReadBigEndian(v, 4));
    case kInt2Oid:
      return static_cast<int16_t>(ReadBigEndian(v, 2));
    case kBoolOid:
      return v[0] != 0;
    case kFloat8Oid:
    case kFloat4Oid:
      return static_cast<int64_t>(Double(column));
    case kNumericOid:
      return static_cast<int64_t>(std::llround(NumericValue(v, size)));
    default: {
      int64_t out = 0;
      return absl::SimpleAtoi(absl::string_view(v, size), &out) ? out : 0;
    }
  }
}

double PgStatement::Double(int column) const {
  const PGresult* r = Valid(column);
  if (r == nullptr || PQgetisnull(r, row_, column)) return 0;
  const char* v = PQgetvalue(r, row_, column);
  const int size = PQgetlength(r, row_, column);
  switch (PQftype(r, column)) {
    case kFloat8Oid: {
      const uint64_t bits = ReadBigEndian(v, 8);
      double out;
      std::memcpy(&out, &bits, sizeof(out));
      return out;
    }
    case kFloat4Oid: {
      const uint32_t bits = static_cast<uint32_t>(ReadBigEndian(v, 4));
      float out;
      std::memcpy(&out, &bits, sizeof(out));
      return out;
    }
    case kInt8Oid:
    case kInt4Oid:
    case kInt2Oid:
    case kBoolOid:
      return static_cast<double>(Int64(column));
    case kNumericOid:
      return static_cast<double>(NumericValue(v, size));
    default: {
      double out = 0;
      return absl::SimpleAtod(absl::string_view(v, size), &out) ? out : 0;
    }
  }
}

std::string PgStatement::Text(int column) const {
  const PGresult* r = Valid(column);
  if (r == nullptr || PQgetisnull(r, row_, column)) return std::string();
  switch (PQftype(r, column)) {
    case kInt8Oid:
    case kInt4Oid:
    case kInt2Oid:
    case kBoolOid:
      return absl::StrCat(Int64(column));
    case kFloat8Oid:
    case kFloat4Oid: {
      // Every digit, as SQLite gives a REAL column's text.
      char buffer[32];
      std::snprintf(buffer, sizeof(buffer), "%.17g", Double(column));
      return buffer;
    }
    case kNumericOid: {
      const long double value =
          NumericValue(PQgetvalue(r, row_, column), PQgetlength(r, row_, column));
      if (value == std::floor(value) && std::fabs(value) < 9.2e18L) {
        return absl::StrCat(static_cast<int64_t>(value));
      }
      return absl::StrCat(static_cast<double>(value));
    }
    case kJsonbOid:
      // Binary jsonb is a version byte, then the text.
      return PQgetlength(r, row_, column) > 0
                 ? std::string(PQgetvalue(r, row_, column) + 1, PQgetlength(r, row_, column) - 1)
                 : std::string();
    default:
      // text, varchar, bytea and the like arrive as their bytes.
      return std::string(PQgetvalue(r, row_, column), PQgetlength(r, row_, column));
  }
}

void PgStatement::Release() {
  if (owned_) {
    delete this;
    return;
  }
  result_.reset();
  row_ = -1;
  for (auto& v : values_) v.reset();
  std::fill(formats_.begin(), formats_.end(), 0);
  in_use_ = false;
}

absl::StatusOr<std::unique_ptr<PgConnection>> PgConnection::Open(
    const std::string& url, absl::Duration statement_timeout) {
  // Keywords beside the URI: libpq takes the URI as dbname and lets later keywords add to it.
  const std::string timeout_ms = absl::StrCat(absl::ToInt64Milliseconds(statement_timeout));
  const std::string options = absl::StrCat("-c statement_timeout=", timeout_ms);
  const char* keywords[] = {"dbname", "connect_timeout", "options", "application_name", nullptr};
  const char* values[] = {url.c_str(), "10", options.c_str(), "calleval", nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return absl::UnavailableError("postgres: out of memory connecting");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    return absl::UnavailableError(absl::StrCat("cannot connect to PostgreSQL: ", message));
  }
  return std::unique_ptr<PgConnection>(new PgConnection(conn));
}

absl::Status PgConnection::ErrorStatus(const PGresult* result, absl::string_view context) {
  std::string message = result != nullptr ? PQresultErrorMessage(result) : "";
  if (message.empty()) message = PQerrorMessage(conn_);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
    message.pop_back();
  }
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  last_sqlstate_ = state != nullptr ? state : (broken() ? "08006" : "XX000");
  const std::string text =
      absl::StrCat("postgres: ", message, " (", last_sqlstate_, ") in: ", context.substr(0, 200));
  const absl::string_view sqlstate = last_sqlstate_;
  // Class 23: integrity constraint violations, as SQLite's SQLITE_CONSTRAINT.
  if (absl::StartsWith(sqlstate, "23")) return absl::AlreadyExistsError(text);
  // Connection exceptions, serialization failures, deadlocks, lock timeouts, cancellations
  // (statement_timeout) and an exhausted server: try again later.
  if (absl::StartsWith(sqlstate, "08") || Retryable(sqlstate) || sqlstate == "55P03" ||
      sqlstate == "57014" || absl::StartsWith(sqlstate, "53") || sqlstate == "57P01") {
    return absl::UnavailableError(text);
  }
  return absl::InternalError(text);
}

absl::StatusOr<Statement> PgConnection::Prepare(absl::string_view sql) {
  RETURN_IF_ERROR(TakeStatement(sql));
  Settle();
  auto it = cache_.find(sql);  // no copy of the text: a lookup by string_view
  if (it != cache_.end() && !it->second->in_use()) {
    it->second->set_in_use();
    return Statement(it->second.get());
  }
  int params = 0;
  std::string translated = ToPostgresParameters(sql, &params);
  if (it != cache_.end()) {
    return Statement(new PgStatement(this, "", std::move(translated), params, /*owned=*/true));
  }
  std::string name = absl::StrCat("s", ++next_name_);
  Result prepared(PQprepare(conn_, name.c_str(), translated.c_str(), 0, nullptr));
  if (prepared == nullptr || PQresultStatus(prepared.get()) != PGRES_COMMAND_OK) {
    return ErrorStatus(prepared.get(), sql);
  }
  auto statement = std::make_unique<PgStatement>(this, std::move(name), std::move(translated),
                                                 params, /*owned=*/false);
  statement->set_in_use();
  PgStatement* raw = statement.get();
  cache_.emplace(std::string(sql), std::move(statement));
  return Statement(raw);
}

absl::Status PgConnection::Exec(absl::string_view sql) {
  RETURN_IF_ERROR(TakeStatement(sql));
  Settle();
  // A deferred BEGIN goes in front, in the same simple query.
  const char* begin = std::exchange(pending_begin_, nullptr);
  const std::string text = begin == nullptr ? std::string(sql) : absl::StrCat(begin, "; ", sql);
  Result r(PQexec(conn_, text.c_str()));
  if (begin != nullptr) {
    const PGTransactionStatusType state = PQtransactionStatus(conn_);
    began_ = state == PQTRANS_INTRANS || state == PQTRANS_INERROR;
  }
  const ExecStatusType status = r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return ErrorStatus(r.get(), sql);
  int changed = 0;
  if (absl::SimpleAtoi(PQcmdTuples(r.get()), &changed)) changes_ = changed;
  return absl::OkStatus();
}

int64_t PgConnection::LastInsertRowId() {
  Settle();
  // lastval(): the value the last nextval() of this session returned, i.e. the identity of the
  // row just inserted. A savepoint keeps a failure (no sequence used yet) from aborting the
  // transaction.
  if (!Exec("SAVEPOINT last_id").ok()) return 0;
  Result r(PQexecParams(conn_, "SELECT lastval()", 0, nullptr, nullptr, nullptr, nullptr, 0));
  int64_t id = 0;
  if (r != nullptr && PQresultStatus(r.get()) == PGRES_TUPLES_OK && PQntuples(r.get()) == 1) {
    if (!absl::SimpleAtoi(PQgetvalue(r.get(), 0, 0), &id)) id = 0;
    Exec("RELEASE last_id").IgnoreError();
  } else {
    Exec("ROLLBACK TO last_id; RELEASE last_id").IgnoreError();
  }
  return id;
}

class PgDatabase final : public Database {
 public:
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& url,
                                                        const std::vector<Migration>& migrations,
                                                        const Options& options);

  using Database::Read;
  using Database::Write;
  absl::Status Write(const WriteFn& fn, const WriteOptions& options) override;
  absl::Status Read(const ReadFn& fn, const ReadOptions& options) override;
  Backend backend() const override { return Backend::kPostgres; }
  const std::string& path() const override { return shown_url_; }

 private:
  PgDatabase() = default;
  absl::StatusOr<std::unique_ptr<PgConnection>> Acquire();
  void Return(std::unique_ptr<PgConnection> conn);
  // Runs `fn` between `begin` and COMMIT on one pooled connection, or, when `begin` is null,
  // as one statement on its own (no BEGIN, no COMMIT). `retryable` is set when it failed on a
  // serialization conflict or a deadlock.
  absl::Status RunTransaction(const char* begin, bool read_only, const WriteFn& fn,
                              bool* retryable);

  std::string url_;
  std::string shown_url_;
  Options options_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<PgConnection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;
};

// The URL with any password replaced, for messages and path().
std::string WithoutPassword(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t at = url.find('@', scheme + 3);
  const size_t slash = url.find('/', scheme + 3);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return url;
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return absl::StrCat(url.substr(0, colon), ":***", url.substr(at));
}

absl::StatusOr<std::unique_ptr<Database>> PgDatabase::Open(const std::string& url,
                                                           const std::vector<Migration>& migrations,
                                                           const Options& options) {
  for (const Migration& m : migrations) {
    if (m.postgres_sql.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("schema migration ", m.version, " has no PostgreSQL form"));
    }
  }
  auto db = std::unique_ptr<PgDatabase>(new PgDatabase());
  db->url_ = url;
  db->shown_url_ = WithoutPassword(url);
  db->options_ = options;
  db->options_.pool_size = std::max(1, options.pool_size);
  db->options_.max_attempts = std::max(1, options.max_attempts);
  // Migrations: one transaction, behind an advisory lock so that processes starting together
  // apply each migration once.
  ASSIGN_OR_RETURN(auto conn, db->Acquire());
  absl::Status migrated = [&]() -> absl::Status {
    RETURN_IF_ERROR(conn->Exec("BEGIN"));
    RETURN_IF_ERROR(conn->Exec(absl::StrCat("SELECT pg_advisory_xact_lock(", kMigrationLock, ")")));
    RETURN_IF_ERROR(conn->Exec(
        "CREATE TABLE IF NOT EXISTS calleval_schema_version (version INTEGER NOT NULL)"));
    ASSIGN_OR_RETURN(auto version_stmt,
                     conn->Prepare("SELECT COALESCE(MAX(version), 0) FROM calleval_schema_version"));
    ASSIGN_OR_RETURN(bool row, version_stmt.Step());
    int64_t version = row ? version_stmt.Int64(0) : 0;
    for (const Migration& m : migrations) {
      if (m.version <= version) continue;
      RETURN_IF_ERROR(conn->Exec(m.postgres_sql));
      RETURN_IF_ERROR(conn->Exec(
          absl::StrCat("INSERT INTO calleval_schema_version (version) VALUES (", m.version, ")")));
      version = m.version;
    }
    return conn->Exec("COMMIT");
  }();
  if (!migrated.ok()) {
    conn->Exec("ROLLBACK").IgnoreError();
    return migrated;
  }
  db->Return(std::move(conn));
  return std::unique_ptr<Database>(std::move(db));
}

absl::StatusOr<std::unique_ptr<PgConnection>> PgDatabase::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !idle_.empty() || open_ < options_.pool_size;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&available), options_.pool_wait)) {
      return absl::UnavailableError(absl::StrCat("all ", options_.pool_size,
                                                 " PostgreSQL connections are busy"));
    }
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
    ++open_;
  }
  auto conn = PgConnection::Open(url_, options_.statement_timeout);
  if (!conn.ok()) {
    absl::MutexLock lock(&mu_);
    --open_;
  }
  return conn;
}

void PgDatabase::Return(std::unique_ptr<PgConnection> conn) {
  absl::MutexLock lock(&mu_);
  // A connection that broke, or was left inside a transaction, is not reused. One whose
  // read-only COMMIT is in flight is leaving its transaction: its next command reads the answer.
  if (conn->broken() ||
      (!conn->commit_in_flight() && PQtransactionStatus(conn->raw()) != PQTRANS_IDLE)) {
    --open_;
    return;
  }
  idle_.push_back(std::move(conn));
}

absl::Status PgDatabase::RunTransaction(const char* begin, bool read_only, const WriteFn& fn,
                                        bool* retryable) {
  *retryable = false;
  ASSIGN_OR_RETURN(auto conn, Acquire());
  if (begin == nullptr) {
    auto run_alone = [&]() {
      conn->ClearError();
      conn->LimitToOneStatement(true);
      absl::Status status = fn(*conn);
      conn->LimitToOneStatement(false);
      return status;
    };
    absl::Status status = run_alone();
    // A read on a pooled connection the server closed is run again on the next one. A write
    // is not: whether the server ran it cannot be known, and the caller's retry finds out (an
    // ingest answers 409 for the call it stored).
    for (int tries = 0; read_only && conn->broken() && tries < options_.pool_size; ++tries) {
      Return(std::move(conn));
      ASSIGN_OR_RETURN(conn, Acquire());
      status = run_alone();
    }
    *retryable = Retryable(conn->last_sqlstate());
    Return(std::move(conn));
    return status;
  }
  conn->ClearError();
  conn->Begin(begin);
  absl::Status status = fn(*conn);
  // Pooled connections the server closed (a restart, an idle timeout) fail at BEGIN, which
  // goes with the first statement, before anything ran on them: each is dropped and `fn` run
  // again on the next one, down to a fresh connection.
  for (int tries = 0; conn->broken() && !conn->began() && tries < options_.pool_size; ++tries) {
    Return(std::move(conn));
    ASSIGN_OR_RETURN(conn, Acquire());
    conn->ClearError();
    conn->Begin(begin);
    status = fn(*conn);
  }
  if (status.ok() && read_only) {
    // A read's answer is in hand: the COMMIT need not be waited for.
    conn->EndReadOnly();
  } else if (status.ok()) {
    status = conn->End("COMMIT");
  } else {
    conn->End("ROLLBACK").IgnoreError();
  }
  // A conflict anywhere in the transaction (its statements or the commit) makes it retryable,
  // whatever status the store made of it.
  *retryable = Retryable(conn->last_sqlstate());
  if (!status.ok() && PQtransactionStatus(conn->raw()) != PQTRANS_IDLE) {
    conn->Exec("ROLLBACK").IgnoreError();
  }
  Return(std::move(conn));
  return status;
}

absl::Status PgDatabase::Write(const WriteFn& fn, const WriteOptions& options) {
  static telemetry::Histogram& durations = TransactionDurations("postgres", "write");
  telemetry::ScopedTimer timer(durations);
  thread_local std::minstd_rand jitter(std::random_device{}());
  // READ COMMITTED never fails serialization, but can still deadlock: it is retried the same.
  const char* begin = nullptr;  // kSingleStatement: the statement on its own
  if (options.isolation == Isolation::kReadCommitted) {
    begin = "BEGIN ISOLATION LEVEL READ COMMITTED";
  } else if (options.isolation == Isolation::kSerializable) {
    begin = "BEGIN ISOLATION LEVEL SERIALIZABLE";
  }
  absl::Status status;
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    bool retryable = false;
    status = RunTransaction(begin, /*read_only=*/false, fn, &retryable);
    if (status.ok() || !retryable) return status;
    // Back off a little, more each time, with jitter so the losers do not collide again.
    const int ceiling_ms = std::min(100, 2 << attempt);
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + jitter() % ceiling_ms));
  }
  return absl::UnavailableError(absl::StrCat("the write lost ", options_.max_attempts,
                                             " conflicts (serialization or deadlock) in a row: ",
                                             status.message()));
}

absl::Status PgDatabase::Read(const ReadFn& fn, const ReadOptions& options) {
  static telemetry::Histogram& durations = TransactionDurations("postgres", "read");
  telemetry::ScopedTimer timer(durations);
  bool retryable = false;
  return RunTransaction(
      options.single_statement ? nullptr : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
      /*read_only=*/true, fn, &retryable);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> OpenPostgres(const std::string& url,
                                                       const std::vector<Migration>& migrations,
                                                       const Database::Options& options) {
  return PgDatabase::Open(url, migrations, options);
}

}  // namespace calleval::db

#include "common/database.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace calleval::db {

telemetry::Histogram& TransactionDurations(absl::string_view backend, absl::string_view kind) {
  static telemetry::HistogramFamily& durations = telemetry::DefaultRegistry().Histogram(
      "calleval_db_transaction_duration_seconds",
      "Time of one database transaction (a Write or Read with its retries), by backend and "
      "kind.",
      {"backend", "kind"});
  return durations.WithLabels({std::string(backend), std::string(kind)});
}

absl::Status Statement::Run() {
  while (true) {
    ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return absl::OkStatus();
  }
}

absl::StatusOr<int64_t> Statement::RunReturningId() {
  ASSIGN_OR_RETURN(bool row, Step());
  if (!row) return absl::InternalError("INSERT ... RETURNING id returned no row");
  const int64_t id = Int64(0);
  RETURN_IF_ERROR(Run());
  return id;
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

absl::string_view Connection::ForUpdate() const {
  return backend() == Backend::kPostgres ? " FOR UPDATE" : "";
}

absl::string_view Connection::ForUpdateSkipLocked() const {
  return backend() == Backend::kPostgres ? " FOR UPDATE SKIP LOCKED" : "";
}

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& url,
                                                         const std::vector<Migration>& migrations,
                                                         Options options) {
  if (absl::StartsWith(url, "postgres://") || absl::StartsWith(url, "postgresql://")) {
    return OpenPostgres(url, migrations, options);
  }
  if (absl::StartsWith(url, "sqlite://")) {
    const std::string path = url.substr(9);
    if (path.empty()) return absl::InvalidArgumentError("sqlite:// names no file");
    return OpenSqlite(path, migrations, options);
  }
  if (url.find("://") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported database URL ", url.substr(0, url.find("://") + 3),
        "... (use sqlite://PATH or postgres://...)"));
  }
  return OpenSqlite(url, migrations, options);
}

std::string ToPostgresParameters(absl::string_view sql, int* count) {
  std::string out;
  out.reserve(sql.size() + 16);
  int highest = 0;
  size_t i = 0;
  while (i < sql.size()) {
    const char ch = sql[i];
    if (ch == '\'' || ch == '"') {
      // A literal or quoted identifier; a doubled quote inside is an escaped one.
      size_t end = i + 1;
      while (end < sql.size()) {
        if (sql[end] == ch) {
          if (end + 1 < sql.size() && sql[end + 1] == ch) {
            end += 2;
            continue;
          }
          break;
        }
        ++end;
      }
      end = std::min(end + 1, sql.size());
      absl::StrAppend(&out, sql.substr(i, end - i));
      i = end;
    } else if (ch == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      const size_t end = std::min(sql.find('\n', i), sql.size());
      absl::StrAppend(&out, sql.substr(i, end - i));
      i = end;
    } else if (ch == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
      const size_t close = sql.find("*/", i + 2);
      const size_t end = close == absl::string_view::npos ? sql.size() : close + 2;
      absl::StrAppend(&out, sql.substr(i, end - i));
      i = end;
    } else if (ch == '?') {
      size_t end = i + 1;
      int number = 0;
      while (end < sql.size() && std::isdigit(static_cast<unsigned char>(sql[end]))) {
        number = number * 10 + (sql[end] - '0');
        ++end;
      }
      // SQLite: a bare `?` takes the number after the highest one used so far.
      if (end == i + 1) number = highest + 1;
      highest = std::max(highest, number);
      absl::StrAppend(&out, "$", number);
      i = end;
    } else {
      out.push_back(ch);
      ++i;
    }
  }
  if (count != nullptr) *count = highest;
  return out;
}

}  // namespace calleval::db

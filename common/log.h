#pragma once

// The server's log (docs/operations.md, "Logs"): one line per event on stderr, as text
//
//   2026-11-28T03:30:00.123Z WARN role=calls request_id=abc call_id=12 msg="lease lost"
//
// or as one JSON object per line (--log-format json). Every line carries time (RFC 3339 UTC,
// milliseconds), level, role (the process's roles) and msg, then the fields the event names
// (call_id, run_id, method, ...) and the request id of the work the thread is doing, if any
// (ScopedLogContext). Values are escaped so that no value can end a line or fake a field; bytes
// that are not UTF-8 become U+FFFD. A line is written with one write(2) under a lock, so lines
// from different threads never interleave.
//
//   LogWarn("lease lost, result dropped", {{"call_id", job.call_id}});

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// "debug", "info", "warn" (or "warning"), "error"; "text", "json".
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);
absl::string_view LogLevelName(LogLevel level);    // "info"
absl::string_view LogFormatName(LogFormat format);  // "text"

// One field of a line. Numbers stay numbers in JSON; everything else is a string.
class LogField {
 public:
  LogField(absl::string_view key, absl::string_view value) : key_(key), value_(value) {}
  LogField(absl::string_view key, const char* value)
      : key_(key), value_(value == nullptr ? "" : value) {}
  LogField(absl::string_view key, const std::string& value) : key_(key), value_(value) {}
  LogField(absl::string_view key, int value) : LogField(key, static_cast<long long>(value)) {}
  LogField(absl::string_view key, long value) : LogField(key, static_cast<long long>(value)) {}
  LogField(absl::string_view key, long long value);
  LogField(absl::string_view key, unsigned value)
      : LogField(key, static_cast<unsigned long long>(value)) {}
  LogField(absl::string_view key, unsigned long value)
      : LogField(key, static_cast<unsigned long long>(value)) {}
  LogField(absl::string_view key, unsigned long long value);
  LogField(absl::string_view key, double value);
  LogField(absl::string_view key, bool value) : key_(key), value_(value ? "true" : "false") {}
  // A status becomes its text ("NOT_FOUND: call 12"); an OK one "OK".
  LogField(absl::string_view key, const absl::Status& status);

  absl::string_view key() const { return key_; }
  absl::string_view value() const { return value_; }
  bool number() const { return number_; }

 private:
  absl::string_view key_;
  std::string value_;
  bool number_ = false;
};

struct LogOptions {
  LogFormat format = LogFormat::kText;
  LogLevel min_level = LogLevel::kInfo;
  // The process's roles as configured: "all", or a comma list ("edge", "calls,metrics").
  std::string role;
  int fd = 2;  // stderr
};

// Sets the process's log once at start-up, before the threads that log start. Until then lines
// are text at info and above on stderr with an empty role.
void ConfigureLogging(LogOptions options);

// Whether a line at `level` would be written: lets a caller skip building an expensive field.
bool LogEnabled(LogLevel level);

void Log(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields = {});
inline void LogDebug(absl::string_view message, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kDebug, message, fields);
}
inline void LogInfo(absl::string_view message, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kInfo, message, fields);
}
inline void LogWarn(absl::string_view message, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kWarn, message, fields);
}
inline void LogError(absl::string_view message, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kError, message, fields);
}

// The request id of the work this thread does, added to every line it logs while the scope
// lives (a gRPC handler, an edge call served in process). Scopes nest; the inner one wins.
class ScopedLogContext {
 public:
  explicit ScopedLogContext(std::string request_id);
  ~ScopedLogContext();
  ScopedLogContext(const ScopedLogContext&) = delete;
  ScopedLogContext& operator=(const ScopedLogContext&) = delete;

 private:
  std::string request_id_;
  const std::string* previous_;
};

// The request id of this thread's current ScopedLogContext; empty outside one.
absl::string_view CurrentRequestId();

namespace log_internal {

// One line, newline included, as `format` writes it. `request_id` (may be empty) is the
// context's, written after role unless a field of the same name is given.
std::string FormatLine(LogFormat format, absl::Time time, LogLevel level, absl::string_view role,
                       absl::string_view request_id, absl::string_view message,
                       std::initializer_list<LogField> fields);

// "2026-11-28T03:30:00.123Z".
std::string FormatTime(absl::Time time);

}  // namespace log_internal

}  // namespace calleval

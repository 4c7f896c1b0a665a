#include "common/log.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace calleval {
namespace {

// A value longer than this is cut (and says so): a log line is not the place for a body.
constexpr size_t kMaxValueBytes = 4096;
constexpr absl::string_view kCut = "...(cut)";
constexpr absl::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_fd{2};
// Set by ConfigureLogging before the threads that log start, read without a lock after.
std::string* g_role = new std::string();
std::mutex* g_write_mu = new std::mutex();

thread_local const std::string* t_request_id = nullptr;

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when the bytes there are not one.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

// Appends `value` escaped as the inside of a JSON string (which a quoted text value is too).
void AppendEscaped(absl::string_view value, std::string* out) {
  const bool cut = value.size() > kMaxValueBytes;
  if (cut) value = value.substr(0, kMaxValueBytes);
  static constexpr char kHex[] = "0123456789abcdef";
  size_t i = 0;
  while (i < value.size()) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(value, i);
      if (length == 0) {
        out->append(kReplacementCharacter.data(), kReplacementCharacter.size());
        ++i;
      } else {
        out->append(value.data() + i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xf]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  if (cut) out->append(kCut.data(), kCut.size());
}

// A text value is written bare when it is plainly one token, quoted and escaped otherwise.
bool NeedsQuotes(absl::string_view value) {
  if (value.empty() || value.size() > kMaxValueBytes) return true;
  for (char ch : value) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '=' || c == '\\') return true;
  }
  return false;
}

void AppendTextValue(absl::string_view value, std::string* out) {
  if (!NeedsQuotes(value)) {
    out->append(value.data(), value.size());
    return;
  }
  out->push_back('"');
  AppendEscaped(value, out);
  out->push_back('"');
}

void AppendJsonString(absl::string_view value, std::string* out) {
  out->push_back('"');
  AppendEscaped(value, out);
  out->push_back('"');
}

absl::string_view UpperLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

void AppendTwoDigits(int value, std::string* out) {
  out->push_back(static_cast<char>('0' + value / 10 % 10));
  out->push_back(static_cast<char>('0' + value % 10));
}

// "2026-11-28T03:30:00.123Z" for the time `seconds`.`millis` since the epoch. The calendar part
// is cached per thread: lines of the same second reuse it.
void AppendTime(int64_t seconds, int millis, std::string* out) {
  thread_local int64_t cached_seconds = -1;
  thread_local char cached[20];
  if (seconds != cached_seconds) {
    const time_t t = static_cast<time_t>(seconds);
    struct tm parts;
    gmtime_r(&t, &parts);
    std::snprintf(cached, sizeof(cached), "%04d-%02d-%02dT%02d:%02d:%02d",
                  (parts.tm_year + 1900) % 10000, parts.tm_mon + 1, parts.tm_mday, parts.tm_hour,
                  parts.tm_min, parts.tm_sec);
    cached_seconds = seconds;
  }
  out->append(cached, 19);
  out->push_back('.');
  out->push_back(static_cast<char>('0' + millis / 100));
  AppendTwoDigits(millis % 100, out);
  out->push_back('Z');
}

void AppendTime(absl::Time time, std::string* out) {
  const int64_t millis = absl::ToUnixMillis(time);
  int64_t seconds = millis / 1000;
  int64_t rest = millis % 1000;
  if (rest < 0) {
    rest += 1000;
    --seconds;
  }
  AppendTime(seconds, static_cast<int>(rest), out);
}

void WriteLine(int fd, absl::string_view line) {
  std::lock_guard<std::mutex> lock(*g_write_mu);
  while (!line.empty()) {
    const ssize_t written = ::write(fd, line.data(), line.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return;  // stderr gone: nothing better to do with the line
    }
    line.remove_prefix(static_cast<size_t>(written));
  }
}

}  // namespace

LogField::LogField(absl::string_view key, long long value)
    : key_(key), value_(absl::StrCat(value)), number_(true) {}

LogField::LogField(absl::string_view key, unsigned long long value)
    : key_(key), value_(absl::StrCat(value)), number_(true) {}

LogField::LogField(absl::string_view key, double value) : key_(key) {
  if (std::isfinite(value)) {
    char digits[32];
    std::snprintf(digits, sizeof(digits), "%.6g", value);
    value_ = digits;
    number_ = true;
  } else {
    value_ = std::isnan(value) ? "NaN" : (value > 0 ? "Infinity" : "-Infinity");
  }
}

LogField::LogField(absl::string_view key, const absl::Status& status)
    : key_(key), value_(status.ok() ? std::string("OK") : status.ToString()) {}

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warn" || lower == "warning") return LogLevel::kWarn;
  if (lower == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level ", name, " (known: debug, info, warn, error)"));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "text") return LogFormat::kText;
  if (lower == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log format ", name, " (known: text, json)"));
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

absl::string_view LogFormatName(LogFormat format) {
  return format == LogFormat::kJson ? "json" : "text";
}

void ConfigureLogging(LogOptions options) {
  g_format.store(static_cast<int>(options.format), std::memory_order_relaxed);
  g_min_level.store(static_cast<int>(options.min_level), std::memory_order_relaxed);
  g_fd.store(options.fd, std::memory_order_relaxed);
  *g_role = std::move(options.role);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_min_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) return;
  const std::string line = log_internal::FormatLine(
      static_cast<LogFormat>(g_format.load(std::memory_order_relaxed)), absl::Now(), level,
      *g_role, CurrentRequestId(), message, fields);
  WriteLine(g_fd.load(std::memory_order_relaxed), line);
}

ScopedLogContext::ScopedLogContext(std::string request_id)
    : request_id_(std::move(request_id)), previous_(t_request_id) {
  t_request_id = &request_id_;
}

ScopedLogContext::~ScopedLogContext() { t_request_id = previous_; }

absl::string_view CurrentRequestId() {
  return t_request_id == nullptr ? absl::string_view() : absl::string_view(*t_request_id);
}

namespace log_internal {

std::string FormatTime(absl::Time time) {
  std::string out;
  AppendTime(time, &out);
  return out;
}

std::string FormatLine(LogFormat format, absl::Time time, LogLevel level, absl::string_view role,
                       absl::string_view request_id, absl::string_view message,
                       std::initializer_list<LogField> fields) {
  // A field named request_id (the edge's access line) stands for the context's.
  bool request_id_field = false;
  for (const LogField& field : fields) request_id_field |= field.key() == "request_id";
  const bool context_id = !request_id.empty() && !request_id_field;

  std::string line;
  line.reserve(128 + message.size());
  if (format == LogFormat::kJson) {
    line.append("{\"time\":\"");
    AppendTime(time, &line);
    line.append("\",\"level\":\"");
    absl::StrAppend(&line, LogLevelName(level));
    line.append("\",\"role\":");
    AppendJsonString(role, &line);
    line.append(",\"msg\":");
    AppendJsonString(message, &line);
    if (context_id) {
      line.append(",\"request_id\":");
      AppendJsonString(request_id, &line);
    }
    for (const LogField& field : fields) {
      line.push_back(',');
      AppendJsonString(field.key(), &line);
      line.push_back(':');
      if (field.number()) {
        absl::StrAppend(&line, field.value());
      } else {
        AppendJsonString(field.value(), &line);
      }
    }
    line.append("}\n");
    return line;
  }
  AppendTime(time, &line);
  line.push_back(' ');
  absl::StrAppend(&line, UpperLevelName(level));
  line.append(" role=");
  AppendTextValue(role, &line);
  if (context_id) {
    line.append(" request_id=");
    AppendTextValue(request_id, &line);
  }
  for (const LogField& field : fields) {
    line.push_back(' ');
    absl::StrAppend(&line, field.key());
    line.push_back('=');
    AppendTextValue(field.value(), &line);
  }
  line.append(" msg=");
  line.push_back('"');
  AppendEscaped(message, &line);
  line.append("\"\n");
  return line;
}

}  // namespace log_internal

}  // namespace calleval

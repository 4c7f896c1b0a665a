#include "common/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/request_id.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace calleval {
namespace {

using log_internal::FormatLine;
using ::testing::HasSubstr;

const absl::Time kTime = absl::FromUnixMillis(1795836600123);  // 2026-11-28T03:30:00.123Z

std::string Text(absl::string_view message, std::initializer_list<LogField> fields,
                 absl::string_view request_id = "", LogLevel level = LogLevel::kInfo) {
  return FormatLine(LogFormat::kText, kTime, level, "edge", request_id, message, fields);
}

nlohmann::json Json(absl::string_view message, std::initializer_list<LogField> fields,
                    absl::string_view request_id = "", LogLevel level = LogLevel::kInfo) {
  const std::string line =
      FormatLine(LogFormat::kJson, kTime, level, "calls,metrics", request_id, message, fields);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  return nlohmann::json::parse(line);
}

TEST(LogTimeTest, Rfc3339UtcWithMilliseconds) {
  EXPECT_EQ(log_internal::FormatTime(kTime), "2026-11-28T03:30:00.123Z");
  EXPECT_EQ(log_internal::FormatTime(absl::FromUnixMillis(0)), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(log_internal::FormatTime(absl::FromUnixMillis(951782400009)),
            "2000-02-29T00:00:00.009Z");
  // The same second twice (the per-thread cache), then the next.
  EXPECT_EQ(log_internal::FormatTime(kTime + absl::Milliseconds(800)),
            "2026-11-28T03:30:00.923Z");
  EXPECT_EQ(log_internal::FormatTime(kTime + absl::Milliseconds(900)),
            "2026-11-28T03:30:01.023Z");
}

TEST(LogTextTest, FieldsInOrderWithMessageLast) {
  EXPECT_EQ(Text("lease lost, result dropped", {{"call_id", 12}, {"method", "GET"}}, "abc-1"),
            "2026-11-28T03:30:00.123Z INFO role=edge request_id=abc-1 call_id=12 method=GET "
            "msg=\"lease lost, result dropped\"\n");
  EXPECT_EQ(Text("x", {}, "", LogLevel::kWarn), "2026-11-28T03:30:00.123Z WARN role=edge msg=\"x\"\n");
  EXPECT_EQ(Text("x", {}, "", LogLevel::kDebug).substr(25, 5), "DEBUG");
  EXPECT_EQ(Text("x", {}, "", LogLevel::kError).substr(25, 5), "ERROR");
}

TEST(LogTextTest, ValuesThatAreNotOneTokenAreQuotedAndEscaped) {
  EXPECT_THAT(Text("m", {{"path", "/a b"}}), HasSubstr(" path=\"/a b\" "));
  EXPECT_THAT(Text("m", {{"v", ""}}), HasSubstr(" v=\"\" "));
  EXPECT_THAT(Text("m", {{"v", "a=b"}}), HasSubstr(" v=\"a=b\" "));
  // A value cannot end the line or close its quotes early to fake a field.
  const std::string forged = Text("m", {{"v", "x\" level=error\nFAKE LINE"}});
  EXPECT_THAT(forged, HasSubstr(" v=\"x\\\" level=error\\nFAKE LINE\" "));
  EXPECT_EQ(std::count(forged.begin(), forged.end(), '\n'), 1);
  EXPECT_THAT(Text("say \"hi\"\\\t\r", {}), HasSubstr("msg=\"say \\\"hi\\\"\\\\\\t\\r\"\n"));
  EXPECT_THAT(Text("bell\x07", {}), HasSubstr("msg=\"bell\\u0007\""));
}

TEST(LogTextTest, FieldRequestIdStandsForTheContexts) {
  const std::string line = Text("m", {{"request_id", "from-field"}}, "from-context");
  EXPECT_THAT(line, HasSubstr("request_id=from-field"));
  EXPECT_THAT(line, ::testing::Not(HasSubstr("from-context")));
}

TEST(LogJsonTest, OneObjectWithTheStandardFields) {
  const nlohmann::json line =
      Json("recording stored", {{"call_id", 12}, {"path", "/x"}, {"ok", true}}, "req-9");
  EXPECT_EQ(line["time"], "2026-11-28T03:30:00.123Z");
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["role"], "calls,metrics");
  EXPECT_EQ(line["msg"], "recording stored");
  EXPECT_EQ(line["request_id"], "req-9");
  EXPECT_EQ(line["call_id"], 12);  // a number, not a string
  EXPECT_EQ(line["path"], "/x");
  EXPECT_EQ(line["ok"], "true");
  EXPECT_FALSE(Json("m", {}).contains("request_id"));
  EXPECT_EQ(Json("m", {}, "", LogLevel::kWarn)["level"], "warn");
}

TEST(LogJsonTest, NumbersStatusesAndNonFiniteValues) {
  const nlohmann::json line =
      Json("m", {{"latency_ms", 1.5},
                 {"big", static_cast<unsigned long long>(18446744073709551615ull)},
                 {"negative", -7L},
                 {"nan", std::nan("")},
                 {"status", absl::NotFoundError("call 12")},
                 {"fine", absl::OkStatus()}});
  EXPECT_DOUBLE_EQ(line["latency_ms"].get<double>(), 1.5);
  EXPECT_EQ(line["big"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(line["negative"], -7);
  EXPECT_EQ(line["nan"], "NaN");
  EXPECT_EQ(line["status"], "NOT_FOUND: call 12");
  EXPECT_EQ(line["fine"], "OK");
}

TEST(LogJsonTest, EscapesControlCharactersQuotesAndBackslashes) {
  std::string nasty = "a\"b\\c\nd\re\tf";
  nasty.push_back('\0');
  nasty += "\x01\x1f\x7fz";
  const std::string raw =
      FormatLine(LogFormat::kJson, kTime, LogLevel::kInfo, "edge", "", nasty, {{"v", nasty}});
  EXPECT_EQ(raw.find('\n'), raw.size() - 1);
  EXPECT_THAT(raw, HasSubstr(R"("a\"b\\c\nd\re\tf\u0000\u0001\u001f\u007fz")"));
  const nlohmann::json line = nlohmann::json::parse(raw);
  EXPECT_EQ(line["msg"], nasty);
  EXPECT_EQ(line["v"], nasty);
}

TEST(LogJsonTest, InvalidUtf8BecomesTheReplacementCharacter) {
  // Kept: 2-, 3- and 4-byte sequences. Replaced: a lone continuation byte, a truncated
  // sequence, an overlong '/', a surrogate, a code point above U+10FFFF, 0xFF.
  const std::string valid = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  EXPECT_EQ(Json(valid, {})["msg"], valid);
  const std::string invalid = "a\x80" "b\xE2\x82" "c\xC0\xAF" "d\xED\xA0\x80" "e\xF4\x90\x80\x80" "f\xFF";
  const std::string raw =
      FormatLine(LogFormat::kJson, kTime, LogLevel::kInfo, "edge", "", invalid, {});
  const nlohmann::json line = nlohmann::json::parse(raw);  // throws on invalid UTF-8
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(line["msg"], "a" + r + "b" + r + r + "c" + r + r + "d" + r + r + r + "e" + r + r +
                             r + r + "f" + r);
  // Text lines too.
  EXPECT_THAT(Text("x\xFF", {}), HasSubstr("msg=\"x" + r + "\""));
}

TEST(LogJsonTest, LongValuesAreCut) {
  const std::string body(10000, 'x');
  const nlohmann::json line = Json(body, {{"v", body}});
  EXPECT_EQ(line["msg"].get<std::string>().size(), 4096 + std::string("...(cut)").size());
  EXPECT_THAT(line["v"].get<std::string>(), ::testing::EndsWith("...(cut)"));
}

TEST(LogParseTest, LevelsAndFormats) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("INFO"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("verbose").ok());
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("xml").ok());
  EXPECT_FALSE(ParseLogFormat("").ok());
}

TEST(ScopedLogContextTest, NestsAndRestores) {
  EXPECT_EQ(CurrentRequestId(), "");
  {
    ScopedLogContext outer("outer");
    EXPECT_EQ(CurrentRequestId(), "outer");
    {
      ScopedLogContext inner("inner");
      EXPECT_EQ(CurrentRequestId(), "inner");
      std::thread([] { EXPECT_EQ(CurrentRequestId(), ""); }).join();  // per thread
    }
    EXPECT_EQ(CurrentRequestId(), "outer");
  }
  EXPECT_EQ(CurrentRequestId(), "");
}

TEST(RequestIdTest, OnlyPlainTokensAreUsable) {
  EXPECT_TRUE(IsUsableRequestId("req-123"));
  EXPECT_TRUE(IsUsableRequestId("0f8fad5b-d9cb-469f-a165-70867728950e"));
  EXPECT_TRUE(IsUsableRequestId("trace/span:1.2_x+y=z@host"));
  EXPECT_TRUE(IsUsableRequestId(std::string(128, 'a')));
  EXPECT_FALSE(IsUsableRequestId(std::string(129, 'a')));
  EXPECT_FALSE(IsUsableRequestId(""));
  for (const char* bad : {"a b", "a\"b", "a\\b", "a\nb", "a\rb", "a\tb", "a,b", "a;b", "a'b",
                          "caf\xC3\xA9", "a{b}"}) {
    EXPECT_FALSE(IsUsableRequestId(bad)) << bad;
  }
  const std::string id = NewRequestId();
  EXPECT_EQ(id.size(), 24u);
  EXPECT_TRUE(IsUsableRequestId(id));
  EXPECT_NE(id, NewRequestId());
}

// The configured log, written to a file: levels below the minimum are dropped, and lines from
// many threads, each longer than a pipe's atomic write, come out whole.
TEST(LogOutputTest, FiltersByLevelAndNeverInterleavesLines) {
  char path[] = "/tmp/log_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ConfigureLogging({LogFormat::kJson, LogLevel::kInfo, "all", fd});
  LogDebug("dropped");
  LogInfo("kept", {{"n", 1}});
  {
    ScopedLogContext context("ctx-1");
    LogWarn("with context");
  }
  constexpr int kThreads = 8;
  constexpr int kLinesEach = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      const std::string filler(3000, static_cast<char>('a' + t));
      for (int i = 0; i < kLinesEach; ++i) LogInfo(filler, {{"thread", t}, {"i", i}});
    });
  }
  for (std::thread& thread : threads) thread.join();
  ConfigureLogging({});
  close(fd);

  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  unlink(path);
  std::vector<std::string> lines = absl::StrSplit(all.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u + kThreads * kLinesEach);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["msg"], "kept");
  EXPECT_EQ(nlohmann::json::parse(lines[0])["role"], "all");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["request_id"], "ctx-1");
  std::vector<int> seen(kThreads, 0);
  for (size_t i = 2; i < lines.size(); ++i) {
    const nlohmann::json line = nlohmann::json::parse(lines[i]);
    const int t = line["thread"];
    EXPECT_EQ(line["msg"], std::string(3000, static_cast<char>('a' + t)));
    EXPECT_EQ(line["i"], seen[t]++);
  }
}

}  // namespace
}  // namespace calleval

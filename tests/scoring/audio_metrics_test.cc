#include "services/scoring/audio_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "calleval/v1/calls.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/scoring/timeline.h"
#include "services/scoring/turns.h"

namespace calleval::scoring {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;
using ::testing::UnorderedElementsAreArray;

// --- Helpers -----------------------------------------------------------------------------------

// The result as JSON, the way the edge prints it.
nlohmann::json ToJson(const Value& v) {
  switch (v.kind_case()) {
    case Value::kNumberValue:
      return v.number_value();
    case Value::kStringValue:
      return v.string_value();
    case Value::kBoolValue:
      return v.bool_value();
    case Value::kStructValue: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& [k, f] : v.struct_value().fields()) o[k] = ToJson(f);
      return o;
    }
    case Value::kListValue: {
      nlohmann::json a = nlohmann::json::array();
      for (const Value& e : v.list_value().values()) a.push_back(ToJson(e));
      return a;
    }
    default:
      return nullptr;
  }
}

nlohmann::json ResultJson(const v1::StandardMetricResult& r) {
  Value v;
  *v.mutable_struct_value() = r.result();
  return ToJson(v);
}

std::vector<std::string> Keys(const nlohmann::json& o) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : o.items()) keys.push_back(k);
  return keys;
}

// Checks the parts every element shares.
void ExpectHeader(const v1::StandardMetricResult& r, int64_t id, const std::string& key,
                  const std::string& name, const std::string& status,
                  const std::vector<std::string>& result_keys) {
  EXPECT_EQ(r.metric_id(), id);
  EXPECT_EQ(r.standard_metric_key(), key);
  EXPECT_EQ(r.name(), name);
  EXPECT_EQ(r.status(), status);
  EXPECT_EQ(r.credits_used(), 0);
  EXPECT_THAT(Keys(ResultJson(r)), UnorderedElementsAreArray(result_keys));
}

const std::vector<std::string> kLatencyKeys = {"turns",  "average_ms", "p50_ms", "p90_ms", "p95_ms",
                                               "p99_ms", "min_ms",     "max_ms", "count"};
const std::vector<std::string> kInterruptionKeys = {"count", "events"};
const std::vector<std::string> kStopKeys = {"average_ms", "events"};
const std::vector<std::string> kSilenceKeys = {"count", "total_ms", "threshold_ms", "silences"};
const std::vector<std::string> kWpmKeys = {"ai_wpm",     "user_wpm",        "ai_words",
                                           "ai_speaking_s", "user_words", "user_speaking_s",
                                           "transcript"};
const std::vector<std::string> kTalkKeys = {"ai_ratio", "user_ratio", "silence_ratio"};

CallTimeline Timeline(std::vector<Span> agent, std::vector<Span> user, double duration_s) {
  CallTimeline t;
  t.agent = std::move(agent);
  t.user = std::move(user);
  t.duration_s = duration_s;
  return t;
}

v1::Turn MakeTurn(const std::string& role, const std::string& content) {
  v1::Turn t;
  t.set_role(role);
  t.set_content(content);
  return t;
}

// --- Latency -----------------------------------------------------------------------------------

TEST(LatencyTest, AgentAnswersAfterAPause) {
  auto r = Latency(Timeline({{0.5, 1.0}, {2.5, 3.0}}, {{1.2, 2.0}}, 4.0));
  ExpectHeader(r, 1, "latency", "Latency", "completed", kLatencyKeys);
  nlohmann::json j = ResultJson(r);
  ASSERT_EQ(j["turns"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["turns"][0]["user_end_s"], 2.0);
  EXPECT_DOUBLE_EQ(j["turns"][0]["agent_start_s"], 2.5);
  EXPECT_DOUBLE_EQ(j["turns"][0]["latency_ms"], 500.0);
  EXPECT_EQ(Keys(j["turns"][0]).size(), 3u);
  EXPECT_DOUBLE_EQ(j["count"], 1);
  for (const char* k : {"average_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms"}) {
    EXPECT_DOUBLE_EQ(j[k], 500.0) << k;
  }
  ASSERT_TRUE(r.has_score());
  EXPECT_DOUBLE_EQ(r.score(), 500.0);
  EXPECT_FALSE(r.has_error());
}

TEST(LatencyTest, AgentStartingExactlyAtTheUserEndIsALatencyOfZero) {
  auto r = Latency(Timeline({{2.0, 3.0}}, {{1.0, 2.0}}, 4.0));
  nlohmann::json j = ResultJson(r);
  ASSERT_EQ(j["turns"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["turns"][0]["latency_ms"], 0.0);
  EXPECT_EQ(r.status(), "completed");
}

TEST(LatencyTest, ShortOverlapIsNeitherLatencyNorInterruption) {
  // The agent starts 150 ms before the caller stops.
  CallTimeline t = Timeline({{1.85, 3.0}}, {{1.0, 2.0}}, 4.0);
  auto r = Latency(t);
  ExpectHeader(r, 1, "latency", "Latency", "not_applicable", kLatencyKeys);
  EXPECT_TRUE(ResultJson(r)["turns"].empty());
  EXPECT_DOUBLE_EQ(ResultJson(AiInterruptions(t))["count"], 0);
  EXPECT_DOUBLE_EQ(ResultJson(UserInterruptions(t))["count"], 0);
}

TEST(LatencyTest, OverlapOfInterruptionLengthIsNoLatencyTurn) {
  CallTimeline t = Timeline({{1.75, 3.0}}, {{1.0, 2.0}}, 4.0);
  EXPECT_DOUBLE_EQ(ResultJson(Latency(t))["count"], 0);
  nlohmann::json ai = ResultJson(AiInterruptions(t));
  ASSERT_EQ(ai["events"].size(), 1u);
  EXPECT_DOUBLE_EQ(ai["events"][0]["at_second"], 1.75);
  EXPECT_DOUBLE_EQ(ai["events"][0]["duration_ms"], 250.0);
}

TEST(LatencyTest, UserTurnEndingWhileTheAgentTalksYieldsNone) {
  // The caller speaks 1–2 s inside the agent's 0–5 s turn; the agent's next turn follows later.
  auto r = Latency(Timeline({{0.0, 5.0}, {6.0, 7.0}}, {{1.0, 2.0}}, 8.0));
  EXPECT_EQ(r.status(), "not_applicable");
  EXPECT_DOUBLE_EQ(ResultJson(r)["count"], 0);
}

TEST(LatencyTest, BargeInThatStopsTheAgentYieldsALatencyTurn) {
  // The agent (0–2.3 s) stops after the caller cut in at 2 s; it answers when the caller is done.
  auto r = Latency(Timeline({{0.0, 2.3}, {4.0, 5.0}}, {{2.0, 3.0}}, 6.0));
  nlohmann::json j = ResultJson(r);
  ASSERT_EQ(j["turns"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["turns"][0]["latency_ms"], 1000.0);
}

TEST(LatencyTest, UserTurnFollowedByAnotherUserTurnYieldsNone) {
  auto r = Latency(Timeline({{5.0, 6.0}}, {{1.0, 2.0}, {3.0, 4.0}}, 7.0));
  nlohmann::json j = ResultJson(r);
  ASSERT_EQ(j["turns"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["turns"][0]["user_end_s"], 4.0);
  EXPECT_DOUBLE_EQ(j["turns"][0]["latency_ms"], 1000.0);
}

TEST(LatencyTest, LastUserTurnWithoutAnswerYieldsNone) {
  auto r = Latency(Timeline({{0.0, 1.0}}, {{2.0, 3.0}}, 5.0));
  EXPECT_EQ(r.status(), "not_applicable");
}

TEST(LatencyTest, PercentilesInterpolateLinearlyLikeNumpy) {
  // Latencies 100, 200, 400, 800, 1600 ms. numpy.percentile: p50 = 400; p90: rank 3.6 →
  // 800 + 0.6 × 800 = 1280; p95: rank 3.8 → 1440; p99: rank 3.96 → 1568; mean 620.
  std::vector<Span> agent;
  std::vector<Span> user;
  const double latencies_ms[] = {800, 100, 1600, 200, 400};
  for (int i = 0; i < 5; ++i) {
    const double user_end = 10.0 * i + 2.0;
    user.push_back({10.0 * i, user_end});
    agent.push_back({user_end + latencies_ms[i] / 1000.0, user_end + latencies_ms[i] / 1000.0 + 1});
  }
  auto r = Latency(Timeline(agent, user, 60.0));
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["count"], 5);
  EXPECT_DOUBLE_EQ(j["average_ms"], 620.0);
  EXPECT_DOUBLE_EQ(j["p50_ms"], 400.0);
  EXPECT_DOUBLE_EQ(j["p90_ms"], 1280.0);
  EXPECT_DOUBLE_EQ(j["p95_ms"], 1440.0);
  EXPECT_DOUBLE_EQ(j["p99_ms"], 1568.0);
  EXPECT_DOUBLE_EQ(j["min_ms"], 100.0);
  EXPECT_DOUBLE_EQ(j["max_ms"], 1600.0);
  EXPECT_DOUBLE_EQ(r.score(), 620.0);
  // Turns are listed in time order, not by latency.
  ASSERT_EQ(j["turns"].size(), 5u);
  EXPECT_DOUBLE_EQ(j["turns"][0]["latency_ms"], 800.0);
  EXPECT_DOUBLE_EQ(j["turns"][4]["latency_ms"], 400.0);
}

TEST(LatencyTest, TwoTurnsInterpolate) {
  // Two turns of 700 and 800 ms → p90 790, p95 795, p99 799.
  auto r = Latency(Timeline({{2.7, 3.0}, {6.8, 7.0}}, {{1.0, 2.0}, {5.0, 6.0}}, 8.0));
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["p50_ms"], 750.0);
  EXPECT_DOUBLE_EQ(j["p90_ms"], 790.0);
  EXPECT_DOUBLE_EQ(j["p95_ms"], 795.0);
  EXPECT_DOUBLE_EQ(j["p99_ms"], 799.0);
}

TEST(LatencyTest, EmptyCallIsNotApplicableWithNulls) {
  auto r = Latency(Timeline({}, {}, 0));
  ExpectHeader(r, 1, "latency", "Latency", "not_applicable", kLatencyKeys);
  nlohmann::json j = ResultJson(r);
  EXPECT_TRUE(j["turns"].empty());
  EXPECT_DOUBLE_EQ(j["count"], 0);
  for (const char* k : {"average_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms"}) {
    EXPECT_TRUE(j[k].is_null()) << k;
  }
  EXPECT_FALSE(r.has_score());
  EXPECT_FALSE(r.has_error());
}

TEST(LatencyTest, OneSidedCallHasNoLatencyTurns) {
  EXPECT_EQ(Latency(Timeline({{0.5, 5.0}, {9.0, 11.0}}, {}, 12.0)).status(), "not_applicable");
  EXPECT_EQ(Latency(Timeline({}, {{0.5, 5.0}, {9.0, 11.0}}, 12.0)).status(), "not_applicable");
}

// --- Interruptions -------------------------------------------------------------------------------

TEST(InterruptionsTest, HeadersAndEmptyCall) {
  CallTimeline t = Timeline({}, {}, 0);
  auto ai = AiInterruptions(t);
  ExpectHeader(ai, 2, "ai_interruptions", "AI Interruptions", "completed", kInterruptionKeys);
  EXPECT_DOUBLE_EQ(ResultJson(ai)["count"], 0);
  EXPECT_TRUE(ResultJson(ai)["events"].empty());
  EXPECT_DOUBLE_EQ(ai.score(), 0);
  auto user = UserInterruptions(t);
  ExpectHeader(user, 3, "user_interruptions", "User Interruptions", "completed", kInterruptionKeys);
  EXPECT_DOUBLE_EQ(user.score(), 0);
}

TEST(InterruptionsTest, OverlapThreshold) {
  // Agent starts 199, 200 and 201 ms before the caller's turn ends.
  for (const auto& [overlap_s, expected] :
       std::vector<std::pair<double, int>>{{0.199, 0}, {0.2, 1}, {0.201, 1}}) {
    CallTimeline t = Timeline({{10.2 - overlap_s, 12.0}}, {{9.0, 10.2}}, 13.0);
    EXPECT_DOUBLE_EQ(ResultJson(AiInterruptions(t))["count"], expected) << overlap_s;
    EXPECT_DOUBLE_EQ(ResultJson(Latency(t))["count"], 0) << overlap_s;
  }
}

TEST(InterruptionsTest, DurationIsTheOverlap) {
  // The agent's short interjection ends inside the caller's turn: the overlap is the interjection.
  CallTimeline t = Timeline({{1.0, 1.5}, {3.0, 3.4}}, {{0.0, 5.0}}, 6.0);
  nlohmann::json j = ResultJson(AiInterruptions(t));
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["events"][0]["at_second"], 1.0);
  EXPECT_DOUBLE_EQ(j["events"][0]["duration_ms"], 500.0);
  EXPECT_DOUBLE_EQ(j["events"][1]["at_second"], 3.0);
  EXPECT_DOUBLE_EQ(j["events"][1]["duration_ms"], 400.0);
  EXPECT_DOUBLE_EQ(j["count"], 2);
}

TEST(InterruptionsTest, SimultaneousStartIsNoInterruption) {
  CallTimeline t = Timeline({{1.0, 3.0}}, {{1.0, 2.0}}, 4.0);
  EXPECT_DOUBLE_EQ(ResultJson(AiInterruptions(t))["count"], 0);
  EXPECT_DOUBLE_EQ(ResultJson(UserInterruptions(t))["count"], 0);
}

TEST(InterruptionsTest, RolesSwapped) {
  CallTimeline t = Timeline({{0.0, 3.0}}, {{2.0, 4.0}}, 5.0);
  EXPECT_DOUBLE_EQ(ResultJson(AiInterruptions(t))["count"], 0);
  auto r = UserInterruptions(t);
  nlohmann::json j = ResultJson(r);
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["events"][0]["at_second"], 2.0);
  EXPECT_DOUBLE_EQ(j["events"][0]["duration_ms"], 1000.0);
  EXPECT_DOUBLE_EQ(r.score(), 1);
}

// --- Stop time -----------------------------------------------------------------------------------

TEST(StopTimeTest, TimeFromCallerStartToAgentTurnEnd) {
  // The agent keeps talking 3 s after the first barge-in; it stops 400 ms into the second.
  CallTimeline t = Timeline({{0.0, 5.0}, {10.0, 12.4}}, {{2.0, 3.0}, {12.0, 13.0}}, 14.0);
  auto r = StopTimeAfterInterruption(t);
  ExpectHeader(r, 4, "stop_time_after_interruption", "Stop Time After Interruption", "completed",
               kStopKeys);
  nlohmann::json j = ResultJson(r);
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["events"][0]["at_second"], 2.0);
  EXPECT_DOUBLE_EQ(j["events"][0]["stop_ms"], 3000.0);
  EXPECT_DOUBLE_EQ(j["events"][1]["at_second"], 12.0);
  EXPECT_DOUBLE_EQ(j["events"][1]["stop_ms"], 400.0);
  EXPECT_DOUBLE_EQ(j["average_ms"], 1700.0);
  EXPECT_DOUBLE_EQ(r.score(), 1700.0);
}

TEST(StopTimeTest, ShortOverlapIsNoInterruption) {
  // The caller starts 150 ms before the agent's turn ends.
  auto r = StopTimeAfterInterruption(Timeline({{0.0, 2.0}}, {{1.85, 3.0}}, 4.0));
  EXPECT_EQ(r.status(), "not_applicable");
}

TEST(StopTimeTest, NoUserInterruptionIsNotApplicable) {
  auto r = StopTimeAfterInterruption(Timeline({{0.0, 1.0}}, {{2.0, 3.0}}, 4.0));
  ExpectHeader(r, 4, "stop_time_after_interruption", "Stop Time After Interruption",
               "not_applicable", kStopKeys);
  nlohmann::json j = ResultJson(r);
  EXPECT_TRUE(j["average_ms"].is_null());
  EXPECT_TRUE(j["events"].empty());
  EXPECT_FALSE(r.has_score());
  EXPECT_FALSE(r.has_error());
}

// --- Silence -------------------------------------------------------------------------------------

TEST(SilenceTest, ThresholdEdgesAndCallEdges) {
  // Leading gap 3000 ms (counts), 2999 ms (does not), 3001 ms (counts), trailing 3500 ms.
  CallTimeline t = Timeline({{3.0, 5.0}, {12.001, 13.0}}, {{7.999, 9.0}}, 16.5);
  auto r = SilenceDetection(t);
  ExpectHeader(r, 5, "silence_detection", "Silence Detection", "completed", kSilenceKeys);
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["count"], 3);
  EXPECT_DOUBLE_EQ(j["threshold_ms"], 3000);
  EXPECT_DOUBLE_EQ(j["total_ms"], 9501.0);
  ASSERT_EQ(j["silences"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["silences"][0]["start_s"], 0.0);
  EXPECT_DOUBLE_EQ(j["silences"][0]["end_s"], 3.0);
  EXPECT_DOUBLE_EQ(j["silences"][0]["duration_ms"], 3000.0);
  EXPECT_DOUBLE_EQ(j["silences"][1]["start_s"], 9.0);
  EXPECT_DOUBLE_EQ(j["silences"][1]["end_s"], 12.001);
  EXPECT_DOUBLE_EQ(j["silences"][1]["duration_ms"], 3001.0);
  EXPECT_DOUBLE_EQ(j["silences"][2]["start_s"], 13.0);
  EXPECT_DOUBLE_EQ(j["silences"][2]["end_s"], 16.5);
  EXPECT_DOUBLE_EQ(j["silences"][2]["duration_ms"], 3500.0);
  EXPECT_DOUBLE_EQ(r.score(), 3);
}

TEST(SilenceTest, GapBetweenDecimalTimesOfExactlyTheThreshold) {
  // 13.1 - 10.1 is 2.99999... in binary; it is still a 3000 ms gap.
  nlohmann::json j = ResultJson(SilenceDetection(Timeline({{0.0, 10.1}}, {{13.1, 14.0}}, 14.0)));
  EXPECT_DOUBLE_EQ(j["count"], 1);
}

TEST(SilenceTest, OverlappingTurnsLeaveNoGap) {
  nlohmann::json j =
      ResultJson(SilenceDetection(Timeline({{0.0, 5.0}, {9.0, 10.0}}, {{2.0, 9.5}}, 10.0)));
  EXPECT_DOUBLE_EQ(j["count"], 0);
  EXPECT_DOUBLE_EQ(j["total_ms"], 0);
  EXPECT_TRUE(j["silences"].empty());
}

TEST(SilenceTest, CustomThreshold) {
  auto r = SilenceDetection(Timeline({{0.0, 1.0}, {2.5, 3.0}}, {}, 3.0), 1500);
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["threshold_ms"], 1500);
  EXPECT_DOUBLE_EQ(j["count"], 1);
  EXPECT_DOUBLE_EQ(j["total_ms"], 1500.0);
}

TEST(SilenceTest, EmptyCallIsOneSilence) {
  nlohmann::json j = ResultJson(SilenceDetection(Timeline({}, {}, 10.0)));
  EXPECT_DOUBLE_EQ(j["count"], 1);
  EXPECT_DOUBLE_EQ(j["silences"][0]["start_s"], 0.0);
  EXPECT_DOUBLE_EQ(j["silences"][0]["end_s"], 10.0);
  EXPECT_DOUBLE_EQ(j["total_ms"], 10000.0);
}

TEST(SilenceTest, NoDurationNoSilence) {
  nlohmann::json j = ResultJson(SilenceDetection(Timeline({}, {}, 0)));
  EXPECT_DOUBLE_EQ(j["count"], 0);
}

TEST(SilenceTest, TurnsBeyondTheRecordingAreClipped) {
  nlohmann::json j = ResultJson(SilenceDetection(Timeline({{0.0, 1.0}, {9.0, 12.0}}, {}, 10.0)));
  ASSERT_EQ(j["silences"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["silences"][0]["end_s"], 9.0);
}

// --- Words per minute ----------------------------------------------------------------------------

TEST(CountWordsTest, TokensWithALetterOrDigit) {
  EXPECT_EQ(CountWords(""), 0);
  EXPECT_EQ(CountWords("  \t\n "), 0);
  EXPECT_EQ(CountWords("Hello, world!"), 2);
  EXPECT_EQ(CountWords("It is M, four - five ... 42?"), 6);
  EXPECT_EQ(CountWords("don't stop"), 2);
  EXPECT_EQ(CountWords("$5 -- ?!"), 1);
  EXPECT_EQ(CountWords("caf\xC3\xA9 na\xC3\xAFve"), 2);             // café naïve
  EXPECT_EQ(CountWords("\xE6\x97\xA5\xE6\x9C\xAC"), 1);             // 日本
  EXPECT_EQ(CountWords("yes\xC2\xA0no"), 2);                        // NBSP separates
  EXPECT_EQ(CountWords("wait \xE2\x80\x94 what \xE2\x80\xA6"), 2);  // em dash, ellipsis
  EXPECT_EQ(CountWords("\xF0\x9F\x98\x80 ok"), 1);                  // emoji
  EXPECT_EQ(CountWords("bad\xFF byte"), 2);
}

TEST(WordsPerMinuteTest, WordsFromTranscriptTimeFromTurns) {
  std::vector<v1::Turn> transcript = {
      MakeTurn("AI Assistant", "one two three four five six"),
      MakeTurn("User", "a b c -"),
      MakeTurn("Function Call", "not counted at all"),
      MakeTurn("AI Assistant", "seven eight nine ten"),
  };
  // Agent speaks 2 + 1 = 3 s → 10 words / 0.05 min = 200 wpm; caller 1.5 s → 3 words = 120 wpm.
  auto r = WordsPerMinute(Timeline({{0.0, 2.0}, {5.0, 6.0}}, {{3.0, 4.5}}, 8.0), &transcript);
  ExpectHeader(r, 6, "words_per_minute", "Words Per Minute", "completed", kWpmKeys);
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["ai_words"], 10);
  EXPECT_DOUBLE_EQ(j["ai_speaking_s"], 3.0);
  EXPECT_DOUBLE_EQ(j["ai_wpm"], 200.0);
  EXPECT_DOUBLE_EQ(j["user_words"], 3);
  EXPECT_DOUBLE_EQ(j["user_speaking_s"], 1.5);
  EXPECT_DOUBLE_EQ(j["user_wpm"], 120.0);
  EXPECT_DOUBLE_EQ(r.score(), 200.0);
  EXPECT_FALSE(r.has_error());
}

TEST(WordsPerMinuteTest, SilentPartyHasNullRate) {
  std::vector<v1::Turn> transcript = {MakeTurn("AI Assistant", "hello are you there")};
  auto r = WordsPerMinute(Timeline({{0.0, 2.0}}, {}, 8.0), &transcript);
  EXPECT_EQ(r.status(), "completed");
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["ai_wpm"], 120.0);
  EXPECT_TRUE(j["user_wpm"].is_null());
  EXPECT_DOUBLE_EQ(j["user_words"], 0);
  EXPECT_DOUBLE_EQ(j["user_speaking_s"], 0.0);
}

TEST(WordsPerMinuteTest, AgentNeverSpeaksLeavesNoScore) {
  std::vector<v1::Turn> transcript = {MakeTurn("User", "hello")};
  auto r = WordsPerMinute(Timeline({}, {{0.0, 1.0}}, 2.0), &transcript);
  EXPECT_EQ(r.status(), "completed");
  EXPECT_TRUE(ResultJson(r)["ai_wpm"].is_null());
  EXPECT_DOUBLE_EQ(ResultJson(r)["user_wpm"], 60.0);
  EXPECT_FALSE(r.has_score());
}

TEST(WordsPerMinuteTest, EmptyTranscriptCountsZeroWords) {
  std::vector<v1::Turn> transcript;
  auto r = WordsPerMinute(Timeline({{0.0, 2.0}}, {}, 3.0), &transcript);
  EXPECT_EQ(r.status(), "completed");
  EXPECT_DOUBLE_EQ(ResultJson(r)["ai_wpm"], 0.0);
  EXPECT_DOUBLE_EQ(r.score(), 0.0);
}

TEST(WordsPerMinuteTest, NoTranscriptIsNotApplicableWithAReason) {
  auto r = WordsPerMinute(Timeline({{0.0, 2.0}}, {{3.0, 4.0}}, 5.0), nullptr);
  ExpectHeader(r, 6, "words_per_minute", "Words Per Minute", "not_applicable", kWpmKeys);
  nlohmann::json j = ResultJson(r);
  EXPECT_TRUE(j["ai_wpm"].is_null());
  EXPECT_TRUE(j["user_wpm"].is_null());
  EXPECT_DOUBLE_EQ(j["ai_words"], 0);
  EXPECT_DOUBLE_EQ(j["user_words"], 0);
  EXPECT_DOUBLE_EQ(j["ai_speaking_s"], 2.0);
  EXPECT_DOUBLE_EQ(j["user_speaking_s"], 1.0);
  EXPECT_TRUE(j["transcript"].is_null());
  EXPECT_FALSE(r.has_score());
  EXPECT_EQ(r.error(), kWordsNeedATranscript);
}

TEST(WordsPerMinuteTest, SaysWhichTranscriptItCounted) {
  std::vector<v1::Turn> transcript = {MakeTurn("AI Assistant", "one two three")};
  EXPECT_EQ(ResultJson(WordsPerMinute(Timeline({{0.0, 2.0}}, {}, 3.0), &transcript))["transcript"],
            "provided");
  EXPECT_EQ(ResultJson(WordsPerMinute(Timeline({{0.0, 2.0}}, {}, 3.0), &transcript,
                                      "generated"))["transcript"],
            "generated");
}

// A voice call without a provided transcript: the audio pass measures the speaking times, the
// generated transcript's words are counted once the recording is transcribed.
TEST(WordsPerMinuteTest, RecountsTheGeneratedTranscriptOverTheMeasuredTimes) {
  const auto measured = WordsPerMinute(Timeline({{0.0, 2.0}}, {{3.0, 4.0}}, 5.0), nullptr);
  std::vector<v1::Turn> generated = {MakeTurn("AI Assistant", "hello there how are you"),
                                     MakeTurn("User", "fine thanks")};
  const auto r = RecountWordsPerMinute(measured, generated, "generated");
  ExpectHeader(r, 6, "words_per_minute", "Words Per Minute", "completed", kWpmKeys);
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["ai_words"], 5);
  EXPECT_DOUBLE_EQ(j["user_words"], 2);
  EXPECT_DOUBLE_EQ(j["ai_wpm"], 150.0);  // 5 words in 2 s
  EXPECT_DOUBLE_EQ(j["user_wpm"], 120.0);
  EXPECT_DOUBLE_EQ(j["ai_speaking_s"], 2.0);
  EXPECT_EQ(j["transcript"], "generated");
  EXPECT_DOUBLE_EQ(r.score(), 150.0);
  EXPECT_FALSE(r.has_error());
}

// --- Talk ratio ----------------------------------------------------------------------------------

TEST(TalkRatioTest, OverlapsCountForBothParties) {
  auto r = TalkRatio(Timeline({{0.0, 4.0}}, {{3.0, 6.0}}, 10.0));
  ExpectHeader(r, 10, "talk_ratio", "Talk Ratio", "completed", kTalkKeys);
  nlohmann::json j = ResultJson(r);
  EXPECT_DOUBLE_EQ(j["ai_ratio"], 0.4);
  EXPECT_DOUBLE_EQ(j["user_ratio"], 0.3);
  EXPECT_DOUBLE_EQ(j["silence_ratio"], 0.4);
  EXPECT_DOUBLE_EQ(r.score(), 0.4);
}

TEST(TalkRatioTest, OneSidedCall) {
  nlohmann::json j = ResultJson(TalkRatio(Timeline({{1.0, 3.0}}, {}, 8.0)));
  EXPECT_DOUBLE_EQ(j["ai_ratio"], 0.25);
  EXPECT_DOUBLE_EQ(j["user_ratio"], 0.0);
  EXPECT_DOUBLE_EQ(j["silence_ratio"], 0.75);
}

TEST(TalkRatioTest, EmptyCallIsAllSilence) {
  nlohmann::json j = ResultJson(TalkRatio(Timeline({}, {}, 5.0)));
  EXPECT_DOUBLE_EQ(j["ai_ratio"], 0.0);
  EXPECT_DOUBLE_EQ(j["user_ratio"], 0.0);
  EXPECT_DOUBLE_EQ(j["silence_ratio"], 1.0);
}

TEST(TalkRatioTest, NoDurationIsNotApplicable) {
  auto r = TalkRatio(Timeline({}, {}, 0));
  ExpectHeader(r, 10, "talk_ratio", "Talk Ratio", "not_applicable", kTalkKeys);
  EXPECT_TRUE(ResultJson(r)["ai_ratio"].is_null());
  EXPECT_FALSE(r.has_score());
  EXPECT_TRUE(r.has_error());
}

// --- The corpus contract ------------------------------------------------------------------------


namespace fs = std::filesystem;

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<Span> SpansOf(const nlohmann::json& turns) {
  std::vector<Span> spans;
  for (const auto& t : turns)
    spans.push_back({t["start_s"].get<double>(), t["end_s"].get<double>()});
  return spans;
}

std::vector<v1::Turn> TranscriptOf(const nlohmann::json& entries) {
  std::vector<v1::Turn> transcript;
  for (const auto& e : entries) {
    v1::Turn t;
    t.set_role(e.at("role").get<std::string>());
    if (e.contains("content") && e["content"].is_string()) {
      t.set_content(e["content"].get<std::string>());
    }
    if (e.contains("start_time") && e["start_time"].is_number()) {
      t.set_start_time(e["start_time"].get<double>());
    }
    if (e.contains("end_time") && e["end_time"].is_number()) {
      t.set_end_time(e["end_time"].get<double>());
    }
    transcript.push_back(t);
  }
  return transcript;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How far a reported number may be from the truth's. The truth rounds figures computed from
// its full-precision turns; we recompute them from its turns as written (to 0.1 ms), so single
// times and durations agree to 0.5 ms, sums over every turn of a call (speaking time) to a few
// tenths of a millisecond per dozen turns, and ratios and rates to one unit of the truth's last
// written place (its rounding and ours may fall on either side of a half).
double ToleranceFor(const std::string& key) {
  if (EndsWith(key, "ratio")) return 1e-4 + 1e-9;
  if (EndsWith(key, "wpm")) return 0.1 + 1e-9;
  if (EndsWith(key, "speaking_s")) return 2e-3;
  if (EndsWith(key, "_ms")) return 0.5;
  return 5e-4;  // a time in seconds: 0.5 ms
}

void ExpectJsonNear(const nlohmann::json& found, const nlohmann::json& truth,
                    const std::string& path, const std::string& key) {
  if (truth.is_object()) {
    ASSERT_TRUE(found.is_object()) << path;
    std::vector<std::string> found_keys = Keys(found);
    std::vector<std::string> truth_keys = Keys(truth);
    ASSERT_THAT(found_keys, UnorderedElementsAreArray(truth_keys)) << path;
    for (const auto& [k, v] : truth.items()) ExpectJsonNear(found[k], v, path + "." + k, k);
  } else if (truth.is_array()) {
    ASSERT_TRUE(found.is_array()) << path;
    ASSERT_EQ(found.size(), truth.size()) << path << "\nfound " << found << "\ntruth " << truth;
    for (size_t i = 0; i < truth.size(); ++i) {
      ExpectJsonNear(found[i], truth[i], path + "[" + std::to_string(i) + "]", key);
    }
  } else if (truth.is_number()) {
    ASSERT_TRUE(found.is_number()) << path << " = " << found;
    EXPECT_NEAR(found.get<double>(), truth.get<double>(), ToleranceFor(key)) << path;
  } else {
    EXPECT_EQ(found, truth) << path;
  }
}

TEST(CorpusContractTest, TruthTurnsReproduceTheTruthMetrics) {
  const fs::path dir = CALLEVAL_CORPUS_DIR;
  ASSERT_TRUE(fs::is_directory(dir)) << "no test corpus at " << dir;
  std::vector<fs::path> truths;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 11 && name.compare(name.size() - 11, 11, ".truth.json") == 0) {
      truths.push_back(entry.path());
    }
  }
  ASSERT_FALSE(truths.empty()) << "no *.truth.json in " << dir;
  std::sort(truths.begin(), truths.end());
  int checked = 0;
  for (const fs::path& path : truths) {
    SCOPED_TRACE(path.filename().string());
    const nlohmann::json truth = ReadJson(path);
    CallTimeline timeline;
    timeline.agent = SpansOf(truth["turns"]["agent"]);
    timeline.user = SpansOf(truth["turns"]["user"]);
    timeline.duration_s = truth["duration_seconds"].get<double>();
    std::vector<v1::Turn> transcript;
    const bool has_transcript =
        truth.contains("transcript_file") && truth["transcript_file"].is_string();
    if (has_transcript) {
      transcript = TranscriptOf(ReadJson(dir / truth["transcript_file"].get<std::string>()));
    }
    std::map<int64_t, v1::StandardMetricResult> ours = {
        {1, Latency(timeline)},
        {2, AiInterruptions(timeline)},
        {3, UserInterruptions(timeline)},
        {4, StopTimeAfterInterruption(timeline)},
        {5, SilenceDetection(timeline, truth["definitions"]["silence_threshold_ms"].get<int>())},
        {6, WordsPerMinute(timeline, has_transcript ? &transcript : nullptr)},
        {10, TalkRatio(timeline)},
    };
    for (const auto& element : truth["standard_metrics"]) {
      const int64_t id = element["metric_id"].get<int64_t>();
      auto it = ours.find(id);
      if (it == ours.end()) continue;
      SCOPED_TRACE("metric " + std::to_string(id));
      const v1::StandardMetricResult& r = it->second;
      EXPECT_EQ(r.standard_metric_key(), element["standard_metric_key"].get<std::string>());
      EXPECT_EQ(r.name(), element["name"].get<std::string>());
      ExpectJsonNear(ResultJson(r), element["result"], "result", "");
      // The truth writes "completed" with null figures where there is nothing to measure;
      // docs/metrics.md (and score.py) have such a metric end not_applicable.
      const bool nothing_to_measure = element["score"].is_null() && (id == 1 || id == 4);
      EXPECT_EQ(r.status(), nothing_to_measure ? "not_applicable" : "completed");
      if (element["score"].is_null()) {
        EXPECT_FALSE(r.has_score());
      } else {
        ASSERT_TRUE(r.has_score());
        EXPECT_NEAR(r.score(), element["score"].get<double>(),
                    ToleranceFor(id == 6    ? "ai_wpm"
                                 : id == 10 ? "ai_ratio"
                                            : "score_ms"));
      }
      ++checked;
    }
    // Mono calls take their turns from the transcript: it must give the truth's turns (the
    // transcript's timings are the truth's, written to the millisecond).
    if (truth["audio"]["channels"] == 1 && has_transcript) {
      CallTimeline from_transcript = TimelineFromTranscript(transcript, timeline.duration_s);
      ASSERT_EQ(from_transcript.agent.size(), timeline.agent.size());
      ASSERT_EQ(from_transcript.user.size(), timeline.user.size());
      for (size_t i = 0; i < timeline.agent.size(); ++i) {
        EXPECT_NEAR(from_transcript.agent[i].start_s, timeline.agent[i].start_s, 6e-4);
        EXPECT_NEAR(from_transcript.agent[i].end_s, timeline.agent[i].end_s, 6e-4);
      }
      for (size_t i = 0; i < timeline.user.size(); ++i) {
        EXPECT_NEAR(from_transcript.user[i].start_s, timeline.user[i].start_s, 6e-4);
        EXPECT_NEAR(from_transcript.user[i].end_s, timeline.user[i].end_s, 6e-4);
      }
    }
  }
  EXPECT_EQ(checked, 7 * static_cast<int>(truths.size()));
}


}  // namespace
}  // namespace calleval::scoring

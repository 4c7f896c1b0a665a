// The context a code judge sees (docs/api.md §6), built from a call, its transcript and results.

#include "services/judges/code_context.h"

#include <gtest/gtest.h>

#include "common/standard_metrics.h"

namespace calleval::judges {
namespace {

using ::nlohmann::json;

v1::Turn MakeTurn(const std::string& role, const std::string& content) {
  v1::Turn t;
  t.set_role(role);
  t.set_content(content);
  return t;
}

v1::StandardMetricResult Standard(int64_t id, const std::string& status, const json& result) {
  v1::StandardMetricResult r = NewStandardMetricResult(id, status);
  *r.mutable_result() = FromJson(result).struct_value();
  return r;
}

class CodeContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    call_.set_id(42);
    call_.set_call_identifier("crm-1");
    call_.set_client_id(1);
    call_.set_agent_id(7);
    call_.set_observation_type("voice");
    call_.set_call_direction("inbound");
    call_.set_duration_seconds(31);
    call_.set_tag("vip");
    (*call_.mutable_metadata()->mutable_fields())["plan"].set_string_value("gold");
    agent_.set_id(7);
    agent_.set_name("Support bot");
    agent_.set_agent_source("internal");
    transcript_ = {MakeTurn("AI Assistant", "Hello."), MakeTurn("User", "Hi, I need help.")};
  }

  v1::Call call_;
  v1::JobAgent agent_;
  std::vector<v1::Turn> transcript_;
};

TEST_F(CodeContextTest, VoiceCallCarriesTheAudioMeasurements) {
  const json silence = {{"count", 2},
                        {"total_ms", 7000},
                        {"threshold_ms", 3000},
                        {"silences", {{{"start_s", 1.5}, {"end_s", 5.0}, {"duration_ms", 3500}}}}};
  std::vector<v1::StandardMetricResult> standard = {
      Standard(5, "completed", silence),
      Standard(1, "completed", {{"count", 3}, {"average_ms", 812.5}}),
      Standard(2, "completed", {{"count", 1}}),
      Standard(3, "not_applicable", {{"count", 0}}),
      Standard(6, "completed", {{"ai_wpm", 151.2}}),
      Standard(8, "failed", json::object()),
  };
  v1::MetricResult llm;
  llm.set_name("Empathy");
  llm.mutable_value()->set_string_value("high");
  llm.set_explanation("kind words");

  json context = BuildCodeContext(call_, transcript_, standard, {llm}, agent_);
  EXPECT_EQ(context["silence"], silence);
  EXPECT_TRUE(context["silence"]["count"].is_number_integer());  // 2, not 2.0
  EXPECT_EQ(context["latency"]["average_ms"], 812.5);
  EXPECT_EQ(context["interruptions"]["ai"]["count"], 1);
  EXPECT_EQ(context["interruptions"]["user"]["count"], 0);
  EXPECT_EQ(context["words_per_minute"]["ai_wpm"], 151.2);
  EXPECT_TRUE(context["standard_metrics"].contains("latency"));
  EXPECT_FALSE(context["standard_metrics"].contains("voice_tone_clarity"));  // failed: absent
  EXPECT_EQ(context["metric_results"]["Empathy"],
            (json{{"value", "high"}, {"explanation", "kind words"}}));
  EXPECT_EQ(context["agent"],
            (json{{"id", 7}, {"name", "Support bot"}, {"agent_source", "internal"}}));
  EXPECT_EQ(context["call"]["id"], 42);
  EXPECT_EQ(context["call"]["call_identifier"], "crm-1");
  EXPECT_EQ(context["call"]["duration_seconds"], 31);
  EXPECT_EQ(context["call"]["tag"], "vip");
  EXPECT_EQ(context["call"]["label"], nullptr);
  EXPECT_EQ(context["call"]["metadata"]["plan"], "gold");
  EXPECT_EQ(context["transcript"].size(), 2u);
  EXPECT_EQ(context["transcript"][1]["role"], "User");
  EXPECT_EQ(context["transcript"][1]["start_time"], nullptr);
  EXPECT_EQ(context["transcript_text"], "AI Assistant: Hello.\nUser: Hi, I need help.\n");
}

TEST_F(CodeContextTest, TextCallHasNoAudioMeasurements) {
  call_.set_observation_type("text");
  json context = BuildCodeContext(call_, transcript_, {}, {}, agent_);
  EXPECT_EQ(context["silence"], nullptr);
  EXPECT_EQ(context["latency"], nullptr);
  EXPECT_EQ(context["interruptions"], nullptr);
  EXPECT_EQ(context["words_per_minute"], nullptr);
  EXPECT_EQ(context["standard_metrics"], json::object());
  EXPECT_EQ(context["metric_results"], json::object());
}

TEST_F(CodeContextTest, VoiceCallWithoutResultsGivesNulls) {
  json context = BuildCodeContext(call_, {}, {}, {}, agent_);
  EXPECT_EQ(context["silence"], nullptr);
  EXPECT_EQ(context["interruptions"], (json{{"ai", nullptr}, {"user", nullptr}}));
  EXPECT_EQ(context["transcript"], json::array());
  EXPECT_EQ(context["transcript_text"], "");
}

TEST(JsonValueTest, RoundTrip) {
  const json value = {{"a", 1},    {"b", 2.5},    {"c", "x"},       {"d", nullptr},
                      {"e", true}, {"f", {1, 2}}, {"g", {{"h", 3}}}};
  EXPECT_EQ(ToJson(FromJson(value)), value);
  google::protobuf::Value nan;
  nan.set_number_value(std::nan(""));
  EXPECT_EQ(ToJson(nan), nullptr);
  google::protobuf::Value big;
  big.set_number_value(1e20);
  EXPECT_TRUE(ToJson(big).is_number_float());
}

}  // namespace
}  // namespace calleval::judges

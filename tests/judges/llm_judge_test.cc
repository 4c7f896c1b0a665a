// The LLM judge's prompt, answer parsing and aggregation. The provider is replaced by a
// scripted LlmClient here (these tests are about what the judge does with answers); the HTTP
// path to a real OpenAI-compatible server is tested in tests/common and tests/integration.

#include "services/judges/llm_judge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>

#include "common/errors.h"
#include "services/judges/metric_values.h"

namespace calleval::judges {
namespace {

using ::testing::HasSubstr;

class ScriptedClient : public LlmClient {
 public:
  explicit ScriptedClient(std::deque<absl::StatusOr<std::string>> answers)
      : answers_(std::move(answers)) {}
  absl::StatusOr<ChatResponse> Complete(const ChatRequest& request) override {
    requests.push_back(request);
    if (answers_.empty()) return absl::InternalError("no more scripted answers");
    absl::StatusOr<std::string> next = std::move(answers_.front());
    answers_.pop_front();
    if (!next.ok()) return next.status();
    ChatResponse response;
    response.content = *next;
    return response;
  }
  std::vector<ChatRequest> requests;

 private:
  std::deque<absl::StatusOr<std::string>> answers_;
};

v1::Turn MakeTurn(const std::string& role, const std::string& content) {
  v1::Turn t;
  t.set_role(role);
  t.set_content(content);
  return t;
}

std::vector<v1::Turn> Conversation() {
  std::vector<v1::Turn> turns = {MakeTurn("AI Assistant", "Hello, how can I help?"),
                                 MakeTurn("User", "What's my balance?")};
  v1::Turn call;
  call.set_role("Function Call");
  (*call.mutable_data()->mutable_fields())["name"].set_string_value("get_balance");
  (*call.mutable_data()->mutable_fields())["arguments"].set_string_value("{\"account\":\"42\"}");
  turns.push_back(call);
  v1::Turn result;
  result.set_role("Function Call Result");
  (*result.mutable_data()->mutable_fields())["result"].set_number_value(125.5);
  turns.push_back(result);
  turns.push_back(MakeTurn("AI Assistant", "Your balance is $125.50."));
  return turns;
}

LlmQuestion Question(const std::string& type, std::vector<std::string> enums = {}) {
  LlmQuestion q;
  q.name = "Answered";
  q.instructions = "Did the agent answer the question?";
  q.result_type = type;
  q.enum_values = std::move(enums);
  return q;
}

TEST(RenderTranscriptTest, NumbersTurnsAndShowsToolCalls) {
  const std::string text = RenderTranscript(Conversation());
  EXPECT_EQ(text,
            "[1] AI Assistant: Hello, how can I help?\n"
            "[2] User: What's my balance?\n"
            "[3] Function Call: get_balance({\"account\":\"42\"})\n"
            "[4] Function Call Result: 125.5\n"
            "[5] AI Assistant: Your balance is $125.50.");
}

TEST(RenderTranscriptTest, CutsTheMiddleOfLongConversations) {
  std::vector<v1::Turn> turns;
  for (int i = 0; i < 1000; ++i) turns.push_back(MakeTurn("User", std::string(100, 'x')));
  const std::string text = RenderTranscript(turns, 10000);
  EXPECT_LE(text.size(), 10100u);
  EXPECT_THAT(text, HasSubstr("turns omitted for length"));
  EXPECT_THAT(text, HasSubstr("[1] User"));
  EXPECT_THAT(text, HasSubstr("[1000] User"));
}

TEST(JudgePromptTest, SaysWhatTheResultMustBe) {
  std::vector<ChatMessage> prompt =
      JudgePrompt(Question("enum", {"polite", "rude"}), Conversation());
  ASSERT_EQ(prompt.size(), 2u);
  EXPECT_EQ(prompt[0].role, "system");
  EXPECT_THAT(prompt[0].content, HasSubstr("JSON object"));
  EXPECT_THAT(prompt[1].content, HasSubstr("Did the agent answer the question?"));
  EXPECT_THAT(prompt[1].content, HasSubstr("\"polite\", \"rude\""));
  EXPECT_THAT(prompt[1].content, HasSubstr("[5] AI Assistant: Your balance is $125.50."));
}

TEST(ParseAnswerTest, CoercesByResultType) {
  struct Case {
    std::string type;
    std::string content;
    std::string expected;  // MetricResultText of the value
  };
  const Case cases[] = {
      {"boolean", R"({"result": true, "explanation": "yes"})", "pass"},
      {"boolean", R"({"result": "No", "explanation": "x"})", "fail"},
      {"boolean", "```json\n{\"result\": false}\n```", "fail"},
      {"boolean", "Sure! {\"result\": \"yes\", \"explanation\": \"x\"} Hope this helps.", "pass"},
      {"rating", R"({"result": 4})", "4"},
      {"rating", R"({"result": " 3 "})", "3"},
      {"numeric", R"({"result": 12.5})", "12.5"},
      {"numeric", R"({"result": "-2"})", "-2"},
      {"enum", R"({"result": " POLITE "})", "polite"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.content);
    absl::StatusOr<ParsedAnswer> parsed =
        ParseAnswer(c.content, Question(c.type, {"polite", "rude"}));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(MetricResultText(parsed->value), c.expected);
  }
}

TEST(ParseAnswerTest, RefusesWhatCannotBeUsed) {
  const std::pair<std::string, std::string> cases[] = {
      {"boolean", "I think the agent did well."},
      {"boolean", R"({"explanation": "no result"})"},
      {"boolean", R"({"result": null})"},
      {"boolean", R"({"result": "maybe"})"},
      {"rating", R"({"result": 7})"},
      {"rating", R"({"result": "great"})"},
      {"numeric", R"({"result": true})"},
      {"enum", R"({"result": "neutral"})"},
      {"enum", R"({"result": 1})"},
  };
  for (const auto& [type, content] : cases) {
    SCOPED_TRACE(content);
    EXPECT_EQ(ParseAnswer(content, Question(type, {"polite", "rude"})).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(JudgeWithLlmTest, RetriesOnceOnAMalformedAnswer) {
  ScriptedClient client({std::string("The agent answered."),
                         std::string(R"({"result": true, "explanation": "turn 5 gives it"})")});
  LlmJudgement judged = JudgeWithLlm(client, Question("boolean"), Conversation());
  ASSERT_TRUE(judged.ok) << judged.error;
  EXPECT_TRUE(judged.value.bool_value());
  EXPECT_EQ(judged.explanation, "turn 5 gives it");
  EXPECT_FALSE(judged.agreement.has_value());
  ASSERT_EQ(client.requests.size(), 2u);
  // The retry shows the model its answer and says what was wrong.
  ASSERT_EQ(client.requests[1].messages.size(), 4u);
  EXPECT_EQ(client.requests[1].messages[2].content, "The agent answered.");
  EXPECT_THAT(client.requests[1].messages[3].content, HasSubstr("not a JSON object"));
}

TEST(JudgeWithLlmTest, TwoMalformedAnswersFail) {
  ScriptedClient client({std::string("nope"), std::string(R"({"result": "perhaps"})")});
  LlmJudgement judged = JudgeWithLlm(client, Question("boolean"), Conversation());
  EXPECT_FALSE(judged.ok);
  EXPECT_THAT(judged.error, HasSubstr("unusable"));
}

TEST(JudgeWithLlmTest, ProviderErrorsAreReportedWithTheirCode) {
  ScriptedClient client({MakeError(absl::StatusCode::kUnavailable, "llm_unavailable",
                                   "the LLM provider answered 503 4 times")});
  LlmJudgement judged = JudgeWithLlm(client, Question("boolean"), Conversation());
  EXPECT_FALSE(judged.ok);
  EXPECT_EQ(judged.error, "llm_unavailable: the LLM provider answered 503 4 times");
}

TEST(JudgeWithLlmTest, SamplesGiveTheMajorityWithAgreement) {
  ScriptedClient client({std::string(R"({"result": true, "explanation": "a"})"),
                         std::string(R"({"result": false, "explanation": "b"})"),
                         std::string(R"({"result": true, "explanation": "c"})")});
  LlmQuestion q = Question("boolean");
  q.samples = 3;
  LlmJudgement judged = JudgeWithLlm(client, q, Conversation());
  ASSERT_TRUE(judged.ok);
  EXPECT_TRUE(judged.value.bool_value());
  EXPECT_EQ(judged.explanation, "a");
  ASSERT_TRUE(judged.agreement.has_value());
  EXPECT_NEAR(*judged.agreement, 2.0 / 3, 1e-9);
  for (const ChatRequest& r : client.requests) EXPECT_GT(r.temperature, 0);
}

TEST(JudgeWithLlmTest, SampledRatingsGiveTheMean) {
  ScriptedClient client({std::string(R"({"result": 4, "explanation": "a"})"),
                         std::string(R"({"result": 5, "explanation": "b"})"),
                         std::string(R"({"result": 4, "explanation": "c"})"),
                         std::string(R"({"result": 3, "explanation": "d"})")});
  LlmQuestion q = Question("rating");
  q.samples = 4;
  LlmJudgement judged = JudgeWithLlm(client, q, Conversation());
  ASSERT_TRUE(judged.ok);
  EXPECT_DOUBLE_EQ(judged.value.number_value(), 4.0);
  EXPECT_NEAR(*judged.agreement, 0.5, 1e-9);  // two of four said 4
}

TEST(JudgeWithLlmTest, SampledEnumsIgnoreAFailedSample) {
  ScriptedClient client({std::string(R"({"result": "rude"})"), std::string("garbage"),
                         std::string("still garbage"), std::string(R"({"result": "rude"})")});
  LlmQuestion q = Question("enum", {"polite", "rude"});
  q.samples = 3;  // the second sample fails twice, the third answers
  LlmJudgement judged = JudgeWithLlm(client, q, Conversation());
  ASSERT_TRUE(judged.ok) << judged.error;
  EXPECT_EQ(judged.value.string_value(), "rude");
  EXPECT_DOUBLE_EQ(*judged.agreement, 1.0);
}

}  // namespace
}  // namespace calleval::judges

#include "services/calls/alert_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/hmac.h>

#include "absl/strings/str_format.h"
#include "common/errors.h"

namespace calleval::calls {
namespace {

using ::testing::HasSubstr;

std::string FieldOf(const absl::Status& status) {
  const v1::ErrorInfo info = ErrorInfoOf(status);
  return info.details().empty() ? "" : info.details(0).field();
}

TEST(AlertFigureTest, ReadsEachFigure) {
  EXPECT_EQ(ParseAlertFigure("latency.p50_ms")->kind, AlertFigure::Kind::kLatencyP50);
  EXPECT_EQ(ParseAlertFigure("latency.p95_ms")->kind, AlertFigure::Kind::kLatencyP95);
  EXPECT_EQ(ParseAlertFigure("latency.mean_ms")->kind, AlertFigure::Kind::kLatencyMean);
  EXPECT_EQ(ParseAlertFigure("pass_rate")->kind, AlertFigure::Kind::kPassRate);
  EXPECT_EQ(ParseAlertFigure("calls.failed_rate")->kind, AlertFigure::Kind::kCallsFailedRate);
  auto metric = ParseAlertFigure("metric.104.false_rate");
  ASSERT_TRUE(metric.ok()) << metric.status();
  EXPECT_EQ(metric->kind, AlertFigure::Kind::kMetricOutcome);
  EXPECT_EQ(metric->metric_id, 104);
  EXPECT_EQ(metric->outcome, "false");
  // An outcome may itself hold underscores.
  auto classified = ParseAlertFigure("metric.7.meets_expectations_rate");
  ASSERT_TRUE(classified.ok());
  EXPECT_EQ(classified->outcome, "meets_expectations");
}

TEST(AlertFigureTest, RefusesOthersNamingTheField) {
  for (const char* bad : {"", "latency", "latency.p99_ms", "pass_rate ", "metric.104.false",
                          "metric..false_rate", "metric.x.false_rate", "metric.-1.false_rate",
                          "metric.104._rate", "metric.104.a b_rate", "metric.104_rate"}) {
    SCOPED_TRACE(bad);
    auto parsed = ParseAlertFigure(bad);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(HttpStatusFor(parsed.status()), 422);
    EXPECT_EQ(FieldOf(parsed.status()), "figure");
  }
}

TEST(AlertOpTest, ComparesAsWritten) {
  EXPECT_TRUE(CheckAlertOp(">").ok());
  EXPECT_TRUE(CheckAlertOp("<=").ok());
  EXPECT_EQ(FieldOf(CheckAlertOp("==")), "op");
  EXPECT_EQ(FieldOf(CheckAlertOp("gt")), "op");
  EXPECT_TRUE(AlertConditionHolds(">", 0.3, 0.2));
  EXPECT_FALSE(AlertConditionHolds(">", 0.2, 0.2));
  EXPECT_TRUE(AlertConditionHolds(">=", 0.2, 0.2));
  EXPECT_TRUE(AlertConditionHolds("<", 0.1, 0.2));
  EXPECT_FALSE(AlertConditionHolds("<", 0.2, 0.2));
  EXPECT_TRUE(AlertConditionHolds("<=", 0.2, 0.2));
}

TEST(AlertWindowTest, DurationsAndCounts) {
  EXPECT_EQ(ParseAlertWindow("5m")->seconds, 300);
  EXPECT_EQ(ParseAlertWindow("1h")->seconds, 3600);
  EXPECT_EQ(ParseAlertWindow("30d")->seconds, 30 * 86400);
  EXPECT_EQ(ParseAlertWindow("720h")->seconds, 30 * 86400);
  EXPECT_EQ(ParseAlertWindow("10 calls")->count, 10);
  EXPECT_EQ(ParseAlertWindow("10000 calls")->count, 10000);
  EXPECT_EQ(ParseAlertWindow("100 calls")->seconds, 0);
  for (const char* bad : {"", "4m", "31d", "721h", "0h", "-1h", "1", "h", "1w", "9 calls",
                          "10001 calls", "calls", "ten calls", "1.5h", "+1h", "10calls"}) {
    SCOPED_TRACE(bad);
    auto parsed = ParseAlertWindow(bad);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(FieldOf(parsed.status()), "window");
  }
}

// The damping rule with its defaults: one counted true evaluation fires; three counted false
// ones resolve; within ten minutes of resolving, three counted true ones fire again.
class DampingTest : public ::testing::Test {
 protected:
  AlertDamping damping_;  // resolve_after 3, refire_after 3, quiet 10 min, spacing 60 s
  AlertState state_;
  int64_t now_ = 1000000;
  int64_t sample_ = 1;
  std::vector<std::string> events_;

  // One evaluation `seconds` after the last, with a new sample when `new_sample`.
  void Eval(std::optional<bool> holds, int64_t seconds = 1, bool new_sample = true) {
    now_ += seconds;
    if (new_sample) ++sample_;
    AlertStep step = StepAlert(state_, holds, sample_, now_, damping_);
    state_ = step.next;
    if (!step.event.empty()) events_.push_back(step.event);
  }
};

TEST_F(DampingTest, TooFewSamplesChangeNothing) {
  Eval(std::nullopt);
  EXPECT_EQ(state_.state, "insufficient_data");
  Eval(false);
  EXPECT_EQ(state_.state, "ok");
  Eval(true);
  EXPECT_EQ(state_.state, "firing");
  // A firing rule stays firing while the samples are too few.
  for (int i = 0; i < 5; ++i) Eval(std::nullopt);
  EXPECT_EQ(state_.state, "firing");
  EXPECT_EQ(events_, std::vector<std::string>({"firing"}));
}

TEST_F(DampingTest, ResolvesAfterThreeCountedFalseEvaluations) {
  Eval(true);
  EXPECT_EQ(state_.state, "firing");
  Eval(false);
  Eval(false);
  EXPECT_EQ(state_.state, "firing");
  // A true one in between starts the count again.
  Eval(true);
  Eval(false);
  Eval(false);
  EXPECT_EQ(state_.state, "firing");
  Eval(false);
  EXPECT_EQ(state_.state, "ok");
  EXPECT_EQ(events_, std::vector<std::string>({"firing", "resolved"}));
}

TEST_F(DampingTest, EvaluationsOnTheSameDataCountOnceUntilTheSpacingPasses) {
  Eval(true);
  Eval(false);
  // No new sample and less than 60 s: the same evidence again, not counted.
  Eval(false, 10, false);
  Eval(false, 10, false);
  EXPECT_EQ(state_.state, "firing");
  EXPECT_EQ(state_.streak, 1);
  // 60 s after the last counted evaluation it counts even without new samples (a sliding
  // window changes by time alone).
  Eval(false, 45, false);
  EXPECT_EQ(state_.streak, 2);
  Eval(false, 60, false);
  EXPECT_EQ(state_.state, "ok");
}

TEST_F(DampingTest, AFlappingRuleIsDamped) {
  Eval(true);
  Eval(false);
  Eval(false);
  Eval(false);
  ASSERT_EQ(events_, std::vector<std::string>({"firing", "resolved"}));
  // Within ten minutes of resolving: one or two true evaluations do not fire again.
  for (int round = 0; round < 5; ++round) {
    Eval(true);
    Eval(true);
    Eval(false);
  }
  EXPECT_EQ(state_.state, "ok");
  EXPECT_EQ(events_.size(), 2u);
  Eval(true);
  Eval(true);
  Eval(true);
  EXPECT_EQ(state_.state, "firing");
  EXPECT_EQ(events_, std::vector<std::string>({"firing", "resolved", "firing"}));
}

TEST_F(DampingTest, AfterTheQuietPeriodOneTrueEvaluationFires) {
  Eval(true);
  Eval(false);
  Eval(false);
  Eval(false);
  Eval(false, 601);
  Eval(true);
  EXPECT_EQ(state_.state, "firing");
  EXPECT_EQ(events_, std::vector<std::string>({"firing", "resolved", "firing"}));
}

// The signature checked with OpenSSL's HMAC directly.
TEST(AlertSignatureTest, IsTheHmacOfTimestampDotBody) {
  const std::string secret = "whsec_test";
  const std::string body = R"({"type":"alert.firing"})";
  const std::string message = "1700000000." + body;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += absl::StrFormat("%02x", mac[i]);
  EXPECT_EQ(AlertSignature(secret, 1700000000, body), "t=1700000000,v1=" + hex);
}

TEST(AlertBodyTest, JsonAndSlackShapes) {
  AlertNotice notice;
  notice.event = "firing";
  notice.rule = {{"id", 3}, {"name", "<!channel> & co"}, {"figure", "pass_rate"}, {"op", "<"}};
  notice.value = 0.5;
  notice.threshold = 0.9;
  notice.samples = 20;
  notice.window = "1d";
  notice.at = "2026-11-28T22:00:00Z";
  auto json = nlohmann::json::parse(AlertBody("json", notice));
  EXPECT_EQ(json["type"], "alert.firing");
  EXPECT_EQ(json["rule"]["id"], 3);
  EXPECT_EQ(json["value"], 0.5);
  EXPECT_EQ(json["threshold"], 0.9);
  EXPECT_EQ(json["samples"], 20);
  EXPECT_EQ(json["window"], "1d");
  EXPECT_EQ(json["at"], "2026-11-28T22:00:00Z");

  auto slack = nlohmann::json::parse(AlertBody("slack", notice));
  ASSERT_TRUE(slack["text"].is_string());
  // The workspace's text cannot ping a channel.
  EXPECT_THAT(slack["text"].get<std::string>(), HasSubstr("&lt;!channel&gt; &amp; co"));
  ASSERT_TRUE(slack["blocks"].is_array());
  for (const auto& block : slack["blocks"]) {
    const std::string type = block["type"];
    EXPECT_TRUE(type == "header" || type == "section" || type == "context") << type;
  }
  EXPECT_EQ(slack["blocks"][0]["text"]["type"], "plain_text");
  EXPECT_LE(slack["blocks"][1]["fields"].size(), 10u);
}

}  // namespace
}  // namespace calleval::calls

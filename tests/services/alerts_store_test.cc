#include "services/calls/alerts_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "services/agents/agents_store.h"
#include "services/agents/scenarios_store.h"
#include "services/calls/calls_store.h"
#include "services/runs/runs_store.h"
#include "tests/services/in_process_directories.h"
#include "tests/support/test_database.h"

namespace calleval::calls {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;

constexpr int64_t kCustomMetric = 101;

std::vector<std::string> Fields(const absl::Status& status) {
  std::vector<std::string> fields;
  const v1::ErrorInfo info = ErrorInfoOf(status);
  for (const auto& d : info.details()) fields.push_back(d.field());
  return fields;
}

class AlertsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/alerts_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts::AccountsStore accounts(db_.get());
    workspace_ = accounts.CreateWorkspace("w", 1000000)->id;
    other_workspace_ = accounts.CreateWorkspace("o", 1000000)->id;
    directories_ = std::make_unique<testing::InProcessDirectories>(db_.get());
    v1::AgentFields agent;
    agent.set_name("a");
    agent.set_phone_number("+16502530000");
    agent.set_language_id(1);
    agent.set_instructions("i");
    agent_ = directories_->agents.Create(workspace_, agent)->id();
    other_agent_ = directories_->agents.Create(workspace_, agent)->id();

    const int64_t workspace = workspace_;
    AgentLookup lookup = [workspace](int64_t ws, int64_t) -> absl::StatusOr<AgentInfo> {
      if (ws == workspace) return AgentInfo{};
      return ValidationError("agent_not_found", "no agent", {{"agent_id", "not found"}});
    };
    CallsStore::Options options;
    recordings_ = *OpenBlobStore(dir_);
    options.recordings = recordings_.get();
    options.catalog = [](int64_t, int64_t) -> absl::StatusOr<std::vector<CustomMetricInfo>> {
      return std::vector<CustomMetricInfo>{{kCustomMetric, 1, false, true}};
    };
    calls_ = std::make_unique<CallsStore>(db_.get(), lookup, options);

    AlertsStore::Options alert_options;
    alert_options.credentials_key = RandomBytes(32);
    alert_options.url_guard.allowed_hosts = {"127.0.0.1"};
    alert_options.agents = lookup;
    alert_options.scenarios = [](int64_t, int64_t) -> absl::StatusOr<int64_t> {
      return NotFoundError("scenario");
    };
    alert_options.metrics =
        [workspace](int64_t ws,
                    const std::vector<int64_t>& ids) -> absl::StatusOr<std::vector<v1::Metric>> {
      std::vector<v1::Metric> out;
      for (int64_t id : ids) {
        if (ws == workspace && id == kCustomMetric) {
          v1::Metric m;
          m.set_id(id);
          out.push_back(m);
        }
      }
      return out;
    };
    runs_ = std::make_unique<runs::RunsStore>(db_.get(), &directories_->scenario_directory);
    runs::RunsStore* runs = runs_.get();
    alert_options.runs = [runs](const runs::RunCountQuery& q) { return runs->CountRuns(q); };
    alert_options.max_rules_per_workspace = 5;
    alerts_ = std::make_unique<AlertsStore>(db_.get(), alert_options);
  }

  void TearDown() override {
    alerts_.reset();
    runs_.reset();
    calls_.reset();
    directories_.reset();
    db_.reset();
    database_.reset();
    std::filesystem::remove_all(dir_);
  }

  v1::CreateAlertRuleRequest Rule(const std::string& figure, const std::string& op,
                                  double threshold, const std::string& window) {
    v1::CreateAlertRuleRequest r;
    r.set_name("rule");
    r.set_figure(figure);
    r.set_op(op);
    r.set_threshold(threshold);
    r.set_window(window);
    r.set_webhook_url("https://hooks.example.com/alerts");
    return r;
  }

  // A settled call of `agent` at `t`: its custom metric `value`, its turns' latencies, or failed.
  void Call(int64_t agent, int64_t t, bool value, std::vector<double> latencies = {500},
            bool fail = false) {
    v1::IngestCallRequest r;
    const std::string id = absl::StrCat("c", ++calls_made_);
    r.set_call_identifier(id);
    r.set_agent_id(agent);
    r.set_call_timestamp(FormatTimestamp(absl::FromUnixSeconds(t)));
    const StoredRecording wav{absl::StrCat("runs/", id), "audio/wav", 4};
    ASSERT_TRUE(recordings_->Put(wav.key, StringBlobSource("RIFF"), wav.content_type).ok());
    auto call = calls_->Ingest(workspace_, r, &wav);
    ASSERT_TRUE(call.ok()) << call.status();
    auto job = calls_->LeaseAnalysis(absl::Minutes(5), 3);
    ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
    const AnalysisJob& j = **job;
    if (fail) {
      ASSERT_TRUE(calls_->FailAnalysis(j.call_id, j.token, "unsupported_audio", "bad").ok());
      return;
    }
    std::vector<v1::StandardMetricResult> results;
    std::vector<v1::MetricResult> custom;
    for (int64_t metric : j.planned_metric_ids) {
      if (metric == kCustomMetric) {
        v1::MetricResult m;
        m.set_metric_id(metric);
        m.set_result_type("boolean");
        m.set_status("completed");
        m.mutable_value()->set_bool_value(value);
        custom.push_back(m);
      } else if (metric == 1) {
        v1::StandardMetricResult s;
        s.set_metric_id(1);
        s.set_status("completed");
        auto* turns = (*s.mutable_result()->mutable_fields())["turns"].mutable_list_value();
        double sum = 0;
        for (double l : latencies) {
          (*turns->add_values()->mutable_struct_value()->mutable_fields())["latency_ms"]
              .set_number_value(l);
          sum += l;
        }
        (*s.mutable_result()->mutable_fields())["average_ms"].set_number_value(
            latencies.empty() ? 0 : sum / latencies.size());
        results.push_back(s);
      }
    }
    ASSERT_TRUE(calls_->RecordAnalysis(j.call_id, j.token, 60.0, results, custom).ok());
  }

  std::string dir_;
  std::unique_ptr<BlobStore> recordings_;
  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<testing::InProcessDirectories> directories_;
  std::unique_ptr<CallsStore> calls_;
  std::unique_ptr<runs::RunsStore> runs_;
  std::unique_ptr<AlertsStore> alerts_;
  int64_t workspace_ = 0, other_workspace_ = 0, agent_ = 0, other_agent_ = 0;
  int calls_made_ = 0;
  const absl::Time now_ = absl::FromUnixSeconds(1795000000);
};

TEST_P(AlertsStoreTest, CreatesReadsListsAndDeletesAWorkspacesRules) {
  auto created = alerts_->Create(workspace_, Rule("metric.101.false_rate", ">", 0.2, "10 calls"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->state(), "insufficient_data");
  EXPECT_EQ(created->min_samples(), 10);  // a count window's default: its count
  EXPECT_EQ(created->format(), "json");
  EXPECT_EQ(created->secret().rfind("whsec_", 0), 0u);
  EXPECT_GT(created->secret().size(), 30u);

  auto got = alerts_->Get(workspace_, created->id());
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_secret());
  EXPECT_EQ(got->figure(), "metric.101.false_rate");
  EXPECT_EQ(alerts_->Get(other_workspace_, created->id()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(alerts_->Delete(other_workspace_, created->id()).code(), absl::StatusCode::kNotFound);

  auto second = alerts_->Create(workspace_, Rule("latency.p95_ms", ">", 1500, "1h"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->min_samples(), 10);
  auto list = alerts_->List(workspace_, 1, 1);
  ASSERT_TRUE(list.ok());
  ASSERT_THAT(list->data(), SizeIs(1));
  EXPECT_EQ(list->data(0).id(), second->id());
  EXPECT_EQ(list->pagination().total_count(), 2);
  EXPECT_FALSE(list->data(0).has_secret());
  EXPECT_THAT(alerts_->List(other_workspace_, 1, 25)->data(), SizeIs(0));

  ASSERT_TRUE(alerts_->Delete(workspace_, created->id()).ok());
  EXPECT_EQ(alerts_->Get(workspace_, created->id()).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(AlertsStoreTest, RefusesBadRulesNamingTheFields) {
  v1::CreateAlertRuleRequest empty;
  auto refused = alerts_->Create(workspace_, empty);
  ASSERT_EQ(HttpStatusFor(refused.status()), 422);
  EXPECT_THAT(Fields(refused.status()),
              ElementsAre("name", "figure", "op", "threshold", "window", "webhook_url"));

  auto bad = Rule("latency.p99_ms", "=", 1, "2m");
  bad.set_min_samples(0);
  bad.set_format("xml");
  bad.set_webhook_url("http://169.254.169.254/latest/meta-data");
  refused = alerts_->Create(workspace_, bad);
  ASSERT_EQ(HttpStatusFor(refused.status()), 422);
  EXPECT_THAT(Fields(refused.status()),
              ElementsAre("figure", "op", "window", "min_samples", "format", "webhook_url"));

  // Plain http only to an allowed host; a metric of the workspace only; one of agent or
  // scenario; pass_rate over a duration only.
  auto plain = Rule("calls.failed_rate", ">", 0.1, "1h");
  plain.set_webhook_url("http://hooks.example.com/a");
  EXPECT_THAT(Fields(alerts_->Create(workspace_, plain).status()), ElementsAre("webhook_url"));
  plain.set_webhook_url("http://127.0.0.1:9/a");
  EXPECT_TRUE(alerts_->Create(workspace_, plain).ok());
  EXPECT_THAT(
      Fields(alerts_->Create(workspace_, Rule("metric.999.false_rate", ">", 0.1, "1h")).status()),
      ElementsAre("figure"));
  EXPECT_THAT(
      Fields(alerts_->Create(workspace_, Rule("pass_rate", "<", 0.9, "100 calls")).status()),
      ElementsAre("window"));
  auto both = Rule("calls.failed_rate", ">", 0.1, "1h");
  both.set_agent_id(agent_);
  both.set_scenario_id(1);
  EXPECT_THAT(Fields(alerts_->Create(workspace_, both).status()), ElementsAre("scenario_id"));
  auto scenario = Rule("calls.failed_rate", ">", 0.1, "1h");
  scenario.set_scenario_id(12345);
  EXPECT_EQ(HttpStatusFor(alerts_->Create(workspace_, scenario).status()), 422);
  auto foreign = Rule("calls.failed_rate", ">", 0.1, "1h");
  foreign.set_agent_id(agent_);
  EXPECT_EQ(ErrorInfoOf(alerts_->Create(other_workspace_, foreign).status()).code(),
            "agent_not_found");

  // The cap (5 in this suite; one rule made above).
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(alerts_->Create(workspace_, plain).ok());
  auto capped = alerts_->Create(workspace_, plain);
  EXPECT_EQ(HttpStatusFor(capped.status()), 422);
  EXPECT_EQ(ErrorInfoOf(capped.status()).code(), "alert_rule_limit");
}

// metric.101.false_rate > 0.2 over the last 10 calls: fires once, then resolves once after
// the damping's three counted evaluations, each transition queued once.
TEST_P(AlertsStoreTest, FiresAndResolvesOnceOverTheLastCalls) {
  auto rule = alerts_->Create(workspace_, Rule("metric.101.false_rate", ">", 0.2, "10 calls"));
  ASSERT_TRUE(rule.ok()) << rule.status();
  const int64_t t0 = absl::ToUnixSeconds(now_) - 3600;
  // Nine calls: too few samples.
  for (int i = 0; i < 9; ++i) Call(agent_, t0 + i, i % 2 == 0);
  EXPECT_EQ(*alerts_->Evaluate(rule->id(), now_), "");
  EXPECT_EQ(alerts_->Get(workspace_, rule->id())->state(), "insufficient_data");
  Call(agent_, t0 + 9, true);  // 10 calls, 4 false: 0.4
  EXPECT_EQ(*alerts_->Evaluate(rule->id(), now_), "firing");
  auto firing = alerts_->Get(workspace_, rule->id());
  EXPECT_EQ(firing->state(), "firing");
  EXPECT_DOUBLE_EQ(firing->last_value(), 0.4);  // 4 false of 10
  EXPECT_EQ(*alerts_->Evaluate(rule->id(), now_ + absl::Seconds(1)), "");

  // Passing calls: the last 10 are all true after ten more; three counted evaluations resolve.
  std::vector<std::string> events;
  for (int i = 0; i < 10; ++i) {
    Call(agent_, t0 + 100 + i, true);
    auto event = alerts_->Evaluate(rule->id(), now_ + absl::Seconds(10 + i));
    ASSERT_TRUE(event.ok()) << event.status();
    if (!event->empty()) events.push_back(*event);
  }
  EXPECT_THAT(events, ElementsAre("resolved"));
  EXPECT_EQ(alerts_->Get(workspace_, rule->id())->state(), "ok");

  // Two deliveries queued, the firing first, each leased once.
  auto first = alerts_->LeaseDelivery(now_ + absl::Minutes(1));
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ((*first)->event, "firing");
  EXPECT_EQ((*first)->webhook_url, "https://hooks.example.com/alerts");
  EXPECT_EQ((*first)->secret, rule->secret());
  auto body = nlohmann::json::parse((*first)->body);
  EXPECT_EQ(body["type"], "alert.firing");
  EXPECT_EQ(body["rule"]["id"], rule->id());
  EXPECT_EQ(body["value"], 0.4);
  EXPECT_EQ(body["samples"], 10);
  auto second = alerts_->LeaseDelivery(now_ + absl::Minutes(1));
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->event, "resolved");
  EXPECT_FALSE(alerts_->LeaseDelivery(now_ + absl::Minutes(1))->has_value());
}

TEST_P(AlertsStoreTest, FiguresOverATimeWindowAndAnAgent) {
  const int64_t now = absl::ToUnixSeconds(now_);
  auto latency = Rule("latency.mean_ms", ">", 1000, "1h");
  latency.set_agent_id(agent_);
  latency.set_min_samples(2);
  auto mean = alerts_->Create(workspace_, latency);
  ASSERT_TRUE(mean.ok()) << mean.status();
  auto failed = Rule("calls.failed_rate", ">=", 0.5, "1h");
  failed.set_min_samples(2);
  auto failed_rule = alerts_->Create(workspace_, failed);
  ASSERT_TRUE(failed_rule.ok());
  // Out of the window (two hours ago), and another agent's: not counted by the agent's rule.
  Call(agent_, now - 7200, true, {9000});
  Call(other_agent_, now - 60, true, {9000});
  Call(agent_, now - 120, true, {1000, 2000});
  Call(agent_, now - 60, true, {600});
  Call(agent_, now - 30, true, {}, /*fail=*/true);
  ASSERT_TRUE(alerts_->Evaluate(mean->id(), now_).ok());
  auto got = alerts_->Get(workspace_, mean->id());
  EXPECT_NEAR(got->last_value(), (1000.0 + 2000.0 + 600.0) / 3, 0.01);
  EXPECT_EQ(got->state(), "firing");
  // Failed calls of the workspace in the last hour: 1 of 4.
  EXPECT_EQ(*alerts_->Evaluate(failed_rule->id(), now_), "");
  got = alerts_->Get(workspace_, failed_rule->id());
  EXPECT_DOUBLE_EQ(got->last_value(), 0.25);
  EXPECT_EQ(got->state(), "ok");
}

// pass_rate: the runs of the rule's scenario created in the window, counted by the runs store.
TEST_P(AlertsStoreTest, PassRateOverTheScenariosRuns) {
  v1::ScenarioFields scenario_fields;
  scenario_fields.set_agent_id(agent_);
  scenario_fields.set_name("s");
  scenario_fields.set_goal("g");
  const int64_t scenario = directories_->scenarios.Create(workspace_, scenario_fields)->id();
  AlertsStore::Options options = alerts_->options();
  options.scenarios = [scenario](int64_t, int64_t id) -> absl::StatusOr<int64_t> {
    if (id == scenario) return 1;
    return NotFoundError("scenario");
  };
  AlertsStore store(db_.get(), options);
  auto request = Rule("pass_rate", "<", 0.9, "1d");
  request.set_scenario_id(scenario);
  request.set_min_samples(3);
  auto rule = store.Create(workspace_, request);
  ASSERT_TRUE(rule.ok()) << rule.status();
  // Three passed, one failed, one errored (not counted): 0.75.
  const std::vector<runs::RunOutcome> outcomes = {{"completed", true, "done", ""},
                                                  {"completed", true, "done", ""},
                                                  {"completed", false, "done", ""},
                                                  {"completed", true, "done", ""},
                                                  {"failed", std::nullopt, "", "hung up"}};
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(runs_->CreateRun(workspace_, scenario, std::string("text")).ok());
    auto job = runs_->Lease(absl::Minutes(1), 3);
    ASSERT_TRUE(job.ok() && job->has_value());
    ASSERT_TRUE(runs_->Finish((*job)->run_id, (*job)->token, outcomes[i]).ok());
    auto event = store.Evaluate(rule->id(), absl::Now());
    ASSERT_TRUE(event.ok()) << event.status();
    // Two completed runs are fewer than min_samples; at three (2 of 3 passed) it fires.
    EXPECT_EQ(*event, i == 2 ? "firing" : "") << i;
  }
  auto got = store.Get(workspace_, rule->id());
  EXPECT_EQ(got->state(), "firing");
  EXPECT_DOUBLE_EQ(got->last_value(), 0.75);
}

// Two evaluators of one rule: the transition is recorded and queued once.
TEST_P(AlertsStoreTest, ConcurrentEvaluationsQueueOneNotification) {
  auto rule = alerts_->Create(workspace_, Rule("metric.101.false_rate", ">", 0.2, "10 calls"));
  ASSERT_TRUE(rule.ok());
  for (int i = 0; i < 10; ++i) Call(agent_, absl::ToUnixSeconds(now_) - 100 + i, false);
  AlertsStore other(db_.get(), alerts_->options());
  std::vector<std::string> events(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto e = (i % 2 == 0 ? alerts_.get() : &other)->Evaluate(rule->id(), now_);
      events[i] = e.ok() ? *e : e.status().ToString();
    });
  }
  for (auto& t : threads) t.join();
  int firings = 0;
  for (const auto& e : events) {
    EXPECT_TRUE(e.empty() || e == "firing") << e;
    firings += e == "firing";
  }
  EXPECT_EQ(firings, 1);
  ASSERT_TRUE(alerts_->LeaseDelivery(now_)->has_value());
  EXPECT_FALSE(alerts_->LeaseDelivery(now_)->has_value());
}

TEST_P(AlertsStoreTest, FailedAttemptsAreRetriedWithBackoffAndLogged) {
  auto created = alerts_->Create(workspace_, Rule("calls.failed_rate", ">", 0.5, "10 calls"));
  ASSERT_TRUE(created.ok());
  for (int i = 0; i < 10; ++i) Call(agent_, absl::ToUnixSeconds(now_) - 100 + i, true, {}, true);
  ASSERT_EQ(*alerts_->Evaluate(created->id(), now_), "firing");
  auto job = alerts_->LeaseDelivery(now_);
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->attempt, 1);
  auto next = alerts_->RecordAttempt(**job, now_, false, 500, "HTTP 500");
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(**next, now_ + absl::Seconds(10));
  // Not due before its retry time; due after.
  EXPECT_FALSE(alerts_->LeaseDelivery(now_ + absl::Seconds(9))->has_value());
  job = alerts_->LeaseDelivery(now_ + absl::Seconds(10));
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->attempt, 2);
  next = alerts_->RecordAttempt(**job, now_ + absl::Seconds(10), true, 204, "");
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  EXPECT_FALSE(alerts_->LeaseDelivery(now_ + absl::Hours(2))->has_value());

  auto log = alerts_->ListDeliveries(workspace_, created->id(), 1, 25);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_THAT(log->data(), SizeIs(2));
  EXPECT_EQ(log->data(0).attempt(), 2);  // newest first
  EXPECT_TRUE(log->data(0).delivered());
  EXPECT_EQ(log->data(0).http_status(), 204);
  EXPECT_FALSE(log->data(0).has_next_retry_at());
  EXPECT_EQ(log->data(1).attempt(), 1);
  EXPECT_FALSE(log->data(1).delivered());
  EXPECT_EQ(log->data(1).http_status(), 500);
  EXPECT_EQ(log->data(1).error(), "HTTP 500");
  EXPECT_EQ(log->data(1).next_retry_at(), FormatTimestamp(now_ + absl::Seconds(10)));
  EXPECT_EQ(log->data(1).event(), "firing");
  EXPECT_EQ(alerts_->ListDeliveries(other_workspace_, created->id(), 1, 25).status().code(),
            absl::StatusCode::kNotFound);
  // Delays grow: 10 s, 30 s, 2 min, 10 min, 30 min, 1 h.
  EXPECT_EQ(alerts_->RetryDelay(3), absl::Minutes(2));
  EXPECT_EQ(alerts_->RetryDelay(7), absl::Hours(1));
}

TEST_P(AlertsStoreTest, AbandonsAfterTheLastAttempt) {
  AlertsStore::Options options = alerts_->options();
  options.max_attempts = 2;
  AlertsStore store(db_.get(), options);
  auto created = store.Create(workspace_, Rule("calls.failed_rate", ">", 0.5, "10 calls"));
  ASSERT_TRUE(created.ok());
  for (int i = 0; i < 10; ++i) Call(agent_, absl::ToUnixSeconds(now_) - 100 + i, true, {}, true);
  ASSERT_EQ(*store.Evaluate(created->id(), now_), "firing");
  absl::Time t = now_;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto job = store.LeaseDelivery(t);
    ASSERT_TRUE(job.ok() && job->has_value()) << attempt;
    auto next = store.RecordAttempt(**job, t, false, 0, "connection refused");
    ASSERT_TRUE(next.ok());
    EXPECT_EQ(next->has_value(), attempt < 2);
    t += absl::Hours(2);
  }
  EXPECT_FALSE(store.LeaseDelivery(t)->has_value());
  EXPECT_THAT(store.ListDeliveries(workspace_, created->id(), 1, 25)->data(), SizeIs(2));
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(AlertsStoreTest);

}  // namespace
}  // namespace calleval::calls

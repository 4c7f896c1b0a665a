#include "services/calls/stats_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/errors.h"
#include "common/schema.h"
#include "common/status_macros.h"
#include "services/accounts/accounts_store.h"
#include "services/agents/agents_store.h"
#include "services/agents/scenarios_store.h"
#include "services/calls/call_figures.h"
#include "services/calls/calls_store.h"
#include "services/calls/query_rows.h"
#include "services/runs/runs_store.h"
#include "tests/services/in_process_directories.h"
#include "tests/support/test_database.h"

namespace calleval::calls {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int64_t kCustomMetric = 101;
// 2026-11-02T00:00:00Z, a Monday.
constexpr int64_t kMonday = 1793577600;

// The width of the histogram bin at `ms`.
double BinWidth(double ms) {
  const int bin = LatencyBin(ms);
  return LatencyBinUpper(bin) - LatencyBinLower(bin);
}

// The exact p-th percentile of `values` (the rank rule of a call's own percentiles) and how far
// one merged from histograms may be from it: each order statistic lies in its bin, so the
// widest bin of the two it is interpolated between.
std::pair<double, double> ExactAndTolerance(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const double k = (values.size() - 1) * p / 100.0;
  const auto f = static_cast<size_t>(std::floor(k));
  const auto c = static_cast<size_t>(std::ceil(k));
  return {values[f] + (values[c] - values[f]) * (k - static_cast<double>(f)),
          std::max(BinWidth(values[f]), BinWidth(values[c])) + 1e-9};
}

// The independent side: what a bucket holds, computed from the call records the store answers
// with (GetCall), not from any row the stats read.
struct Expected {
  std::map<std::string, int64_t> status;
  int64_t credits = 0;
  std::vector<double> latencies;
  int64_t ai = 0, user = 0, silences = 0;
  std::vector<double> talk;
  std::map<std::pair<int64_t, std::string>, int64_t> outcomes;

  void Add(const v1::Call& call) {
    ++status[call.analysis_status()];
    const std::string& s = call.analysis_status();
    if (s != "completed" && s != "failed" && s != "skipped") return;
    credits += call.credits_used();
    for (const v1::MetricResult& r : call.metric_results()) {
      std::string outcome = r.status();
      if (r.status() == "completed") {
        outcome = r.structured_output().has_outcome_classification()
                      ? r.structured_output().outcome_classification()
                      : (r.value().bool_value() ? "true" : "false");
      }
      ++outcomes[{r.metric_id(), outcome}];
    }
    if (s != "completed") {
      // A call that did not complete has its custom metrics settled with its status.
      if (call.metric_results().empty()) ++outcomes[{kCustomMetric, s}];
      return;
    }
    for (const v1::StandardMetricResult& r : call.standard_metrics()) {
      if (r.status() != "completed") continue;
      const auto& f = r.result().fields();
      switch (r.metric_id()) {
        case 1:
          for (const Value& t : f.at("turns").list_value().values()) {
            latencies.push_back(t.struct_value().fields().at("latency_ms").number_value());
          }
          break;
        case 2:
          ai += static_cast<int64_t>(f.at("count").number_value());
          break;
        case 3:
          user += static_cast<int64_t>(f.at("count").number_value());
          break;
        case 5:
          silences += static_cast<int64_t>(f.at("count").number_value());
          break;
        case 10:
          talk.push_back(f.at("ai_ratio").number_value());
          break;
      }
    }
  }

  void Check(const v1::StatsBucket& b) const {
    SCOPED_TRACE(b.start());
    auto count = [&](const char* s) {
      auto it = status.find(s);
      return it == status.end() ? int64_t{0} : it->second;
    };
    EXPECT_EQ(b.calls().pending(), count("pending"));
    EXPECT_EQ(b.calls().processing(), count("processing"));
    EXPECT_EQ(b.calls().completed(), count("completed"));
    EXPECT_EQ(b.calls().failed(), count("failed"));
    EXPECT_EQ(b.calls().skipped(), count("skipped"));
    EXPECT_EQ(b.credits_used(), credits);
    EXPECT_EQ(b.latency_turns(), static_cast<int64_t>(latencies.size()));
    if (latencies.empty()) {
      EXPECT_FALSE(b.has_latency_p50_ms());
    } else {
      double sum = 0;
      for (double l : latencies) sum += l;
      EXPECT_NEAR(b.latency_mean_ms(), sum / latencies.size(), 0.05);
      const auto [p50, p50_tolerance] = ExactAndTolerance(latencies, 50);
      const auto [p95, p95_tolerance] = ExactAndTolerance(latencies, 95);
      EXPECT_NEAR(b.latency_p50_ms(), p50, p50_tolerance);
      EXPECT_NEAR(b.latency_p95_ms(), p95, p95_tolerance);
    }
    EXPECT_EQ(b.ai_interruptions(), ai);
    EXPECT_EQ(b.user_interruptions(), user);
    EXPECT_EQ(b.silences(), silences);
    if (talk.empty()) {
      EXPECT_FALSE(b.has_talk_ratio_mean());
    } else {
      double sum = 0;
      for (double t : talk) sum += t;
      EXPECT_NEAR(b.talk_ratio_mean(), sum / talk.size(), 1e-9);
    }
    std::map<std::pair<int64_t, std::string>, int64_t> got;
    for (const auto& o : b.metric_outcomes()) got[{o.metric_id(), o.outcome()}] = o.count();
    EXPECT_EQ(got, outcomes);
  }
};

class StatsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/stats_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts::AccountsStore accounts(db_.get());
    workspace_ = accounts.CreateWorkspace("w", 1000000)->id;
    other_workspace_ = accounts.CreateWorkspace("o", 1000000)->id;
    agents::AgentsStore agents(db_.get());
    v1::AgentFields agent;
    agent.set_name("a");
    agent.set_phone_number("+16502530000");
    agent.set_language_id(1);
    agent.set_instructions("i");
    agent_ = agents.Create(workspace_, agent)->id();
    directories_ = std::make_unique<testing::InProcessDirectories>(db_.get());
    agents::ScenariosStore& scenarios = directories_->scenarios;
    v1::ScenarioFields scenario;
    scenario.set_agent_id(agent_);
    scenario.set_name("s");
    scenario.set_goal("g");
    scenario_ = scenarios.Create(workspace_, scenario)->id();
    runs_ = std::make_unique<runs::RunsStore>(db_.get(), &directories_->scenario_directory);

    const int64_t agent_id = agent_;
    AgentLookup lookup = [agent_id](int64_t, int64_t agent) -> absl::StatusOr<AgentInfo> {
      if (agent == agent_id) return AgentInfo{};
      return ValidationError("agent_not_found", "no agent");
    };
    CallsStore::Options options;
    recordings_ = *OpenBlobStore(dir_);
    options.recordings = recordings_.get();
    options.catalog = [](int64_t, int64_t) -> absl::StatusOr<std::vector<CustomMetricInfo>> {
      return std::vector<CustomMetricInfo>{{kCustomMetric, 2, false, true}};
    };
    calls_ = std::make_unique<CallsStore>(db_.get(), lookup, options);
    const int64_t scenario_id = scenario_;
    runs::RunsStore* runs = runs_.get();
    stats_ = std::make_unique<StatsStore>(
        db_.get(), lookup,
        [scenario_id, agent_id](int64_t, int64_t id) -> absl::StatusOr<int64_t> {
          if (id == scenario_id) return agent_id;
          return NotFoundError("scenario");
        },
        [runs](const runs::RunCountQuery& q) { return runs->CountRuns(q); });
  }
  void TearDown() override {
    stats_.reset();
    calls_.reset();
    runs_.reset();
    directories_.reset();
    db_.reset();
    database_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A voice call (its recording stored at once) at `t`, made by a run when `run` is set.
  v1::Call IngestVoice(const std::string& identifier, int64_t t, std::optional<int64_t> run) {
    v1::IngestCallRequest r;
    r.set_call_identifier(identifier);
    r.set_agent_id(agent_);
    r.set_call_timestamp(FormatTimestamp(absl::FromUnixSeconds(t)));
    const StoredRecording wav{absl::StrCat("runs/", identifier), "audio/wav", 4};
    EXPECT_TRUE(recordings_->Put(wav.key, StringBlobSource("RIFF"), wav.content_type).ok());
    RunOrigin origin;
    if (run.has_value()) {
      origin.run_id = *run;
      origin.scenario_id = scenario_;
    }
    auto call = calls_->Ingest(workspace_, r, &wav, origin);
    EXPECT_TRUE(call.ok()) << call.status();
    return *call;
  }

  // Scores the next call in the queue with results drawn from `rng`; fails it instead when
  // `fail` is set.
  void ScoreNext(std::mt19937& rng, bool fail) {
    auto job = calls_->LeaseAnalysis(absl::Minutes(5), 3);
    ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
    const AnalysisJob& j = **job;
    if (fail) {
      ASSERT_TRUE(calls_->FailAnalysis(j.call_id, j.token, "unsupported_audio", "bad").ok());
      return;
    }
    std::vector<v1::StandardMetricResult> results;
    std::vector<v1::MetricResult> custom;
    std::uniform_real_distribution<double> latency(100, 6000);
    std::uniform_int_distribution<int> small(0, 4);
    for (int64_t id : j.planned_metric_ids) {
      if (id == kCustomMetric) {
        v1::MetricResult r;
        r.set_metric_id(id);
        r.set_result_type("boolean");
        r.set_status("completed");
        const bool value = small(rng) % 2 == 0;
        r.mutable_value()->set_bool_value(value);
        if (value) r.mutable_structured_output()->set_outcome_classification("meets_expectations");
        custom.push_back(r);
        continue;
      }
      v1::StandardMetricResult r;
      r.set_metric_id(id);
      r.set_status(small(rng) == 0 && id != 1 ? "failed" : "completed");
      Struct* s = r.mutable_result();
      auto set = [&](const char* key, double v) {
        (*s->mutable_fields())[key].set_number_value(v);
      };
      if (id == 1) {
        const int turns = small(rng) + 1;
        auto* list = (*s->mutable_fields())["turns"].mutable_list_value();
        for (int i = 0; i < turns; ++i) {
          (*list->add_values()->mutable_struct_value()->mutable_fields())["latency_ms"]
              .set_number_value(std::round(latency(rng) * 10) / 10);
        }
        set("average_ms", 0);  // replaced below
        double sum = 0;
        for (const Value& v : list->values()) {
          sum += v.struct_value().fields().at("latency_ms").number_value();
        }
        set("average_ms", sum / turns);
      } else if (id == 2 || id == 3 || id == 5) {
        set("count", small(rng));
      } else if (id == 10) {
        set("ai_ratio", std::uniform_real_distribution<double>(0, 1)(rng));
      }
      results.push_back(r);
    }
    ASSERT_TRUE(calls_->RecordAnalysis(j.call_id, j.token, 60.0, results, custom).ok());
  }

  std::string dir_;
  std::unique_ptr<BlobStore> recordings_;  // the local store in dir_
  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<testing::InProcessDirectories> directories_;
  std::unique_ptr<CallsStore> calls_;
  std::unique_ptr<runs::RunsStore> runs_;
  std::unique_ptr<StatsStore> stats_;
  int64_t workspace_ = 0, other_workspace_ = 0, agent_ = 0, scenario_ = 0;
};

StatsRange Days(int64_t from, int days) {
  StatsRange range;
  range.from = from;
  range.width = 86400;
  range.to = from + days * range.width;
  range.bucket = "day";
  return range;
}

TEST_P(StatsStoreTest, AgentStatsMatchTheCallRecords) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> when(kMonday - 86400, kMonday + 6 * 86400);
  // 40 calls over eight days (the first and last outside the range asked): most scored, some
  // failed, a few left pending or processing, some deleted after they settled.
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) {
    ids.push_back(absl::StrCat("c", i));
    IngestVoice(ids.back(), when(rng), std::nullopt);
  }
  for (int i = 0; i < 34; ++i) ScoreNext(rng, i % 9 == 4);
  ASSERT_TRUE(calls_->LeaseAnalysis(absl::Minutes(5), 3)->has_value());  // one processing
  for (const char* id : {"c3", "c11", "c38"}) ASSERT_TRUE(calls_->Delete(workspace_, id).ok());

  const StatsRange range = Days(kMonday, 5);
  auto stats = stats_->AgentStats(workspace_, agent_, range);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->buckets_size(), 5);
  std::vector<Expected> expected(5);
  Expected total;
  int in_range = 0;
  for (const std::string& id : ids) {
    auto call = calls_->Get(workspace_, id);
    if (!call.ok()) continue;  // deleted
    const int64_t t = absl::ToUnixSeconds(*ParseTimestamp(call->call_timestamp()));
    if (t < range.from || t >= range.to) continue;
    expected[(t - range.from) / range.width].Add(*call);
    total.Add(*call);
    ++in_range;
  }
  ASSERT_GT(in_range, 15);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(stats->buckets(i).start(),
              FormatTimestamp(absl::FromUnixSeconds(kMonday + i * 86400)));
    expected[i].Check(stats->buckets(i));
  }
  total.Check(stats->total());
  EXPECT_EQ(stats->total().calls().total(), in_range);

  // The totals kept as the calls ended are the ones SQL computes again from the rows.
  ASSERT_TRUE(db_->Write([](db::Connection& c) { return RebuildAgentTotals(c); }).ok());
  auto rebuilt = stats_->AgentStats(workspace_, agent_, range);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  for (int i = 0; i < 5; ++i) expected[i].Check(rebuilt->buckets(i));
  total.Check(rebuilt->total());

  // Another workspace sees nothing of the agent (404), and an unknown agent is 404.
  EXPECT_EQ(stats_->AgentStats(other_workspace_, agent_ + 1, range).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StatsStoreTest, ScenarioStatsCountItsRunsAndTheirCalls) {
  std::mt19937 rng(11);
  // Runs: two pass, one fails, one errors, one stays queued.
  std::vector<int64_t> run_ids;
  for (int i = 0; i < 5; ++i) {
    auto run = runs_->CreateRun(workspace_, scenario_, std::string("text"));
    ASSERT_TRUE(run.ok()) << run.status();
    run_ids.push_back(run->id());
  }
  const std::vector<runs::RunOutcome> outcomes = {
      {"completed", true, "done", ""},
      {"completed", true, "done", ""},
      {"completed", false, "done", ""},
      {"failed", std::nullopt, "", "the agent hung up"}};
  for (const runs::RunOutcome& outcome : outcomes) {
    auto job = runs_->Lease(absl::Minutes(1), 3);
    ASSERT_TRUE(job.ok() && job->has_value());
    ASSERT_TRUE(runs_->Finish((*job)->run_id, (*job)->token, outcome).ok());
  }
  // The runs' calls, and a pushed call of the same agent that is no run's.
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  for (int i = 0; i < 3; ++i) IngestVoice(absl::StrCat("run-", run_ids[i]), now, run_ids[i]);
  IngestVoice("pushed", now, std::nullopt);
  for (int i = 0; i < 4; ++i) ScoreNext(rng, false);

  auto range = ParseStatsRange(std::nullopt, std::nullopt, std::string("day"), absl::Now());
  ASSERT_TRUE(range.ok());
  auto stats = stats_->ScenarioStats(workspace_, scenario_, *range);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->scenario_id(), scenario_);
  EXPECT_EQ(stats->agent_id(), agent_);
  const v1::StatsBucket& today = stats->buckets(stats->buckets_size() - 1);
  EXPECT_EQ(today.runs().total(), 5);
  EXPECT_EQ(today.runs().passed(), 2);
  EXPECT_EQ(today.runs().failed(), 1);
  EXPECT_EQ(today.runs().errored(), 1);
  EXPECT_EQ(today.runs().queued(), 1);
  EXPECT_DOUBLE_EQ(today.runs().pass_rate(), 2.0 / 3.0);
  Expected expected;
  for (int i = 0; i < 3; ++i)
    expected.Add(*calls_->Get(workspace_, absl::StrCat("run-", run_ids[i])));
  expected.Check(today);
  expected.Check(stats->total());

  // The agent's stats count the runs as well, and all four calls.
  auto agent_stats = stats_->AgentStats(workspace_, agent_, *range);
  ASSERT_TRUE(agent_stats.ok());
  EXPECT_EQ(agent_stats->total().runs().total(), 5);
  EXPECT_EQ(agent_stats->total().calls().completed(), 4);
  EXPECT_EQ(stats_->ScenarioStats(workspace_, scenario_ + 1, *range).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StatsStoreTest, HourlyAndWeeklyBucketsAddUpToTheSameTotal) {
  std::mt19937 rng(3);
  for (int i = 0; i < 12; ++i) IngestVoice(absl::StrCat("h", i), kMonday + i * 7919, std::nullopt);
  for (int i = 0; i < 12; ++i) ScoreNext(rng, false);
  StatsRange hours;
  hours.from = kMonday;
  hours.width = 3600;
  hours.to = kMonday + 48 * 3600;
  hours.bucket = "hour";
  StatsRange weeks = hours;
  weeks.width = 7 * 86400;
  weeks.to = kMonday + weeks.width;
  weeks.bucket = "week";
  auto by_hour = stats_->AgentStats(workspace_, agent_, hours);
  auto by_week = stats_->AgentStats(workspace_, agent_, weeks);
  ASSERT_TRUE(by_hour.ok() && by_week.ok());
  EXPECT_EQ(by_hour->buckets_size(), 48);
  EXPECT_EQ(by_week->buckets_size(), 1);
  int64_t calls = 0, turns = 0;
  for (const auto& b : by_hour->buckets()) {
    calls += b.calls().completed();
    turns += b.latency_turns();
  }
  EXPECT_EQ(calls, 12);
  EXPECT_EQ(turns, by_week->total().latency_turns());
  EXPECT_EQ(by_hour->total().SerializeAsString().size() > 0, true);
  EXPECT_EQ(by_hour->total().latency_p95_ms(), by_week->total().latency_p95_ms());
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(StatsStoreTest);

// A data dir made by the previous release (schema version 9, tests/fixtures/make_v9_data_dir.py)
// upgrades in place: every call, result, ledger row and balance kept, the queryable rows filled
// in, and the stats agree with the call records.
TEST(UpgradeTest, AVersion9DataDirUpgradesInPlace) {
  std::string tmpl = ::testing::TempDir() + "/upgrade_XXXXXX";
  const std::string dir = mkdtemp(tmpl.data());
  const std::string path = dir + "/calleval.db";
  std::filesystem::copy_file(CALLEVAL_SOURCE_DIR "/tests/fixtures/v9_data_dir.db", path);

  // What the old schema holds, read with the old migrations only (nothing to apply).
  const std::vector<db::Migration> all = SchemaMigrations();
  const std::vector<db::Migration> v9(all.begin(), all.begin() + 9);
  // Every row of what the upgrade must keep, as text.
  auto snapshot = [](db::Database& db) {
    std::vector<std::string> rows;
    const std::vector<std::pair<const char*, int>> queries = {
        {"SELECT id, workspace_id, call_identifier, analysis_status, credits_used, "
         "standard_metrics, metric_results, call_timestamp FROM calls ORDER BY id",
         8},
        {"SELECT id, workspace_id, call_id, metric_id, kind, amount FROM credit_ledger "
         "ORDER BY id",
         6},
        {"SELECT id, credit_balance FROM workspaces ORDER BY id", 2},
        {"SELECT id, name FROM agents ORDER BY id", 2}};
    EXPECT_TRUE(db.Read([&](db::Connection& c) -> absl::Status {
                    for (const auto& [sql, columns] : queries) {
                      ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
                      while (true) {
                        ASSIGN_OR_RETURN(bool row, stmt.Step());
                        if (!row) break;
                        std::string line = sql;
                        for (int i = 0; i < columns; ++i) {
                          absl::StrAppend(&line, "|", stmt.OptionalText(i).value_or("NULL"));
                        }
                        rows.push_back(std::move(line));
                      }
                    }
                    return absl::OkStatus();
                  }).ok());
    return rows;
  };
  std::vector<std::string> before;
  {
    auto old = db::Database::Open(path, v9);
    ASSERT_TRUE(old.ok()) << old.status();
    before = snapshot(**old);
  }
  ASSERT_GE(before.size(), 7u + 2u);

  auto database = db::Database::Open(path, all);
  ASSERT_TRUE(database.ok()) << database.status();
  db::Database& db = **database;
  EXPECT_EQ(snapshot(db), before);

  agents::AgentsStore agents(&db);
  AgentLookup lookup = [&agents](int64_t ws, int64_t id) -> absl::StatusOr<AgentInfo> {
    ASSIGN_OR_RETURN(v1::Agent agent, agents.Get(ws, id));
    return AgentInfo{};
  };
  CallsStore calls(&db, lookup, CallsStore::Options());
  auto filled = calls.BackfillQueryRows(/*batch=*/3);
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ(*filled, 7);
  EXPECT_EQ(*calls.BackfillQueryRows(), 0);  // once only
  EXPECT_EQ(snapshot(db), before);

  StatsStore stats(&db, lookup, nullptr, nullptr);
  auto range =
      ParseStatsRange(std::string("2026-10-26T00:00:00Z"), std::string("2026-11-30T00:00:00Z"),
                      std::string("week"), absl::Now());
  ASSERT_TRUE(range.ok());
  // Every call of the fixture happened in November 2026 (the ones without a call_timestamp
  // on the day it was made, also in November).
  auto agent_stats = stats.AgentStats(1, 1, *range);
  ASSERT_TRUE(agent_stats.ok()) << agent_stats.status();
  Expected expected;
  auto listed = calls.List(1, v1::ListCallsRequest());
  ASSERT_TRUE(listed.ok());
  for (const v1::Call& call : listed->data()) expected.Add(*calls.Get(1, call.call_identifier()));
  expected.Check(agent_stats->total());
  EXPECT_EQ(agent_stats->total().calls().total(), 6);
  EXPECT_GT(agent_stats->total().latency_turns(), 0);
  std::filesystem::remove_all(dir);
}

TEST(ParseStatsRangeTest, AlignsToBucketsAndDefaults) {
  const absl::Time now = absl::FromUnixSeconds(kMonday + 3 * 86400 + 5000);  // Thursday
  auto days = ParseStatsRange(std::nullopt, std::nullopt, std::nullopt, now);
  ASSERT_TRUE(days.ok());
  EXPECT_EQ(days->bucket, "day");
  EXPECT_EQ(days->to, kMonday + 4 * 86400);
  EXPECT_EQ(days->buckets(), 30);
  auto weeks = ParseStatsRange(std::string("2026-11-04T10:00:00Z"),
                               std::string("2026-11-10T00:00:00Z"), std::string("week"), now);
  ASSERT_TRUE(weeks.ok());
  EXPECT_EQ(weeks->from, kMonday);  // back to Monday
  EXPECT_EQ(weeks->to, kMonday + 14 * 86400);
  auto hours = ParseStatsRange(std::string("2026-11-02T00:00:00Z"),
                               std::string("2026-11-02T05:00:00Z"), std::string("hour"), now);
  ASSERT_TRUE(hours.ok());
  EXPECT_EQ(hours->buckets(), 5);  // a `to` on an edge stays there
}

TEST(ParseStatsRangeTest, RejectsWhatCannotBeAnswered) {
  const absl::Time now = absl::Now();
  for (auto [from, to, bucket, field] :
       std::vector<std::tuple<const char*, const char*, const char*, const char*>>{
           {nullptr, nullptr, "month", "bucket"},
           {"yesterday", nullptr, "day", "from"},
           {nullptr, "2026-13-01T00:00:00Z", "day", "to"},
           {"2026-11-05T00:00:00Z", "2026-11-04T00:00:00Z", "day", "from"},
           {"2020-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "hour", "from"}}) {
    auto opt = [](const char* s) { return s ? std::optional<std::string>(s) : std::nullopt; };
    absl::Status status = ParseStatsRange(opt(from), opt(to), opt(bucket), now).status();
    EXPECT_EQ(HttpStatusFor(status), 422) << from << " " << bucket;
    ASSERT_EQ(ErrorInfoOf(status).details_size(), 1);
    EXPECT_EQ(ErrorInfoOf(status).details(0).field(), field);
  }
}

}  // namespace
}  // namespace calleval::calls

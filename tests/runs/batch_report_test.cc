#include "services/runs/batch_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace calleval::runs {
namespace {

constexpr int64_t kScenario = 11;

v1::Run CompletedRun(int64_t id, bool passed, int64_t call_id, int64_t scenario = kScenario) {
  v1::Run run;
  run.set_id(id);
  run.set_scenario_id(scenario);
  run.set_status("completed");
  run.set_passed(passed);
  run.set_call_id(call_id);
  return run;
}

v1::CallFigures::Metric* AddMetric(v1::CallFigures& call, int64_t id, const std::string& status,
                                   const std::string& result_type) {
  v1::CallFigures::Metric* metric = call.add_metrics();
  metric->set_metric_id(id);
  metric->set_name(absl::StrCat("metric ", id));
  metric->set_status(status);
  metric->set_result_type(result_type);
  return metric;
}

ComparedBatch Batch(int64_t id, std::vector<v1::Run> runs) {
  ComparedBatch batch;
  batch.batch.set_id(id);
  batch.batch.set_status("completed");
  batch.runs = std::move(runs);
  return batch;
}

// Per call id (100 + i on the baseline, 200 + i on the current side): a judged metric 7 whose
// outcome follows the run's pass, a rating metric 8 without rules, and a voice call's latency.
std::map<int64_t, v1::CallFigures> Calls(const std::vector<v1::Run>& runs, double latency_ms,
                                         double rating) {
  std::map<int64_t, v1::CallFigures> calls;
  for (const v1::Run& run : runs) {
    v1::CallFigures& call = calls[run.call_id()];
    call.set_call_id(run.call_id());
    call.set_observation_type("voice");
    call.set_latency_mean_ms(latency_ms);
    AddMetric(call, 7, "completed", "boolean")
        ->set_outcome(run.passed() ? "meets_expectations" : "requires_attention");
    AddMetric(call, 8, "completed", "rating")->set_value(rating);
  }
  return calls;
}

TEST(BatchReportTest, FiguresOfAScenarioInOrderWithTheirDirection) {
  std::vector<v1::Run> base_runs, current_runs;
  for (int i = 0; i < 6; ++i) {
    base_runs.push_back(CompletedRun(i, true, 100 + i));
    current_runs.push_back(CompletedRun(10 + i, true, 200 + i));
  }
  std::map<int64_t, v1::CallFigures> calls = Calls(base_runs, 800, 4);
  // The current side is slower and rated higher.
  for (auto& [id, call] : Calls(current_runs, 1600, 5)) calls[id] = call;
  const v1::BatchRunComparison comparison = BuildBatchComparison(
      Batch(2, current_runs), Batch(1, base_runs), calls, /*judged_metrics=*/{7},
      /*unjudged_metrics=*/{8});
  EXPECT_EQ(comparison.batch_run_id(), 2);
  EXPECT_EQ(comparison.baseline_batch_run_id(), 1);
  EXPECT_TRUE(comparison.complete());
  ASSERT_EQ(comparison.scenarios_size(), 1);
  const auto& figures = comparison.scenarios(0).metrics();
  ASSERT_EQ(figures.size(), 4);
  EXPECT_EQ(figures[0].metric(), "passed");
  EXPECT_FALSE(figures[0].has_metric_id());
  EXPECT_EQ(figures[0].verdict(), "unchanged");
  EXPECT_EQ(figures[1].metric_id(), 7);
  EXPECT_EQ(figures[1].kind(), "pass_rate");
  EXPECT_EQ(figures[2].metric_id(), 8);
  EXPECT_EQ(figures[2].kind(), "mean");
  EXPECT_DOUBLE_EQ(figures[2].difference(), 1.0);
  EXPECT_EQ(figures[2].verdict(), "improved");  // higher is better
  EXPECT_EQ(figures[3].metric(), "latency.mean_ms");
  EXPECT_FALSE(figures[3].has_metric_id());
  EXPECT_DOUBLE_EQ(figures[3].difference(), 800);
  EXPECT_EQ(figures[3].verdict(), "regressed");  // lower is better
  EXPECT_EQ(figures[3].baseline_runs(), 6);
  EXPECT_EQ(comparison.verdict(), "regressed");
}

TEST(BatchReportTest, RunsThatFailedToRunAndResultsThatDidNotApplyAreNoSamples) {
  std::vector<v1::Run> base_runs = {CompletedRun(1, true, 101), CompletedRun(2, true, 102),
                                    CompletedRun(3, true, 103)};
  std::vector<v1::Run> current_runs = {CompletedRun(11, true, 201), CompletedRun(12, false, 202),
                                       CompletedRun(13, true, 203)};
  v1::Run failed_to_run;
  failed_to_run.set_id(14);
  failed_to_run.set_scenario_id(kScenario);
  failed_to_run.set_status("failed");
  current_runs.push_back(failed_to_run);
  std::map<int64_t, v1::CallFigures> calls;
  for (int64_t id : {101, 102, 103, 201, 203}) {
    calls[id].set_call_id(id);
    AddMetric(calls[id], 7, "completed", "boolean")->set_outcome("meets_expectations");
  }
  calls[202].set_call_id(202);
  AddMetric(calls[202], 7, "failed", "boolean");  // failed: counts as not passing
  calls[203].clear_metrics();
  AddMetric(calls[203], 7, "not_applicable", "boolean");  // says nothing
  // A scenario only the current batch ran is not compared.
  current_runs.push_back(CompletedRun(15, true, 204, /*scenario=*/12));
  const v1::BatchRunComparison comparison =
      BuildBatchComparison(Batch(2, current_runs), Batch(1, base_runs), calls, {7}, {});
  ASSERT_EQ(comparison.scenarios_size(), 1);
  EXPECT_EQ(comparison.scenarios(0).scenario_id(), kScenario);
  const auto& figures = comparison.scenarios(0).metrics();
  ASSERT_EQ(figures.size(), 2);
  EXPECT_EQ(figures[0].current_runs(), 3);  // the failed run is no sample
  EXPECT_NEAR(figures[0].current(), 2.0 / 3, 1e-12);
  EXPECT_EQ(figures[1].current_runs(), 2);  // 201 passes, 202 failed, 203 did not apply
  EXPECT_DOUBLE_EQ(figures[1].current(), 0.5);
  EXPECT_EQ(figures[1].baseline_runs(), 3);
}

TEST(BatchReportTest, AMetricWithoutADefinitionIsJudgedByItsOutcomes) {
  std::vector<v1::Run> base_runs = {CompletedRun(1, true, 101), CompletedRun(2, true, 102)};
  std::vector<v1::Run> current_runs = {CompletedRun(11, true, 201), CompletedRun(12, true, 202)};
  std::map<int64_t, v1::CallFigures> calls;
  for (int64_t id : {101, 102, 201, 202}) {
    calls[id].set_call_id(id);
    // 9 has outcomes but no known definition: judged; 10, numeric with none, is a mean.
    AddMetric(calls[id], 9, "completed", "boolean")->set_outcome("exceeds_expectations");
    AddMetric(calls[id], 10, "completed", "numeric")->set_value(3);
    AddMetric(calls[id], 12, "completed", "enum");  // neither
  }
  ComparedBatch current = Batch(2, current_runs);
  current.batch.set_status("in_progress");
  const v1::BatchRunComparison comparison =
      BuildBatchComparison(current, Batch(1, base_runs), calls, {}, {});
  EXPECT_FALSE(comparison.complete());
  const auto& figures = comparison.scenarios(0).metrics();
  ASSERT_EQ(figures.size(), 3);
  EXPECT_EQ(figures[1].metric_id(), 9);
  EXPECT_EQ(figures[1].kind(), "pass_rate");
  EXPECT_DOUBLE_EQ(figures[1].current(), 1.0);
  EXPECT_EQ(figures[2].metric_id(), 10);
  EXPECT_EQ(figures[2].kind(), "mean");
  EXPECT_EQ(comparison.verdict(), "unchanged");
}

TEST(BatchReportTest, TheSameBatchesGiveTheSameAnswer) {
  std::vector<v1::Run> base_runs, current_runs;
  std::map<int64_t, v1::CallFigures> calls;
  for (int i = 0; i < 12; ++i) {
    base_runs.push_back(CompletedRun(i, i % 3 != 0, 100 + i));
    current_runs.push_back(CompletedRun(20 + i, i % 2 == 0, 200 + i));
    calls[100 + i].set_call_id(100 + i);
    calls[100 + i].set_latency_mean_ms(700 + 37 * i);
    calls[200 + i].set_call_id(200 + i);
    calls[200 + i].set_latency_mean_ms(760 + 29 * i);
  }
  const auto a = BuildBatchComparison(Batch(2, current_runs), Batch(1, base_runs), calls, {}, {});
  const auto b = BuildBatchComparison(Batch(2, current_runs), Batch(1, base_runs), calls, {}, {});
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  ASSERT_EQ(a.scenarios(0).metrics_size(), 2);
  EXPECT_TRUE(a.scenarios(0).metrics(1).has_p_value());
}

}  // namespace
}  // namespace calleval::runs

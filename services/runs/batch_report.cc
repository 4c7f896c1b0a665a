#include "services/runs/batch_report.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/status_macros.h"

namespace calleval::runs {
namespace {

constexpr char kPassedKey[] = "passed";
constexpr char kLatencyKey[] = "latency.mean_ms";

// The samples of one figure of one scenario, before the statistics.
struct Figure {
  std::optional<int64_t> metric_id;
  std::string name;
  std::string key;  // names the figure in its seed
  FigureKind kind = FigureKind::kPassRate;
  bool higher_is_better = true;
  std::vector<double> baseline;
  std::vector<double> current;
};

bool Passing(const std::string& outcome) {
  return outcome == "meets_expectations" || outcome == "exceeds_expectations";
}

// The runs that count as samples, by scenario: those that completed (a run that failed to run
// says nothing about the agent's answers).
std::map<int64_t, std::vector<const v1::Run*>> CompletedByScenario(
    const std::vector<v1::Run>& runs) {
  std::map<int64_t, std::vector<const v1::Run*>> by_scenario;
  for (const v1::Run& run : runs) {
    by_scenario[run.scenario_id()];  // present in the batch, even with no completed run
    if (run.status() == "completed") by_scenario[run.scenario_id()].push_back(&run);
  }
  return by_scenario;
}

const v1::CallFigures* CallOf(const v1::Run& run, const std::map<int64_t, v1::CallFigures>& calls) {
  if (!run.has_call_id()) return nullptr;
  auto found = calls.find(run.call_id());
  return found == calls.end() ? nullptr : &found->second;
}

// Adds one side's samples of every figure of a scenario to `figures` (by key, created on first
// sight so either side may bring a figure the other lacks).
void AddSamples(const std::vector<const v1::Run*>& runs,
                const std::map<int64_t, v1::CallFigures>& calls,
                const std::set<int64_t>& judged_metrics, const std::set<int64_t>& unjudged_metrics,
                bool baseline_side, std::map<std::string, Figure>& figures) {
  auto figure = [&](const std::string& key) -> Figure& { return figures[key]; };
  auto add = [&](Figure& f, double value) {
    (baseline_side ? f.baseline : f.current).push_back(value);
  };
  for (const v1::Run* run : runs) {
    if (run->has_passed()) {
      Figure& f = figure(kPassedKey);
      f.name = kPassedKey;
      f.key = kPassedKey;
      add(f, run->passed() ? 1 : 0);
    }
    const v1::CallFigures* call = CallOf(*run, calls);
    if (call == nullptr) continue;
    for (const v1::CallFigures::Metric& metric : call->metrics()) {
      const int64_t id = metric.metric_id();
      const bool judged =
          judged_metrics.count(id) > 0 || (unjudged_metrics.count(id) == 0 && metric.has_outcome());
      if (judged) {
        // A failed result fails the run, so it counts as a fail here too; a metric that did
        // not apply or was skipped says nothing.
        if (metric.status() != "completed" && metric.status() != "failed") continue;
        Figure& f = figure(absl::StrCat("metric:", id));
        f.metric_id = id;
        f.name = metric.name();
        f.key = absl::StrCat("metric:", id);
        add(f, metric.status() == "completed" && Passing(metric.outcome()) ? 1 : 0);
      } else if ((metric.result_type() == "numeric" || metric.result_type() == "rating") &&
                 metric.status() == "completed" && metric.has_value()) {
        Figure& f = figure(absl::StrCat("metric:", id));
        f.metric_id = id;
        f.name = metric.name();
        f.key = absl::StrCat("metric:", id);
        f.kind = FigureKind::kMean;
        add(f, metric.value());
      }
    }
    if (call->has_latency_mean_ms()) {
      Figure& f = figure(kLatencyKey);
      f.name = kLatencyKey;
      f.key = kLatencyKey;
      f.kind = FigureKind::kMean;
      f.higher_is_better = false;
      add(f, call->latency_mean_ms());
    }
  }
}

// "passed" first, then the custom metrics by id, then the standard figures.
int FigureRank(const Figure& f) {
  if (f.key == kPassedKey) return 0;
  return f.metric_id.has_value() ? 1 : 2;
}

}  // namespace

v1::BatchRunComparison BuildBatchComparison(const ComparedBatch& current,
                                            const ComparedBatch& baseline,
                                            const std::map<int64_t, v1::CallFigures>& calls,
                                            const std::set<int64_t>& judged_metrics,
                                            const std::set<int64_t>& unjudged_metrics,
                                            const ComparisonOptions& options) {
  v1::BatchRunComparison comparison;
  comparison.set_batch_run_id(current.batch.id());
  comparison.set_baseline_batch_run_id(baseline.batch.id());
  comparison.set_complete(current.batch.status() == "completed" &&
                          baseline.batch.status() == "completed");
  const auto current_runs = CompletedByScenario(current.runs);
  const auto baseline_runs = CompletedByScenario(baseline.runs);
  // Every figure of every scenario, in answer order, then compared as one family.
  std::vector<std::pair<int64_t, std::vector<Figure>>> scenarios;
  for (const auto& [scenario_id, runs] : current_runs) {
    auto base = baseline_runs.find(scenario_id);
    if (base == baseline_runs.end()) continue;
    std::map<std::string, Figure> figures;
    AddSamples(base->second, calls, judged_metrics, unjudged_metrics, /*baseline_side=*/true,
               figures);
    AddSamples(runs, calls, judged_metrics, unjudged_metrics, /*baseline_side=*/false, figures);
    std::vector<Figure> ordered;
    for (auto& [key, figure] : figures) ordered.push_back(std::move(figure));
    std::stable_sort(ordered.begin(), ordered.end(), [](const Figure& a, const Figure& b) {
      if (FigureRank(a) != FigureRank(b)) return FigureRank(a) < FigureRank(b);
      return a.metric_id.value_or(0) < b.metric_id.value_or(0);
    });
    scenarios.emplace_back(scenario_id, std::move(ordered));
  }
  std::vector<FigureSamples> samples;
  for (const auto& [scenario_id, figures] : scenarios) {
    for (const Figure& figure : figures) {
      FigureSamples s;
      s.kind = figure.kind;
      s.higher_is_better = figure.higher_is_better;
      s.baseline = figure.baseline;
      s.current = figure.current;
      s.seed = ComparisonSeed(current.batch.id(), baseline.batch.id(), scenario_id, figure.key);
      samples.push_back(std::move(s));
    }
  }
  const std::vector<FigureComparison> compared = CompareFigures(samples, options);
  std::vector<std::string> verdicts;
  size_t next = 0;
  for (const auto& [scenario_id, figures] : scenarios) {
    v1::ScenarioComparison& scenario = *comparison.add_scenarios();
    scenario.set_scenario_id(scenario_id);
    for (const Figure& figure : figures) {
      const FigureComparison& result = compared[next++];
      v1::ComparedFigure& out = *scenario.add_metrics();
      if (figure.metric_id) out.set_metric_id(*figure.metric_id);
      out.set_metric(figure.name);
      out.set_kind(figure.kind == FigureKind::kPassRate ? "pass_rate" : "mean");
      if (result.baseline) out.set_baseline(*result.baseline);
      if (result.current) out.set_current(*result.current);
      if (result.difference) out.set_difference(*result.difference);
      if (result.ci_low) out.set_ci_low(*result.ci_low);
      if (result.ci_high) out.set_ci_high(*result.ci_high);
      if (result.p_value) out.set_p_value(*result.p_value);
      out.set_baseline_runs(result.baseline_samples);
      out.set_current_runs(result.current_samples);
      out.set_verdict(result.verdict);
      verdicts.push_back(result.verdict);
    }
  }
  comparison.set_verdict(OverallVerdict(verdicts));
  return comparison;
}

absl::StatusOr<v1::BatchRunComparison> CompareBatchRuns(
    RunsStore& runs, RunCalls& calls, const ComparisonMetricDefinitions& definitions,
    int64_t workspace_id, int64_t batch_id, std::optional<int64_t> baseline_id) {
  ComparedBatch current;
  ASSIGN_OR_RETURN(current.batch, runs.GetBatch(workspace_id, batch_id));
  if (!baseline_id && current.batch.has_baseline_batch_run_id()) {
    baseline_id = current.batch.baseline_batch_run_id();
  }
  if (!baseline_id) {
    return ValidationError("no_baseline",
                           absl::StrCat("batch run ", batch_id,
                                        " has no baseline: name one with baseline_batch_run_id"),
                           {{"baseline_batch_run_id", "is required: the batch run has none"}});
  }
  if (*baseline_id == batch_id) {
    return ValidationError("validation_failed", "a batch run is not compared with itself",
                           {{"baseline_batch_run_id", "must name another batch run"}});
  }
  ComparedBatch baseline;
  absl::StatusOr<v1::BatchRun> base = runs.GetBatch(workspace_id, *baseline_id);
  if (absl::IsNotFound(base.status())) {
    return ValidationError("batch_run_not_found",
                           absl::StrCat("no batch run ", *baseline_id, " in this workspace"),
                           {{"baseline_batch_run_id", "must name a batch run of the workspace"}});
  }
  RETURN_IF_ERROR(base.status());
  baseline.batch = *std::move(base);
  ASSIGN_OR_RETURN(current.runs, runs.BatchRuns(workspace_id, batch_id));
  ASSIGN_OR_RETURN(baseline.runs, runs.BatchRuns(workspace_id, *baseline_id));

  std::vector<int64_t> call_ids;
  for (const ComparedBatch* side : {&baseline, &current}) {
    for (const v1::Run& run : side->runs) {
      if (run.status() == "completed" && run.has_call_id()) call_ids.push_back(run.call_id());
    }
  }
  std::map<int64_t, v1::CallFigures> figures;
  if (!call_ids.empty()) {
    ASSIGN_OR_RETURN(v1::CallFiguresList list, calls.Figures(workspace_id, call_ids));
    for (v1::CallFigures& call : *list.mutable_calls()) {
      const int64_t id = call.call_id();
      figures[id] = std::move(call);
    }
  }
  std::set<int64_t> judged;
  std::set<int64_t> unjudged;
  if (definitions) {
    std::set<int64_t> metric_ids;
    for (const auto& [id, call] : figures) {
      for (const auto& metric : call.metrics()) metric_ids.insert(metric.metric_id());
    }
    if (!metric_ids.empty()) {
      ASSIGN_OR_RETURN(
          std::vector<v1::Metric> metrics,
          definitions(workspace_id, std::vector<int64_t>(metric_ids.begin(), metric_ids.end())));
      for (const v1::Metric& metric : metrics) {
        (metric.structured_output_size() > 0 ? judged : unjudged).insert(metric.id());
      }
    }
  }
  return BuildBatchComparison(current, baseline, figures, judged, unjudged);
}

}  // namespace calleval::runs

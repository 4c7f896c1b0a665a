#pragma once

// A batch run compared with its baseline (GET /api/v1/batch_runs/{id}/comparison, docs/api.md
// §5.6): which figures of which runs are compared, gathered from the runs store and, for what
// the runs' calls were scored, from the calls service (RunCalls::Figures); the statistics are
// batch_comparison.h's.
//
// Per scenario run in both batches, the figures are:
//   - "passed": each completed run's pass (1 or 0). Runs that failed to run are no sample;
//   - each custom metric with structured_output rules the scenario's calls were scored on: 1
//     when the outcome is meets_expectations or exceeds_expectations, else 0; a result that
//     failed counts 0 (as it fails the run), one not_applicable, skipped or pending is no sample;
//   - each numeric or rating custom metric without rules: its value, compared by mean, higher
//     is better;
//   - "latency.mean_ms" of voice calls: the latency metric's average_ms, lower is better.
// Every figure of the comparison is one family for the correction of the p-values.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "calleval/v1/metrics.pb.h"
#include "services/runs/batch_comparison.h"
#include "services/runs/run_calls.h"
#include "services/runs/runs_store.h"

namespace calleval::runs {

// The metrics service's definitions of the workspace's metrics among `ids`
// (MetricsStore::Definitions): which custom metrics have structured_output rules.
using ComparisonMetricDefinitions = std::function<absl::StatusOr<std::vector<v1::Metric>>(
    int64_t workspace_id, const std::vector<int64_t>& ids)>;

// One side of a comparison: the batch and its runs.
struct ComparedBatch {
  v1::BatchRun batch;
  std::vector<v1::Run> runs;
};

// The comparison of `current` with `baseline`, from what their runs' calls were scored
// (`calls`, by call id) and which custom metrics are judged by structured_output rules
// (`judged_metrics`; a metric absent from it is judged when any of its results has an outcome).
v1::BatchRunComparison BuildBatchComparison(const ComparedBatch& current,
                                            const ComparedBatch& baseline,
                                            const std::map<int64_t, v1::CallFigures>& calls,
                                            const std::set<int64_t>& judged_metrics,
                                            const std::set<int64_t>& unjudged_metrics,
                                            const ComparisonOptions& options = {});

// Reads both batches (404 for a batch the workspace lacks; 422 no_baseline when neither the
// batch nor `baseline_id` names a baseline; 422 batch_run_not_found for a baseline the workspace
// lacks), their calls' figures and the metrics' definitions, and compares them.
absl::StatusOr<v1::BatchRunComparison> CompareBatchRuns(
    RunsStore& runs, RunCalls& calls, const ComparisonMetricDefinitions& definitions,
    int64_t workspace_id, int64_t batch_id, std::optional<int64_t> baseline_id);

}  // namespace calleval::runs

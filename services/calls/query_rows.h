#pragma once

// The rows of the queryable model (schema migration 10), written by the calls store in the
// transactions that change a call: planned metrics at ingest, results and figures when the call
// is scored, the agent's hourly totals when it settles or is deleted.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/calls.pb.h"
#include "common/database.h"

namespace calleval::calls {

// One call_metrics row per planned metric, status pending, in plan order.
absl::Status WritePlannedMetrics(db::Connection& c, int64_t call_id,
                                 const std::vector<int64_t>& metric_ids,
                                 const std::vector<int64_t>& credit_costs);

// A planned metric of a call and the credits it costs (fixed at ingest).
struct PlannedMetric {
  int64_t metric_id = 0;
  int64_t credit_cost = 0;
};
// The call's plan from its call_metrics rows, in plan order.
absl::StatusOr<std::vector<PlannedMetric>> ReadPlan(db::Connection& c, int64_t call_id);
// The planned metrics of a settled call that kept less than they cost (credits_used below
// credit_cost): what the call is owed back, if they were charged.
absl::StatusOr<std::vector<int64_t>> UnusedPlannedMetrics(db::Connection& c, int64_t call_id);

// The results of a scored call: call_metrics rows (inserted for a result that was not planned,
// with cost 0), its figures and latency histogram.
absl::Status WriteCallResults(db::Connection& c, int64_t call_id,
                              const std::vector<v1::StandardMetricResult>& standard,
                              const std::vector<v1::MetricResult>& custom);

// The planned metrics still pending take `status` (the call ended failed or skipped).
absl::Status SettlePendingMetrics(db::Connection& c, int64_t call_id, absl::string_view status);

// Adds a settled call (completed, failed, skipped) to its agent's hourly totals (`sign` +1), or
// takes it away (-1, before the call is deleted). A call that has not settled counts nowhere,
// nor one whose rows the backfill has not written yet (calls.query_rows = 0).
absl::Status ApplyToAgentTotals(db::Connection& c, int64_t call_id, int sign);

// Computes every agent's hourly totals again from the call rows, in SQL (the totals kept as
// calls end must equal them: stats_store_test checks it; bench/stats_bench loads its million
// calls this way).
absl::Status RebuildAgentTotals(db::Connection& c);

// Whether `status` is one a call does not leave.
bool IsSettled(absl::string_view analysis_status);

}  // namespace calleval::calls

#pragma once

// What the queryable model keeps of a scored call (docs/architecture.md, "Results the database
// can query"): the standard metric figures people chart, the per-turn latencies as a
// histogram that buckets merge, and each metric result as a row. Pure functions of the call's
// results; services/calls/query_rows.h writes them.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "calleval/v1/calls.pb.h"

namespace calleval::calls {

// a / b rounded towards negative infinity (a Unix time before 1970 still falls in its own hour).
inline int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// Per-turn latency histogram: bin -> turns. Bins are 10 ms wide below 1 s, 50 ms below 5 s,
// 250 ms below 20 s, and one open bin above; a percentile merged from them is within a bin's
// width of the exact one (each order statistic is placed inside its bin).
using LatencyHistogram = std::map<int, int64_t>;

int LatencyBin(double latency_ms);
// The bin's lower and upper edge in ms (the open bin's upper edge is its lower edge).
double LatencyBinLower(int bin);
double LatencyBinUpper(int bin);

// The p-th percentile (0-100) of the turns in `histogram`, with the same rank rule as a call's
// own latency percentiles (linear between order statistics, docs/metrics.md), turns spread
// evenly inside their bin. nullopt when it holds no turns.
std::optional<double> HistogramPercentile(const LatencyHistogram& histogram, double p);

// The figures of one call, from its completed standard metric results; a figure whose metric
// was not completed is absent.
struct CallFigures {
  int64_t latency_turns = 0;
  std::optional<double> latency_mean_ms, latency_p50_ms, latency_p95_ms, latency_max_ms;
  LatencyHistogram latency_bins;
  std::optional<int64_t> ai_interruptions, user_interruptions, silences;
  std::optional<double> silence_total_ms, talk_ratio, ai_wpm, user_wpm;

  // Whether any standard metric contributed (a text call has none of these).
  bool Any() const;
};
CallFigures ExtractCallFigures(const std::vector<v1::StandardMetricResult>& results);

// One result as a row of call_metrics.
struct MetricRow {
  int64_t metric_id = 0;
  std::string status;
  std::optional<double> value_number;
  std::optional<std::string> value_text;
  std::optional<double> score;
  int64_t credits_used = 0;
  std::optional<std::string> outcome;
};
MetricRow MetricRowOf(const v1::StandardMetricResult& result);
// A custom metric's outcome is what stats count it by: the outcome_classification of the rule
// that matched when there is one; else, once completed, a boolean's "true"/"false" or an enum's
// value; else (numeric and rating without a rule) "completed"; a result that did not complete
// counts under its status (failed, skipped, not_applicable).
MetricRow MetricRowOf(const v1::MetricResult& result);

}  // namespace calleval::calls

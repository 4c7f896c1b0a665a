#include "services/calls/query_rows.h"

#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/standard_metrics.h"
#include "common/status_macros.h"
#include "services/calls/call_figures.h"

namespace calleval::calls {
namespace {

absl::Status UpsertMetricRow(db::Connection& c, int64_t call_id, const MetricRow& row) {
  ASSIGN_OR_RETURN(
      auto upsert,
      c.Prepare("INSERT INTO call_metrics (call_id, metric_id, credit_cost, status, value_number, "
                "value_text, score, credits_used, outcome) VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (call_id, metric_id) DO UPDATE SET status = excluded.status, "
                "value_number = excluded.value_number, value_text = excluded.value_text, "
                "score = excluded.score, credits_used = excluded.credits_used, "
                "outcome = excluded.outcome"));
  upsert.Bind(1, call_id).Bind(2, row.metric_id).Bind(3, row.status);
  upsert.Bind(4, row.value_number).Bind(5, row.value_text).Bind(6, row.score);
  upsert.Bind(7, row.credits_used).Bind(8, row.outcome);
  return upsert.Run();
}

}  // namespace

bool IsSettled(absl::string_view status) {
  return status == "completed" || status == "failed" || status == "skipped";
}

absl::Status WritePlannedMetrics(db::Connection& c, int64_t call_id,
                                 const std::vector<int64_t>& metric_ids,
                                 const std::vector<int64_t>& credit_costs) {
  if (metric_ids.empty()) return absl::OkStatus();
  // One statement for all of them: on PostgreSQL a row per round trip would cost the ingest
  // path a dozen trips.
  std::string sql =
      "INSERT INTO call_metrics (call_id, metric_id, credit_cost, status, plan_order) VALUES ";
  for (size_t i = 0; i < metric_ids.size(); ++i) {
    absl::StrAppend(&sql, i == 0 ? "" : ", ", "(?, ?, ?, 'pending', ?)");
  }
  sql += " ON CONFLICT (call_id, metric_id) DO NOTHING";
  ASSIGN_OR_RETURN(auto insert, c.Prepare(sql));
  for (size_t i = 0; i < metric_ids.size(); ++i) {
    const int base = static_cast<int>(4 * i);
    insert.Bind(base + 1, call_id).Bind(base + 2, metric_ids[i]);
    insert.Bind(base + 3, i < credit_costs.size() ? credit_costs[i] : int64_t{0});
    insert.Bind(base + 4, static_cast<int64_t>(i + 1));
  }
  return insert.Run();
}

absl::StatusOr<std::vector<PlannedMetric>> ReadPlan(db::Connection& c, int64_t call_id) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT metric_id, credit_cost FROM call_metrics WHERE "
                                        "call_id = ? AND plan_order IS NOT NULL ORDER BY "
                                        "plan_order"));
  stmt.Bind(1, call_id);
  std::vector<PlannedMetric> plan;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return plan;
    plan.push_back({stmt.Int64(0), stmt.Int64(1)});
  }
}

absl::StatusOr<std::vector<int64_t>> UnusedPlannedMetrics(db::Connection& c, int64_t call_id) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT metric_id FROM call_metrics WHERE call_id = ? "
                                        "AND plan_order IS NOT NULL AND credits_used < "
                                        "credit_cost ORDER BY plan_order"));
  stmt.Bind(1, call_id);
  std::vector<int64_t> ids;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return ids;
    ids.push_back(stmt.Int64(0));
  }
}

absl::Status WriteCallResults(db::Connection& c, int64_t call_id,
                              const std::vector<v1::StandardMetricResult>& standard,
                              const std::vector<v1::MetricResult>& custom) {
  for (const auto& r : standard) RETURN_IF_ERROR(UpsertMetricRow(c, call_id, MetricRowOf(r)));
  for (const auto& r : custom) RETURN_IF_ERROR(UpsertMetricRow(c, call_id, MetricRowOf(r)));

  const CallFigures f = ExtractCallFigures(standard);
  ASSIGN_OR_RETURN(auto clear_bins, c.Prepare("DELETE FROM call_latency_bins WHERE call_id = ?"));
  clear_bins.Bind(1, call_id);
  RETURN_IF_ERROR(clear_bins.Run());
  ASSIGN_OR_RETURN(auto clear, c.Prepare("DELETE FROM call_figures WHERE call_id = ?"));
  clear.Bind(1, call_id);
  RETURN_IF_ERROR(clear.Run());
  if (!f.Any()) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      auto figures,
      c.Prepare("INSERT INTO call_figures (call_id, latency_turns, latency_mean_ms, "
                "latency_p50_ms, latency_p95_ms, latency_max_ms, ai_interruptions, "
                "user_interruptions, silences, silence_total_ms, talk_ratio, ai_wpm, user_wpm) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  figures.Bind(1, call_id).Bind(2, f.latency_turns).Bind(3, f.latency_mean_ms);
  figures.Bind(4, f.latency_p50_ms).Bind(5, f.latency_p95_ms).Bind(6, f.latency_max_ms);
  figures.Bind(7, f.ai_interruptions).Bind(8, f.user_interruptions).Bind(9, f.silences);
  figures.Bind(10, f.silence_total_ms).Bind(11, f.talk_ratio).Bind(12, f.ai_wpm);
  figures.Bind(13, f.user_wpm);
  RETURN_IF_ERROR(figures.Run());
  for (const auto& [bin, turns] : f.latency_bins) {
    ASSIGN_OR_RETURN(auto insert, c.Prepare("INSERT INTO call_latency_bins (call_id, bin, turns) "
                                            "VALUES (?, ?, ?)"));
    insert.Bind(1, call_id).Bind(2, static_cast<int64_t>(bin)).Bind(3, turns);
    RETURN_IF_ERROR(insert.Run());
  }
  return absl::OkStatus();
}

absl::Status SettlePendingMetrics(db::Connection& c, int64_t call_id, absl::string_view status) {
  ASSIGN_OR_RETURN(auto settle, c.Prepare("UPDATE call_metrics SET status = ?, outcome = ? "
                                          "WHERE call_id = ? AND status = 'pending'"));
  settle.Bind(1, status).Bind(2, status).Bind(3, call_id);
  return settle.Run();
}

absl::Status ApplyToAgentTotals(db::Connection& c, int64_t call_id, int sign) {
  ASSIGN_OR_RETURN(auto call, c.Prepare("SELECT agent_id, call_time, analysis_status, "
                                        "credits_used, query_rows FROM calls WHERE id = ?"));
  call.Bind(1, call_id);
  ASSIGN_OR_RETURN(bool found, call.Step());
  // A call from before the queryable rows counts once BackfillQueryRows has reached it.
  if (!found || call.IsNull(1) || call.Int64(4) == 0) return absl::OkStatus();
  const std::string status = call.Text(2);
  if (!IsSettled(status)) return absl::OkStatus();
  const int64_t agent_id = call.Int64(0);
  const int64_t hour = FloorDiv(call.Int64(1), 3600);
  const int64_t credits = call.Int64(3);

  ASSIGN_OR_RETURN(auto figures,
                   c.Prepare("SELECT latency_turns, latency_mean_ms, ai_interruptions, "
                             "user_interruptions, silences, talk_ratio FROM call_figures "
                             "WHERE call_id = ?"));
  figures.Bind(1, call_id);
  ASSIGN_OR_RETURN(bool has_figures, figures.Step());
  int64_t latency_turns = 0, ai = 0, user = 0, silences = 0, talk_calls = 0;
  double latency_sum = 0, talk_sum = 0;
  if (has_figures) {
    latency_turns = figures.Int64(0);
    latency_sum = figures.OptionalDouble(1).value_or(0) * static_cast<double>(latency_turns);
    ai = figures.OptionalInt64(2).value_or(0);
    user = figures.OptionalInt64(3).value_or(0);
    silences = figures.OptionalInt64(4).value_or(0);
    if (std::optional<double> talk = figures.OptionalDouble(5)) {
      talk_calls = 1;
      talk_sum = *talk;
    }
  }
  ASSIGN_OR_RETURN(
      auto totals,
      c.Prepare(
          "INSERT INTO agent_hourly_calls (agent_id, hour, completed, failed, skipped, "
          "credits, latency_turns, latency_sum_ms, ai_interruptions, user_interruptions, "
          "silences, talk_ratio_calls, talk_ratio_sum) VALUES "
          "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id, hour) DO UPDATE SET "
          "completed = agent_hourly_calls.completed + excluded.completed, "
          "failed = agent_hourly_calls.failed + excluded.failed, "
          "skipped = agent_hourly_calls.skipped + excluded.skipped, "
          "credits = agent_hourly_calls.credits + excluded.credits, "
          "latency_turns = agent_hourly_calls.latency_turns + excluded.latency_turns, "
          "latency_sum_ms = agent_hourly_calls.latency_sum_ms + excluded.latency_sum_ms, "
          "ai_interruptions = agent_hourly_calls.ai_interruptions + "
          "excluded.ai_interruptions, "
          "user_interruptions = agent_hourly_calls.user_interruptions + "
          "excluded.user_interruptions, "
          "silences = agent_hourly_calls.silences + excluded.silences, "
          "talk_ratio_calls = agent_hourly_calls.talk_ratio_calls + "
          "excluded.talk_ratio_calls, "
          "talk_ratio_sum = agent_hourly_calls.talk_ratio_sum + excluded.talk_ratio_sum"));
  totals.Bind(1, agent_id).Bind(2, hour);
  totals.Bind(3, int64_t{status == "completed" ? sign : 0});
  totals.Bind(4, int64_t{status == "failed" ? sign : 0});
  totals.Bind(5, int64_t{status == "skipped" ? sign : 0});
  totals.Bind(6, sign * credits).Bind(7, sign * latency_turns).Bind(8, sign * latency_sum);
  totals.Bind(9, sign * ai).Bind(10, sign * user).Bind(11, sign * silences);
  totals.Bind(12, sign * talk_calls).Bind(13, sign * talk_sum);
  RETURN_IF_ERROR(totals.Run());

  ASSIGN_OR_RETURN(auto bins,
                   c.Prepare("SELECT bin, turns FROM call_latency_bins WHERE call_id = ?"));
  bins.Bind(1, call_id);
  std::vector<std::pair<int64_t, int64_t>> histogram;
  while (true) {
    ASSIGN_OR_RETURN(bool row, bins.Step());
    if (!row) break;
    histogram.emplace_back(bins.Int64(0), bins.Int64(1));
  }
  for (const auto& [bin, turns] : histogram) {
    ASSIGN_OR_RETURN(
        auto add, c.Prepare("INSERT INTO agent_hourly_latency (agent_id, hour, bin, turns) "
                            "VALUES (?, ?, ?, ?) ON CONFLICT (agent_id, hour, bin) DO UPDATE SET "
                            "turns = agent_hourly_latency.turns + excluded.turns"));
    add.Bind(1, agent_id).Bind(2, hour).Bind(3, bin).Bind(4, sign * turns);
    RETURN_IF_ERROR(add.Run());
  }

  ASSIGN_OR_RETURN(auto outcomes,
                   c.Prepare("SELECT metric_id, outcome FROM call_metrics WHERE call_id = ? "
                             "AND metric_id >= ? AND outcome IS NOT NULL"));
  outcomes.Bind(1, call_id).Bind(2, kFirstCustomMetricId);
  std::vector<std::pair<int64_t, std::string>> counted;
  while (true) {
    ASSIGN_OR_RETURN(bool row, outcomes.Step());
    if (!row) break;
    counted.emplace_back(outcomes.Int64(0), outcomes.Text(1));
  }
  for (const auto& [metric_id, outcome] : counted) {
    ASSIGN_OR_RETURN(
        auto add,
        c.Prepare("INSERT INTO agent_hourly_outcomes (agent_id, hour, metric_id, outcome, calls) "
                  "VALUES (?, ?, ?, ?, ?) ON CONFLICT (agent_id, hour, metric_id, outcome) DO "
                  "UPDATE SET calls = agent_hourly_outcomes.calls + excluded.calls"));
    add.Bind(1, agent_id).Bind(2, hour).Bind(3, metric_id).Bind(4, outcome);
    add.Bind(5, int64_t{sign});
    RETURN_IF_ERROR(add.Run());
  }
  return absl::OkStatus();
}

absl::Status RebuildAgentTotals(db::Connection& c) {
  for (const char* table :
       {"agent_hourly_calls", "agent_hourly_latency", "agent_hourly_outcomes"}) {
    RETURN_IF_ERROR(c.Exec(absl::StrCat("DELETE FROM ", table)));
  }
  // The calls that count: ended, and with their rows written (as in ApplyToAgentTotals). Hours
  // are call_time / 3600, exact for times after 1970.
  constexpr absl::string_view kCounted =
      "c.analysis_status IN ('completed', 'failed', 'skipped') AND c.query_rows = 1 AND "
      "c.call_time IS NOT NULL";
  RETURN_IF_ERROR(c.Exec(absl::StrCat(
      "INSERT INTO agent_hourly_calls (agent_id, hour, completed, failed, skipped, credits, "
      "latency_turns, latency_sum_ms, ai_interruptions, user_interruptions, silences, "
      "talk_ratio_calls, talk_ratio_sum) SELECT c.agent_id, c.call_time / 3600, "
      "SUM(CASE WHEN c.analysis_status = 'completed' THEN 1 ELSE 0 END), "
      "SUM(CASE WHEN c.analysis_status = 'failed' THEN 1 ELSE 0 END), "
      "SUM(CASE WHEN c.analysis_status = 'skipped' THEN 1 ELSE 0 END), SUM(c.credits_used), "
      "COALESCE(SUM(f.latency_turns), 0), "
      "COALESCE(SUM(COALESCE(f.latency_mean_ms, 0) * f.latency_turns), 0), "
      "COALESCE(SUM(f.ai_interruptions), 0), COALESCE(SUM(f.user_interruptions), 0), "
      "COALESCE(SUM(f.silences), 0), SUM(CASE WHEN f.talk_ratio IS NULL THEN 0 ELSE 1 END), "
      "COALESCE(SUM(f.talk_ratio), 0) FROM calls c LEFT JOIN call_figures f ON f.call_id = c.id "
      "WHERE ",
      kCounted, " GROUP BY c.agent_id, c.call_time / 3600")));
  RETURN_IF_ERROR(c.Exec(absl::StrCat(
      "INSERT INTO agent_hourly_latency (agent_id, hour, bin, turns) SELECT c.agent_id, "
      "c.call_time / 3600, b.bin, SUM(b.turns) FROM call_latency_bins b JOIN calls c ON "
      "c.id = b.call_id WHERE ",
      kCounted, " GROUP BY c.agent_id, c.call_time / 3600, b.bin")));
  return c.Exec(absl::StrCat(
      "INSERT INTO agent_hourly_outcomes (agent_id, hour, metric_id, outcome, calls) SELECT "
      "c.agent_id, c.call_time / 3600, m.metric_id, m.outcome, COUNT(*) FROM call_metrics m "
      "JOIN calls c ON c.id = m.call_id WHERE ",
      kCounted, " AND m.metric_id >= ", kFirstCustomMetricId,
      " AND m.outcome IS NOT NULL GROUP BY c.agent_id, c.call_time / 3600, m.metric_id, "
      "m.outcome"));
}

}  // namespace calleval::calls

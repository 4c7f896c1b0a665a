#include "services/calls/stats_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errors.h"
#include "common/standard_metrics.h"
#include "common/status_macros.h"
#include "services/calls/call_figures.h"

namespace calleval::calls {
namespace {

constexpr int64_t kHour = 3600;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kWeek = 7 * kDay;
// Weeks start on Monday: the first Monday after the epoch (a Thursday) is 1970-01-05.
constexpr int64_t kFirstMonday = 4 * kDay;

// The start of the bucket holding `t`.
int64_t BucketStart(int64_t t, int64_t width) {
  const int64_t origin = width == kWeek ? kFirstMonday : 0;
  return FloorDiv(t - origin, width) * width + origin;
}

// What a bucket adds up, before it becomes a StatsBucket.
struct Sums {
  v1::CallStatusCounts calls;
  int64_t credits = 0;
  int64_t latency_turns = 0;
  double latency_sum_ms = 0;
  LatencyHistogram latency;
  int64_t ai_interruptions = 0;
  int64_t user_interruptions = 0;
  int64_t silences = 0;
  int64_t talk_ratio_calls = 0;
  double talk_ratio_sum = 0;
  runs::RunCounts runs;
  std::map<std::pair<int64_t, std::string>, int64_t> outcomes;

  void AddStatus(absl::string_view status, int64_t n) {
    if (status == "pending") {
      calls.set_pending(calls.pending() + n);
    } else if (status == "processing") {
      calls.set_processing(calls.processing() + n);
    } else if (status == "computed") {
      calls.set_computed(calls.computed() + n);
    } else if (status == "completed") {
      calls.set_completed(calls.completed() + n);
    } else if (status == "failed") {
      calls.set_failed(calls.failed() + n);
    } else if (status == "skipped") {
      calls.set_skipped(calls.skipped() + n);
    }
  }

  void Merge(const Sums& o) {
    AddStatus("pending", o.calls.pending());
    AddStatus("processing", o.calls.processing());
    AddStatus("computed", o.calls.computed());
    AddStatus("completed", o.calls.completed());
    AddStatus("failed", o.calls.failed());
    AddStatus("skipped", o.calls.skipped());
    credits += o.credits;
    latency_turns += o.latency_turns;
    latency_sum_ms += o.latency_sum_ms;
    for (const auto& [bin, turns] : o.latency) latency[bin] += turns;
    ai_interruptions += o.ai_interruptions;
    user_interruptions += o.user_interruptions;
    silences += o.silences;
    talk_ratio_calls += o.talk_ratio_calls;
    talk_ratio_sum += o.talk_ratio_sum;
    runs.queued += o.runs.queued;
    runs.in_progress += o.runs.in_progress;
    runs.passed += o.runs.passed;
    runs.failed += o.runs.failed;
    runs.errored += o.runs.errored;
    runs.cancelled += o.runs.cancelled;
    for (const auto& [key, n] : o.outcomes) outcomes[key] += n;
  }

  v1::StatsBucket ToProto(int64_t start, int64_t end) const {
    v1::StatsBucket b;
    b.set_start(FormatTimestamp(absl::FromUnixSeconds(start)));
    b.set_end(FormatTimestamp(absl::FromUnixSeconds(end)));
    *b.mutable_calls() = calls;
    b.mutable_calls()->set_total(calls.pending() + calls.processing() + calls.computed() +
                                 calls.completed() + calls.failed() + calls.skipped());
    b.set_latency_turns(latency_turns);
    if (latency_turns > 0) {
      b.set_latency_mean_ms(latency_sum_ms / static_cast<double>(latency_turns));
      if (auto p50 = HistogramPercentile(latency, 50)) b.set_latency_p50_ms(*p50);
      if (auto p95 = HistogramPercentile(latency, 95)) b.set_latency_p95_ms(*p95);
    }
    b.set_ai_interruptions(ai_interruptions);
    b.set_user_interruptions(user_interruptions);
    b.set_silences(silences);
    if (talk_ratio_calls > 0) {
      b.set_talk_ratio_mean(talk_ratio_sum / static_cast<double>(talk_ratio_calls));
    }
    b.set_credits_used(credits);
    v1::RunOutcomeCounts* r = b.mutable_runs();
    r->set_queued(runs.queued);
    r->set_in_progress(runs.in_progress);
    r->set_passed(runs.passed);
    r->set_failed(runs.failed);
    r->set_errored(runs.errored);
    r->set_cancelled(runs.cancelled);
    r->set_total(runs.queued + runs.in_progress + runs.passed + runs.failed + runs.errored +
                 runs.cancelled);
    if (runs.passed + runs.failed > 0) {
      r->set_pass_rate(static_cast<double>(runs.passed) /
                       static_cast<double>(runs.passed + runs.failed));
    }
    for (const auto& [key, n] : outcomes) {
      if (n <= 0) continue;
      v1::MetricOutcomeCount* o = b.add_metric_outcomes();
      o->set_metric_id(key.first);
      o->set_outcome(key.second);
      o->set_count(n);
    }
    return b;
  }
};

using BucketSums = std::map<int64_t, Sums>;

// Runs `sql`, whose first column is the bucket index, and hands each row to `add`.
template <typename Add>
absl::Status ForEachRow(db::Connection& c, const std::string& sql,
                        const std::vector<int64_t>& params, const Add& add) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
  for (size_t i = 0; i < params.size(); ++i) stmt.Bind(static_cast<int>(i + 1), params[i]);
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    add(stmt);
  }
}

v1::Stats Render(const StatsRange& range, BucketSums& sums) {
  v1::Stats stats;
  stats.set_from(FormatTimestamp(absl::FromUnixSeconds(range.from)));
  stats.set_to(FormatTimestamp(absl::FromUnixSeconds(range.to)));
  stats.set_bucket(range.bucket);
  Sums total;
  for (int64_t i = 0; i < range.buckets(); ++i) {
    const int64_t start = range.from + i * range.width;
    auto it = sums.find(i);
    const Sums empty;
    const Sums& s = it == sums.end() ? empty : it->second;
    *stats.add_buckets() = s.ToProto(start, start + range.width);
    total.Merge(s);
  }
  *stats.mutable_total() = total.ToProto(range.from, range.to);
  return stats;
}

// Adds the runs of an agent or a scenario (whichever is set) to the buckets of `range`.
absl::Status AddRuns(const RunCounter& runs, int64_t workspace_id, std::optional<int64_t> agent_id,
                     std::optional<int64_t> scenario_id, const StatsRange& range,
                     BucketSums* sums) {
  if (!runs) return absl::OkStatus();
  runs::RunCountQuery query;
  query.workspace_id = workspace_id;
  query.agent_id = agent_id;
  query.scenario_id = scenario_id;
  query.from = range.from;
  query.to = range.to;
  query.width = range.width;
  ASSIGN_OR_RETURN(auto counted, runs(query));
  for (const auto& [bucket, counts] : counted) {
    Sums one;
    one.runs = counts;
    (*sums)[bucket].Merge(one);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StatsRange> ParseStatsRange(const std::optional<std::string>& from,
                                           const std::optional<std::string>& to,
                                           const std::optional<std::string>& bucket,
                                           absl::Time now) {
  StatsRange range;
  range.bucket = bucket.value_or("day");
  int64_t default_buckets = 30;
  if (range.bucket == "hour") {
    range.width = kHour;
  } else if (range.bucket == "day") {
    range.width = kDay;
  } else if (range.bucket == "week") {
    range.width = kWeek;
    default_buckets = 12;
  } else {
    return ValidationError("validation_failed", "bucket must be hour, day or week",
                           {{"bucket", "must be hour, day or week"}});
  }
  const auto parse = [](const std::optional<std::string>& text,
                        const char* field) -> absl::StatusOr<std::optional<int64_t>> {
    if (!text.has_value()) return std::optional<int64_t>();
    std::optional<absl::Time> t = ParseTimestamp(*text);
    if (!t.has_value()) {
      return ValidationError("validation_failed",
                             absl::StrCat(field, " must be an RFC 3339 date-time"),
                             {{field, "must be an RFC 3339 date-time"}});
    }
    return std::optional<int64_t>(absl::ToUnixSeconds(*t));
  };
  ASSIGN_OR_RETURN(std::optional<int64_t> from_s, parse(from, "from"));
  ASSIGN_OR_RETURN(std::optional<int64_t> to_s, parse(to, "to"));
  const int64_t end = to_s.value_or(absl::ToUnixSeconds(now));
  // `to` on to the end of its bucket (a `to` on an edge stays there).
  range.to = BucketStart(end, range.width);
  if (range.to < end || !to_s.has_value()) range.to += range.width;
  range.from = from_s.has_value() ? BucketStart(*from_s, range.width)
                                  : range.to - default_buckets * range.width;
  if (from_s.has_value() && to_s.has_value() && *from_s >= *to_s) {
    return ValidationError("validation_failed", "from must be before to",
                           {{"from", "must be before to"}});
  }
  if (range.buckets() > kMaxStatsBuckets) {
    return ValidationError(
        "validation_failed",
        absl::StrCat("the range holds ", range.buckets(), " buckets; at most ", kMaxStatsBuckets),
        {{"from", absl::StrCat("at most ", kMaxStatsBuckets, " ", range.bucket, "s before to")}});
  }
  return range;
}

absl::StatusOr<v1::Stats> StatsStore::AgentStats(int64_t workspace_id, int64_t agent_id,
                                                 const StatsRange& range) {
  // The agent is the resource the route names: 404 when it is not the workspace's (the lookup
  // answers ingest's 422 agent_not_found).
  if (absl::Status found = agents_(workspace_id, agent_id).status(); !found.ok()) {
    if (ErrorInfoOf(found).code() == "agent_not_found") {
      return NotFoundError(absl::StrCat("agent ", agent_id));
    }
    return found;
  }
  BucketSums sums;
  const int64_t first_hour = FloorDiv(range.from, kHour);
  const int64_t end_hour = FloorDiv(range.to, kHour);
  const std::vector<int64_t> hourly = {range.from, range.width, agent_id, first_hour, end_hour};
  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    // Settled calls: the agent's hourly totals.
    RETURN_IF_ERROR(ForEachRow(
        c,
        "SELECT (hour * 3600 - ?1) / ?2, CAST(SUM(completed) AS BIGINT), "
        "CAST(SUM(failed) AS BIGINT), CAST(SUM(skipped) AS BIGINT), CAST(SUM(credits) AS BIGINT), "
        "CAST(SUM(latency_turns) AS BIGINT), CAST(SUM(latency_sum_ms) AS DOUBLE PRECISION), "
        "CAST(SUM(ai_interruptions) AS BIGINT), CAST(SUM(user_interruptions) AS BIGINT), "
        "CAST(SUM(silences) AS BIGINT), CAST(SUM(talk_ratio_calls) AS BIGINT), "
        "CAST(SUM(talk_ratio_sum) AS DOUBLE PRECISION) FROM agent_hourly_calls "
        "WHERE agent_id = ?3 AND hour >= ?4 AND hour < ?5 GROUP BY 1",
        hourly, [&](db::Statement& row) {
          Sums& s = sums[row.Int64(0)];
          s.AddStatus("completed", row.Int64(1));
          s.AddStatus("failed", row.Int64(2));
          s.AddStatus("skipped", row.Int64(3));
          s.credits += row.Int64(4);
          s.latency_turns += row.Int64(5);
          s.latency_sum_ms += row.Double(6);
          s.ai_interruptions += row.Int64(7);
          s.user_interruptions += row.Int64(8);
          s.silences += row.Int64(9);
          s.talk_ratio_calls += row.Int64(10);
          s.talk_ratio_sum += row.Double(11);
        }));
    RETURN_IF_ERROR(ForEachRow(
        c,
        "SELECT (hour * 3600 - ?1) / ?2, bin, CAST(SUM(turns) AS BIGINT) FROM "
        "agent_hourly_latency WHERE agent_id = ?3 AND hour >= ?4 AND hour < ?5 GROUP BY 1, 2",
        hourly, [&](db::Statement& row) {
          sums[row.Int64(0)].latency[static_cast<int>(row.Int64(1))] += row.Int64(2);
        }));
    RETURN_IF_ERROR(ForEachRow(
        c,
        "SELECT (hour * 3600 - ?1) / ?2, metric_id, outcome, CAST(SUM(calls) AS BIGINT) FROM "
        "agent_hourly_outcomes WHERE agent_id = ?3 AND hour >= ?4 AND hour < ?5 "
        "GROUP BY 1, 2, 3",
        hourly, [&](db::Statement& row) {
          sums[row.Int64(0)].outcomes[{row.Int64(1), row.Text(2)}] += row.Int64(3);
        }));
    // Calls not settled yet, counted live (few, and the partial index holds only them).
    return ForEachRow(
        c,
        "SELECT (call_time - ?1) / ?2, analysis_status, COUNT(*) FROM calls WHERE "
        "agent_id = ?3 AND analysis_status IN ('pending', 'processing', 'computed') AND "
        "call_time >= ?1 AND call_time < ?4 AND workspace_id = ?5 GROUP BY 1, 2",
        {range.from, range.width, agent_id, range.to, workspace_id},
        [&](db::Statement& row) { sums[row.Int64(0)].AddStatus(row.Text(1), row.Int64(2)); });
  }));
  RETURN_IF_ERROR(AddRuns(runs_, workspace_id, agent_id, std::nullopt, range, &sums));
  v1::Stats stats = Render(range, sums);
  stats.set_agent_id(agent_id);
  return stats;
}

absl::StatusOr<v1::Stats> StatsStore::ScenarioStats(int64_t workspace_id, int64_t scenario_id,
                                                    const StatsRange& range) {
  ASSIGN_OR_RETURN(int64_t agent_id, scenarios_(workspace_id, scenario_id));
  BucketSums sums;
  const std::vector<int64_t> params = {range.from, range.width, scenario_id, workspace_id,
                                       range.to};
  std::vector<int64_t> outcome_params = params;
  outcome_params.push_back(kFirstCustomMetricId);
  // The calls of the scenario's runs, settled ones only for the figures, as for an agent.
  constexpr absl::string_view kCallsOfScenario =
      "c.scenario_id = ?3 AND c.workspace_id = ?4 AND c.call_time >= ?1 AND c.call_time < ?5";
  constexpr absl::string_view kSettled =
      " AND c.analysis_status IN ('completed', 'failed', 'skipped')";
  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(
        ForEachRow(c,
                   absl::StrCat("SELECT (c.call_time - ?1) / ?2, c.analysis_status, COUNT(*), "
                                "CAST(SUM(c.credits_used) AS BIGINT) FROM calls c WHERE ",
                                kCallsOfScenario, " GROUP BY 1, 2"),
                   params, [&](db::Statement& row) {
                     Sums& s = sums[row.Int64(0)];
                     const std::string status = row.Text(1);
                     s.AddStatus(status, row.Int64(2));
                     if (status == "completed" || status == "failed" || status == "skipped") {
                       s.credits += row.Int64(3);
                     }
                   }));
    RETURN_IF_ERROR(ForEachRow(
        c,
        absl::StrCat(
            "SELECT (c.call_time - ?1) / ?2, CAST(SUM(f.latency_turns) AS BIGINT), "
            "CAST(SUM(COALESCE(f.latency_mean_ms, 0) * f.latency_turns) AS DOUBLE PRECISION), "
            "CAST(SUM(COALESCE(f.ai_interruptions, 0)) AS BIGINT), "
            "CAST(SUM(COALESCE(f.user_interruptions, 0)) AS BIGINT), "
            "CAST(SUM(COALESCE(f.silences, 0)) AS BIGINT), "
            "CAST(SUM(CASE WHEN f.talk_ratio IS NULL THEN 0 ELSE 1 END) AS BIGINT), "
            "CAST(SUM(COALESCE(f.talk_ratio, 0)) AS DOUBLE PRECISION) "
            "FROM call_figures f JOIN calls c ON c.id = f.call_id WHERE ",
            kCallsOfScenario, kSettled, " GROUP BY 1"),
        params, [&](db::Statement& row) {
          Sums& s = sums[row.Int64(0)];
          s.latency_turns += row.Int64(1);
          s.latency_sum_ms += row.Double(2);
          s.ai_interruptions += row.Int64(3);
          s.user_interruptions += row.Int64(4);
          s.silences += row.Int64(5);
          s.talk_ratio_calls += row.Int64(6);
          s.talk_ratio_sum += row.Double(7);
        }));
    RETURN_IF_ERROR(ForEachRow(
        c,
        absl::StrCat("SELECT (c.call_time - ?1) / ?2, b.bin, CAST(SUM(b.turns) AS BIGINT) FROM "
                     "call_latency_bins b JOIN calls c ON c.id = b.call_id WHERE ",
                     kCallsOfScenario, kSettled, " GROUP BY 1, 2"),
        params, [&](db::Statement& row) {
          sums[row.Int64(0)].latency[static_cast<int>(row.Int64(1))] += row.Int64(2);
        }));
    return ForEachRow(
        c,
        absl::StrCat("SELECT (c.call_time - ?1) / ?2, m.metric_id, m.outcome, COUNT(*) FROM "
                     "call_metrics m JOIN calls c ON c.id = m.call_id WHERE ",
                     kCallsOfScenario, kSettled,
                     " AND m.metric_id >= ?6 AND m.outcome IS NOT NULL GROUP BY 1, 2, 3"),
        outcome_params, [&](db::Statement& row) {
          sums[row.Int64(0)].outcomes[{row.Int64(1), row.Text(2)}] += row.Int64(3);
        });
  }));
  RETURN_IF_ERROR(AddRuns(runs_, workspace_id, std::nullopt, scenario_id, range, &sums));
  v1::Stats stats = Render(range, sums);
  stats.set_agent_id(agent_id);
  stats.set_scenario_id(scenario_id);
  return stats;
}

}  // namespace calleval::calls

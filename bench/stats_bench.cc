// Stats over a million calls: loads an agent's calls straight into the query rows (as many as
// --calls, spread over --days ending now), builds the hourly totals with the same SQL the store
// keeps them by (RebuildAgentTotals), then times GET .../stats's store call for 30 daily, 168
// hourly and 12 weekly buckets.
//
//   stats_bench [--database-url URL] [--calls N] [--days D] [--repeats R]
//
// Without --database-url it makes a SQLite file in a temporary directory. For PostgreSQL give a
// fresh database, e.g. one made by tests/support's `test_postgres newdb DIR`.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/database.h"
#include "common/schema.h"
#include "common/status_macros.h"
#include "services/calls/query_rows.h"
#include "services/calls/stats_store.h"

namespace calleval {
namespace {

struct Flags {
  std::string database_url;
  int64_t calls = 1000000;
  int64_t days = 30;
  int repeats = 20;
};

// The calls as SQL makes them, no round trip per row: 1% still pending, 1 in 37 failed, the
// rest completed with 1-6 latency turns over two bins, a custom metric with three outcomes.
absl::Status Load(db::Database& db, const Flags& flags, int64_t now) {
  const int64_t span = flags.days * 86400;
  const int64_t start = now - span;
  const std::string series = absl::StrCat(
      "WITH RECURSIVE n(i) AS (SELECT CAST(1 AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < ",
      flags.calls, ") ");
  return db.Write([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(
        c.Exec("INSERT INTO workspaces (id, name, credit_balance, created_at) "
               "VALUES (1, 'bench', 0, 'x')"));
    RETURN_IF_ERROR(c.Exec(
        "INSERT INTO agents (id, workspace_id, name, agent_source, call_directions, "
        "max_call_duration_seconds, created_at, updated_at) VALUES (1, 1, 'bench', 'internal', "
        "'[\"inbound\"]', 600, 'x', 'x')"));
    RETURN_IF_ERROR(c.Exec(absl::StrCat(
        series,
        "INSERT INTO calls (id, workspace_id, agent_id, call_identifier, observation_type, "
        "call_direction, analysis_status, transcription_status, call_timestamp, created_at, "
        "updated_at, call_time, credits_used, query_rows) SELECT i, 1, 1, 'b-' || i, 'voice', "
        "'inbound', CASE WHEN i % 100 = 0 THEN 'pending' WHEN i % 37 = 0 THEN 'failed' ELSE "
        "'completed' END, 'completed', 'x', 'x', 'x', ",
        start, " + (i * ", span, ") / ", flags.calls, ", 13, 1 FROM n")));
    RETURN_IF_ERROR(c.Exec(
        "INSERT INTO call_figures (call_id, latency_turns, latency_mean_ms, latency_p50_ms, "
        "latency_p95_ms, latency_max_ms, ai_interruptions, user_interruptions, silences, "
        "silence_total_ms, talk_ratio, ai_wpm, user_wpm) SELECT id, 2 + id % 5, 700 + id % 900, "
        "700, 1500, 1600, id % 3, id % 2, id % 4, 0, 0.3 + (id % 40) / 100.0, 150, 140 "
        "FROM calls WHERE analysis_status = 'completed'"));
    RETURN_IF_ERROR(c.Exec(
        "INSERT INTO call_latency_bins (call_id, bin, turns) SELECT id, 40 + id % 60, 1 + id % 2 "
        "FROM calls WHERE analysis_status = 'completed'"));
    RETURN_IF_ERROR(
        c.Exec("INSERT INTO call_latency_bins (call_id, bin, turns) SELECT id, 100 + id % 80, "
               "1 + id % 4 FROM calls WHERE analysis_status = 'completed'"));
    RETURN_IF_ERROR(
        c.Exec("INSERT INTO call_metrics (call_id, metric_id, credit_cost, status, credits_used, "
               "outcome) SELECT id, 101, 2, 'completed', 2, CASE id % 3 WHEN 0 THEN "
               "'meets_expectations' WHEN 1 THEN 'requires_attention' ELSE 'false' END FROM calls "
               "WHERE analysis_status <> 'pending'"));
    return calls::RebuildAgentTotals(c);
  });
}

double Millis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

int Run(const Flags& flags) {
  std::string url = flags.database_url;
  std::string dir;
  if (url.empty()) {
    char tmpl[] = "/tmp/stats_bench_XXXXXX";
    dir = mkdtemp(tmpl);
    url = dir + "/calleval.db";
  }
  db::Database::Options options;
  options.statement_timeout = absl::Minutes(30);  // the load is one long transaction
  auto database = db::Database::Open(url, SchemaMigrations(), options);
  if (!database.ok()) {
    std::cerr << "stats_bench: " << database.status() << "\n";
    return 1;
  }
  db::Database& db = **database;
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  const auto load_start = std::chrono::steady_clock::now();
  if (absl::Status loaded = Load(db, flags, now); !loaded.ok()) {
    std::cerr << "stats_bench: loading: " << loaded << "\n";
    return 1;
  }
  std::printf("%s: %lld calls over %lld days loaded, totals built in %.1f s\n",
              db.backend() == db::Backend::kSqlite ? "sqlite" : "postgres",
              static_cast<long long>(flags.calls), static_cast<long long>(flags.days),
              Millis(std::chrono::steady_clock::now() - load_start) / 1000);

  calls::StatsStore stats(
      &db, [](int64_t, int64_t) -> absl::StatusOr<calls::AgentInfo> { return calls::AgentInfo{}; },
      nullptr, nullptr);
  for (const char* bucket : {"day", "hour", "week"}) {
    const std::optional<std::string> from =
        std::string(bucket) == "hour"
            ? std::optional<std::string>(FormatTimestamp(absl::FromUnixSeconds(now - 7 * 86400)))
            : std::nullopt;
    auto range =
        calls::ParseStatsRange(from, std::nullopt, std::string(bucket), absl::FromUnixSeconds(now));
    if (!range.ok()) {
      std::cerr << "stats_bench: " << range.status() << "\n";
      return 1;
    }
    std::vector<double> times;
    int64_t counted = 0;
    for (int i = 0; i < flags.repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto answer = stats.AgentStats(1, 1, *range);
      times.push_back(Millis(std::chrono::steady_clock::now() - t0));
      if (!answer.ok()) {
        std::cerr << "stats_bench: " << answer.status() << "\n";
        return 1;
      }
      counted = answer->total().calls().total();
    }
    std::sort(times.begin(), times.end());
    std::printf("  %3lld %s buckets over %lld calls: min %.1f ms, median %.1f ms, max %.1f ms\n",
                static_cast<long long>(range->buckets()), bucket, static_cast<long long>(counted),
                times.front(), times[times.size() / 2], times.back());
  }
  if (!dir.empty()) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace calleval

int main(int argc, char** argv) {
  calleval::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    bool ok = true;
    if (arg == "--database-url") {
      flags.database_url = value();
    } else if (arg == "--calls") {
      ok = absl::SimpleAtoi(value(), &flags.calls) && flags.calls > 0;
    } else if (arg == "--days") {
      ok = absl::SimpleAtoi(value(), &flags.days) && flags.days > 0;
    } else if (arg == "--repeats") {
      ok = absl::SimpleAtoi(value(), &flags.repeats) && flags.repeats > 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "usage: stats_bench [--database-url URL] [--calls N] [--days D] "
                   "[--repeats R]\n";
      return 2;
    }
  }
  return calleval::Run(flags);
}

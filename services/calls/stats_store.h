#pragma once

// Stats of an agent's or a scenario's calls and runs per time bucket (docs/api.md §5.7),
// computed by SQL: an agent's from the hourly totals kept as its calls settle
// (services/calls/query_rows.h) plus a live count of its calls not settled yet; a scenario's
// from the rows of its runs' calls. Runs are counted by their owner, through RunCounter.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.pb.h"
#include "common/database.h"
#include "services/calls/calls_store.h"
#include "services/runs/runs_store.h"

namespace calleval::calls {

// A validated range: [from, to) in Unix seconds, both on bucket edges, `width` seconds a bucket.
struct StatsRange {
  int64_t from = 0;
  int64_t to = 0;
  int64_t width = 86400;
  std::string bucket;  // hour | day | week

  int64_t buckets() const { return (to - from) / width; }
};

inline constexpr int64_t kMaxStatsBuckets = 1000;

// Reads from, to and bucket as the request gives them (docs/api.md §5.7): 422 for an unknown
// bucket, a malformed time, `from` not before `to`, or more than kMaxStatsBuckets buckets.
absl::StatusOr<StatsRange> ParseStatsRange(const std::optional<std::string>& from,
                                           const std::optional<std::string>& to,
                                           const std::optional<std::string>& bucket,
                                           absl::Time now);

// The runs of an agent or a scenario, counted by the runs store.
using RunCounter =
    std::function<absl::StatusOr<std::map<int64_t, runs::RunCounts>>(const runs::RunCountQuery&)>;
// The agent a scenario of the workspace belongs to; 404 scenario_not_found when it is not there.
using ScenarioAgentLookup =
    std::function<absl::StatusOr<int64_t>(int64_t workspace_id, int64_t scenario_id)>;

class StatsStore {
 public:
  StatsStore(db::Database* db, AgentLookup agents, ScenarioAgentLookup scenarios, RunCounter runs)
      : db_(db),
        agents_(std::move(agents)),
        scenarios_(std::move(scenarios)),
        runs_(std::move(runs)) {}

  absl::StatusOr<v1::Stats> AgentStats(int64_t workspace_id, int64_t agent_id,
                                       const StatsRange& range);
  absl::StatusOr<v1::Stats> ScenarioStats(int64_t workspace_id, int64_t scenario_id,
                                          const StatsRange& range);

 private:
  db::Database* db_;
  AgentLookup agents_;
  ScenarioAgentLookup scenarios_;
  RunCounter runs_;
};

}  // namespace calleval::calls

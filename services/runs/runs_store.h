#pragma once

// Runs and batch runs (docs/api.md §5) on SQLite: creation, reads, the batch summary, and the
// durable queue the runs role works from. A run is leased with a token and a short expiry that
// the worker's heartbeat renews; a worker that dies leaves the lease to expire and the run is
// handed out again, so no run stays in_progress forever; one leased `max_attempts` times without
// a report ends failed.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "calleval/v1/agents.pb.h"
#include "common/database.h"
#include "services/runs/scenario_directory.h"

namespace calleval::runs {

inline constexpr int kDefaultBatchConcurrency = 4;
inline constexpr int kMaxBatchConcurrency = 32;
inline constexpr int kMaxBatchScenarios = 500;
inline constexpr int kMaxBatchRepeat = 50;
// Scenarios times repeat.
inline constexpr int kMaxBatchRuns = 1000;

// A run leased to one worker.
struct RunJob {
  int64_t run_id = 0;
  std::string token;
  int attempts = 0;  // including this one
  int64_t workspace_id = 0;
  int64_t scenario_id = 0;
  int64_t agent_id = 0;
  std::string channel;
  std::optional<int64_t> call_id;  // set once the conversation was ingested
  // Not stored with the lease: the runs worker notes the agent's version label at the start.
  std::optional<std::string> agent_version;
  // Nor this: the platform's version of an external agent, as the platform answered the
  // request that made the run's call (Retell's agent_version), or as the run's call records it.
  std::optional<std::string> platform_version;
};

// How a run ended.
struct RunOutcome {
  std::string status;  // completed | failed
  std::optional<bool> passed;
  std::string end_reason;
  std::string error;
  // The agent's version label the worker read at the run's start; none: the agent has none.
  std::optional<std::string> agent_version = std::nullopt;
  // The platform's version of the agent the run's call reached; none: the platform told none.
  std::optional<std::string> platform_version = std::nullopt;
};

// Runs by outcome, for stats (services/calls/stats_store.h).
struct RunCounts {
  int64_t queued = 0;
  int64_t in_progress = 0;
  int64_t passed = 0;   // completed, and the call met the scenario's metrics
  int64_t failed = 0;   // completed, and it did not
  int64_t errored = 0;  // the run itself failed
  int64_t cancelled = 0;
};
// Which runs to count: an agent's or a scenario's, created in [from, to) (Unix seconds), in
// buckets of `width` seconds starting at `from` (bucket i covers from + i * width).
struct RunCountQuery {
  int64_t workspace_id = 0;
  std::optional<int64_t> agent_id;
  std::optional<int64_t> scenario_id;
  int64_t from = 0;
  int64_t to = 0;
  int64_t width = 86400;
};

// The counts and their query as the Agents service's internal CountRuns carries them, for the
// calls service's stats in another process.
v1::CountRunsRequest ToProto(const RunCountQuery& query);
RunCountQuery FromProto(const v1::CountRunsRequest& request);
v1::RunCountBuckets ToProto(const std::map<int64_t, RunCounts>& counts);
std::map<int64_t, RunCounts> FromProto(const v1::RunCountBuckets& buckets);

class RunsStore {
 public:
  // Scenarios and agents are the agents service's: the store asks `scenarios` about them.
  RunsStore(db::Database* db, ScenarioDirectory* scenarios) : db_(db), scenarios_(scenarios) {}

  // Runs counted per bucket by SQL (bucket index -> counts; empty buckets absent).
  absl::StatusOr<std::map<int64_t, RunCounts>> CountRuns(const RunCountQuery& query);

  // A queued run of the workspace's scenario (404 when it is not there). `channel`: phone, web
  // or text (else 422); default phone when the agent has a phone number, else web.
  absl::StatusOr<v1::Run> CreateRun(int64_t workspace_id, int64_t scenario_id,
                                    const std::optional<std::string>& channel);
  absl::StatusOr<v1::Run> GetRun(int64_t workspace_id, int64_t id);
  // Newest first, filtered by scenario and/or batch.
  absl::StatusOr<v1::ListRunsResponse> ListRuns(int64_t workspace_id,
                                                const v1::ListRunsRequest& request);
  // `repeat` queued runs per scenario (each must belong to `agent_id`), at most `concurrency`
  // of them in progress at once; `baseline_batch_run_id` must name a batch of the workspace
  // (else 422 batch_run_not_found).
  absl::StatusOr<v1::BatchRun> CreateBatch(int64_t workspace_id,
                                           const v1::CreateBatchRunRequest& request);
  absl::StatusOr<v1::BatchRun> GetBatch(int64_t workspace_id, int64_t id);
  // The batch's runs, oldest first (404 when the workspace has no such batch).
  absl::StatusOr<std::vector<v1::Run>> BatchRuns(int64_t workspace_id, int64_t id);

  // The queue. Oldest queued run whose batch has room, or one whose lease expired. The token
  // carries `holder` (common/lease_heartbeat.h LeaseToken), for ReleaseLeasesOf.
  absl::StatusOr<std::optional<RunJob>> Lease(absl::Duration lease, int max_attempts,
                                              absl::string_view holder = "");
  // Remembers the call the run's conversation became, so a retried lease does not ingest twice.
  absl::Status SetCall(int64_t run_id, absl::string_view token, int64_t call_id);
  // Extends the lease while the run is still working (the workers' heartbeat);
  // kFailedPrecondition when the lease is no longer held.
  absl::Status Renew(int64_t run_id, absl::string_view token, absl::Duration lease);
  absl::Status Finish(int64_t run_id, absl::string_view token, const RunOutcome& outcome);
  // Gives the lease back untried (the worker is stopping): the attempt does not count.
  absl::Status Release(int64_t run_id, absl::string_view token);
  // A runs role restarting gives back every run lease whose token carries `holder` (its
  // previous life's): they expire now and the runs resume at once (the attempt counts).
  // Answers how many were given back.
  absl::StatusOr<int> ReleaseLeasesOf(absl::string_view holder);

  // Runs queued and not yet taken by a worker (a batch's runs waiting for room included), for
  // the operators' queue-depth gauge.
  absl::StatusOr<int64_t> CountQueued();

 private:
  db::Database* db_;
  ScenarioDirectory* scenarios_;
};

}  // namespace calleval::runs

#pragma once

// Scenarios (docs/api.md §5): a simulated caller (persona, goal, or an exact caller_script) to run
// against one agent, with the metrics that judge the run. Every function takes the workspace
// the request resolved; a scenario of another workspace is not found.

#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "calleval/v1/agents.pb.h"
#include "common/database.h"
#include "services/agents/metric_directory.h"

namespace calleval::agents {

// Limits of scenarios (documented in docs/api.md §5).
inline constexpr int kDefaultMaxTurns = 20;
inline constexpr int kMaxTurns = 200;
inline constexpr int kMaxScenarioTextLength = 10000;  // persona, goal, expected_outcome
inline constexpr int kMaxCallerScriptLines = 200;
inline constexpr int kMaxCallerLineLength = 2000;

// Who a scenario calls: its agent, and whether that agent has a phone number.
struct ScenarioCallee {
  int64_t agent_id = 0;
  bool agent_has_phone = false;
};

class ScenariosStore {
 public:
  // Metrics are the metrics service's: the store asks `metrics` whether the custom metric ids
  // a scenario names exist, before its own transaction.
  ScenariosStore(db::Database* db, MetricDirectory* metrics) : db_(db), metrics_(metrics) {}

  // Validates and stores a scenario: agent_id names an agent of the workspace (else 422
  // agent_not_found), name is required, a caller needs a script or a goal, every metric id is
  // a standard metric or a custom metric of the workspace (else 422 metric_not_found).
  // `source_call_id`: the call the scenario replays (POST /api/v1/calls/{id}/scenario).
  absl::StatusOr<v1::Scenario> Create(int64_t workspace_id, const v1::ScenarioFields& fields,
                                      std::optional<int64_t> source_call_id = std::nullopt);
  absl::StatusOr<v1::Scenario> Get(int64_t workspace_id, int64_t id);
  // PATCH: the sent keys change (null clears a nullable field or restores a default) and the
  // merged scenario is validated as on create.
  absl::StatusOr<v1::Scenario> Update(int64_t workspace_id, int64_t id,
                                      const v1::ScenarioFields& patch);
  // Deletes the scenario; the agents service then tells the metrics service, which owns the
  // metric links to it (services/agents/deletion_listener.h).
  absl::Status Delete(int64_t workspace_id, int64_t id);
  // Of `ids`, those that name a scenario of the workspace (for services that link to them).
  absl::StatusOr<absl::flat_hash_set<int64_t>> Existing(int64_t workspace_id,
                                                        absl::Span<const int64_t> ids);
  // Of `ids`, those that name a scenario of the workspace, each with its callee (for the runs
  // store, which queues runs of them; services/runs/scenario_directory.h).
  absl::StatusOr<absl::flat_hash_map<int64_t, ScenarioCallee>> Callees(
      int64_t workspace_id, absl::Span<const int64_t> ids);
  // Newest first, optionally of one agent; page is 1-based, per_page 1..100 (else 422).
  absl::StatusOr<v1::ListScenariosResponse> List(int64_t workspace_id,
                                                 const v1::ListScenariosRequest& request);

 private:
  db::Database* db_;
  MetricDirectory* metrics_;
};

}  // namespace calleval::agents

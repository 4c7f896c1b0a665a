#pragma once

// The Agents service's methods: each RPC once, with where it runs and who may call it
// (common/method_table.h). gRPC and the edge both serve this table: point reads inline, the
// rest on the pool.

#include <optional>

#include "common/method_table.h"
#include "services/agents/agents_service.h"

namespace calleval::agents {

// PATCH names its workspace in the query's client_id; one in the body counts when the query has
// none.
inline std::optional<int64_t> ClientIdOfUpdate(const v1::UpdateAgentRequest& request) {
  if (request.has_client_id()) return request.client_id();
  if (request.agent().has_client_id()) return request.agent().client_id();
  return std::nullopt;
}
inline std::optional<int64_t> ClientIdOfScenarioUpdate(const v1::UpdateScenarioRequest& request) {
  if (request.has_client_id()) return request.client_id();
  if (request.scenario().has_client_id()) return request.scenario().client_id();
  return std::nullopt;
}

inline constexpr MethodEntry<AgentsService> kAgentsMethods[] = {
    Unary<&AgentsService::CreateAgent>("CreateAgent", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::GetAgent>("GetAgent", Execution::kPointRead, Access::kWorkspace),
    Unary<&AgentsService::UpdateAgent, &ClientIdOfUpdate>("UpdateAgent", Execution::kPool,
                                                          Access::kWorkspace),
    Unary<&AgentsService::DeleteAgent>("DeleteAgent", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::ListAgents>("ListAgents", Execution::kPool, Access::kWorkspace),
    // A dozen rows; any valid key reads them (the request names no workspace).
    Unary<&AgentsService::ListLanguages>("ListLanguages", Execution::kPointRead,
                                         Access::kWorkspace),
    Unary<&AgentsService::CreateScenario>("CreateScenario", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::GetScenario>("GetScenario", Execution::kPointRead, Access::kWorkspace),
    Unary<&AgentsService::UpdateScenario, &ClientIdOfScenarioUpdate>(
        "UpdateScenario", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::DeleteScenario>("DeleteScenario", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::ListScenarios>("ListScenarios", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::ReplayCall>("ReplayCall", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::RunScenario>("RunScenario", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::GetRun>("GetRun", Execution::kPointRead, Access::kWorkspace),
    Unary<&AgentsService::ListRuns>("ListRuns", Execution::kPool, Access::kWorkspace),
    Unary<&AgentsService::CreateBatchRun>("CreateBatchRun", Execution::kPool, Access::kWorkspace),
    // Counts the batch's runs.
    Unary<&AgentsService::GetBatchRun>("GetBatchRun", Execution::kPool, Access::kWorkspace),
    // Reads both batches' runs and their calls' figures, and computes the statistics.
    Unary<&AgentsService::GetBatchRunComparison>("GetBatchRunComparison", Execution::kPool,
                                                 Access::kWorkspace),
    Unary<&AgentsService::ListIntegrations>("ListIntegrations", Execution::kPool,
                                            Access::kWorkspace),
    Unary<&AgentsService::GetIntegration>("GetIntegration", Execution::kPointRead,
                                          Access::kWorkspace),
    Unary<&AgentsService::ReplaceIntegration>("ReplaceIntegration", Execution::kPool,
                                              Access::kWorkspace),
    Unary<&AgentsService::UpdateIntegration>("UpdateIntegration", Execution::kPool,
                                             Access::kWorkspace),
    Unary<&AgentsService::DeleteIntegration>("DeleteIntegration", Execution::kPool,
                                             Access::kWorkspace),
    // Internal: the agents and scenarios tables, asked by metrics and runs in other processes.
    Unary<&AgentsService::ExistingAgents>("ExistingAgents", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::ExistingScenarios>("ExistingScenarios", Execution::kPool,
                                             Access::kInternal),
    Unary<&AgentsService::GetDisabledMetrics>("GetDisabledMetrics", Execution::kPool,
                                              Access::kInternal),
    Unary<&AgentsService::ReplaceDisabledMetrics>("ReplaceDisabledMetrics", Execution::kPool,
                                                  Access::kInternal),
    Unary<&AgentsService::GetScenarioAgents>("GetScenarioAgents", Execution::kPool,
                                             Access::kInternal),
    Unary<&AgentsService::GetAgentPhone>("GetAgentPhone", Execution::kPool, Access::kInternal),
    // Asked by calls on every ingest: a point read, answered inline.
    Unary<&AgentsService::GetCallAgent>("GetCallAgent", Execution::kPointRead, Access::kInternal),
    Unary<&AgentsService::CountRuns>("CountRuns", Execution::kPool, Access::kInternal),
    // Internal: what the runs workers in other processes read of a run's scenario and agent;
    // the web channel's credentials travel on no other method.
    Unary<&AgentsService::GetRunScenario>("GetRunScenario", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::GetRunAgent>("GetRunAgent", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::GetAgentWebChannel>("GetAgentWebChannel", Execution::kPool,
                                              Access::kInternal),
    Unary<&AgentsService::GetRunIntegration>("GetRunIntegration", Execution::kPool,
                                             Access::kInternal),
    // Internal: the run queue, leased by runs workers in other processes.
    Unary<&AgentsService::LeaseRun>("LeaseRun", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::RenewRunLease>("RenewRunLease", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::SetRunCall>("SetRunCall", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::FinishRun>("FinishRun", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::ReleaseRun>("ReleaseRun", Execution::kPool, Access::kInternal),
    Unary<&AgentsService::ReleaseRunLeasesOf>("ReleaseRunLeasesOf", Execution::kPool,
                                              Access::kInternal),
    // Internal: a voice platform's webhook from an edge in another process (an agent lookup,
    // the integration's secret, then the call's ingest).
    Unary<&AgentsService::HandlePlatformEvent>("HandlePlatformEvent", Execution::kPool,
                                               Access::kInternal),
};

}  // namespace calleval::agents

#pragma once

// The metrics service's AgentDirectory answered by the agents and scenarios stores of this
// process (the roles share one database today). A gRPC client of the Agents service would
// answer the same questions when the roles no longer share it.

#include "services/agents/agents_store.h"
#include "services/agents/scenarios_store.h"
#include "services/metrics/agent_directory.h"

namespace calleval::agents {

class InProcessAgentDirectory final : public metrics::AgentDirectory {
 public:
  InProcessAgentDirectory(AgentsStore* agents, ScenariosStore* scenarios)
      : agents_(agents), scenarios_(scenarios) {}

  absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingAgents(
      int64_t workspace_id, absl::Span<const int64_t> ids) override;
  absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingScenarios(
      int64_t workspace_id, absl::Span<const int64_t> ids) override;
  absl::StatusOr<std::vector<int64_t>> DisabledMetrics(int64_t workspace_id,
                                                       int64_t agent_id) override;
  absl::StatusOr<std::vector<int64_t>> ReplaceDisabledMetrics(
      int64_t workspace_id, int64_t agent_id, MetricKind kind,
      const std::vector<int64_t>& ids) override;

 private:
  AgentsStore* agents_;
  ScenariosStore* scenarios_;
};

}  // namespace calleval::agents

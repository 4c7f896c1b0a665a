#pragma once

// The runs store's ScenarioDirectory answered by the agents and scenarios stores of this
// process (the agents role runs here). services/agents/grpc_agents_clients.h answers the same
// questions over the Agents service when it runs elsewhere.

#include "services/agents/agents_store.h"
#include "services/agents/scenarios_store.h"
#include "services/runs/scenario_directory.h"

namespace calleval::agents {

class InProcessScenarioDirectory final : public runs::ScenarioDirectory {
 public:
  InProcessScenarioDirectory(AgentsStore* agents, ScenariosStore* scenarios)
      : agents_(agents), scenarios_(scenarios) {}

  absl::StatusOr<absl::flat_hash_map<int64_t, runs::ScenarioAgent>> ScenarioAgents(
      int64_t workspace_id, absl::Span<const int64_t> scenario_ids) override;
  absl::StatusOr<bool> AgentHasPhone(int64_t workspace_id, int64_t agent_id) override;

 private:
  AgentsStore* agents_;
  ScenariosStore* scenarios_;
};

}  // namespace calleval::agents

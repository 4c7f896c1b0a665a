#pragma once

// The runs workers' RunAgents answered by the agents and scenarios stores of this process (the
// agents role runs here). The Agents service's internal GetRunScenario, GetRunAgent and
// GetAgentWebChannel answer through this too; services/agents/grpc_agents_clients.h asks them
// from another process.

#include <optional>

#include "calleval/v1/agents.pb.h"
#include "services/agents/agents_store.h"
#include "services/agents/integrations_store.h"
#include "services/agents/scenarios_store.h"
#include "services/runs/run_agents.h"

namespace calleval::agents {

class InProcessRunAgents final : public runs::RunAgents {
 public:
  // `integrations` may be null: GetIntegration then answers UNAVAILABLE.
  InProcessRunAgents(AgentsStore* agents, ScenariosStore* scenarios,
                     IntegrationsStore* integrations = nullptr)
      : agents_(agents), scenarios_(scenarios), integrations_(integrations) {}

  absl::StatusOr<v1::Scenario> GetScenario(int64_t workspace_id, int64_t scenario_id) override;
  absl::StatusOr<v1::Agent> GetAgent(int64_t workspace_id, int64_t agent_id) override;
  absl::StatusOr<std::optional<WebChannel>> GetWebChannel(int64_t workspace_id,
                                                          int64_t agent_id) override;
  absl::StatusOr<std::optional<IntegrationSettings>> GetIntegration(
      int64_t workspace_id, absl::string_view provider) override;

 private:
  AgentsStore* agents_;
  ScenariosStore* scenarios_;
  IntegrationsStore* integrations_;
};

// A web channel on the wire (GetAgentWebChannel) and back. Every stored value is a string
// (MergeWebChannel keeps no other type); one that is not fails the conversion rather than
// travel changed.
absl::StatusOr<v1::AgentWebChannel> WebChannelToProto(const std::optional<WebChannel>& channel);
std::optional<WebChannel> WebChannelFromProto(const v1::AgentWebChannel& channel);

// Integration settings on the wire (GetRunIntegration) and back. A secret that is not a string
// fails the conversion rather than travel changed.
absl::StatusOr<v1::RunIntegration> IntegrationToProto(
    const std::optional<IntegrationSettings>& settings);
absl::StatusOr<std::optional<IntegrationSettings>> IntegrationFromProto(
    const v1::RunIntegration& integration);

}  // namespace calleval::agents

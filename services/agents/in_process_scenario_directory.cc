#include "services/agents/in_process_scenario_directory.h"

#include "common/status_macros.h"

namespace calleval::agents {

absl::StatusOr<absl::flat_hash_map<int64_t, runs::ScenarioAgent>>
InProcessScenarioDirectory::ScenarioAgents(int64_t workspace_id,
                                           absl::Span<const int64_t> scenario_ids) {
  ASSIGN_OR_RETURN(auto callees, scenarios_->Callees(workspace_id, scenario_ids));
  absl::flat_hash_map<int64_t, runs::ScenarioAgent> out;
  out.reserve(callees.size());
  for (const auto& [scenario_id, callee] : callees) {
    out[scenario_id] = runs::ScenarioAgent{callee.agent_id, callee.agent_has_phone};
  }
  return out;
}

absl::StatusOr<bool> InProcessScenarioDirectory::AgentHasPhone(int64_t workspace_id,
                                                               int64_t agent_id) {
  return agents_->HasPhoneNumber(workspace_id, agent_id);
}

}  // namespace calleval::agents

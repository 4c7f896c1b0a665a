#include "services/agents/in_process_agent_directory.h"

#include "common/standard_metrics.h"
#include "common/status_macros.h"

namespace calleval::agents {

absl::StatusOr<absl::flat_hash_set<int64_t>> InProcessAgentDirectory::ExistingAgents(
    int64_t workspace_id, absl::Span<const int64_t> ids) {
  return agents_->Existing(workspace_id, ids);
}

absl::StatusOr<absl::flat_hash_set<int64_t>> InProcessAgentDirectory::ExistingScenarios(
    int64_t workspace_id, absl::Span<const int64_t> ids) {
  return scenarios_->Existing(workspace_id, ids);
}

absl::StatusOr<std::vector<int64_t>> InProcessAgentDirectory::DisabledMetrics(int64_t workspace_id,
                                                                              int64_t agent_id) {
  ASSIGN_OR_RETURN(v1::Agent agent, agents_->Get(workspace_id, agent_id));
  return std::vector<int64_t>(agent.disabled_metric_ids().begin(),
                              agent.disabled_metric_ids().end());
}

absl::StatusOr<std::vector<int64_t>> InProcessAgentDirectory::ReplaceDisabledMetrics(
    int64_t workspace_id, int64_t agent_id, MetricKind kind, const std::vector<int64_t>& ids) {
  const bool standard = kind == MetricKind::kStandard;
  return agents_->ReplaceDisabledMetrics(
      workspace_id, agent_id,
      [standard](int64_t id) { return (FindStandardMetric(id) != nullptr) == standard; }, ids);
}

}  // namespace calleval::agents

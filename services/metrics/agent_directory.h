#pragma once

// What the metrics service asks the agents service, which owns the agents and scenarios tables
// (docs/architecture.md, "Who owns which table"): whether the agents and scenarios a metric
// names exist, and an agent's list of disabled metrics. The metrics store never reads those
// tables itself; the roles may one day keep them in different databases.

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace calleval::metrics {

class AgentDirectory {
 public:
  // Which part of an agent's disabled_metric_ids a toggle replaces.
  enum class MetricKind { kStandard, kCustom };

  virtual ~AgentDirectory() = default;

  // Of `ids`, those that name an agent of the workspace.
  virtual absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingAgents(
      int64_t workspace_id, absl::Span<const int64_t> ids) = 0;
  // Of `ids`, those that name a scenario of the workspace.
  virtual absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingScenarios(
      int64_t workspace_id, absl::Span<const int64_t> ids) = 0;
  // The agent's disabled_metric_ids; NotFound when it is not an agent of the workspace.
  virtual absl::StatusOr<std::vector<int64_t>> DisabledMetrics(int64_t workspace_id,
                                                               int64_t agent_id) = 0;
  // Makes the `kind` part of the agent's disabled_metric_ids exactly `ids` (the other part is
  // kept) and returns the whole new list; NotFound when it is not an agent of the workspace.
  virtual absl::StatusOr<std::vector<int64_t>> ReplaceDisabledMetrics(
      int64_t workspace_id, int64_t agent_id, MetricKind kind, const std::vector<int64_t>& ids) = 0;
};

}  // namespace calleval::metrics

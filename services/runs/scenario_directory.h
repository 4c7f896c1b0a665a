#pragma once

// What the runs store asks the agents service, which owns the agents and scenarios tables
// (docs/architecture.md, "Who owns which table"), when it queues a run or a batch: a
// scenario's agent, and whether that agent has a phone number (the default channel). The runs
// store never reads those tables itself. Answered by the agents and scenarios stores of this
// process (agents::InProcessScenarioDirectory) when the agents role runs here, by the Agents
// service's internal methods otherwise (agents::NewGrpcScenarioDirectory).

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace calleval::runs {

struct ScenarioAgent {
  int64_t agent_id = 0;
  bool agent_has_phone = false;
};

class ScenarioDirectory {
 public:
  virtual ~ScenarioDirectory() = default;

  // For each of `scenario_ids` that names a scenario of the workspace: its agent; one question
  // for all of them. A scenario that is not there is absent from the answer.
  virtual absl::StatusOr<absl::flat_hash_map<int64_t, ScenarioAgent>> ScenarioAgents(
      int64_t workspace_id, absl::Span<const int64_t> scenario_ids) = 0;
  // Whether the agent has a phone number; NotFound when it is not an agent of the workspace.
  virtual absl::StatusOr<bool> AgentHasPhone(int64_t workspace_id, int64_t agent_id) = 0;
};

}  // namespace calleval::runs

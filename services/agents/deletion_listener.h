#pragma once

// Told by the agents service once the delete of an agent or a scenario has committed, so a
// service that keeps links to it (the metrics service's metric_agents and metric_scenarios) can
// drop them. The links are in tables the agents service does not own, so no foreign key or
// transaction spans both; a notice may be lost (a crash right after the delete) or repeat, so
// listeners are idempotent and readers of the links ignore those to deleted agents and
// scenarios.

#include <cstdint>

#include "absl/status/status.h"

namespace calleval::agents {

class DeletionListener {
 public:
  virtual ~DeletionListener() = default;

  // The agent is deleted, and with it its scenarios.
  virtual absl::Status AgentDeleted(int64_t workspace_id, int64_t agent_id) = 0;
  virtual absl::Status ScenarioDeleted(int64_t workspace_id, int64_t scenario_id) = 0;
};

}  // namespace calleval::agents

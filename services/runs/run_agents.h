#pragma once

// What the runs workers ask the agents service, which owns the agents and scenarios tables
// (docs/architecture.md, "Who owns which table"): the scenario a run plays, its agent, the
// agent's web channel with its credentials, and the workspace's integration settings (the
// carriers' and platforms' accounts) with their secrets. The runs workers never read those tables
// themselves. Answered by the agents and scenarios stores of this process
// (agents::InProcessRunAgents) when the agents role runs here, by the Agents service's internal
// methods otherwise (agents::NewGrpcRunAgents).

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/agents.pb.h"
#include "services/agents/integrations.h"
#include "services/agents/web_channel.h"

namespace calleval::runs {

class RunAgents {
 public:
  virtual ~RunAgents() = default;

  // As GetScenario and GetAgent answer them; NotFound when not in the workspace.
  virtual absl::StatusOr<v1::Scenario> GetScenario(int64_t workspace_id, int64_t scenario_id) = 0;
  virtual absl::StatusOr<v1::Agent> GetAgent(int64_t workspace_id, int64_t agent_id) = 0;
  // The agent's web channel, its credentials unsealed; nullopt when it has none.
  virtual absl::StatusOr<std::optional<agents::WebChannel>> GetWebChannel(int64_t workspace_id,
                                                                          int64_t agent_id) = 0;
  // The workspace's integration settings for a carrier or platform (twilio, telnyx, plivo,
  // vapi, retell, livekit), its secrets unsealed; nullopt when the workspace has none.
  virtual absl::StatusOr<std::optional<agents::IntegrationSettings>> GetIntegration(
      int64_t workspace_id, absl::string_view provider) = 0;
};

}  // namespace calleval::runs

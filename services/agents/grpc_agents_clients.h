#pragma once

// What the other services ask the agents service when it runs in another process: the
// Agents service's internal methods (proto/calleval/v1/agents.proto), on a channel that
// carries the installation's internal credential (CreateInternalChannel). The in-process
// twins are InProcessAgentDirectory, InProcessScenarioDirectory and InProcessRunAgents;
// cmd/calleval/server.cc picks one by whether the agents role runs in the process.

#include <grpcpp/channel.h>

#include <memory>

#include "absl/time/time.h"
#include "services/metrics/agent_directory.h"
#include "services/runs/run_agents.h"
#include "services/runs/run_queue.h"
#include "services/runs/scenario_directory.h"

namespace calleval::agents {

// Every call waits at most this long: the questions are single-row reads on the agents role.
inline constexpr absl::Duration kAgentsCallDeadline = absl::Seconds(10);

// For the metrics store.
std::unique_ptr<metrics::AgentDirectory> NewGrpcAgentDirectory(
    std::shared_ptr<grpc::Channel> agents, absl::Duration deadline = kAgentsCallDeadline);
// For the runs store.
std::unique_ptr<runs::ScenarioDirectory> NewGrpcScenarioDirectory(
    std::shared_ptr<grpc::Channel> agents, absl::Duration deadline = kAgentsCallDeadline);

// For the runs workers.
std::unique_ptr<runs::RunAgents> NewGrpcRunAgents(std::shared_ptr<grpc::Channel> agents,
                                                  absl::Duration deadline = kAgentsCallDeadline);

// The run queue for the runs workers. Renew, SetCall, Finish and Release with a token that no
// longer holds the lease answer kFailedPrecondition, as the store does.
std::unique_ptr<runs::RunQueue> NewGrpcRunQueue(std::shared_ptr<grpc::Channel> agents,
                                                absl::Duration deadline = kAgentsCallDeadline);

}  // namespace calleval::agents

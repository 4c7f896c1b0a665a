#pragma once

// What the calls and stats stores need of the agents and metrics services, whose tables they
// never read (docs/architecture.md, "In one process or apart"): the call's agent (which metrics
// it turned off, its silence threshold, its name), the workspace's custom metrics as an ingest
// plans them, and the runs counted for the stats. Both arrive as the owners' internal messages, v1::CallAgent and v1::IngestCatalog,
// whether from a store in this process or from the owner's internal method over gRPC, and are
// turned into the store's types here, once, for both paths.

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/metrics.pb.h"
#include "services/calls/calls_store.h"
#include "services/calls/stats_store.h"

namespace calleval::calls {

// An owner's answer, from its store in this process or its internal method.
using CallAgentSource =
    std::function<absl::StatusOr<v1::CallAgent>(int64_t workspace_id, int64_t agent_id)>;
using IngestCatalogSource =
    std::function<absl::StatusOr<v1::IngestCatalog>(int64_t workspace_id, int64_t agent_id)>;

// The AgentLookup the calls store takes: the source's NOT_FOUND becomes ingest's 422
// agent_not_found.
AgentLookup AgentLookupFrom(CallAgentSource source);
MetricCatalog MetricCatalogFrom(IngestCatalogSource source);

// The stats' run counts over the Agents service's internal CountRuns (it serves the runs).
RunCounter NewGrpcRunCounter(std::shared_ptr<grpc::Channel> agents);

// The sources over the owners' internal methods (Agents/GetCallAgent, Metrics/GetIngestCatalog),
// on channels that carry the installation's internal credential (CreateInternalChannel).
CallAgentSource NewGrpcCallAgentSource(std::shared_ptr<grpc::Channel> agents);
IngestCatalogSource NewGrpcIngestCatalogSource(std::shared_ptr<grpc::Channel> metrics);

}  // namespace calleval::calls

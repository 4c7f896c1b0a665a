#include "services/calls/owner_directories.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "common/client_context.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace calleval::calls {
namespace {

// Both are point reads on the owner's side, asked on every ingest; past this the ingest answers
// the owner's unavailability (503) and the client may retry, nothing having been stored.
constexpr absl::Duration kOwnerDeadline = absl::Seconds(10);

}  // namespace

AgentLookup AgentLookupFrom(CallAgentSource source) {
  return [source = std::move(source)](int64_t workspace_id,
                                      int64_t agent_id) -> absl::StatusOr<AgentInfo> {
    absl::StatusOr<v1::CallAgent> agent = source(workspace_id, agent_id);
    if (!agent.ok()) {
      if (agent.status().code() != absl::StatusCode::kNotFound) return agent.status();
      return ValidationError(
          "agent_not_found", absl::StrCat("agent ", agent_id, " not found"),
          {{"agent_id", absl::StrCat("no agent ", agent_id, " in workspace ", workspace_id)}});
    }
    AgentInfo info;
    info.disabled_metric_ids.assign(agent->disabled_metric_ids().begin(),
                                    agent->disabled_metric_ids().end());
    if (agent->has_silence_threshold_ms()) info.silence_threshold_ms = agent->silence_threshold_ms();
    info.name = agent->name();
    info.agent_source = agent->agent_source();
    if (agent->has_version()) info.version = agent->version();
    return info;
  };
}

MetricCatalog MetricCatalogFrom(IngestCatalogSource source) {
  return [source = std::move(source)](
             int64_t workspace_id,
             int64_t agent_id) -> absl::StatusOr<std::vector<CustomMetricInfo>> {
    ASSIGN_OR_RETURN(v1::IngestCatalog catalog, source(workspace_id, agent_id));
    std::vector<CustomMetricInfo> out;
    out.reserve(catalog.entries_size());
    for (const v1::IngestCatalog::Entry& e : catalog.entries()) {
      out.push_back({e.id(), e.credit_cost(), e.requires_audio(), e.applies_to_agent()});
    }
    return out;
  };
}

CallAgentSource NewGrpcCallAgentSource(std::shared_ptr<grpc::Channel> agents) {
  std::shared_ptr<v1::Agents::Stub> stub = v1::Agents::NewStub(std::move(agents));
  return [stub](int64_t workspace_id, int64_t agent_id) -> absl::StatusOr<v1::CallAgent> {
    std::unique_ptr<grpc::ClientContext> context = ContextWithin(kOwnerDeadline);
    v1::GetCallAgentRequest request;
    request.set_workspace_id(workspace_id);
    request.set_agent_id(agent_id);
    v1::CallAgent reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub->GetCallAgent(context.get(), request, &reply)));
    return reply;
  };
}

IngestCatalogSource NewGrpcIngestCatalogSource(std::shared_ptr<grpc::Channel> metrics) {
  std::shared_ptr<v1::Metrics::Stub> stub = v1::Metrics::NewStub(std::move(metrics));
  return [stub](int64_t workspace_id, int64_t agent_id) -> absl::StatusOr<v1::IngestCatalog> {
    std::unique_ptr<grpc::ClientContext> context = ContextWithin(kOwnerDeadline);
    v1::GetIngestCatalogRequest request;
    request.set_workspace_id(workspace_id);
    request.set_agent_id(agent_id);
    v1::IngestCatalog reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub->GetIngestCatalog(context.get(), request, &reply)));
    return reply;
  };
}

RunCounter NewGrpcRunCounter(std::shared_ptr<grpc::Channel> agents) {
  std::shared_ptr<v1::Agents::Stub> stub = v1::Agents::NewStub(std::move(agents));
  return [stub](const runs::RunCountQuery& query)
             -> absl::StatusOr<std::map<int64_t, runs::RunCounts>> {
    std::unique_ptr<grpc::ClientContext> context = ContextWithin(kOwnerDeadline);
    v1::RunCountBuckets reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub->CountRuns(context.get(), runs::ToProto(query), &reply)));
    return runs::FromProto(reply);
  };
}

}  // namespace calleval::calls

// The Metrics service's internal methods: what the agents service asks and tells the metrics
// store when the agents role runs in another process (services/metrics/grpc_metrics_clients.h),
// and the catalog the calls service plans each ingest with (services/calls/owner_directories.h).
// The method table admits only the installation's credential (Access::kInternal).

#include "common/status_macros.h"
#include "services/metrics/metrics_service.h"

namespace calleval::metrics {

absl::Status MetricsService::ExistingMetrics(const RequestContext& /*context*/,
                                             const v1::ExistingIdsRequest& request,
                                             v1::ExistingIds* response) {
  ASSIGN_OR_RETURN(auto existing, deps_.store->ExistingCustom(request.workspace_id(), request.ids()));
  response->mutable_ids()->Add(existing.begin(), existing.end());
  return absl::OkStatus();
}

absl::Status MetricsService::AgentDeleted(const RequestContext& /*context*/,
                                          const v1::AgentDeletedRequest& request,
                                          google::protobuf::Empty* /*response*/) {
  return deps_.store->AgentDeleted(request.workspace_id(), request.agent_id());
}

absl::Status MetricsService::ScenarioDeleted(const RequestContext& /*context*/,
                                             const v1::ScenarioDeletedRequest& request,
                                             google::protobuf::Empty* /*response*/) {
  return deps_.store->ScenarioDeleted(request.workspace_id(), request.scenario_id());
}

absl::Status MetricsService::GetIngestCatalog(const RequestContext& /*context*/,
                                              const v1::GetIngestCatalogRequest& request,
                                              v1::IngestCatalog* response) {
  ASSIGN_OR_RETURN(*response, deps_.store->Catalog(request.workspace_id(), request.agent_id()));
  return absl::OkStatus();
}

}  // namespace calleval::metrics

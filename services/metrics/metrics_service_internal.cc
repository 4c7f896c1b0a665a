// The Metrics service's internal methods: what the agents service asks and tells the metrics
// store when the agents role runs in another process (services/metrics/grpc_metrics_clients.h),
// the catalog the calls service plans each ingest with (services/calls/owner_directories.h), and
// the metrics' definitions the calls service and the runs workers judge calls by.
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

absl::Status MetricsService::GetMetricDefinitions(const RequestContext& /*context*/,
                                                  const v1::GetMetricDefinitionsRequest& request,
                                                  v1::MetricDefinitions* response) {
  ASSIGN_OR_RETURN(std::vector<v1::Metric> definitions,
                   deps_.store->Definitions(request.workspace_id(),
                                            {request.ids().begin(), request.ids().end()}));
  response->mutable_metrics()->Add(std::make_move_iterator(definitions.begin()),
                                   std::make_move_iterator(definitions.end()));
  return absl::OkStatus();
}

}  // namespace calleval::metrics

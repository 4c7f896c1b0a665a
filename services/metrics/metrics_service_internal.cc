// The Metrics service's internal methods: what the agents service asks and tells the metrics
// store when the agents role runs in another process (services/metrics/grpc_metrics_clients.h).

#include "common/errors.h"
#include "common/status_macros.h"
#include "common/unary.h"
#include "services/metrics/metrics_service.h"

namespace calleval::metrics {
namespace {

// As in agents_service_internal.cc: no credential set, no internal method answers.
template <typename Work>
grpc::ServerUnaryReactor* RunInternal(grpc::CallbackServerContext* context, ThreadPool* pool,
                                      const std::string& credential, Work work) {
  if (credential.empty()) {
    return RunUnaryInline(context, [] {
      return UnauthenticatedError("internal methods are not open in this process");
    });
  }
  return RunInternalUnary(context, pool, credential, std::move(work));
}

}  // namespace

grpc::ServerUnaryReactor* MetricsService::ExistingMetrics(grpc::CallbackServerContext* context,
                                                          const v1::ExistingIdsRequest* request,
                                                          v1::ExistingIds* response) {
  return RunInternal(
      context, deps_.pool, deps_.internal_credential, [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(auto existing,
                         deps_.store->ExistingCustom(request->workspace_id(), request->ids()));
        response->mutable_ids()->Add(existing.begin(), existing.end());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* MetricsService::AgentDeleted(grpc::CallbackServerContext* context,
                                                       const v1::AgentDeletedRequest* request,
                                                       google::protobuf::Empty*) {
  return RunInternal(
      context, deps_.pool, deps_.internal_credential, [this, request]() -> absl::Status {
        return deps_.store->AgentDeleted(request->workspace_id(), request->agent_id());
      });
}

grpc::ServerUnaryReactor* MetricsService::ScenarioDeleted(grpc::CallbackServerContext* context,
                                                          const v1::ScenarioDeletedRequest* request,
                                                          google::protobuf::Empty*) {
  return RunInternal(
      context, deps_.pool, deps_.internal_credential, [this, request]() -> absl::Status {
        return deps_.store->ScenarioDeleted(request->workspace_id(), request->scenario_id());
      });
}

}  // namespace calleval::metrics

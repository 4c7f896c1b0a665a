#include "services/metrics/metrics_service.h"

#include "common/status_macros.h"
#include "common/unary.h"

namespace calleval::metrics {

absl::Status MetricsService::HandleListUsableMetrics(const std::string& authorization,
                                                     const v1::ListUsableMetricsRequest& request,
                                                     v1::ListUsableMetricsResponse* response) {
  ASSIGN_OR_RETURN(accounts::Principal principal, authenticator_->Authenticate(authorization));
  std::optional<int64_t> client_id;
  if (request.has_client_id()) client_id = request.client_id();
  ASSIGN_OR_RETURN(int64_t workspace_id, accounts::ResolveWorkspace(principal, client_id));
  std::vector<int64_t> disabled;
  if (request.has_agent_id()) {
    ASSIGN_OR_RETURN(disabled, disabled_metrics_(workspace_id, request.agent_id()));
  }
  ASSIGN_OR_RETURN(*response, store_->ListUsable(workspace_id, disabled));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* MetricsService::ListUsableMetrics(
    grpc::CallbackServerContext* context, const v1::ListUsableMetricsRequest* request,
    v1::ListUsableMetricsResponse* response) {
  return RunUnaryInline(context, [this, auth = AuthorizationOf(context), request, response] {
    return HandleListUsableMetrics(auth, *request, response);
  });
}

}  // namespace calleval::metrics

#pragma once

// gRPC adapter of the Metrics service: authenticates, resolves the workspace, calls the store.

#include <functional>
#include <string>
#include <vector>

#include "calleval/v1/metrics.grpc.pb.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/metrics/metrics_store.h"

namespace calleval::metrics {

// The disabled metric ids of an agent of the workspace; 404 when there is no such agent.
using DisabledMetricsLookup =
    std::function<absl::StatusOr<std::vector<int64_t>>(int64_t workspace_id, int64_t agent_id)>;

class MetricsService final : public v1::Metrics::CallbackService {
 public:
  MetricsService(const MetricsStore* store, accounts::Authenticator* authenticator,
                 DisabledMetricsLookup disabled_metrics)
      : store_(store),
        authenticator_(authenticator),
        disabled_metrics_(std::move(disabled_metrics)) {}

  grpc::ServerUnaryReactor* ListUsableMetrics(grpc::CallbackServerContext* context,
                                              const v1::ListUsableMetricsRequest* request,
                                              v1::ListUsableMetricsResponse* response) override;

  // The handler, independent of the transport (see calls_service.h).
  absl::Status HandleListUsableMetrics(const std::string& authorization,
                                       const v1::ListUsableMetricsRequest& request,
                                       v1::ListUsableMetricsResponse* response);

 private:
  const MetricsStore* store_;
  accounts::Authenticator* authenticator_;
  DisabledMetricsLookup disabled_metrics_;
};

}  // namespace calleval::metrics

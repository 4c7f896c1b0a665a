#include "services/metrics/grpc_metrics_clients.h"

#include "calleval/v1/metrics.grpc.pb.h"
#include "common/client_context.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace calleval::metrics {
namespace {

class GrpcMetricDirectory final : public agents::MetricDirectory {
 public:
  GrpcMetricDirectory(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Metrics::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingMetrics(
      int64_t workspace_id, absl::Span<const int64_t> ids) override {
    if (ids.empty()) return absl::flat_hash_set<int64_t>();
    v1::ExistingIdsRequest request;
    request.set_workspace_id(workspace_id);
    request.mutable_ids()->Add(ids.begin(), ids.end());
    v1::ExistingIds reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->ExistingMetrics(ContextWithin(deadline_).get(), request, &reply)));
    return absl::flat_hash_set<int64_t>(reply.ids().begin(), reply.ids().end());
  }

 private:
  std::unique_ptr<v1::Metrics::Stub> stub_;
  const absl::Duration deadline_;
};

class GrpcDeletionListener final : public agents::DeletionListener {
 public:
  GrpcDeletionListener(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Metrics::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::Status AgentDeleted(int64_t workspace_id, int64_t agent_id) override {
    v1::AgentDeletedRequest request;
    request.set_workspace_id(workspace_id);
    request.set_agent_id(agent_id);
    google::protobuf::Empty reply;
    return FromGrpcStatus(stub_->AgentDeleted(ContextWithin(deadline_).get(), request, &reply));
  }

  absl::Status ScenarioDeleted(int64_t workspace_id, int64_t scenario_id) override {
    v1::ScenarioDeletedRequest request;
    request.set_workspace_id(workspace_id);
    request.set_scenario_id(scenario_id);
    google::protobuf::Empty reply;
    return FromGrpcStatus(stub_->ScenarioDeleted(ContextWithin(deadline_).get(), request, &reply));
  }

 private:
  std::unique_ptr<v1::Metrics::Stub> stub_;
  const absl::Duration deadline_;
};

}  // namespace

std::unique_ptr<agents::MetricDirectory> NewGrpcMetricDirectory(
    std::shared_ptr<grpc::Channel> metrics, absl::Duration deadline) {
  return std::make_unique<GrpcMetricDirectory>(std::move(metrics), deadline);
}

std::unique_ptr<agents::DeletionListener> NewGrpcDeletionListener(
    std::shared_ptr<grpc::Channel> metrics, absl::Duration deadline) {
  return std::make_unique<GrpcDeletionListener>(std::move(metrics), deadline);
}

MetricDefinitions NewGrpcMetricDefinitions(std::shared_ptr<grpc::Channel> metrics,
                                           absl::Duration deadline) {
  std::shared_ptr<v1::Metrics::Stub> stub = v1::Metrics::NewStub(std::move(metrics));
  return [stub, deadline](int64_t workspace_id,
                          const std::vector<int64_t>& ids) -> absl::StatusOr<std::vector<v1::Metric>> {
    if (ids.empty()) return std::vector<v1::Metric>();
    v1::GetMetricDefinitionsRequest request;
    request.set_workspace_id(workspace_id);
    request.mutable_ids()->Add(ids.begin(), ids.end());
    v1::MetricDefinitions reply;
    RETURN_IF_ERROR(FromGrpcStatus(
        stub->GetMetricDefinitions(ContextWithin(deadline).get(), request, &reply)));
    return std::vector<v1::Metric>(std::make_move_iterator(reply.mutable_metrics()->begin()),
                                   std::make_move_iterator(reply.mutable_metrics()->end()));
  };
}

}  // namespace calleval::metrics

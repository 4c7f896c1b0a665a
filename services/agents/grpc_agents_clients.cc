#include "services/agents/grpc_agents_clients.h"

#include "calleval/v1/agents.grpc.pb.h"
#include "common/client_context.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "services/agents/in_process_run_agents.h"

namespace calleval::agents {
namespace {

v1::ExistingIdsRequest ExistingIdsRequestOf(int64_t workspace_id, absl::Span<const int64_t> ids) {
  v1::ExistingIdsRequest request;
  request.set_workspace_id(workspace_id);
  request.mutable_ids()->Add(ids.begin(), ids.end());
  return request;
}

class GrpcAgentDirectory final : public metrics::AgentDirectory {
 public:
  GrpcAgentDirectory(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Agents::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingAgents(
      int64_t workspace_id, absl::Span<const int64_t> ids) override {
    if (ids.empty()) return absl::flat_hash_set<int64_t>();
    v1::ExistingIds reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->ExistingAgents(
        ContextWithin(deadline_).get(), ExistingIdsRequestOf(workspace_id, ids), &reply)));
    return absl::flat_hash_set<int64_t>(reply.ids().begin(), reply.ids().end());
  }

  absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingScenarios(
      int64_t workspace_id, absl::Span<const int64_t> ids) override {
    if (ids.empty()) return absl::flat_hash_set<int64_t>();
    v1::ExistingIds reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->ExistingScenarios(
        ContextWithin(deadline_).get(), ExistingIdsRequestOf(workspace_id, ids), &reply)));
    return absl::flat_hash_set<int64_t>(reply.ids().begin(), reply.ids().end());
  }

  absl::StatusOr<std::vector<int64_t>> DisabledMetrics(int64_t workspace_id,
                                                       int64_t agent_id) override {
    v1::GetDisabledMetricsRequest request;
    request.set_workspace_id(workspace_id);
    request.set_agent_id(agent_id);
    v1::DisabledMetrics reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->GetDisabledMetrics(ContextWithin(deadline_).get(), request, &reply)));
    return std::vector<int64_t>(reply.metric_ids().begin(), reply.metric_ids().end());
  }

  absl::StatusOr<std::vector<int64_t>> ReplaceDisabledMetrics(
      int64_t workspace_id, int64_t agent_id, MetricKind kind,
      const std::vector<int64_t>& ids) override {
    v1::ReplaceDisabledMetricsRequest request;
    request.set_workspace_id(workspace_id);
    request.set_agent_id(agent_id);
    request.set_standard(kind == MetricKind::kStandard);
    request.mutable_metric_ids()->Add(ids.begin(), ids.end());
    v1::DisabledMetrics reply;
    RETURN_IF_ERROR(FromGrpcStatus(
        stub_->ReplaceDisabledMetrics(ContextWithin(deadline_).get(), request, &reply)));
    return std::vector<int64_t>(reply.metric_ids().begin(), reply.metric_ids().end());
  }

 private:
  std::unique_ptr<v1::Agents::Stub> stub_;
  const absl::Duration deadline_;
};

class GrpcScenarioDirectory final : public runs::ScenarioDirectory {
 public:
  GrpcScenarioDirectory(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Agents::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::StatusOr<absl::flat_hash_map<int64_t, runs::ScenarioAgent>> ScenarioAgents(
      int64_t workspace_id, absl::Span<const int64_t> scenario_ids) override {
    absl::flat_hash_map<int64_t, runs::ScenarioAgent> out;
    if (scenario_ids.empty()) return out;
    v1::ScenarioAgents reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->GetScenarioAgents(
        ContextWithin(deadline_).get(), ExistingIdsRequestOf(workspace_id, scenario_ids), &reply)));
    for (const v1::ScenarioAgents::Entry& entry : reply.scenarios()) {
      out[entry.scenario_id()] = runs::ScenarioAgent{entry.agent_id(), entry.agent_has_phone()};
    }
    return out;
  }

  absl::StatusOr<bool> AgentHasPhone(int64_t workspace_id, int64_t agent_id) override {
    v1::GetAgentPhoneRequest request;
    request.set_workspace_id(workspace_id);
    request.set_agent_id(agent_id);
    v1::AgentPhone reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->GetAgentPhone(ContextWithin(deadline_).get(), request, &reply)));
    return reply.has_phone();
  }

 private:
  std::unique_ptr<v1::Agents::Stub> stub_;
  const absl::Duration deadline_;
};

class GrpcRunAgents final : public runs::RunAgents {
 public:
  GrpcRunAgents(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Agents::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::StatusOr<v1::Scenario> GetScenario(int64_t workspace_id, int64_t scenario_id) override {
    v1::Scenario reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->GetRunScenario(
        ContextWithin(deadline_).get(), ItemOf(workspace_id, scenario_id), &reply)));
    return reply;
  }

  absl::StatusOr<v1::Agent> GetAgent(int64_t workspace_id, int64_t agent_id) override {
    v1::Agent reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->GetRunAgent(ContextWithin(deadline_).get(),
                                                      ItemOf(workspace_id, agent_id), &reply)));
    return reply;
  }

  absl::StatusOr<std::optional<WebChannel>> GetWebChannel(int64_t workspace_id,
                                                          int64_t agent_id) override {
    v1::AgentWebChannel reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->GetAgentWebChannel(
        ContextWithin(deadline_).get(), ItemOf(workspace_id, agent_id), &reply)));
    return WebChannelFromProto(reply);
  }

  absl::StatusOr<std::optional<IntegrationSettings>> GetIntegration(
      int64_t workspace_id, absl::string_view provider) override {
    v1::RunIntegrationRequest request;
    request.set_workspace_id(workspace_id);
    request.set_provider(std::string(provider));
    v1::RunIntegration reply;
    RETURN_IF_ERROR(FromGrpcStatus(
        stub_->GetRunIntegration(ContextWithin(deadline_).get(), request, &reply)));
    return IntegrationFromProto(reply);
  }

 private:
  static v1::WorkspaceItemRequest ItemOf(int64_t workspace_id, int64_t id) {
    v1::WorkspaceItemRequest request;
    request.set_workspace_id(workspace_id);
    request.set_id(id);
    return request;
  }

  std::unique_ptr<v1::Agents::Stub> stub_;
  const absl::Duration deadline_;
};

class GrpcRunQueue final : public runs::RunQueue {
 public:
  GrpcRunQueue(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Agents::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::StatusOr<std::optional<runs::RunJob>> Lease(absl::Duration lease, int max_attempts,
                                                    absl::string_view holder) override {
    v1::LeaseRunRequest request;
    request.set_lease_seconds(static_cast<int32_t>(absl::ToInt64Seconds(lease)));
    request.set_max_attempts(max_attempts);
    request.set_holder(std::string(holder));
    v1::LeaseRunResponse reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->LeaseRun(ContextWithin(deadline_).get(), request, &reply)));
    if (!reply.has_run()) return std::nullopt;
    return std::optional<runs::RunJob>(runs::FromProto(reply.run()));
  }

  absl::Status Renew(int64_t run_id, absl::string_view token, absl::Duration lease) override {
    v1::RenewRunLeaseRequest request;
    request.set_run_id(run_id);
    request.set_token(std::string(token));
    request.set_lease_seconds(static_cast<int32_t>(absl::ToInt64Seconds(lease)));
    google::protobuf::Empty reply;
    return FromGrpcStatus(stub_->RenewRunLease(ContextWithin(deadline_).get(), request, &reply));
  }

  absl::Status SetCall(int64_t run_id, absl::string_view token, int64_t call_id) override {
    v1::SetRunCallRequest request;
    request.set_run_id(run_id);
    request.set_token(std::string(token));
    request.set_call_id(call_id);
    google::protobuf::Empty reply;
    return FromGrpcStatus(stub_->SetRunCall(ContextWithin(deadline_).get(), request, &reply));
  }

  absl::Status Finish(int64_t run_id, absl::string_view token,
                      const runs::RunOutcome& outcome) override {
    v1::FinishRunRequest request;
    request.set_run_id(run_id);
    request.set_token(std::string(token));
    request.set_status(outcome.status);
    if (outcome.passed) request.set_passed(*outcome.passed);
    request.set_end_reason(outcome.end_reason);
    request.set_error(outcome.error);
    if (outcome.agent_version) request.set_agent_version(*outcome.agent_version);
    if (outcome.platform_version) request.set_platform_version(*outcome.platform_version);
    google::protobuf::Empty reply;
    return FromGrpcStatus(stub_->FinishRun(ContextWithin(deadline_).get(), request, &reply));
  }

  absl::Status Release(int64_t run_id, absl::string_view token) override {
    v1::ReleaseRunRequest request;
    request.set_run_id(run_id);
    request.set_token(std::string(token));
    google::protobuf::Empty reply;
    return FromGrpcStatus(stub_->ReleaseRun(ContextWithin(deadline_).get(), request, &reply));
  }

  absl::StatusOr<int> ReleaseLeasesOf(absl::string_view holder) override {
    v1::ReleaseRunLeasesOfRequest request;
    request.set_holder(std::string(holder));
    v1::ReleaseRunLeasesOfResponse reply;
    RETURN_IF_ERROR(FromGrpcStatus(
        stub_->ReleaseRunLeasesOf(ContextWithin(deadline_).get(), request, &reply)));
    return reply.released();
  }

 private:
  std::unique_ptr<v1::Agents::Stub> stub_;
  const absl::Duration deadline_;
};

}  // namespace

std::unique_ptr<runs::RunQueue> NewGrpcRunQueue(std::shared_ptr<grpc::Channel> agents,
                                                absl::Duration deadline) {
  return std::make_unique<GrpcRunQueue>(std::move(agents), deadline);
}

std::unique_ptr<runs::RunAgents> NewGrpcRunAgents(std::shared_ptr<grpc::Channel> agents,
                                                  absl::Duration deadline) {
  return std::make_unique<GrpcRunAgents>(std::move(agents), deadline);
}

std::unique_ptr<metrics::AgentDirectory> NewGrpcAgentDirectory(
    std::shared_ptr<grpc::Channel> agents, absl::Duration deadline) {
  return std::make_unique<GrpcAgentDirectory>(std::move(agents), deadline);
}

std::unique_ptr<runs::ScenarioDirectory> NewGrpcScenarioDirectory(
    std::shared_ptr<grpc::Channel> agents, absl::Duration deadline) {
  return std::make_unique<GrpcScenarioDirectory>(std::move(agents), deadline);
}

}  // namespace calleval::agents

#include "services/calls/grpc_calls_clients.h"

#include "calleval/v1/calls.grpc.pb.h"
#include "common/client_context.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace calleval::calls {
namespace {

class GrpcRunCalls final : public runs::RunCalls {
 public:
  GrpcRunCalls(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Calls::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::StatusOr<v1::Call> Ingest(int64_t workspace_id, const v1::IngestCallRequest& call,
                                  const runs::RunCallOrigin& origin,
                                  const std::optional<runs::RunRecording>& recording) override {
    v1::IngestRunCallRequest request;
    request.set_workspace_id(workspace_id);
    *request.mutable_call() = call;
    request.set_run_id(origin.run_id);
    request.set_scenario_id(origin.scenario_id);
    if (origin.platform_version) request.set_platform_version(*origin.platform_version);
    if (recording.has_value()) {
      request.set_recording_key(recording->key);
      request.set_recording_content_type(recording->content_type);
      request.set_recording_bytes(recording->bytes);
    }
    v1::Call reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->IngestRunCall(ContextWithin(deadline_).get(), request, &reply)));
    return reply;
  }

  absl::StatusOr<v1::Call> Get(int64_t workspace_id, const std::string& id_or_key) override {
    v1::GetWorkspaceCallRequest request;
    request.set_workspace_id(workspace_id);
    request.set_call_identifier_or_id(id_or_key);
    v1::Call reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->GetWorkspaceCall(ContextWithin(deadline_).get(), request, &reply)));
    return reply;
  }

  absl::StatusOr<v1::CallFiguresList> Figures(int64_t workspace_id,
                                              const std::vector<int64_t>& call_ids) override {
    v1::GetCallFiguresRequest request;
    request.set_workspace_id(workspace_id);
    for (int64_t id : call_ids) request.add_call_ids(id);
    v1::CallFiguresList reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->GetCallFigures(ContextWithin(deadline_).get(), request, &reply)));
    return reply;
  }

 private:
  std::unique_ptr<v1::Calls::Stub> stub_;
  const absl::Duration deadline_;
};

}  // namespace

std::unique_ptr<runs::RunCalls> NewGrpcRunCalls(std::shared_ptr<grpc::Channel> calls,
                                                absl::Duration deadline) {
  return std::make_unique<GrpcRunCalls>(std::move(calls), deadline);
}

}  // namespace calleval::calls

#include "services/calls/calls_service.h"

#include "common/status_macros.h"
#include "common/unary.h"

namespace calleval::calls {
using accounts::ClientIdOf;

absl::StatusOr<int64_t> CallsService::Workspace(const std::string& authorization,
                                                std::optional<int64_t> client_id) {
  return accounts::RequestWorkspace(authenticator_, authorization, client_id);
}

absl::Status CallsService::HandleIngestCall(const std::string& authorization,
                                            const v1::IngestCallRequest& request,
                                            v1::Call* response) {
  ASSIGN_OR_RETURN(int64_t workspace, Workspace(authorization, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, store_->Ingest(workspace, request));
  if (on_ingest_) on_ingest_(*response);
  return absl::OkStatus();
}

absl::Status CallsService::HandleGetCall(const std::string& authorization,
                                         const v1::GetCallRequest& request, v1::Call* response) {
  ASSIGN_OR_RETURN(int64_t workspace, Workspace(authorization, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, store_->Get(workspace, request.call_identifier_or_id()));
  return absl::OkStatus();
}

absl::Status CallsService::HandleUpdateCall(const std::string& authorization,
                                            const v1::UpdateCallRequest& request,
                                            v1::Call* response) {
  ASSIGN_OR_RETURN(int64_t workspace, Workspace(authorization, ClientIdOf(request)));
  std::optional<int64_t> agent_id;
  if (request.has_agent_id()) agent_id = request.agent_id();
  ASSIGN_OR_RETURN(*response, store_->Update(workspace, request.call_identifier_or_id(), agent_id,
                                             request.update()));
  return absl::OkStatus();
}

absl::Status CallsService::HandleListCalls(const std::string& authorization,
                                           const v1::ListCallsRequest& request,
                                           v1::ListCallsResponse* response) {
  ASSIGN_OR_RETURN(int64_t workspace, Workspace(authorization, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, store_->List(workspace, request));
  return absl::OkStatus();
}

absl::Status CallsService::HandleDeleteCall(const std::string& authorization,
                                            const v1::DeleteCallRequest& request,
                                            google::protobuf::Empty* response) {
  ASSIGN_OR_RETURN(int64_t workspace, Workspace(authorization, ClientIdOf(request)));
  return store_->Delete(workspace, request.call_identifier_or_id());
}

grpc::ServerUnaryReactor* CallsService::IngestCall(grpc::CallbackServerContext* context,
                                                   const v1::IngestCallRequest* request,
                                                   v1::Call* response) {
  return RunUnary(context, pool_, [this, auth = AuthorizationOf(context), request, response] {
    return HandleIngestCall(auth, *request, response);
  });
}

grpc::ServerUnaryReactor* CallsService::GetCall(grpc::CallbackServerContext* context,
                                                const v1::GetCallRequest* request,
                                                v1::Call* response) {
  return RunUnaryInline(context, [this, auth = AuthorizationOf(context), request, response] {
    return HandleGetCall(auth, *request, response);
  });
}

grpc::ServerUnaryReactor* CallsService::UpdateCall(grpc::CallbackServerContext* context,
                                                   const v1::UpdateCallRequest* request,
                                                   v1::Call* response) {
  return RunUnary(context, pool_, [this, auth = AuthorizationOf(context), request, response] {
    return HandleUpdateCall(auth, *request, response);
  });
}

grpc::ServerUnaryReactor* CallsService::ListCalls(grpc::CallbackServerContext* context,
                                                  const v1::ListCallsRequest* request,
                                                  v1::ListCallsResponse* response) {
  return RunUnary(context, pool_, [this, auth = AuthorizationOf(context), request, response] {
    return HandleListCalls(auth, *request, response);
  });
}

grpc::ServerUnaryReactor* CallsService::DeleteCall(grpc::CallbackServerContext* context,
                                                   const v1::DeleteCallRequest* request,
                                                   google::protobuf::Empty* response) {
  return RunUnary(context, pool_, [this, auth = AuthorizationOf(context), request, response] {
    return HandleDeleteCall(auth, *request, response);
  });
}

grpc::ServerUnaryReactor* CallsService::LeaseAnalysis(grpc::CallbackServerContext* context,
                                                      const v1::LeaseAnalysisRequest* request,
                                                      v1::LeaseAnalysisResponse* response) {
  return RunUnary(context, pool_, [this, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<AnalysisJob> job,
                     store_->LeaseAnalysis(absl::Seconds(std::max(1, request->lease_seconds())),
                                           std::max(1, request->max_attempts())));
    if (job) *response->mutable_job() = ToProto(*job);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CallsService::RecordAnalysis(grpc::CallbackServerContext* context,
                                                       const v1::RecordAnalysisRequest* request,
                                                       google::protobuf::Empty* response) {
  return RunUnary(context, pool_, [this, request]() {
    std::optional<double> duration;
    if (request->has_duration_seconds()) duration = request->duration_seconds();
    return store_->RecordAnalysis(
        request->call_id(), request->token(), duration,
        {request->results().begin(), request->results().end()},
        {request->metric_results().begin(), request->metric_results().end()});
  });
}

grpc::ServerUnaryReactor* CallsService::FailAnalysis(grpc::CallbackServerContext* context,
                                                     const v1::FailAnalysisRequest* request,
                                                     google::protobuf::Empty* response) {
  return RunUnary(context, pool_, [this, request]() {
    return store_->FailAnalysis(request->call_id(), request->token(), request->reason(),
                                request->message());
  });
}

grpc::ServerUnaryReactor* CallsService::ReleaseAnalysis(grpc::CallbackServerContext* context,
                                                        const v1::ReleaseAnalysisRequest* request,
                                                        google::protobuf::Empty* response) {
  return RunUnary(context, pool_, [this, request]() {
    return store_->ReleaseAnalysis(request->call_id(), request->token());
  });
}

v1::AnalysisJob ToProto(const AnalysisJob& job) {
  v1::AnalysisJob out;
  out.set_call_id(job.call_id);
  out.set_token(job.token);
  out.set_attempts(job.attempts);
  out.set_observation_type(job.observation_type);
  out.set_recording_path(job.recording_path);
  for (const auto& turn : job.transcript) *out.add_transcript() = turn;
  for (int64_t id : job.planned_metric_ids) out.add_planned_metric_ids(id);
  *out.mutable_metadata() = job.metadata;
  out.set_silence_threshold_ms(job.silence_threshold_ms);
  for (const auto& metric : job.custom_metrics) *out.add_custom_metrics() = metric;
  *out.mutable_call() = job.call;
  *out.mutable_agent() = job.agent;
  return out;
}

AnalysisJob FromProto(const v1::AnalysisJob& job) {
  AnalysisJob out;
  out.call_id = job.call_id();
  out.token = job.token();
  out.attempts = job.attempts();
  out.observation_type = job.observation_type();
  out.recording_path = job.recording_path();
  out.transcript.assign(job.transcript().begin(), job.transcript().end());
  out.planned_metric_ids.assign(job.planned_metric_ids().begin(), job.planned_metric_ids().end());
  out.metadata = job.metadata();
  out.silence_threshold_ms = job.silence_threshold_ms();
  out.custom_metrics.assign(job.custom_metrics().begin(), job.custom_metrics().end());
  out.call = job.call();
  out.agent = job.agent();
  return out;
}

}  // namespace calleval::calls

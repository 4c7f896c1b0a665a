#include "services/calls/calls_service.h"

#include "common/status_macros.h"
#include "common/unary.h"
#include "services/calls/calls_methods.h"

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

namespace {

template <typename Request>
absl::StatusOr<StatsRange> RangeOf(const Request& request) {
  return ParseStatsRange(
      request.has_from() ? std::optional<std::string>(request.from()) : std::nullopt,
      request.has_to() ? std::optional<std::string>(request.to()) : std::nullopt,
      request.has_bucket() ? std::optional<std::string>(request.bucket()) : std::nullopt,
      absl::Now());
}

}  // namespace

absl::Status CallsService::HandleGetAgentStats(const std::string& authorization,
                                               const v1::GetAgentStatsRequest& request,
                                               v1::Stats* response) {
  ASSIGN_OR_RETURN(int64_t workspace, Workspace(authorization, ClientIdOf(request)));
  if (stats_ == nullptr) return absl::UnavailableError("stats are not served by this process");
  ASSIGN_OR_RETURN(StatsRange range, RangeOf(request));
  ASSIGN_OR_RETURN(*response, stats_->AgentStats(workspace, request.agent_id(), range));
  return absl::OkStatus();
}

absl::Status CallsService::HandleGetScenarioStats(const std::string& authorization,
                                                  const v1::GetScenarioStatsRequest& request,
                                                  v1::Stats* response) {
  ASSIGN_OR_RETURN(int64_t workspace, Workspace(authorization, ClientIdOf(request)));
  if (stats_ == nullptr) return absl::UnavailableError("stats are not served by this process");
  ASSIGN_OR_RETURN(StatsRange range, RangeOf(request));
  ASSIGN_OR_RETURN(*response, stats_->ScenarioStats(workspace, request.scenario_id(), range));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CallsService::GetAgentStats(grpc::CallbackServerContext* context,
                                                      const v1::GetAgentStatsRequest* request,
                                                      v1::Stats* response) {
  return RunUnaryAs(context, ExecutionOf(kCallsMethods, "GetAgentStats"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleGetAgentStats(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* CallsService::GetScenarioStats(grpc::CallbackServerContext* context,
                                                         const v1::GetScenarioStatsRequest* request,
                                                         v1::Stats* response) {
  return RunUnaryAs(context, ExecutionOf(kCallsMethods, "GetScenarioStats"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleGetScenarioStats(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* CallsService::IngestCall(grpc::CallbackServerContext* context,
                                                   const v1::IngestCallRequest* request,
                                                   v1::Call* response) {
  return RunUnaryAs(context, ExecutionOf(kCallsMethods, "IngestCall"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleIngestCall(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* CallsService::GetCall(grpc::CallbackServerContext* context,
                                                const v1::GetCallRequest* request,
                                                v1::Call* response) {
  return RunUnaryAs(context, ExecutionOf(kCallsMethods, "GetCall"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleGetCall(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* CallsService::UpdateCall(grpc::CallbackServerContext* context,
                                                   const v1::UpdateCallRequest* request,
                                                   v1::Call* response) {
  return RunUnaryAs(context, ExecutionOf(kCallsMethods, "UpdateCall"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleUpdateCall(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* CallsService::ListCalls(grpc::CallbackServerContext* context,
                                                  const v1::ListCallsRequest* request,
                                                  v1::ListCallsResponse* response) {
  return RunUnaryAs(context, ExecutionOf(kCallsMethods, "ListCalls"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleListCalls(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* CallsService::DeleteCall(grpc::CallbackServerContext* context,
                                                   const v1::DeleteCallRequest* request,
                                                   google::protobuf::Empty* response) {
  return RunUnaryAs(context, ExecutionOf(kCallsMethods, "DeleteCall"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleDeleteCall(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* CallsService::LeaseAnalysis(grpc::CallbackServerContext* context,
                                                      const v1::LeaseAnalysisRequest* request,
                                                      v1::LeaseAnalysisResponse* response) {
  return RunInternalUnary(
      context, pool_, internal_credential_, [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(std::optional<AnalysisJob> job,
                         store_->LeaseAnalysis(absl::Seconds(std::max(1, request->lease_seconds())),
                                               std::max(1, request->max_attempts()),
                                               request->holder()));
        if (job) *response->mutable_job() = ToProto(*job);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* CallsService::RecordAnalysis(grpc::CallbackServerContext* context,
                                                       const v1::RecordAnalysisRequest* request,
                                                       google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    std::optional<double> duration;
    if (request->has_duration_seconds()) duration = request->duration_seconds();
    if (request->audio_stage_only()) {
      return store_->RecordAudioStage(
          request->call_id(), request->token(), duration,
          {request->results().begin(), request->results().end()},
          {request->audio_results().begin(), request->audio_results().end()});
    }
    return store_->RecordAnalysis(
        request->call_id(), request->token(), duration,
        {request->results().begin(), request->results().end()},
        {request->metric_results().begin(), request->metric_results().end()});
  });
}

grpc::ServerUnaryReactor* CallsService::FailAnalysis(grpc::CallbackServerContext* context,
                                                     const v1::FailAnalysisRequest* request,
                                                     google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    return store_->FailAnalysis(request->call_id(), request->token(), request->reason(),
                                request->message());
  });
}

grpc::ServerUnaryReactor* CallsService::ReleaseAnalysis(grpc::CallbackServerContext* context,
                                                        const v1::ReleaseAnalysisRequest* request,
                                                        google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    return store_->ReleaseAnalysis(request->call_id(), request->token());
  });
}

grpc::ServerUnaryReactor* CallsService::LeaseTranscription(
    grpc::CallbackServerContext* context, const v1::LeaseTranscriptionRequest* request,
    v1::LeaseTranscriptionResponse* response) {
  return RunInternalUnary(
      context, pool_, internal_credential_, [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(
            std::optional<TranscriptionJob> job,
            store_->LeaseTranscription(absl::Seconds(std::max(1, request->lease_seconds())),
                                       std::max(1, request->max_attempts()), request->holder()));
        if (job) *response->mutable_job() = ToProto(*job);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* CallsService::RecordTranscription(
    grpc::CallbackServerContext* context, const v1::RecordTranscriptionRequest* request,
    google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    return store_->RecordTranscription(
        request->call_id(), request->token(),
        {request->transcript().begin(), request->transcript().end()});
  });
}

grpc::ServerUnaryReactor* CallsService::FailTranscription(
    grpc::CallbackServerContext* context, const v1::FailTranscriptionRequest* request,
    google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    return store_->FailTranscription(request->call_id(), request->token(), request->message());
  });
}

grpc::ServerUnaryReactor* CallsService::ReleaseTranscription(
    grpc::CallbackServerContext* context, const v1::ReleaseTranscriptionRequest* request,
    google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    return store_->ReleaseTranscription(request->call_id(), request->token());
  });
}

grpc::ServerUnaryReactor* CallsService::RenewAnalysisLease(grpc::CallbackServerContext* context,
                                                           const v1::RenewLeaseRequest* request,
                                                           google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    return store_->RenewAnalysisLease(request->call_id(), request->token(),
                                      absl::Seconds(std::max(1, request->lease_seconds())));
  });
}

grpc::ServerUnaryReactor* CallsService::RenewTranscriptionLease(
    grpc::CallbackServerContext* context, const v1::RenewLeaseRequest* request,
    google::protobuf::Empty* response) {
  return RunInternalUnary(context, pool_, internal_credential_, [this, request]() {
    return store_->RenewTranscriptionLease(request->call_id(), request->token(),
                                           absl::Seconds(std::max(1, request->lease_seconds())));
  });
}

grpc::ServerUnaryReactor* CallsService::ReleaseHolderLeases(
    grpc::CallbackServerContext* context, const v1::ReleaseHolderLeasesRequest* request,
    v1::ReleaseHolderLeasesResponse* response) {
  return RunInternalUnary(
      context, pool_, internal_credential_, [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(int released, store_->ReleaseLeasesOf(request->holder()));
        response->set_released(released);
        return absl::OkStatus();
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
  out.set_transcription_status(job.transcription_status);
  out.set_transcription_error(job.transcription_error);
  for (const auto& turn : job.generated_transcript) *out.add_generated_transcript() = turn;
  out.set_audio_stage_done(job.audio_stage_done);
  for (const auto& r : job.audio_results) *out.add_audio_results() = r;
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
  out.transcription_status = job.transcription_status();
  out.transcription_error = job.transcription_error();
  out.generated_transcript.assign(job.generated_transcript().begin(),
                                  job.generated_transcript().end());
  out.audio_stage_done = job.audio_stage_done();
  out.audio_results.assign(job.audio_results().begin(), job.audio_results().end());
  return out;
}

v1::TranscriptionJob ToProto(const TranscriptionJob& job) {
  v1::TranscriptionJob out;
  out.set_call_id(job.call_id);
  out.set_token(job.token);
  out.set_attempts(job.attempts);
  out.set_recording_path(job.recording_path);
  *out.mutable_metadata() = job.metadata;
  out.set_has_provided_transcript(job.has_provided_transcript);
  return out;
}

TranscriptionJob FromProto(const v1::TranscriptionJob& job) {
  TranscriptionJob out;
  out.call_id = job.call_id();
  out.token = job.token();
  out.attempts = job.attempts();
  out.recording_path = job.recording_path();
  out.metadata = job.metadata();
  out.has_provided_transcript = job.has_provided_transcript();
  return out;
}

}  // namespace calleval::calls

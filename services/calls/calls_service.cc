#include "services/calls/calls_service.h"

#include "common/pagination.h"
#include "common/status_macros.h"
#include "services/calls/calls_methods.h"
#include "services/calls/in_process_run_calls.h"

namespace calleval::calls {

absl::Span<const MethodEntry<CallsService>> CallsService::Methods() { return kCallsMethods; }

absl::Status CallsService::IngestCall(const RequestContext& context,
                                      const v1::IngestCallRequest& request, v1::Call* response) {
  ASSIGN_OR_RETURN(*response, store_->Ingest(context.workspace_id, request));
  if (on_ingest_) on_ingest_(*response);
  return absl::OkStatus();
}

absl::Status CallsService::GetCall(const RequestContext& context, const v1::GetCallRequest& request,
                                   v1::Call* response) {
  ASSIGN_OR_RETURN(*response, store_->Get(context.workspace_id, request.call_identifier_or_id()));
  return absl::OkStatus();
}

absl::Status CallsService::GetCallWaveform(const RequestContext& context,
                                           const v1::GetCallWaveformRequest& request,
                                           v1::CallWaveform* response) {
  ASSIGN_OR_RETURN(*response,
                   store_->GetWaveform(context.workspace_id, request.call_identifier_or_id()));
  return absl::OkStatus();
}

absl::Status CallsService::UpdateCall(const RequestContext& context,
                                      const v1::UpdateCallRequest& request, v1::Call* response) {
  std::optional<int64_t> agent_id;
  if (request.has_agent_id()) agent_id = request.agent_id();
  ASSIGN_OR_RETURN(*response, store_->Update(context.workspace_id, request.call_identifier_or_id(),
                                             agent_id, request.update()));
  return absl::OkStatus();
}

absl::Status CallsService::ListCalls(const RequestContext& context,
                                     const v1::ListCallsRequest& request,
                                     v1::ListCallsResponse* response) {
  ASSIGN_OR_RETURN(*response, store_->List(context.workspace_id, request));
  return absl::OkStatus();
}

absl::Status CallsService::DeleteCall(const RequestContext& context,
                                      const v1::DeleteCallRequest& request,
                                      google::protobuf::Empty* response) {
  return store_->Delete(context.workspace_id, request.call_identifier_or_id());
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

absl::Status CallsService::GetAgentStats(const RequestContext& context,
                                         const v1::GetAgentStatsRequest& request,
                                         v1::Stats* response) {
  if (stats_ == nullptr) return absl::UnavailableError("stats are not served by this process");
  ASSIGN_OR_RETURN(StatsRange range, RangeOf(request));
  ASSIGN_OR_RETURN(*response, stats_->AgentStats(context.workspace_id, request.agent_id(), range));
  return absl::OkStatus();
}

absl::Status CallsService::GetScenarioStats(const RequestContext& context,
                                            const v1::GetScenarioStatsRequest& request,
                                            v1::Stats* response) {
  if (stats_ == nullptr) return absl::UnavailableError("stats are not served by this process");
  ASSIGN_OR_RETURN(StatsRange range, RangeOf(request));
  ASSIGN_OR_RETURN(*response,
                   stats_->ScenarioStats(context.workspace_id, request.scenario_id(), range));
  return absl::OkStatus();
}

absl::Status CallsService::CreateAlertRule(const RequestContext& context,
                                           const v1::CreateAlertRuleRequest& request,
                                           v1::AlertRule* response) {
  if (alerts_ == nullptr) return absl::UnavailableError("alert rules are not served here");
  ASSIGN_OR_RETURN(*response, alerts_->Create(context.workspace_id, request));
  return absl::OkStatus();
}

absl::Status CallsService::ListAlertRules(const RequestContext& context,
                                          const v1::ListAlertRulesRequest& request,
                                          v1::ListAlertRulesResponse* response) {
  if (alerts_ == nullptr) return absl::UnavailableError("alert rules are not served here");
  ASSIGN_OR_RETURN(*response,
                   alerts_->List(context.workspace_id, request.has_page() ? request.page() : 1,
                                 request.has_per_page() ? request.per_page() : kDefaultPerPage));
  return absl::OkStatus();
}

absl::Status CallsService::GetAlertRule(const RequestContext& context,
                                        const v1::GetAlertRuleRequest& request,
                                        v1::AlertRule* response) {
  if (alerts_ == nullptr) return absl::UnavailableError("alert rules are not served here");
  ASSIGN_OR_RETURN(*response, alerts_->Get(context.workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status CallsService::DeleteAlertRule(const RequestContext& context,
                                           const v1::GetAlertRuleRequest& request,
                                           google::protobuf::Empty* response) {
  if (alerts_ == nullptr) return absl::UnavailableError("alert rules are not served here");
  return alerts_->Delete(context.workspace_id, request.id());
}

absl::Status CallsService::ListAlertDeliveries(const RequestContext& context,
                                               const v1::ListAlertDeliveriesRequest& request,
                                               v1::ListAlertDeliveriesResponse* response) {
  if (alerts_ == nullptr) return absl::UnavailableError("alert rules are not served here");
  ASSIGN_OR_RETURN(
      *response,
      alerts_->ListDeliveries(context.workspace_id, request.id(),
                              request.has_page() ? request.page() : 1,
                              request.has_per_page() ? request.per_page() : kDefaultPerPage));
  return absl::OkStatus();
}

absl::Status CallsService::LeaseAnalysis(const RequestContext& context,
                                         const v1::LeaseAnalysisRequest& request,
                                         v1::LeaseAnalysisResponse* response) {
  ASSIGN_OR_RETURN(std::optional<AnalysisJob> job,
                   store_->LeaseAnalysis(absl::Seconds(std::max(1, request.lease_seconds())),
                                         std::max(1, request.max_attempts()), request.holder()));
  if (job) *response->mutable_job() = ToProto(*job);
  return absl::OkStatus();
}

absl::Status CallsService::RecordAnalysis(const RequestContext& context,
                                          const v1::RecordAnalysisRequest& request,
                                          google::protobuf::Empty* response) {
  std::optional<double> duration;
  if (request.has_duration_seconds()) duration = request.duration_seconds();
  const v1::CallWaveform* waveform = request.has_waveform() ? &request.waveform() : nullptr;
  if (request.audio_stage_only()) {
    return store_->RecordAudioStage(
        request.call_id(), request.token(), duration,
        {request.results().begin(), request.results().end()},
        {request.audio_results().begin(), request.audio_results().end()}, waveform);
  }
  return store_->RecordAnalysis(request.call_id(), request.token(), duration,
                                {request.results().begin(), request.results().end()},
                                {request.metric_results().begin(), request.metric_results().end()},
                                waveform);
}

absl::Status CallsService::FailAnalysis(const RequestContext& context,
                                        const v1::FailAnalysisRequest& request,
                                        google::protobuf::Empty* response) {
  return store_->FailAnalysis(request.call_id(), request.token(), request.reason(),
                              request.message());
}

absl::Status CallsService::ReleaseAnalysis(const RequestContext& context,
                                           const v1::ReleaseAnalysisRequest& request,
                                           google::protobuf::Empty* response) {
  return store_->ReleaseAnalysis(request.call_id(), request.token());
}

absl::Status CallsService::RenewAnalysisLease(const RequestContext& context,
                                              const v1::RenewLeaseRequest& request,
                                              google::protobuf::Empty* response) {
  return store_->RenewAnalysisLease(request.call_id(), request.token(),
                                    absl::Seconds(std::max(1, request.lease_seconds())));
}

absl::Status CallsService::LeaseTranscription(const RequestContext& context,
                                              const v1::LeaseTranscriptionRequest& request,
                                              v1::LeaseTranscriptionResponse* response) {
  ASSIGN_OR_RETURN(
      std::optional<TranscriptionJob> job,
      store_->LeaseTranscription(absl::Seconds(std::max(1, request.lease_seconds())),
                                 std::max(1, request.max_attempts()), request.holder()));
  if (job) *response->mutable_job() = ToProto(*job);
  return absl::OkStatus();
}

absl::Status CallsService::RecordTranscription(const RequestContext& context,
                                               const v1::RecordTranscriptionRequest& request,
                                               google::protobuf::Empty* response) {
  return store_->RecordTranscription(request.call_id(), request.token(),
                                     {request.transcript().begin(), request.transcript().end()});
}

absl::Status CallsService::FailTranscription(const RequestContext& context,
                                             const v1::FailTranscriptionRequest& request,
                                             google::protobuf::Empty* response) {
  return store_->FailTranscription(request.call_id(), request.token(), request.message());
}

absl::Status CallsService::ReleaseTranscription(const RequestContext& context,
                                                const v1::ReleaseTranscriptionRequest& request,
                                                google::protobuf::Empty* response) {
  return store_->ReleaseTranscription(request.call_id(), request.token());
}

absl::Status CallsService::RenewTranscriptionLease(const RequestContext& context,
                                                   const v1::RenewLeaseRequest& request,
                                                   google::protobuf::Empty* response) {
  return store_->RenewTranscriptionLease(request.call_id(), request.token(),
                                         absl::Seconds(std::max(1, request.lease_seconds())));
}

absl::Status CallsService::ReleaseHolderLeases(const RequestContext& context,
                                               const v1::ReleaseHolderLeasesRequest& request,
                                               v1::ReleaseHolderLeasesResponse* response) {
  ASSIGN_OR_RETURN(int released, store_->ReleaseLeasesOf(request.holder()));
  response->set_released(released);
  return absl::OkStatus();
}

absl::Status CallsService::GetRecordingLocation(const RequestContext& /*context*/,
                                                const v1::GetRecordingLocationRequest& request,
                                                v1::RecordingLocation* response) {
  ASSIGN_OR_RETURN(StoredRecording recording, store_->GetRecording(request.call_id()));
  response->set_key(recording.key);
  response->set_content_type(recording.content_type);
  response->set_bytes(recording.bytes);
  return absl::OkStatus();
}

absl::Status CallsService::IngestRunCall(const RequestContext& /*context*/,
                                         const v1::IngestRunCallRequest& request,
                                         v1::Call* response) {
  std::optional<runs::RunRecording> recording;
  if (!request.recording_key().empty()) {
    recording = runs::RunRecording{request.recording_key(), request.recording_content_type(),
                                   request.recording_bytes()};
  }
  runs::RunCallOrigin origin{request.run_id(), request.scenario_id()};
  if (request.has_platform_version()) origin.platform_version = request.platform_version();
  InProcessRunCalls calls(store_, on_ingest_);
  ASSIGN_OR_RETURN(*response,
                   calls.Ingest(request.workspace_id(), request.call(), origin, recording));
  return absl::OkStatus();
}

absl::Status CallsService::GetWorkspaceCall(const RequestContext& /*context*/,
                                            const v1::GetWorkspaceCallRequest& request,
                                            v1::Call* response) {
  InProcessRunCalls calls(store_, nullptr);
  ASSIGN_OR_RETURN(*response, calls.Get(request.workspace_id(), request.call_identifier_or_id()));
  return absl::OkStatus();
}

absl::Status CallsService::GetCallFigures(const RequestContext& /*context*/,
                                          const v1::GetCallFiguresRequest& request,
                                          v1::CallFiguresList* response) {
  InProcessRunCalls calls(store_, nullptr);
  const std::vector<int64_t> ids(request.call_ids().begin(), request.call_ids().end());
  ASSIGN_OR_RETURN(*response, calls.Figures(request.workspace_id(), ids));
  return absl::OkStatus();
}

v1::AnalysisJob ToProto(const AnalysisJob& job) {
  v1::AnalysisJob out;
  out.set_call_id(job.call_id);
  out.set_token(job.token);
  out.set_attempts(job.attempts);
  out.set_observation_type(job.observation_type);
  out.set_recording_key(job.recording_key);
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
  out.recording_key = job.recording_key();
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
  out.set_recording_key(job.recording_key);
  *out.mutable_metadata() = job.metadata;
  out.set_has_provided_transcript(job.has_provided_transcript);
  return out;
}

TranscriptionJob FromProto(const v1::TranscriptionJob& job) {
  TranscriptionJob out;
  out.call_id = job.call_id();
  out.token = job.token();
  out.attempts = job.attempts();
  out.recording_key = job.recording_key();
  out.metadata = job.metadata();
  out.has_provided_transcript = job.has_provided_transcript();
  return out;
}

}  // namespace calleval::calls

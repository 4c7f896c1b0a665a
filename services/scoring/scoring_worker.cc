#include "services/scoring/scoring_worker.h"

#include <grpcpp/client_context.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/standard_metrics.h"
#include "common/status_macros.h"
#include "services/calls/calls_service.h"
#include "services/scoring/analysis.h"
#include "services/scoring/audio_metrics.h"
#include "services/judges/llm_judge.h"
#include "services/scoring/custom_metrics.h"
#include "services/scoring/local_recording.h"
#include "services/scoring/transcription_accuracy.h"

namespace calleval::scoring {
namespace {

bool HasProvidedTranscript(const calls::AnalysisJob& job) {
  return job.call.transcript_source() == "provided";
}

bool TranscriptionEnded(const calls::AnalysisJob& job) {
  return job.transcription_status == "completed" || job.transcription_status == "failed";
}

// Whether a voice call's planned metrics beyond the audio ones need its transcription, which
// has not ended: transcription_accuracy compares the provided transcript with it, and without a
// provided transcript the transcript-judged metrics judge the generated one. (Without an LLM
// provider the LLM-judged standard metrics fail at once and need nothing.)
bool WaitsForTranscription(const calls::AnalysisJob& job, const Judges& tools) {
  if (job.observation_type != "voice" || TranscriptionEnded(job)) return false;
  const bool provided = HasProvidedTranscript(job);
  for (int64_t id : job.planned_metric_ids) {
    const StandardMetricInfo* info = FindStandardMetric(id);
    if (id == kTranscriptionAccuracyMetricId) {
      if (provided) return true;
    } else if (id == kWordsPerMinuteMetricId) {
      if (!provided) return true;  // the words to count are the generated transcript's
    } else if (info == nullptr) {
      if (!provided) return true;  // a custom metric
    } else if (!info->requires_audio && !provided && tools.llm != nullptr) {
      return true;
    }
  }
  return false;
}

// Why a voice call has no transcript to judge: its transcription failed (else empty).
std::string NoTranscriptReason(const calls::AnalysisJob& job) {
  if (job.observation_type != "voice" || !job.transcript.empty() ||
      job.transcription_status != "failed") {
    return "";
  }
  return absl::StrCat("no transcript: the transcription failed: ", job.transcription_error);
}

v1::StandardMetricResult TranscriptionAccuracyOf(const calls::AnalysisJob& job) {
  if (!HasProvidedTranscript(job)) return TranscriptionAccuracyNotApplicable(kNoProvidedTranscript);
  if (job.transcription_status != "completed") {
    v1::StandardMetricResult r = NewStandardMetricResult(kTranscriptionAccuracyMetricId, "failed");
    r.set_error(job.transcription_status == "failed"
                    ? absl::StrCat("the transcription failed: ", job.transcription_error)
                    : std::string("the recording was not transcribed"));
    return r;
  }
  return TranscriptionAccuracy(job.transcript, job.generated_transcript);
}

// words_per_minute of a voice call that had no transcript at its audio pass (`measured`, not
// applicable for want of words): once the recording is transcribed, the generated transcript's
// words over the speaking times measured; when the transcription failed, failed with the reason.
// Anything else (a provided transcript, a mono call whose roles are unknown) stays as measured.
v1::StandardMetricResult WordsPerMinuteOf(const calls::AnalysisJob& job,
                                          const v1::StandardMetricResult& measured) {
  if (HasProvidedTranscript(job) || measured.status() != "not_applicable" ||
      measured.error() != kWordsNeedATranscript) {
    return measured;
  }
  if (job.transcription_status == "completed") {
    return RecountWordsPerMinute(measured, job.generated_transcript, "generated");
  }
  if (job.transcription_status == "failed") {
    v1::StandardMetricResult r = measured;
    r.set_status("failed");
    r.set_error(absl::StrCat("no transcript to count words: the transcription failed: ",
                             job.transcription_error));
    return r;
  }
  return measured;
}

// user_sentiment (11) and task_completion (12): the LLM judge on the transcript, both in one
// provider request when batching is on.
std::vector<v1::StandardMetricResult> JudgeStandardWithLlm(
    const std::vector<const StandardMetricInfo*>& metrics, const calls::AnalysisJob& job,
    const Judges& tools, const std::string& no_transcript_reason) {
  std::vector<v1::StandardMetricResult> out;
  if (tools.llm == nullptr || job.transcript.empty()) {
    for (const StandardMetricInfo* info : metrics) {
      const bool failed = tools.llm == nullptr || !no_transcript_reason.empty();
      v1::StandardMetricResult r =
          NewStandardMetricResult(info->id, failed ? "failed" : "not_applicable");
      r.set_error(tools.llm == nullptr            ? std::string("llm_unavailable")
                  : !no_transcript_reason.empty() ? no_transcript_reason
                                                  : "the call has no transcript to judge");
      out.push_back(std::move(r));
    }
    return out;
  }
  std::vector<judges::LlmQuestion> questions;
  for (const StandardMetricInfo* info : metrics) {
    judges::LlmQuestion question;
    question.name = std::string(info->name);
    if (info->key == "user_sentiment") {
      question.instructions =
          "What is the caller's (User's) overall sentiment over the whole conversation, "
          "weighing how they sound at the end most: positive, neutral or negative?";
      question.result_type = "enum";
      question.enum_values = {"positive", "neutral", "negative"};
    } else {
      question.instructions =
          "Did the agent accomplish what the caller asked for? true when every request of the "
          "caller was answered, done, or correctly handed off; false when a request was left "
          "unresolved, refused without reason, or answered wrongly.";
      question.result_type = "boolean";
    }
    questions.push_back(std::move(question));
  }
  const std::vector<judges::LlmJudgement> judged =
      judges::JudgeAllWithLlm(*tools.llm, questions, job.transcript, tools.llm_batch);
  for (size_t i = 0; i < metrics.size(); ++i) {
    if (!judged[i].ok) {
      v1::StandardMetricResult r = NewStandardMetricResult(metrics[i]->id, "failed");
      r.set_error(judged[i].error);
      out.push_back(std::move(r));
      continue;
    }
    v1::StandardMetricResult r = NewStandardMetricResult(metrics[i]->id, "completed");
    auto& fields = *r.mutable_result()->mutable_fields();
    fields["value"] = judged[i].value;
    fields["explanation"].set_string_value(judged[i].explanation);
    if (judged[i].value.has_bool_value()) r.set_score(judged[i].value.bool_value() ? 1.0 : 0.0);
    out.push_back(std::move(r));
  }
  return out;
}

bool CancelledByShutdown(const JobOutcome& outcome) {
  auto cancelled = [](const std::string& error) {
    return absl::StartsWith(error, "llm_cancelled") ||
           absl::StrContains(error, ": llm_cancelled");
  };
  for (const auto& r : outcome.results) {
    if (cancelled(r.error())) return true;
  }
  for (const auto& r : outcome.metric_results) {
    if (cancelled(r.error())) return true;
  }
  return false;
}

bool Planned(const calls::AnalysisJob& job, int64_t id) {
  for (int64_t p : job.planned_metric_ids) {
    if (p == id) return true;
  }
  return false;
}

}  // namespace

JobOutcome ScoreJob(const calls::AnalysisJob& job, const std::string& recording_path,
                    const Judges& tools) {
  JobOutcome out;
  const bool voice = job.observation_type == "voice";
  std::vector<v1::StandardMetricResult> all_standard;
  if (voice && job.audio_stage_done) {
    all_standard = job.audio_results;
  } else if (voice) {
    AnalysisOptions options;
    options.channel_map = ChannelMapOf(job.metadata);
    options.silence_threshold_ms = job.silence_threshold_ms;
    absl::StatusOr<AnalysisResult> analysis = AnalyzeRecording(
        recording_path, job.transcript.empty() ? nullptr : &job.transcript, options);
    if (!analysis.ok()) {
      out.status = analysis.status();
      const std::string code = ErrorInfoOf(analysis.status()).code();
      out.failure_reason = code == "unsupported_audio" ? code : "analysis_failed";
      return out;
    }
    out.duration_s = analysis->duration_seconds;
    all_standard = std::move(analysis->standard_metrics);
    out.waveform = std::move(analysis->waveform);
  }
  const bool waits = WaitsForTranscription(job, tools);
  for (auto& m : all_standard) {
    if (voice && m.metric_id() == kWordsPerMinuteMetricId && !waits) {
      m = WordsPerMinuteOf(job, m);
    }
    // Shown pending until the transcription ends: the words it counts are not known yet.
    const bool wpm_pending = waits && m.metric_id() == kWordsPerMinuteMetricId &&
                             m.status() == "not_applicable" && m.error() == kWordsNeedATranscript;
    if (Planned(job, m.metric_id()) && !wpm_pending) out.results.push_back(m);
  }
  if (waits) {
    out.audio_stage_only = true;
    out.audio_results = std::move(all_standard);
    return out;
  }
  if (voice && Planned(job, kTranscriptionAccuracyMetricId)) {
    v1::StandardMetricResult accuracy = TranscriptionAccuracyOf(job);
    out.results.push_back(accuracy);
    all_standard.push_back(std::move(accuracy));
  }
  const std::string no_transcript_reason = NoTranscriptReason(job);
  // The transcript-judged standard metrics, by the LLM provider.
  std::vector<const StandardMetricInfo*> transcript_judged;
  for (const StandardMetricInfo& m : kStandardMetrics) {
    if (!m.requires_audio && Planned(job, m.id)) transcript_judged.push_back(&m);
  }
  if (!transcript_judged.empty()) {
    for (v1::StandardMetricResult& r :
         JudgeStandardWithLlm(transcript_judged, job, tools, no_transcript_reason)) {
      out.results.push_back(r);
      all_standard.push_back(std::move(r));
    }
  }
  out.metric_results = JudgeCustomMetrics(job, all_standard, tools, no_transcript_reason);
  return out;
}

GrpcAnalysisQueue::GrpcAnalysisQueue(std::shared_ptr<grpc::Channel> calls, absl::Duration lease,
                                     int max_attempts, std::string holder)
    : stub_(v1::Calls::NewStub(std::move(calls))),
      lease_(lease),
      max_attempts_(max_attempts),
      holder_(std::move(holder)) {}

namespace {

// Every queue call is short; a calls role that does not answer in time is retried later.
void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
}

}  // namespace

absl::StatusOr<std::optional<calls::AnalysisJob>> GrpcAnalysisQueue::Lease() {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::LeaseAnalysisRequest request;
  request.set_lease_seconds(static_cast<int32_t>(absl::ToInt64Seconds(lease_)));
  request.set_max_attempts(max_attempts_);
  request.set_holder(holder_);
  v1::LeaseAnalysisResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub_->LeaseAnalysis(&context, request, &response)));
  if (!response.has_job()) return std::nullopt;
  return std::optional<calls::AnalysisJob>(calls::FromProto(response.job()));
}

absl::Status GrpcAnalysisQueue::Record(const calls::AnalysisJob& job,
                                       std::optional<double> duration_s,
                                       const std::vector<v1::StandardMetricResult>& results,
                                       const std::vector<v1::MetricResult>& metric_results,
                                       const v1::CallWaveform* waveform) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::RecordAnalysisRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  if (duration_s) request.set_duration_seconds(*duration_s);
  for (const auto& r : results) *request.add_results() = r;
  for (const auto& r : metric_results) *request.add_metric_results() = r;
  if (waveform != nullptr) *request.mutable_waveform() = *waveform;
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->RecordAnalysis(&context, request, &empty));
}

absl::Status GrpcAnalysisQueue::RecordAudioStage(
    const calls::AnalysisJob& job, std::optional<double> duration_s,
    const std::vector<v1::StandardMetricResult>& planned_results,
    const std::vector<v1::StandardMetricResult>& audio_results,
    const v1::CallWaveform* waveform) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::RecordAnalysisRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  if (duration_s) request.set_duration_seconds(*duration_s);
  for (const auto& r : planned_results) *request.add_results() = r;
  request.set_audio_stage_only(true);
  for (const auto& r : audio_results) *request.add_audio_results() = r;
  if (waveform != nullptr) *request.mutable_waveform() = *waveform;
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->RecordAnalysis(&context, request, &empty));
}

absl::Status GrpcAnalysisQueue::Fail(const calls::AnalysisJob& job, absl::string_view reason,
                                     absl::string_view message) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::FailAnalysisRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  request.set_reason(std::string(reason));
  request.set_message(std::string(message));
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->FailAnalysis(&context, request, &empty));
}

absl::Status GrpcAnalysisQueue::Release(const calls::AnalysisJob& job) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ReleaseAnalysisRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->ReleaseAnalysis(&context, request, &empty));
}

absl::Status GrpcAnalysisQueue::Renew(const calls::AnalysisJob& job) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::RenewLeaseRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  request.set_lease_seconds(static_cast<int32_t>(absl::ToInt64Seconds(lease_)));
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->RenewAnalysisLease(&context, request, &empty));
}

absl::StatusOr<int> ReleaseHolderLeasesOverGrpc(const std::shared_ptr<grpc::Channel>& calls,
                                                absl::string_view holder) {
  std::unique_ptr<v1::Calls::Stub> stub = v1::Calls::NewStub(calls);
  grpc::ClientContext context;
  // At start-up the calls role may be starting too: wait for it a little.
  context.set_wait_for_ready(true);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ReleaseHolderLeasesRequest request;
  request.set_holder(std::string(holder));
  v1::ReleaseHolderLeasesResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub->ReleaseHolderLeases(&context, request, &response)));
  return response.released();
}

void ScoringWorkers::Start() {
  if (queue_->lease() > absl::ZeroDuration()) {
    heartbeat_ = std::make_unique<LeaseHeartbeat>("scoring",
                                                  LeaseHeartbeat::IntervalFor(queue_->lease()));
  }
  workers_.Start(
      options_.workers, options_.poll_interval, [this] { return WorkOnce(); }, "analysis");
}

bool ScoringWorkers::WorkOnce() {
  auto job = queue_->Lease();
  if (!job.ok()) {
    LogWarn("scoring: leasing a call failed", {{"error", job.status()}});
    return false;
  }
  if (!job->has_value()) return false;
  const calls::AnalysisJob& leased = **job;
  // Once per call: a voice call's analysis is leased again after its transcription.
  if (leased.attempts == 1) ObserveQueueWait("analysis", leased.call.created_at());
  // Renewed until reported (the handle is destroyed before the job).
  std::unique_ptr<LeaseHeartbeat::Held> held;
  if (heartbeat_) {
    calls::AnalysisJob ref;
    ref.call_id = leased.call_id;
    ref.token = leased.token;
    held = heartbeat_->Hold([this, ref] { return queue_->Renew(ref); });
  }
  // Only a voice call whose recording waits for transcription concerns the transcription
  // workers; waking them for every text call would cost a write transaction per call.
  if (options_.on_leased && leased.observation_type == "voice" &&
      leased.transcription_status == "pending") {
    options_.on_leased();
  }
  // The recording, for a voice call whose audio stage is still to be scored: read through the
  // blob store, never from another role's working dir.
  std::optional<LocalRecording> recording;
  if (leased.observation_type == "voice" && !leased.audio_stage_done) {
    absl::StatusOr<LocalRecording> fetched =
        options_.recordings == nullptr
            ? absl::FailedPreconditionError("no blob store for recordings")
            : LocalRecording::Fetch(*options_.recordings, leased.recording_key,
                                    options_.scratch_dir, options_.max_recording_bytes);
    if (!fetched.ok()) {
      LogWarn("scoring: the recording could not be read", {{"call_id", leased.call_id},
                                                          {"attempt", leased.attempts},
                                                          {"error", fetched.status()}});
      if (fetched.status().code() == absl::StatusCode::kUnavailable &&
          leased.attempts < options_.recording_attempts) {
        // Not reported: the heartbeat stops, the lease runs out and the call is leased again, a
        // lease later (the attempts count it).
        held.reset();
        return true;
      }
      absl::Status reported = queue_->Fail(
          leased, "recording_unavailable",
          absl::StrCat("the recording could not be read: ", fetched.status().message()));
      if (!reported.ok()) {
        LogWarn("scoring: reporting failed", {{"call_id", leased.call_id}, {"error", reported}});
      }
      return true;
    }
    recording.emplace(*std::move(fetched));
  }
  JobOutcome outcome =
      ScoreJob(leased, recording.has_value() ? recording->path() : std::string(), options_.judges);
  if (held && held->lost()) {
    // The lease expired and another worker took the call: its report would be refused.
    LogWarn("scoring: lease lost, result dropped", {{"call_id", leased.call_id}});
    return true;
  }
  // A stop that cancelled provider requests mid-job gives the call back unscored rather than
  // recording "cancelled" failures: another worker, or this one after a restart, scores it in
  // full.
  absl::Status reported;
  const v1::CallWaveform* waveform = outcome.waveform ? &*outcome.waveform : nullptr;
  if (CancelledByShutdown(outcome)) {
    reported = queue_->Release(leased);
  } else if (!outcome.status.ok()) {
    LogWarn("scoring failed", {{"call_id", leased.call_id},
                               {"reason", outcome.failure_reason},
                               {"error", outcome.status}});
    reported = queue_->Fail(leased, outcome.failure_reason, outcome.status.message());
  } else if (outcome.audio_stage_only) {
    reported = queue_->RecordAudioStage(leased, outcome.duration_s, outcome.results,
                                        outcome.audio_results, waveform);
  } else {
    reported = queue_->Record(leased, outcome.duration_s, outcome.results, outcome.metric_results,
                              waveform);
  }
  if (!reported.ok()) {
    LogWarn("scoring: reporting failed", {{"call_id", leased.call_id}, {"error", reported}});
  }
  return true;
}

}  // namespace calleval::scoring

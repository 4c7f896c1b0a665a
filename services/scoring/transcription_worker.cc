#include "services/scoring/transcription_worker.h"

#include <grpcpp/client_context.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "services/calls/calls_service.h"
#include "services/scoring/analysis.h"
#include "services/scoring/audio_decoder.h"
#include "services/scoring/local_recording.h"

namespace calleval::scoring {

namespace {

// One channel on its way to the recognizer: samples are buffered until a piece is there, cut
// at a quiet point, transcribed and dropped, so memory stays flat with the call's length.
class ChannelPieces {
 public:
  ChannelPieces(SpeechRecognizer* recognizer, double piece_seconds)
      : recognizer_(recognizer), piece_seconds_(piece_seconds) {}

  absl::Status Add(absl::Span<const float> samples) {
    AppendPcm16(samples, &buffer_);
    // ChunkBoundaries looks for the quietest point up to 30 s before the nominal cut.
    while (buffer_.size() > static_cast<size_t>(piece_seconds_ * kSpeechSampleRate)) {
      const std::vector<size_t> cuts = ChunkBoundaries(buffer_, piece_seconds_);
      if (cuts.empty()) break;
      RETURN_IF_ERROR(TranscribeFront(cuts.front()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ChannelTranscript> Finish() {
    if (!buffer_.empty()) RETURN_IF_ERROR(TranscribeFront(buffer_.size()));
    return std::move(words_);
  }

 private:
  absl::Status TranscribeFront(size_t count) {
    std::vector<int16_t> piece(buffer_.begin(), buffer_.begin() + count);
    buffer_.erase(buffer_.begin(), buffer_.begin() + count);
    ASSIGN_OR_RETURN(ChannelTranscript part, recognizer_->Transcribe(piece));
    const double offset = static_cast<double>(consumed_) / kSpeechSampleRate;
    for (RecognizedWord& word : part.words) {
      word.start_seconds += offset;
      word.end_seconds += offset;
      words_.words.push_back(std::move(word));
    }
    consumed_ += count;
    return absl::OkStatus();
  }

  SpeechRecognizer* recognizer_;
  const double piece_seconds_;
  std::vector<int16_t> buffer_;
  size_t consumed_ = 0;
  ChannelTranscript words_;
};

}  // namespace

absl::StatusOr<std::vector<v1::Turn>> TranscribeRecording(const std::string& path,
                                                          const ChannelMap& channel_map,
                                                          bool has_provided_transcript,
                                                          SpeechRecognizer& recognizer,
                                                          double piece_seconds) {
  ASSIGN_OR_RETURN(std::unique_ptr<AudioDecoder> decoder,
                   AudioDecoder::Open(path, kSpeechSampleRate));
  const int channels = decoder->channels();
  if (channels == 1 && !has_provided_transcript) {
    return MakeError(absl::StatusCode::kFailedPrecondition, "mono_recording",
                     "mono recording without a provided transcript: speech-to-text cannot "
                     "tell the agent from the caller; send a stereo recording (agent and "
                     "caller on separate channels) or a transcript");
  }
  std::vector<ChannelPieces> pieces(channels, ChannelPieces(&recognizer, piece_seconds));
  std::array<std::vector<float>, 2> block;
  while (true) {
    ASSIGN_OR_RETURN(size_t frames, decoder->Read(&block));
    if (frames == 0) break;
    for (int c = 0; c < channels; ++c) {
      RETURN_IF_ERROR(pieces[c].Add(absl::MakeConstSpan(block[c].data(), frames)));
    }
  }
  if (channels == 1) {
    ASSIGN_OR_RETURN(ChannelTranscript words, pieces[0].Finish());
    return MergeChannels(words, ChannelTranscript{});
  }
  ASSIGN_OR_RETURN(ChannelTranscript agent, pieces[channel_map.agent].Finish());
  ASSIGN_OR_RETURN(ChannelTranscript user, pieces[channel_map.user].Finish());
  return MergeChannels(agent, user);
}

namespace {

// Every queue call is short; a calls role that does not answer in time is retried later.
void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
}

}  // namespace

GrpcTranscriptionQueue::GrpcTranscriptionQueue(std::shared_ptr<grpc::Channel> calls,
                                               absl::Duration lease, int max_attempts,
                                               std::string holder)
    : stub_(v1::Calls::NewStub(std::move(calls))),
      lease_(lease),
      max_attempts_(max_attempts),
      holder_(std::move(holder)) {}

absl::StatusOr<std::optional<calls::TranscriptionJob>> GrpcTranscriptionQueue::Lease() {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::LeaseTranscriptionRequest request;
  request.set_lease_seconds(static_cast<int32_t>(absl::ToInt64Seconds(lease_)));
  request.set_max_attempts(max_attempts_);
  request.set_holder(holder_);
  v1::LeaseTranscriptionResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub_->LeaseTranscription(&context, request, &response)));
  if (!response.has_job()) return std::nullopt;
  return std::optional<calls::TranscriptionJob>(calls::FromProto(response.job()));
}

absl::Status GrpcTranscriptionQueue::Record(const calls::TranscriptionJob& job,
                                            const std::vector<v1::Turn>& transcript) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::RecordTranscriptionRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  for (const auto& turn : transcript) *request.add_transcript() = turn;
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->RecordTranscription(&context, request, &empty));
}

absl::Status GrpcTranscriptionQueue::Fail(const calls::TranscriptionJob& job,
                                          absl::string_view message) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::FailTranscriptionRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  request.set_message(std::string(message));
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->FailTranscription(&context, request, &empty));
}

absl::Status GrpcTranscriptionQueue::Release(const calls::TranscriptionJob& job) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ReleaseTranscriptionRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->ReleaseTranscription(&context, request, &empty));
}

absl::Status GrpcTranscriptionQueue::Renew(const calls::TranscriptionJob& job) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::RenewLeaseRequest request;
  request.set_call_id(job.call_id);
  request.set_token(job.token);
  request.set_lease_seconds(static_cast<int32_t>(absl::ToInt64Seconds(lease_)));
  google::protobuf::Empty empty;
  return FromGrpcStatus(stub_->RenewTranscriptionLease(&context, request, &empty));
}

void TranscriptionWorkers::Start() {
  if (queue_->lease() > absl::ZeroDuration()) {
    heartbeat_ = std::make_unique<LeaseHeartbeat>("transcription",
                                                  LeaseHeartbeat::IntervalFor(queue_->lease()));
  }
  workers_.Start(
      options_.workers, options_.poll_interval, [this] { return WorkOnce(); }, "transcription");
}

namespace {
// A recording the store cannot give (unreachable) is tried again on the next lease; at this
// attempt the transcription ends failed with the store's reason.
constexpr int kRecordingAttempts = 3;
}  // namespace

void TranscriptionWorkers::Run(const calls::TranscriptionJob& job,
                               std::unique_ptr<SpeechRecognizer>* recognizer) {
  absl::Status reported;
  if (*recognizer == nullptr) {
    // Made on the first job, not at start: a process that never sees a voice call never loads
    // a model. A factory that fails (model files missing) fails this job and is tried again on
    // the next.
    absl::StatusOr<std::unique_ptr<SpeechRecognizer>> made = options_.make_recognizer(workers_.cancel_flag());
    if (!made.ok()) {
      reported = queue_->Fail(job, made.status().message());
      LogWarn("transcription: no recognizer", {{"call_id", job.call_id}, {"error", made.status()}});
      if (!reported.ok()) {
        LogWarn("transcription: reporting failed", {{"call_id", job.call_id}, {"error", reported}});
      }
      if (options_.on_reported) options_.on_reported();
      return;
    }
    *recognizer = *std::move(made);
  }
  // Renewed until reported.
  std::unique_ptr<LeaseHeartbeat::Held> held;
  if (heartbeat_) {
    calls::TranscriptionJob ref;
    ref.call_id = job.call_id;
    ref.token = job.token;
    held = heartbeat_->Hold([this, ref] { return queue_->Renew(ref); });
  }
  // Read through the blob store, never from another role's working dir.
  absl::StatusOr<LocalRecording> recording =
      options_.recordings == nullptr
          ? absl::FailedPreconditionError("no blob store for recordings")
          : LocalRecording::Fetch(*options_.recordings, job.recording_key, options_.scratch_dir,
                                  options_.max_recording_bytes);
  if (!recording.ok()) {
    LogWarn("transcription: the recording could not be read",
            {{"call_id", job.call_id}, {"attempt", job.attempts}, {"error", recording.status()}});
    if (recording.status().code() == absl::StatusCode::kUnavailable &&
        job.attempts < kRecordingAttempts) {
      // Not reported: the lease runs out and the recording is leased again, a lease later.
      return;
    }
    reported = queue_->Fail(job, absl::StrCat("the recording could not be read: ",
                                              recording.status().message()));
    if (!reported.ok()) {
      LogWarn("transcription: reporting failed", {{"call_id", job.call_id}, {"error", reported}});
    }
    if (options_.on_reported) options_.on_reported();
    return;
  }
  absl::StatusOr<std::vector<v1::Turn>> transcript = TranscribeRecording(
      recording->path(), ChannelMapOf(job.metadata), job.has_provided_transcript, **recognizer);
  if (held && held->lost()) {
    // The lease expired and another worker took the recording: its report would be refused.
    LogWarn("transcription: lease lost, transcript dropped", {{"call_id", job.call_id}});
    return;
  }
  if (!transcript.ok() && transcript.status().code() == absl::StatusCode::kCancelled) {
    // Stopping: give the recording back untranscribed; the next start takes it up again.
    reported = queue_->Release(job);
  } else if (!transcript.ok()) {
    LogWarn("transcription failed", {{"call_id", job.call_id}, {"error", transcript.status()}});
    reported = queue_->Fail(job, transcript.status().message());
  } else {
    reported = queue_->Record(job, *transcript);
  }
  if (!reported.ok()) {
    LogWarn("transcription: reporting failed", {{"call_id", job.call_id}, {"error", reported}});
  }
  if (options_.on_reported) options_.on_reported();
}

bool TranscriptionWorkers::WorkOnce() {
  // Each thread keeps its recognizer (a loaded model) across jobs.
  thread_local std::unique_ptr<SpeechRecognizer> recognizer;
  auto job = queue_->Lease();
  if (!job.ok()) {
    LogWarn("transcription: leasing a recording failed", {{"error", job.status()}});
    return false;
  }
  if (!job->has_value()) return false;
  Run(**job, &recognizer);
  return true;
}

}  // namespace calleval::scoring

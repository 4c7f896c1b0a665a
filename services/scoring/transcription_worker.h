#pragma once

// Transcription workers: lease a voice call's recording from the transcription queue, turn
// each channel into words with a speech recognizer (speech_to_text.h), merge them into a timed,
// role-labelled transcript and report it with the lease token. This runs beside the audio pass
// rather than in it: transcribing takes about a tenth of the call's length with the embedded
// recognizer, while the audio metrics take a fraction of a second, so they are never held up.
// The analysis queue hands a `computed` call out again once its transcription has ended.

#include <grpcpp/channel.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "common/blob_store.h"
#include "common/lease_heartbeat.h"
#include "common/polling_workers.h"
#include "services/calls/calls_store.h"
#include "services/scoring/speech_to_text.h"
#include "services/scoring/timeline.h"

namespace calleval::scoring {

// The transcript of a recording: each channel transcribed on its own (stereo: the agent's and
// the caller's per `channel_map`) and merged. The file is decoded in blocks and each channel
// handed to the recognizer in pieces of about `piece_seconds`, cut at the quietest 100 ms of
// the 30 s before each nominal cut, so memory does not grow with the call (an hour of stereo
// audio held whole would take 230 MB). A mono recording cannot say who spoke, so it is
// transcribed only when the call has a provided transcript to compare with (its turns are all
// labelled "AI Assistant" and used for transcription_accuracy only); without one the answer is
// kFailedPrecondition (code mono_recording), before anything is decoded.
inline constexpr double kTranscriptionPieceSeconds = 300;
absl::StatusOr<std::vector<v1::Turn>> TranscribeRecording(
    const std::string& path, const ChannelMap& channel_map, bool has_provided_transcript,
    SpeechRecognizer& recognizer, double piece_seconds = kTranscriptionPieceSeconds);

// Where transcription jobs come from and results go. In one process: the calls store itself.
class TranscriptionQueue {
 public:
  virtual ~TranscriptionQueue() = default;
  virtual absl::StatusOr<std::optional<calls::TranscriptionJob>> Lease() = 0;
  virtual absl::Status Record(const calls::TranscriptionJob& job,
                              const std::vector<v1::Turn>& transcript) = 0;
  virtual absl::Status Fail(const calls::TranscriptionJob& job, absl::string_view message) = 0;
  virtual absl::Status Release(const calls::TranscriptionJob& job) = 0;
  // Extends the job's lease by lease() from now (the heartbeat); kFailedPrecondition when the
  // lease is lost. Only job.call_id and job.token are read.
  virtual absl::Status Renew(const calls::TranscriptionJob& job) { return absl::OkStatus(); }
  // How long a lease lasts; the workers renew every third of it. Zero: no heartbeat.
  virtual absl::Duration lease() const { return absl::ZeroDuration(); }
};

class StoreTranscriptionQueue : public TranscriptionQueue {
 public:
  // `holder`: this process's lease holder id, carried by the tokens it takes.
  StoreTranscriptionQueue(calls::CallsStore* store, absl::Duration lease, int max_attempts,
                          std::string holder = "")
      : store_(store), lease_(lease), max_attempts_(max_attempts), holder_(std::move(holder)) {}
  absl::StatusOr<std::optional<calls::TranscriptionJob>> Lease() override {
    return store_->LeaseTranscription(lease_, max_attempts_, holder_);
  }
  absl::Status Renew(const calls::TranscriptionJob& job) override {
    return store_->RenewTranscriptionLease(job.call_id, job.token, lease_);
  }
  absl::Duration lease() const override { return lease_; }
  absl::Status Record(const calls::TranscriptionJob& job,
                      const std::vector<v1::Turn>& transcript) override {
    return store_->RecordTranscription(job.call_id, job.token, transcript);
  }
  absl::Status Fail(const calls::TranscriptionJob& job, absl::string_view message) override {
    return store_->FailTranscription(job.call_id, job.token, message);
  }
  absl::Status Release(const calls::TranscriptionJob& job) override {
    return store_->ReleaseTranscription(job.call_id, job.token);
  }

 private:
  calls::CallsStore* store_;
  absl::Duration lease_;
  int max_attempts_;
  std::string holder_;
};

// The queue of a calls role in another process, over gRPC.
class GrpcTranscriptionQueue : public TranscriptionQueue {
 public:
  GrpcTranscriptionQueue(std::shared_ptr<grpc::Channel> calls, absl::Duration lease,
                         int max_attempts, std::string holder = "");
  absl::StatusOr<std::optional<calls::TranscriptionJob>> Lease() override;
  absl::Status Record(const calls::TranscriptionJob& job,
                      const std::vector<v1::Turn>& transcript) override;
  absl::Status Fail(const calls::TranscriptionJob& job, absl::string_view message) override;
  absl::Status Release(const calls::TranscriptionJob& job) override;
  absl::Status Renew(const calls::TranscriptionJob& job) override;
  absl::Duration lease() const override { return lease_; }

 private:
  std::unique_ptr<v1::Calls::Stub> stub_;
  absl::Duration lease_;
  int max_attempts_;
  std::string holder_;
};

// Makes a worker's recognizer (PocketSphinx loads its model once per worker). `cancel`
// becomes true when the workers stop, and should end a transcription in progress.
using RecognizerFactory = std::function<absl::StatusOr<std::unique_ptr<SpeechRecognizer>>(
    const std::atomic<bool>* cancel)>;

class TranscriptionWorkers {
 public:
  struct Options {
    int workers = 1;
    absl::Duration poll_interval = absl::Seconds(1);
    RecognizerFactory make_recognizer;
    // Runs after each reported transcription (wakes the scoring workers for the transcript
    // stage).
    std::function<void()> on_reported;
    // Where recordings are read from, and where a remote store's recording is downloaded for
    // the length of a job (local_recording.h).
    BlobStore* recordings = nullptr;
    std::string scratch_dir;
    int64_t max_recording_bytes = int64_t{2} << 30;
  };
  TranscriptionWorkers(TranscriptionQueue* queue, Options options)
      : queue_(queue), options_(std::move(options)) {}
  ~TranscriptionWorkers() { Stop(); }

  // Before Start().
  void set_on_reported(std::function<void()> on_reported) {
    options_.on_reported = std::move(on_reported);
  }
  void Start();
  // Wakes a worker now (a call was leased for analysis) instead of at the next poll.
  void Notify() { workers_.Notify(); }
  // Stops leasing, cancels transcriptions in progress (their leases are given back), joins.
  void Stop() {
    workers_.Stop();
    if (heartbeat_) heartbeat_->Stop();
  }

 private:
  // Leases one recording, transcribes it and reports; false when none was waiting.
  bool WorkOnce();
  // One leased job: transcribe and report.
  void Run(const calls::TranscriptionJob& job, std::unique_ptr<SpeechRecognizer>* recognizer);

  TranscriptionQueue* queue_;
  Options options_;
  // Renews the leases of the recordings being transcribed (one thread for the pool).
  std::unique_ptr<LeaseHeartbeat> heartbeat_;
  PollingWorkers workers_;
};

}  // namespace calleval::scoring

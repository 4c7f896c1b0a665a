#pragma once

// Scoring workers: lease a call from the analysis queue, run the audio pass on its stored
// recording, and report the standard metrics with the lease token. The lease is short and
// renewed by a heartbeat while the call is scored (common/lease_heartbeat.h): a worker that dies
// stops renewing, its lease expires and the call is handed out again; a stale report is refused,
// so nothing is recorded or charged twice.

#include <grpcpp/channel.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "common/lease_heartbeat.h"
#include "common/polling_workers.h"
#include "common/blob_store.h"
#include "services/calls/calls_store.h"
#include "services/judges/sandbox.h"
#include "services/scoring/custom_metrics.h"

namespace calleval::scoring {

// Where jobs come from and results go. In one process: the calls store itself.
class AnalysisQueue {
 public:
  virtual ~AnalysisQueue() = default;
  virtual absl::StatusOr<std::optional<calls::AnalysisJob>> Lease() = 0;
  // `waveform`: the recording's peaks when this job ran the audio pass, else null.
  virtual absl::Status Record(const calls::AnalysisJob& job, std::optional<double> duration_s,
                              const std::vector<v1::StandardMetricResult>& results,
                              const std::vector<v1::MetricResult>& metric_results,
                              const v1::CallWaveform* waveform) = 0;
  // The audio stage of a voice call that waits for its transcription (CallsStore::
  // RecordAudioStage).
  virtual absl::Status RecordAudioStage(
      const calls::AnalysisJob& job, std::optional<double> duration_s,
      const std::vector<v1::StandardMetricResult>& planned_results,
      const std::vector<v1::StandardMetricResult>& audio_results,
      const v1::CallWaveform* waveform) = 0;
  virtual absl::Status Fail(const calls::AnalysisJob& job, absl::string_view reason,
                            absl::string_view message) = 0;
  virtual absl::Status Release(const calls::AnalysisJob& job) = 0;
  // Extends the job's lease by lease() from now (the heartbeat); kFailedPrecondition when the
  // lease is lost. Only job.call_id and job.token are read.
  virtual absl::Status Renew(const calls::AnalysisJob& job) { return absl::OkStatus(); }
  // How long a lease lasts; the workers renew every third of it. Zero: no heartbeat.
  virtual absl::Duration lease() const { return absl::ZeroDuration(); }
};

class StoreAnalysisQueue : public AnalysisQueue {
 public:
  // `holder`: this process's lease holder id, carried by the tokens it takes.
  StoreAnalysisQueue(calls::CallsStore* store, absl::Duration lease, int max_attempts,
                     std::string holder = "")
      : store_(store), lease_(lease), max_attempts_(max_attempts), holder_(std::move(holder)) {}
  absl::StatusOr<std::optional<calls::AnalysisJob>> Lease() override {
    return store_->LeaseAnalysis(lease_, max_attempts_, holder_);
  }
  absl::Status Renew(const calls::AnalysisJob& job) override {
    return store_->RenewAnalysisLease(job.call_id, job.token, lease_);
  }
  absl::Duration lease() const override { return lease_; }
  absl::Status Record(const calls::AnalysisJob& job, std::optional<double> duration_s,
                      const std::vector<v1::StandardMetricResult>& results,
                      const std::vector<v1::MetricResult>& metric_results,
                      const v1::CallWaveform* waveform) override {
    return store_->RecordAnalysis(job.call_id, job.token, duration_s, results, metric_results,
                                  waveform);
  }
  absl::Status RecordAudioStage(
      const calls::AnalysisJob& job, std::optional<double> duration_s,
      const std::vector<v1::StandardMetricResult>& planned_results,
      const std::vector<v1::StandardMetricResult>& audio_results,
      const v1::CallWaveform* waveform) override {
    return store_->RecordAudioStage(job.call_id, job.token, duration_s, planned_results,
                                    audio_results, waveform);
  }
  absl::Status Fail(const calls::AnalysisJob& job, absl::string_view reason,
                    absl::string_view message) override {
    return store_->FailAnalysis(job.call_id, job.token, reason, message);
  }
  absl::Status Release(const calls::AnalysisJob& job) override {
    return store_->ReleaseAnalysis(job.call_id, job.token);
  }

 private:
  calls::CallsStore* store_;
  absl::Duration lease_;
  int max_attempts_;
  std::string holder_;
};

// The queue of a calls role in another process, over gRPC.
class GrpcAnalysisQueue : public AnalysisQueue {
 public:
  GrpcAnalysisQueue(std::shared_ptr<grpc::Channel> calls, absl::Duration lease, int max_attempts,
                    std::string holder = "");
  absl::StatusOr<std::optional<calls::AnalysisJob>> Lease() override;
  absl::Status Record(const calls::AnalysisJob& job, std::optional<double> duration_s,
                      const std::vector<v1::StandardMetricResult>& results,
                      const std::vector<v1::MetricResult>& metric_results,
                      const v1::CallWaveform* waveform) override;
  absl::Status RecordAudioStage(
      const calls::AnalysisJob& job, std::optional<double> duration_s,
      const std::vector<v1::StandardMetricResult>& planned_results,
      const std::vector<v1::StandardMetricResult>& audio_results,
      const v1::CallWaveform* waveform) override;
  absl::Status Fail(const calls::AnalysisJob& job, absl::string_view reason,
                    absl::string_view message) override;
  absl::Status Release(const calls::AnalysisJob& job) override;
  absl::Status Renew(const calls::AnalysisJob& job) override;
  absl::Duration lease() const override { return lease_; }

 private:
  std::unique_ptr<v1::Calls::Stub> stub_;
  absl::Duration lease_;
  int max_attempts_;
  std::string holder_;
};

// Gives back, over gRPC, every analysis and transcription lease of `holder` (a scoring process
// starting: what its previous life held). Answers how many were given back.
absl::StatusOr<int> ReleaseHolderLeasesOverGrpc(const std::shared_ptr<grpc::Channel>& calls,
                                                absl::string_view holder);

// The metrics of one leased call: the audio pass for voice calls, transcription_accuracy, the
// transcript-judged standard metrics by the LLM provider (failed llm_unavailable without one,
// docs/api.md §7), then the custom metrics (custom_metrics.h). Only the job's planned metrics are
// returned.
//
// A voice call is scored in two stages when its transcription is still running and a planned
// metric needs it (transcription_accuracy; without a provided transcript, the LLM and custom
// metrics, which judge the generated one): the audio stage reports the audio metrics
// (`audio_stage_only`) and the call becomes `computed`; the transcript stage, leased once the
// transcription has ended, reuses them (job.audio_results) and scores the rest.
struct JobOutcome {
  absl::Status status;  // not OK: the call fails with `failure_reason`
  std::string failure_reason;
  std::optional<double> duration_s;
  std::vector<v1::StandardMetricResult> results;
  std::vector<v1::MetricResult> metric_results;
  bool audio_stage_only = false;
  std::vector<v1::StandardMetricResult> audio_results;  // every audio metric, planned or not
  // The recording's peaks, when this job ran the audio pass.
  std::optional<v1::CallWaveform> waveform;
};
// `recording_path`: the job's recording as a local file (LocalRecording), for a voice call
// whose audio stage is to be scored; otherwise unused.
JobOutcome ScoreJob(const calls::AnalysisJob& job, const std::string& recording_path,
                    const Judges& tools);

class ScoringWorkers {
 public:
  struct Options {
    int workers = 1;
    absl::Duration poll_interval = absl::Seconds(1);
    Judges judges;  // the code sandbox and the LLM provider, each may be null
    // Runs after leasing a voice call whose transcription is pending (wakes the transcription
    // workers: a voice call's transcription starts once its analysis has).
    std::function<void()> on_leased;
    // Where recordings are read from (the same --recordings-url as the calls role's), and where
    // a remote store's recording is downloaded for the length of a job (local_recording.h).
    BlobStore* recordings = nullptr;
    std::string scratch_dir;
    int64_t max_recording_bytes = int64_t{2} << 30;
    // A recording the store cannot give (unreachable) leaves the lease to expire, and the call
    // is tried again; at this attempt it ends failed with the store's reason instead.
    int recording_attempts = 3;
  };
  ScoringWorkers(AnalysisQueue* queue, Options options) : queue_(queue), options_(options) {}
  ~ScoringWorkers() { Stop(); }

  void Start();
  // Wakes a worker now (a call became ready) instead of at the next poll.
  void Notify() { workers_.Notify(); }
  // Stops leasing, lets analyses in progress finish and report, joins the workers.
  void Stop() {
    workers_.Stop();
    if (heartbeat_) heartbeat_->Stop();
  }

 private:
  // Leases, scores and reports one call; false when none was ready.
  bool WorkOnce();

  AnalysisQueue* queue_;
  Options options_;
  // Renews the leases of the calls being scored (one thread for the pool).
  std::unique_ptr<LeaseHeartbeat> heartbeat_;
  PollingWorkers workers_;
};

}  // namespace calleval::scoring

#pragma once

// Call records on SQLite: ingest with all of docs/api.md §2's rules, read by id or call_identifier,
// update of the mutable fields, listing, deletion, and the durable queue of recording
// downloads.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.pb.h"
#include "common/blob_store.h"
#include "common/database.h"
#include "common/url_guard.h"
#include "services/calls/credits.h"
#include "services/calls/recording_signer.h"

namespace calleval::calls {

// What ingest and scoring need to know about the call's agent.
struct AgentInfo {
  std::vector<int64_t> disabled_metric_ids;
  std::optional<int> silence_threshold_ms;
  std::string name;
  std::string agent_source;
  // The agent's version label, recorded on the call.
  std::optional<std::string> version;
};
// Looks the agent up in the workspace: 422 agent_not_found when it is not there.
using AgentLookup =
    std::function<absl::StatusOr<AgentInfo>(int64_t workspace_id, int64_t agent_id)>;

// A custom metric of the workspace, as ingest sees it.
struct CustomMetricInfo {
  int64_t id = 0;
  int64_t credit_cost = 1;
  bool requires_audio = false;
  bool applies_to_agent = false;  // the agent is in its agent_ids, or it is global
};
// The workspace's custom metrics, each with whether it applies to `agent_id`.
using MetricCatalog = std::function<absl::StatusOr<std::vector<CustomMetricInfo>>(
    int64_t workspace_id, int64_t agent_id)>;
// The current definitions of those `ids` that still exist in the workspace.
using MetricDefinitions = std::function<absl::StatusOr<std::vector<v1::Metric>>(
    int64_t workspace_id, const std::vector<int64_t>& ids)>;

// A recording waiting to be downloaded, leased to one downloader.
struct RecordingJob {
  int64_t call_id = 0;
  std::string url;
  int attempts = 0;  // including this one
  std::string token;  // renews the lease (RenewRecordingLease)
};

// A call leased to one scoring worker: everything the analysis needs.
struct AnalysisJob {
  int64_t call_id = 0;
  std::string token;  // must come back with the report
  int attempts = 0;   // including this one
  std::string observation_type;
  // The recording's key in the blob store (CallsStore::Options::recordings); empty for text
  // calls and until the recording is stored.
  std::string recording_key;
  std::vector<v1::Turn> transcript;
  std::vector<int64_t> planned_metric_ids;
  google::protobuf::Struct metadata;
  int silence_threshold_ms = 3000;
  // The planned custom metrics as defined at lease time (one deleted since ingest is absent).
  std::vector<v1::Metric> custom_metrics;
  // The call's scalar fields and metadata (no transcript or results), and its agent: what a
  // code judge sees (docs/api.md §6).
  v1::Call call;
  v1::JobAgent agent;
  // Speech-to-text as of the lease (pending, processing, completed, failed), why it failed, and
  // the generated transcript once completed.
  std::string transcription_status;
  std::string transcription_error;
  std::vector<v1::Turn> generated_transcript;
  // The audio stage was recorded by an earlier lease (the call is `computed`): this lease is
  // the transcript stage, and audio_results holds every audio metric (planned or not).
  bool audio_stage_done = false;
  std::vector<v1::StandardMetricResult> audio_results;
};

// A voice call's recording leased to one transcription worker.
struct TranscriptionJob {
  int64_t call_id = 0;
  std::string token;  // must come back with the report
  int attempts = 0;   // including this one
  std::string recording_key;  // in the blob store
  google::protobuf::Struct metadata;  // channel_map
  bool has_provided_transcript = false;
};

// Credits per metric (docs/api.md §9): every standard metric costs 1; custom metrics carry their
// own credit_cost, fixed when the call is ingested.
inline constexpr int64_t kStandardMetricCost = 1;

// The run a call was made by, when the runs role ingests its conversation: stats of a scenario
// count the calls of its runs. Never taken from a pushed call's metadata. With it, the voice
// platform's version of the agent that took the call (a run's or a platform's production call,
// runs::RunCallOrigin), recorded as the call's platform_version.
struct RunOrigin {
  std::optional<int64_t> run_id;
  std::optional<int64_t> scenario_id;
  std::optional<std::string> platform_version;
};

// A call's stored recording: its object in the blob store, and what the call's row says of it.
struct StoredRecording {
  std::string key;
  std::string content_type;
  int64_t bytes = 0;
};

class CallsStore {
 public:
  struct Options {
    // Where recordings are kept (--recordings-url). Must outlive the store.
    BlobStore* recordings = nullptr;
    UrlGuardOptions url_guard;
    const RecordingSigner* signer = nullptr;
    // Custom metrics; without them only the standard metrics are known.
    MetricCatalog catalog;
    MetricDefinitions definitions;
    // The credit ledger (accounts'). Without it, the accounts store on the same database.
    Credits* credits = nullptr;
    // Runs after a call's analysis ended (RecordAnalysis, FailAnalysis) and was committed, with
    // the call's workspace: the alert rules' evaluator marks it (services/calls/
    // alert_workers.h). Must not block.
    std::function<void(int64_t workspace_id)> on_settled;
  };

  CallsStore(db::Database* db, AgentLookup agents, Options options);

  // Validates and stores a call; answers with the record (analysis_status pending) and, when
  // some metric_ids cannot be scored, ignored_metric_ids.
  // `recorded`, when given, is a recording the service made itself (a run's conversation),
  // already in the blob store under a key starting with "runs/": the call is a voice call
  // whose recording is stored at once instead of downloaded; recording_url stays null. When
  // the call is not stored (refused, or its call_identifier taken) the object is deleted, so
  // no object outlives an ingest that did not name it.
  absl::StatusOr<v1::Call> Ingest(int64_t workspace_id, const v1::IngestCallRequest& request,
                                  const StoredRecording* recorded = nullptr,
                                  const RunOrigin& origin = {});
  // An all-digit key is tried as the integer id first, then as a call_identifier.
  absl::StatusOr<v1::Call> Get(int64_t workspace_id, absl::string_view id_or_identifier);
  // Changes label, tag, customer_number, call_end_reason and metadata (merged); with
  // `agent_id` the call must belong to that agent (else 404).
  absl::StatusOr<v1::Call> Update(int64_t workspace_id, absl::string_view id_or_identifier,
                                  std::optional<int64_t> agent_id, const v1::CallUpdate& update);
  absl::StatusOr<v1::ListCallsResponse> List(int64_t workspace_id,
                                             const v1::ListCallsRequest& request);
  // Deletes the record and its stored recording. Refunds the call is still owed are applied
  // first (kUnavailable when that cannot be done now: nothing is deleted).
  absl::Status Delete(int64_t workspace_id, absl::string_view id_or_identifier);

  // Writes the queryable rows (schema version 10: planned metrics, results, figures, the
  // agents' hourly totals) of calls stored before them, `batch` calls a transaction; run at
  // start-up. Answers how many calls it filled in (0 once done).
  absl::StatusOr<int> BackfillQueryRows(int batch = 500);

  // Recording downloads. A job is leased for `lease` with a token carrying `holder`; the
  // downloader's heartbeat renews it, and a downloader that dies leaves the lease to expire and
  // the job is handed out again.
  absl::StatusOr<std::optional<RecordingJob>> ClaimRecordingJob(absl::Duration lease,
                                                                absl::string_view holder = "");
  // Extends the download's lease to `lease` from now; kFailedPrecondition when it is no longer
  // held (stored, failed, or expired and claimed by another downloader).
  absl::Status RenewRecordingLease(int64_t call_id, absl::string_view token, absl::Duration lease);
  absl::Status CompleteRecording(int64_t call_id, absl::string_view content_type, int64_t bytes);
  // Gives the job back untried (the process is stopping): the attempt does not count.
  absl::Status ReleaseRecording(int64_t call_id);
  // Gives the job back for a later attempt (transient failure).
  absl::Status RetryRecording(int64_t call_id, absl::Duration delay);
  // Ends the call failed with failure_reason download_failed and `message`.
  absl::Status FailRecording(int64_t call_id, absl::string_view message);
  // The analysis queue. LeaseAnalysis hands out the oldest call ready for analysis (text
  // calls at once, voice calls once their recording is stored), or one whose lease expired.
  // The first lease reserves the planned metrics' credits through Options::credits, between
  // two transactions: the call is claimed (still pending, under a lease token), reserved, then
  // handed out; a short balance ends it skipped with insufficient_credits, charging nothing. A
  // crash in between leaves the claim to expire (or to ReleaseLeasesOf) and the next claim
  // reserves again, which charges nothing twice. A call that was leased `max_attempts` times
  // without a report ends failed, refunded in full.
  // The job's token carries `holder` (common/lease_heartbeat.h LeaseToken) so that a restart
  // of that process can give the lease back (ReleaseLeasesOf).
  absl::StatusOr<std::optional<AnalysisJob>> LeaseAnalysis(absl::Duration lease, int max_attempts,
                                                           absl::string_view holder = "");
  // Extends the lease held with `token` to `lease` from now (the worker's heartbeat). A lease
  // no longer held (reported, released, or expired and taken by another worker) is refused
  // with kFailedPrecondition: the worker abandons the job.
  absl::Status RenewAnalysisLease(int64_t call_id, absl::string_view token, absl::Duration lease);
  // Stores the results of a lease (`token` must be the current one: a stale report is
  // refused with kFailedPrecondition) and completes the call. Metrics that did not complete
  // are refunded, each at most once: the transaction records that the call is owed them
  // (calls.refunds_owed) and ApplyOwedRefunds gives them back once it has committed.
  // `waveform`, when the report ran the audio pass, is stored in the same transaction
  // (call_waveforms.h).
  absl::Status RecordAnalysis(int64_t call_id, absl::string_view token,
                              std::optional<double> duration_seconds,
                              const std::vector<v1::StandardMetricResult>& results,
                              const std::vector<v1::MetricResult>& metric_results = {},
                              const v1::CallWaveform* waveform = nullptr);
  // Ends the call failed (for example unsupported_audio) and refunds its metrics.
  absl::Status FailAnalysis(int64_t call_id, absl::string_view token, absl::string_view reason,
                            absl::string_view message);
  // Gives a lease back untried (the worker is stopping).
  absl::Status ReleaseAnalysis(int64_t call_id, absl::string_view token);
  // Records the audio stage of a voice call whose transcription is still running: the call
  // becomes `computed` with `planned_results` (the planned audio metrics; the planned metrics
  // that need the transcript show `pending`), keeps `audio_results` (every audio metric) for
  // the transcript stage, and is handed out again by LeaseAnalysis once its transcription has
  // completed or failed. The lease ends; the attempts count starts again for the next stage.
  // `waveform` as RecordAnalysis: the transcript stage does not decode again, so the peaks are
  // the audio stage's.
  absl::Status RecordAudioStage(int64_t call_id, absl::string_view token,
                                std::optional<double> duration_seconds,
                                const std::vector<v1::StandardMetricResult>& planned_results,
                                const std::vector<v1::StandardMetricResult>& audio_results,
                                const v1::CallWaveform* waveform = nullptr);

  // The transcription queue: voice calls whose recording is stored and whose analysis has
  // started (so a call skipped for credits is never transcribed), oldest first, or one whose
  // transcription lease expired. A call leased `max_attempts` times without a report ends with
  // transcription_status failed (the call itself goes on).
  absl::StatusOr<std::optional<TranscriptionJob>> LeaseTranscription(
      absl::Duration lease, int max_attempts, absl::string_view holder = "");
  // The transcription lease's heartbeat, like RenewAnalysisLease.
  absl::Status RenewTranscriptionLease(int64_t call_id, absl::string_view token,
                                       absl::Duration lease);
  // Stores the generated transcript (transcription_status completed); a call without a
  // provided transcript shows it as its transcript with transcript_source "generated".
  absl::Status RecordTranscription(int64_t call_id, absl::string_view token,
                                   const std::vector<v1::Turn>& transcript);
  // transcription_status failed, with `message` kept for the metrics that needed it.
  absl::Status FailTranscription(int64_t call_id, absl::string_view token,
                                 absl::string_view message);
  absl::Status ReleaseTranscription(int64_t call_id, absl::string_view token);

  // A process restarting gives back what its previous life held: every recording download,
  // analysis and transcription lease whose token carries `holder` expires now (the token is cleared, so a
  // late report of the dead process is refused), and the calls are handed out again at once.
  // The attempt counts (a call that keeps killing its worker still ends failed). Answers how
  // many leases were given back.
  absl::StatusOr<int> ReleaseLeasesOf(absl::string_view holder);

  // Calls waiting for a worker, under no lease, in each queue: what the claims' "ready" lookups
  // (queue_claims.h) would find. One COUNT over a partial index each; for the operators'
  // queue-depth gauges.
  struct QueueDepths {
    int64_t downloads = 0;
    int64_t transcription = 0;
    int64_t analysis = 0;
  };
  absl::StatusOr<QueueDepths> CountQueued();

  // Gives back, through Options::credits, what settled calls are owed (metrics charged and not
  // used) and clears their refunds_owed mark. Each settlement applies its own once it has
  // committed; this finds those a crash or an unreachable accounts role left behind. Run at
  // start-up, and by LeaseAnalysis every kOwedRefundsSweep. Answers how many calls it settled
  // up; stops at the first refund that fails (they stay owed).
  absl::StatusOr<int> ApplyOwedRefunds();
  static constexpr absl::Duration kOwedRefundsSweep = absl::Seconds(30);

  // The peaks of the call's recording, for its waveform (call_waveforms.cc). kNotFound with code
  // "not_found" for no such call, "no_recording" for a call without a recording (a text call),
  // "no_waveform" while its analysis has not computed them, or when it ended without them.
  absl::StatusOr<v1::CallWaveform> GetWaveform(int64_t workspace_id,
                                               absl::string_view id_or_identifier);

  // The stored recording of a call (no workspace check: the caller verified a signed link).
  absl::StatusOr<StoredRecording> GetRecording(int64_t call_id);
  // The key a downloaded recording is stored under: the call's id.
  static std::string RecordingKey(int64_t call_id);
  BlobStore* recordings() const { return options_.recordings; }

 private:
  struct Claim;
  // The lease itself, in one write transaction: a job to hand out, a first lease to reserve
  // credits for, or nothing waiting.
  absl::StatusOr<Claim> LeaseNext(absl::Duration lease, int max_attempts, absl::string_view holder);
  // After a reservation: the claim becomes the call's analysis lease (nullopt when the claim
  // was lost meanwhile).
  absl::StatusOr<std::optional<AnalysisJob>> StartReservedLease(int64_t call_id,
                                                                absl::string_view token);
  // The call as a job for the worker holding `token` (inside the lease's transaction).
  absl::StatusOr<AnalysisJob> ReadJob(db::Connection& c, int64_t call_id, std::string token,
                                      int attempts, std::vector<int64_t> planned);
  // Gives back what one call is owed and clears its mark.
  absl::Status ApplyOwedRefundsOf(int64_t call_id);
  void MaybeSweepOwedRefunds();
  // A write of one call's rows (kOneCall in calls_store.cc: READ COMMITTED, the call's row
  // locked or changed by one conditional UPDATE before anything is decided).
  absl::Status WriteCall(const db::Database::WriteFn& fn);

  db::Database* db_;
  AgentLookup agents_;
  Options options_;
  std::unique_ptr<accounts::AccountsStore> own_accounts_;
  std::unique_ptr<Credits> own_credits_;
  Credits* credits_;
  std::atomic<int64_t> next_refund_sweep_{0};  // Unix seconds
};

}  // namespace calleval::calls

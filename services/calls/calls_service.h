#pragma once

// The Calls service: its handlers, one per RPC, listed in its method table (calls_methods.h),
// which serves them on gRPC and at the edge (common/method_table.h).

#include <functional>

#include "absl/types/span.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "common/method_table.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/accounts/request_guard.h"
#include "services/calls/alerts_store.h"
#include "services/calls/calls_store.h"
#include "services/calls/stats_store.h"

namespace calleval::calls {

class CallsService {
 public:
  using Api = v1::Calls;
  static absl::Span<const MethodEntry<CallsService>> Methods();

  // `on_ingest` runs after each stored ingest (wakes the recording downloader).
  // `internal_credential` admits the queue methods (common/internal_credential.h).
  // `stats` answers GetAgentStats and GetScenarioStats (unavailable without it).
  CallsService(CallsStore* store, accounts::Authenticator* authenticator, ThreadPool* pool,
               std::function<void(const v1::Call&)> on_ingest, std::string internal_credential,
               StatsStore* stats = nullptr)
      : store_(store),
        pool_(pool),
        guard_(authenticator, std::move(internal_credential)),
        on_ingest_(std::move(on_ingest)),
        stats_(stats) {}

  // Serves the alert rules' methods (unavailable without it).
  void set_alerts(AlertsStore* alerts) { alerts_ = alerts; }

  ThreadPool* pool() const { return pool_; }
  const RequestGuard& guard() const { return guard_; }

  // The public methods: the caller's workspace is context.workspace_id.
  absl::Status IngestCall(const RequestContext& context, const v1::IngestCallRequest& request,
                          v1::Call* response);
  absl::Status GetCall(const RequestContext& context, const v1::GetCallRequest& request,
                       v1::Call* response);
  absl::Status UpdateCall(const RequestContext& context, const v1::UpdateCallRequest& request,
                          v1::Call* response);
  absl::Status ListCalls(const RequestContext& context, const v1::ListCallsRequest& request,
                         v1::ListCallsResponse* response);
  absl::Status DeleteCall(const RequestContext& context, const v1::DeleteCallRequest& request,
                          google::protobuf::Empty* response);
  absl::Status GetAgentStats(const RequestContext& context, const v1::GetAgentStatsRequest& request,
                             v1::Stats* response);
  absl::Status GetScenarioStats(const RequestContext& context,
                                const v1::GetScenarioStatsRequest& request, v1::Stats* response);
  // The peaks of the call's recording (CallsStore::GetWaveform).
  absl::Status GetCallWaveform(const RequestContext& context,
                               const v1::GetCallWaveformRequest& request,
                               v1::CallWaveform* response);

  // Alert rules (docs/api.md §5.11).
  absl::Status CreateAlertRule(const RequestContext& context,
                               const v1::CreateAlertRuleRequest& request, v1::AlertRule* response);
  absl::Status ListAlertRules(const RequestContext& context,
                              const v1::ListAlertRulesRequest& request,
                              v1::ListAlertRulesResponse* response);
  absl::Status GetAlertRule(const RequestContext& context, const v1::GetAlertRuleRequest& request,
                            v1::AlertRule* response);
  absl::Status DeleteAlertRule(const RequestContext& context,
                               const v1::GetAlertRuleRequest& request,
                               google::protobuf::Empty* response);
  absl::Status ListAlertDeliveries(const RequestContext& context,
                                   const v1::ListAlertDeliveriesRequest& request,
                                   v1::ListAlertDeliveriesResponse* response);

  // The analysis queue for scoring workers in other processes (internal: the installation's
  // credential, no API key).
  absl::Status LeaseAnalysis(const RequestContext& context, const v1::LeaseAnalysisRequest& request,
                             v1::LeaseAnalysisResponse* response);
  absl::Status RecordAnalysis(const RequestContext& context,
                              const v1::RecordAnalysisRequest& request,
                              google::protobuf::Empty* response);
  absl::Status FailAnalysis(const RequestContext& context, const v1::FailAnalysisRequest& request,
                            google::protobuf::Empty* response);
  absl::Status ReleaseAnalysis(const RequestContext& context,
                               const v1::ReleaseAnalysisRequest& request,
                               google::protobuf::Empty* response);
  absl::Status RenewAnalysisLease(const RequestContext& context,
                                  const v1::RenewLeaseRequest& request,
                                  google::protobuf::Empty* response);
  // The transcription queue, likewise.
  absl::Status LeaseTranscription(const RequestContext& context,
                                  const v1::LeaseTranscriptionRequest& request,
                                  v1::LeaseTranscriptionResponse* response);
  absl::Status RecordTranscription(const RequestContext& context,
                                   const v1::RecordTranscriptionRequest& request,
                                   google::protobuf::Empty* response);
  absl::Status FailTranscription(const RequestContext& context,
                                 const v1::FailTranscriptionRequest& request,
                                 google::protobuf::Empty* response);
  absl::Status ReleaseTranscription(const RequestContext& context,
                                    const v1::ReleaseTranscriptionRequest& request,
                                    google::protobuf::Empty* response);
  absl::Status RenewTranscriptionLease(const RequestContext& context,
                                       const v1::RenewLeaseRequest& request,
                                       google::protobuf::Empty* response);
  // Gives back every lease of a holder (a restarted process, before its workers start).
  absl::Status ReleaseHolderLeases(const RequestContext& context,
                                   const v1::ReleaseHolderLeasesRequest& request,
                                   v1::ReleaseHolderLeasesResponse* response);
  // Where a call's recording is stored, for an edge in another process serving a presigned link
  // it has verified (services/calls/recording_locator.h).
  absl::Status GetRecordingLocation(const RequestContext& context,
                                    const v1::GetRecordingLocationRequest& request,
                                    v1::RecordingLocation* response);
  // For runs workers in other processes (internal): a run's call stored, with its run origin
  // and its recording's blob key as the request names them; a call read back by id or key.
  absl::Status IngestRunCall(const RequestContext& context,
                             const v1::IngestRunCallRequest& request, v1::Call* response);
  absl::Status GetWorkspaceCall(const RequestContext& context,
                                const v1::GetWorkspaceCallRequest& request, v1::Call* response);
  absl::Status GetCallFigures(const RequestContext& context,
                              const v1::GetCallFiguresRequest& request,
                              v1::CallFiguresList* response);

 private:
  CallsStore* store_;
  ThreadPool* pool_;
  const accounts::ApiKeyGuard guard_;
  std::function<void(const v1::Call&)> on_ingest_;
  StatsStore* stats_;
  AlertsStore* alerts_ = nullptr;
};

// The analysis job on the wire and back.
v1::AnalysisJob ToProto(const AnalysisJob& job);
AnalysisJob FromProto(const v1::AnalysisJob& job);
v1::TranscriptionJob ToProto(const TranscriptionJob& job);
TranscriptionJob FromProto(const v1::TranscriptionJob& job);

}  // namespace calleval::calls

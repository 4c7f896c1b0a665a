#pragma once

// gRPC adapter of the Calls service: authenticates, resolves the workspace, calls the store.

#include <functional>

#include "calleval/v1/calls.grpc.pb.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/calls/calls_store.h"
#include "services/calls/stats_store.h"

namespace calleval::calls {

class CallsService final : public v1::Calls::CallbackService {
 public:
  // `on_ingest` runs after each stored ingest (wakes the recording downloader).
  // `internal_credential` opens the queue methods (common/internal_credential.h).
  // `stats` answers GetAgentStats and GetScenarioStats (unavailable without it).
  CallsService(CallsStore* store, accounts::Authenticator* authenticator, ThreadPool* pool,
               std::function<void(const v1::Call&)> on_ingest, std::string internal_credential,
               StatsStore* stats = nullptr)
      : store_(store),
        authenticator_(authenticator),
        pool_(pool),
        on_ingest_(std::move(on_ingest)),
        internal_credential_(std::move(internal_credential)),
        stats_(stats) {}

  grpc::ServerUnaryReactor* IngestCall(grpc::CallbackServerContext* context,
                                       const v1::IngestCallRequest* request,
                                       v1::Call* response) override;
  grpc::ServerUnaryReactor* GetCall(grpc::CallbackServerContext* context,
                                    const v1::GetCallRequest* request, v1::Call* response) override;
  grpc::ServerUnaryReactor* UpdateCall(grpc::CallbackServerContext* context,
                                       const v1::UpdateCallRequest* request,
                                       v1::Call* response) override;
  grpc::ServerUnaryReactor* ListCalls(grpc::CallbackServerContext* context,
                                      const v1::ListCallsRequest* request,
                                      v1::ListCallsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteCall(grpc::CallbackServerContext* context,
                                       const v1::DeleteCallRequest* request,
                                       google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* GetAgentStats(grpc::CallbackServerContext* context,
                                          const v1::GetAgentStatsRequest* request,
                                          v1::Stats* response) override;
  grpc::ServerUnaryReactor* GetScenarioStats(grpc::CallbackServerContext* context,
                                             const v1::GetScenarioStatsRequest* request,
                                             v1::Stats* response) override;

  // The analysis queue for scoring workers in other processes (internal: the installation's
  // credential, no API key).
  grpc::ServerUnaryReactor* LeaseAnalysis(grpc::CallbackServerContext* context,
                                          const v1::LeaseAnalysisRequest* request,
                                          v1::LeaseAnalysisResponse* response) override;
  grpc::ServerUnaryReactor* RecordAnalysis(grpc::CallbackServerContext* context,
                                           const v1::RecordAnalysisRequest* request,
                                           google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* FailAnalysis(grpc::CallbackServerContext* context,
                                         const v1::FailAnalysisRequest* request,
                                         google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* ReleaseAnalysis(grpc::CallbackServerContext* context,
                                            const v1::ReleaseAnalysisRequest* request,
                                            google::protobuf::Empty* response) override;
  // The transcription queue, likewise.
  grpc::ServerUnaryReactor* RenewAnalysisLease(grpc::CallbackServerContext* context,
                                               const v1::RenewLeaseRequest* request,
                                               google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* RenewTranscriptionLease(grpc::CallbackServerContext* context,
                                                    const v1::RenewLeaseRequest* request,
                                                    google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* ReleaseHolderLeases(grpc::CallbackServerContext* context,
                                                const v1::ReleaseHolderLeasesRequest* request,
                                                v1::ReleaseHolderLeasesResponse* response) override;
  grpc::ServerUnaryReactor* LeaseTranscription(grpc::CallbackServerContext* context,
                                               const v1::LeaseTranscriptionRequest* request,
                                               v1::LeaseTranscriptionResponse* response) override;
  grpc::ServerUnaryReactor* RecordTranscription(grpc::CallbackServerContext* context,
                                                const v1::RecordTranscriptionRequest* request,
                                                google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* FailTranscription(grpc::CallbackServerContext* context,
                                              const v1::FailTranscriptionRequest* request,
                                              google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* ReleaseTranscription(grpc::CallbackServerContext* context,
                                                 const v1::ReleaseTranscriptionRequest* request,
                                                 google::protobuf::Empty* response) override;

  // The handlers, independent of the transport: `authorization` is the caller's
  // Authorization header. The gRPC methods above run them (writes on the pool, short reads
  // inline); the edge calls them directly when the role runs in its process.
  absl::Status HandleIngestCall(const std::string& authorization,
                                const v1::IngestCallRequest& request, v1::Call* response);
  absl::Status HandleGetCall(const std::string& authorization, const v1::GetCallRequest& request,
                             v1::Call* response);
  absl::Status HandleUpdateCall(const std::string& authorization,
                                const v1::UpdateCallRequest& request, v1::Call* response);
  absl::Status HandleListCalls(const std::string& authorization,
                               const v1::ListCallsRequest& request,
                               v1::ListCallsResponse* response);
  absl::Status HandleDeleteCall(const std::string& authorization,
                                const v1::DeleteCallRequest& request,
                                google::protobuf::Empty* response);
  absl::Status HandleGetAgentStats(const std::string& authorization,
                                   const v1::GetAgentStatsRequest& request, v1::Stats* response);
  absl::Status HandleGetScenarioStats(const std::string& authorization,
                                      const v1::GetScenarioStatsRequest& request,
                                      v1::Stats* response);

 private:
  // The workspace the request acts on: the key's own, or client_id when accessible.
  absl::StatusOr<int64_t> Workspace(const std::string& authorization,
                                    std::optional<int64_t> client_id);

  CallsStore* store_;
  accounts::Authenticator* authenticator_;
  ThreadPool* pool_;
  std::function<void(const v1::Call&)> on_ingest_;
  const std::string internal_credential_;
  StatsStore* stats_;
};

// The analysis job on the wire and back.
v1::AnalysisJob ToProto(const AnalysisJob& job);
AnalysisJob FromProto(const v1::AnalysisJob& job);
v1::TranscriptionJob ToProto(const TranscriptionJob& job);
TranscriptionJob FromProto(const v1::TranscriptionJob& job);

}  // namespace calleval::calls

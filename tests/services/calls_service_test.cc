// The Calls adapter on a real gRPC server over the real calls store: the public methods
// (authentication, workspace, status mapping, the ingest hook) and the internal queue methods
// the scoring workers of other processes use, which answer only the installation's internal
// credential, never an API key.

#include "services/calls/calls_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/internal_credential.h"
#include "common/status_macros.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "common/internal_credential.h"
#include "common/thread_pool.h"
#include "services/agents/agents_store.h"
#include "services/calls/calls_store.h"
#include "services/calls/recording_locator.h"
#include "services/calls/grpc_calls_clients.h"
#include "services/calls/in_process_run_calls.h"
#include "services/calls/recording_signer.h"
#include "tests/services/service_test_support.h"

namespace calleval::calls {
namespace {

using ::calleval::testing::ContextWith;
using ::calleval::testing::ContextWithKey;
using ::calleval::testing::InternalContext;
using ::calleval::testing::kTestInternalCredential;
using ::calleval::testing::Metadata;
using ::calleval::testing::WireErrorInfo;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

v1::IngestCallRequest TextCall(const std::string& identifier, int64_t agent_id) {
  v1::IngestCallRequest request;
  request.set_call_identifier(identifier);
  request.set_agent_id(agent_id);
  request.set_tag("bookings");
  request.set_customer_number("+14155550199");
  (*request.mutable_metadata()->mutable_fields())["crm_id"].set_string_value("A-1");
  v1::Turn* agent = request.add_transcript();
  agent->set_role("AI Assistant");
  agent->set_content("Hello, how can I help?");
  agent->set_start_time(0);
  agent->set_end_time(1.5);
  v1::Turn* user = request.add_transcript();
  user->set_role("User");
  user->set_content("A table for two, please.");
  user->set_start_time(2);
  user->set_end_time(4);
  return request;
}

class CallsServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    if (HasFatalFailure()) return;
    recordings_dir_ = testing::MakeTempDir("calls_service");
    agents_ = std::make_unique<agents::AgentsStore>(db());
    signer_ = std::make_unique<RecordingSigner>("signing-key", "http://edge.test", absl::Hours(1));
    CallsStore::Options options;
    recordings_ = *OpenBlobStore(recordings_dir_);
    options.recordings = recordings_.get();
    options.signer = signer_.get();
    // Ingest's view of agents, as cmd/calleval/server.cc gives it: over the agents store.
    agents::AgentsStore* agents = agents_.get();
    store_ = std::make_unique<CallsStore>(
        db(),
        [agents](int64_t workspace_id, int64_t agent_id) -> absl::StatusOr<AgentInfo> {
          absl::StatusOr<v1::Agent> agent = agents->Get(workspace_id, agent_id);
          if (!agent.ok()) {
            if (agent.status().code() != absl::StatusCode::kNotFound) return agent.status();
            return ValidationError("agent_not_found", "agent not found",
                                   {{"agent_id", "no such agent in the workspace"}});
          }
          AgentInfo info;
          info.name = agent->name();
          info.agent_source = agent->agent_source();
          return info;
        },
        options);
    service_ = std::make_unique<CallsService>(
        store_.get(), authenticator_.get(), &pool_,
        [this](const v1::Call& call) {
          std::lock_guard<std::mutex> lock(ingested_mu_);
          ingested_.push_back(call);
        },
        kTestInternalCredential);
    server_ = testing::TestGrpcServer::Serve(service_.get());
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Calls::NewStub(server_->channel());
    agent_id_ = CreateAgent(tenants_.own, "Booking");
    granted_agent_id_ = CreateAgent(tenants_.granted, "Granted");
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(recordings_dir_);
  }

  int64_t CreateAgent(int64_t workspace_id, const std::string& name) {
    v1::AgentFields fields;
    fields.set_name(name);
    fields.set_phone_number("+14155550123");
    fields.set_language_id(1);
    fields.set_instructions("Take table bookings.");
    absl::StatusOr<v1::Agent> agent = agents_->Create(workspace_id, fields);
    EXPECT_TRUE(agent.ok()) << agent.status();
    return agent.ok() ? agent->id() : 0;
  }

  std::unique_ptr<grpc::ClientContext> Keyed() { return ContextWithKey(tenants_.key); }

  v1::Call Ingest(const v1::IngestCallRequest& request) {
    v1::Call call;
    const grpc::Status status = stub_->IngestCall(Keyed().get(), request, &call);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return call;
  }

  v1::Call Read(const std::string& id_or_identifier) {
    v1::GetCallRequest get;
    get.set_call_identifier_or_id(id_or_identifier);
    v1::Call call;
    const grpc::Status status = stub_->GetCall(Keyed().get(), get, &call);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return call;
  }

  std::optional<v1::AnalysisJob> LeaseAnalysis(const std::string& holder = "worker-a") {
    v1::LeaseAnalysisRequest request;
    request.set_lease_seconds(60);
    request.set_max_attempts(3);
    request.set_holder(holder);
    v1::LeaseAnalysisResponse response;
    const grpc::Status status = stub_->LeaseAnalysis(InternalContext().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!response.has_job()) return std::nullopt;
    return response.job();
  }

  // A voice call whose recording the service recorded itself (a run's conversation): stored at
  // once, so the transcription queue has something to hand out.
  int64_t IngestRecordedVoiceCall(const std::string& identifier) {
    const StoredRecording wav{absl::StrCat("runs/", identifier), "audio/wav", 44};
    EXPECT_TRUE(
        recordings_->Put(wav.key, StringBlobSource(std::string(44, '\0')), wav.content_type).ok());
    v1::IngestCallRequest request;
    request.set_call_identifier(identifier);
    request.set_agent_id(agent_id_);
    request.set_observation_type("voice");
    absl::StatusOr<v1::Call> call = store_->Ingest(tenants_.own, request, &wav);
    EXPECT_TRUE(call.ok()) << call.status();
    return call.ok() ? call->id() : 0;
  }

  std::vector<v1::Call> ingested() {
    std::lock_guard<std::mutex> lock(ingested_mu_);
    return ingested_;
  }

  std::string recordings_dir_;
  std::unique_ptr<BlobStore> recordings_;
  ThreadPool pool_{4};
  std::unique_ptr<agents::AgentsStore> agents_;
  std::unique_ptr<RecordingSigner> signer_;
  std::unique_ptr<CallsStore> store_;
  std::mutex ingested_mu_;
  std::vector<v1::Call> ingested_;
  std::unique_ptr<CallsService> service_;
  std::unique_ptr<testing::TestGrpcServer> server_;
  std::unique_ptr<v1::Calls::Stub> stub_;
  int64_t agent_id_ = 0;
  int64_t granted_agent_id_ = 0;
};

TEST_P(CallsServiceTest, EveryPublicMethodAuthenticatesAndResolvesTheWorkspace) {
  const auto* service = testing::ServiceNamed(v1::Calls::service_full_name());
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseUnauthenticated(server_->channel(), service, tenants_),
      ::testing::IsSupersetOf({"IngestCall", "GetCall", "UpdateCall", "ListCalls", "DeleteCall"}));
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseForeignWorkspace(server_->channel(), service, tenants_),
      IsEmpty());
  EXPECT_THAT(ingested(), IsEmpty());
}

TEST_P(CallsServiceTest, IngestReadUpdateListDelete) {
  const v1::Call call = Ingest(TextCall("call-1", agent_id_));
  EXPECT_GT(call.id(), 0);
  EXPECT_EQ(call.client_id(), tenants_.own);
  EXPECT_EQ(call.call_identifier(), "call-1");
  EXPECT_EQ(call.agent_id(), agent_id_);
  EXPECT_EQ(call.observation_type(), "text");
  EXPECT_EQ(call.analysis_status(), "pending");
  EXPECT_EQ(call.tag(), "bookings");
  EXPECT_EQ(call.customer_number(), "+14155550199");
  EXPECT_EQ(call.metadata().fields().at("crm_id").string_value(), "A-1");
  ASSERT_THAT(call.transcript(), SizeIs(2));
  EXPECT_EQ(call.transcript(1).content(), "A table for two, please.");
  // The hook (which wakes the downloader or the scoring workers) saw the stored call.
  ASSERT_THAT(ingested(), SizeIs(1));
  EXPECT_EQ(ingested()[0].SerializeAsString(), call.SerializeAsString());

  EXPECT_EQ(Read("call-1").SerializeAsString(), call.SerializeAsString());
  EXPECT_EQ(Read(absl::StrCat(call.id())).SerializeAsString(), call.SerializeAsString());

  v1::UpdateCallRequest update;
  update.set_call_identifier_or_id("call-1");
  update.mutable_update()->set_label("reviewed");
  (*update.mutable_update()->mutable_metadata()->mutable_fields())["score"].set_number_value(3);
  // Set without naming it in set_fields, as a gRPC client does (common/sent_fields.h).
  v1::Call updated;
  ASSERT_GRPC_OK(stub_->UpdateCall(Keyed().get(), update, &updated));
  EXPECT_EQ(updated.label(), "reviewed");
  EXPECT_EQ(updated.metadata().fields().at("crm_id").string_value(), "A-1");  // merged
  EXPECT_EQ(updated.metadata().fields().at("score").number_value(), 3);
  // With agent_id the call must be that agent's.
  update.set_agent_id(agent_id_ + 1000);
  EXPECT_GRPC_ERROR(stub_->UpdateCall(Keyed().get(), update, &updated), grpc::NOT_FOUND,
                    "not_found");

  Ingest(TextCall("call-2", agent_id_));
  v1::IngestCallRequest untagged = TextCall("call-3", agent_id_);
  untagged.clear_tag();
  Ingest(untagged);
  v1::ListCallsRequest list;
  list.set_tag("bookings");  // the filter reaches the store
  v1::ListCallsResponse listed;
  ASSERT_GRPC_OK(stub_->ListCalls(Keyed().get(), list, &listed));
  std::vector<std::string> identifiers;
  for (const v1::Call& c : listed.data()) identifiers.push_back(c.call_identifier());
  EXPECT_THAT(identifiers, ::testing::UnorderedElementsAre("call-1", "call-2"));

  v1::DeleteCallRequest remove;
  remove.set_call_identifier_or_id("call-1");
  google::protobuf::Empty empty;
  ASSERT_GRPC_OK(stub_->DeleteCall(Keyed().get(), remove, &empty));
  v1::GetCallRequest get;
  get.set_call_identifier_or_id("call-1");
  v1::Call gone;
  EXPECT_GRPC_ERROR(stub_->GetCall(Keyed().get(), get, &gone), grpc::NOT_FOUND, "not_found");
}

// Store errors keep their code and ErrorInfo across the hop, and a refused ingest does not
// run the hook.
TEST_P(CallsServiceTest, StoreErrorsReachTheClientWithTheirDetails) {
  Ingest(TextCall("dup", agent_id_));
  v1::Call call;
  grpc::Status status = stub_->IngestCall(Keyed().get(), TextCall("dup", agent_id_), &call);
  EXPECT_EQ(status.error_code(), grpc::ALREADY_EXISTS) << status.error_message();
  v1::ErrorInfo info = WireErrorInfo(status);
  ASSERT_THAT(info.details(), SizeIs(1));
  EXPECT_EQ(info.details(0).field(), "call_identifier");

  // An agent of another workspace is no agent here.
  status = stub_->IngestCall(Keyed().get(), TextCall("other-agent", granted_agent_id_), &call);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "agent_not_found");
  info = WireErrorInfo(status);
  ASSERT_THAT(info.details(), SizeIs(1));
  EXPECT_EQ(info.details(0).field(), "agent_id");

  v1::ListCallsRequest list;
  list.set_analysis_status("pondering");
  v1::ListCallsResponse listed;
  status = stub_->ListCalls(Keyed().get(), list, &listed);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "validation_failed");
  info = WireErrorInfo(status);
  ASSERT_THAT(info.details(), SizeIs(1));
  EXPECT_EQ(info.details(0).field(), "analysis_status");

  EXPECT_THAT(ingested(), SizeIs(1));
}

TEST_P(CallsServiceTest, ClientIdActsOnAGrantedWorkspace) {
  v1::IngestCallRequest request = TextCall("granted-1", granted_agent_id_);
  request.set_client_id(tenants_.granted);
  const v1::Call call = Ingest(request);
  EXPECT_EQ(call.client_id(), tenants_.granted);
  v1::GetCallRequest get;
  get.set_call_identifier_or_id("granted-1");
  v1::Call read;
  EXPECT_GRPC_ERROR(stub_->GetCall(Keyed().get(), get, &read), grpc::NOT_FOUND, "not_found");
  get.set_client_id(tenants_.granted);
  ASSERT_GRPC_OK(stub_->GetCall(Keyed().get(), get, &read));
  EXPECT_EQ(read.id(), call.id());
}

// Every queue method refuses callers without the installation's credential, API keys included,
// and does nothing: the call stays pending.
TEST_P(CallsServiceTest, QueueMethodsRefuseAnythingButTheInternalCredential) {
  const v1::Call call = Ingest(TextCall("queued", agent_id_));
  const std::string credential = kTestInternalCredential;
  const auto* service = testing::ServiceNamed(v1::Calls::service_full_name());
  std::vector<std::string> internal;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* method = service->method(i);
    if (testing::IsPublic(method)) continue;
    internal.push_back(method->name());
    for (const Metadata& metadata :
         std::vector<Metadata>{{},
                               {{"authorization", key_header()}},
                               {{"authorization", "Bearer " + credential}},
                               {{kInternalCredentialMetadata, "another-installation-credential"}},
                               {{kInternalCredentialMetadata, credential + "x"}},
                               {{kInternalCredentialMetadata, tenants_.key}}}) {
      auto request = testing::NewMessage(method->input_type());
      // A request that would act if it were let through.
      const auto* call_id = method->input_type()->FindFieldByName("call_id");
      if (call_id != nullptr) request->GetReflection()->SetInt64(request.get(), call_id, call.id());
      auto response = testing::NewMessage(method->output_type());
      const grpc::Status status =
          testing::CallMethod(server_->channel(), method, *request, response.get(), metadata);
      SCOPED_TRACE(absl::StrCat(method->name(), " with ",
                                metadata.empty() ? "nothing" : metadata[0].second));
      EXPECT_GRPC_ERROR(status, grpc::UNAUTHENTICATED, "unauthenticated");
    }
  }
  // The analysis and transcription queues, ReleaseHolderLeases, the edge's
  // GetRecordingLocation, the runs workers' IngestRunCall and GetWorkspaceCall, and the batch
  // comparisons' GetCallFigures.
  EXPECT_THAT(internal, SizeIs(15));
  EXPECT_EQ(Read("queued").analysis_status(), "pending");
  EXPECT_TRUE(LeaseAnalysis().has_value());  // still there for the credential
}

// The analysis queue over gRPC: the job carries what the scoring worker needs, the lease is
// renewed and reported with its token, and a stale token is refused (FAILED_PRECONDITION, which
// the remote queue turns into "abandon the job").
TEST_P(CallsServiceTest, AnalysisQueueLeaseRenewRecord) {
  const v1::Call call = Ingest(TextCall("scored", agent_id_));
  std::optional<v1::AnalysisJob> job = LeaseAnalysis();
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->call_id(), call.id());
  EXPECT_FALSE(job->token().empty());
  EXPECT_EQ(job->attempts(), 1);
  EXPECT_EQ(job->observation_type(), "text");
  ASSERT_THAT(job->transcript(), SizeIs(2));
  EXPECT_EQ(job->transcript(0).content(), "Hello, how can I help?");
  EXPECT_EQ(job->metadata().fields().at("crm_id").string_value(), "A-1");
  EXPECT_EQ(job->call().call_identifier(), "scored");
  EXPECT_EQ(job->agent().id(), agent_id_);
  EXPECT_EQ(job->agent().name(), "Booking");
  ASSERT_FALSE(job->planned_metric_ids().empty());
  EXPECT_EQ(Read("scored").analysis_status(), "processing");
  EXPECT_FALSE(LeaseAnalysis().has_value());  // held

  v1::RenewLeaseRequest renew;
  renew.set_call_id(call.id());
  renew.set_token(job->token());
  renew.set_lease_seconds(120);
  google::protobuf::Empty empty;
  ASSERT_GRPC_OK(stub_->RenewAnalysisLease(InternalContext().get(), renew, &empty));
  renew.set_token(job->token() + "-stale");
  EXPECT_EQ(stub_->RenewAnalysisLease(InternalContext().get(), renew, &empty).error_code(),
            grpc::FAILED_PRECONDITION);

  v1::RecordAnalysisRequest record;
  record.set_call_id(call.id());
  record.set_token(job->token());
  record.set_duration_seconds(4);
  v1::StandardMetricResult* result = record.add_results();
  result->set_metric_id(job->planned_metric_ids(0));
  result->set_status("completed");
  result->set_score(0.75);
  ASSERT_GRPC_OK(stub_->RecordAnalysis(InternalContext().get(), record, &empty));
  const v1::Call scored = Read("scored");
  EXPECT_EQ(scored.analysis_status(), "completed");
  bool found = false;
  for (const v1::StandardMetricResult& r : scored.standard_metrics()) {
    if (r.metric_id() != job->planned_metric_ids(0)) continue;
    found = true;
    EXPECT_EQ(r.status(), "completed");
    EXPECT_EQ(r.score(), 0.75);
  }
  EXPECT_TRUE(found) << scored.DebugString();
  // The report was the lease's last word: a second one is stale.
  EXPECT_EQ(stub_->RecordAnalysis(InternalContext().get(), record, &empty).error_code(),
            grpc::FAILED_PRECONDITION);
}

// A request without lease_seconds or max_attempts (zero) still leases for at least a second
// and one attempt, instead of handing out a lease that is already over or a call with no
// attempts left.
TEST_P(CallsServiceTest, ZeroLeaseAndAttemptsAreRaisedToOne) {
  const v1::Call call = Ingest(TextCall("defaults", agent_id_));
  v1::LeaseAnalysisResponse response;
  ASSERT_GRPC_OK(stub_->LeaseAnalysis(InternalContext().get(), {}, &response));
  ASSERT_TRUE(response.has_job());
  EXPECT_EQ(response.job().call_id(), call.id());
  EXPECT_EQ(response.job().attempts(), 1);
  v1::LeaseAnalysisResponse again;
  ASSERT_GRPC_OK(stub_->LeaseAnalysis(InternalContext().get(), {}, &again));
  EXPECT_FALSE(again.has_job());  // the lease has not run out at once
}

TEST_P(CallsServiceTest, FailAndReleaseAnalysis) {
  const v1::Call failing = Ingest(TextCall("failing", agent_id_));
  std::optional<v1::AnalysisJob> job = LeaseAnalysis();
  ASSERT_TRUE(job.has_value());
  v1::FailAnalysisRequest fail;
  fail.set_call_id(failing.id());
  fail.set_token(job->token());
  fail.set_reason("unsupported_audio");
  fail.set_message("not a WAV file");
  google::protobuf::Empty empty;
  ASSERT_GRPC_OK(stub_->FailAnalysis(InternalContext().get(), fail, &empty));
  const v1::Call failed = Read("failing");
  EXPECT_EQ(failed.analysis_status(), "failed");
  EXPECT_EQ(failed.failure_reason(), "unsupported_audio");
  EXPECT_EQ(failed.failure_message(), "not a WAV file");
  EXPECT_EQ(stub_->FailAnalysis(InternalContext().get(), fail, &empty).error_code(),
            grpc::FAILED_PRECONDITION);

  const v1::Call released = Ingest(TextCall("released", agent_id_));
  job = LeaseAnalysis();
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(job->call_id(), released.id());
  v1::ReleaseAnalysisRequest release;
  release.set_call_id(released.id());
  release.set_token(job->token());
  ASSERT_GRPC_OK(stub_->ReleaseAnalysis(InternalContext().get(), release, &empty));
  // Given back untried: handed out again at once, and the attempt did not count.
  std::optional<v1::AnalysisJob> again = LeaseAnalysis();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->call_id(), released.id());
  EXPECT_EQ(again->attempts(), 1);
  EXPECT_NE(again->token(), job->token());
}

// A scoring process restarting gives back what its previous life held, by holder.
TEST_P(CallsServiceTest, ReleaseHolderLeasesGivesBackThatHoldersLeases) {
  const v1::Call call = Ingest(TextCall("held", agent_id_));
  std::optional<v1::AnalysisJob> job = LeaseAnalysis("pod-1/scoring");
  ASSERT_TRUE(job.has_value());
  v1::ReleaseHolderLeasesRequest request;
  request.set_holder("pod-2/scoring");
  v1::ReleaseHolderLeasesResponse response;
  ASSERT_GRPC_OK(stub_->ReleaseHolderLeases(InternalContext().get(), request, &response));
  EXPECT_EQ(response.released(), 0);
  request.set_holder("pod-1/scoring");
  ASSERT_GRPC_OK(stub_->ReleaseHolderLeases(InternalContext().get(), request, &response));
  EXPECT_EQ(response.released(), 1);
  // The dead process's late report is refused; the call is handed out again.
  v1::RecordAnalysisRequest record;
  record.set_call_id(call.id());
  record.set_token(job->token());
  google::protobuf::Empty empty;
  EXPECT_EQ(stub_->RecordAnalysis(InternalContext().get(), record, &empty).error_code(),
            grpc::FAILED_PRECONDITION);
  std::optional<v1::AnalysisJob> again = LeaseAnalysis("pod-1/scoring");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->call_id(), call.id());
  EXPECT_EQ(again->attempts(), 2);
}

// The transcription queue over gRPC, for a voice call whose recording is stored.
TEST_P(CallsServiceTest, TranscriptionQueueLeaseRenewRecordFailRelease) {
  const int64_t transcribed = IngestRecordedVoiceCall("voice-1");
  // Transcription starts once the analysis has (a call skipped for credits is never
  // transcribed).
  v1::LeaseTranscriptionRequest lease;
  lease.set_lease_seconds(60);
  lease.set_max_attempts(3);
  lease.set_holder("worker-a");
  v1::LeaseTranscriptionResponse leased;
  ASSERT_GRPC_OK(stub_->LeaseTranscription(InternalContext().get(), lease, &leased));
  EXPECT_FALSE(leased.has_job());
  std::optional<v1::AnalysisJob> analysis = LeaseAnalysis();
  ASSERT_TRUE(analysis.has_value());
  EXPECT_EQ(analysis->call_id(), transcribed);
  EXPECT_EQ(analysis->observation_type(), "voice");
  const std::string stored_key = store_->GetRecording(transcribed)->key;
  EXPECT_FALSE(stored_key.empty());
  EXPECT_EQ(analysis->recording_key(), stored_key);

  ASSERT_GRPC_OK(stub_->LeaseTranscription(InternalContext().get(), lease, &leased));
  ASSERT_TRUE(leased.has_job());
  const v1::TranscriptionJob job = leased.job();
  EXPECT_EQ(job.call_id(), transcribed);
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_EQ(job.recording_key(), stored_key);
  EXPECT_FALSE(job.has_provided_transcript());

  google::protobuf::Empty empty;
  v1::RenewLeaseRequest renew;
  renew.set_call_id(transcribed);
  renew.set_token(job.token());
  renew.set_lease_seconds(120);
  ASSERT_GRPC_OK(stub_->RenewTranscriptionLease(InternalContext().get(), renew, &empty));
  // The analysis lease's token is not the transcription's.
  renew.set_token(analysis->token());
  EXPECT_EQ(stub_->RenewTranscriptionLease(InternalContext().get(), renew, &empty).error_code(),
            grpc::FAILED_PRECONDITION);

  v1::RecordTranscriptionRequest record;
  record.set_call_id(transcribed);
  record.set_token(job.token());
  v1::Turn* turn = record.add_transcript();
  turn->set_role("User");
  turn->set_content("I would like a table.");
  turn->set_start_time(0.5);
  turn->set_end_time(2);
  ASSERT_GRPC_OK(stub_->RecordTranscription(InternalContext().get(), record, &empty));
  const v1::Call call = Read("voice-1");
  EXPECT_EQ(call.transcription_status(), "completed");
  EXPECT_EQ(call.transcript_source(), "generated");
  ASSERT_THAT(call.transcript(), SizeIs(1));
  EXPECT_EQ(call.transcript(0).content(), "I would like a table.");
  EXPECT_EQ(stub_->RecordTranscription(InternalContext().get(), record, &empty).error_code(),
            grpc::FAILED_PRECONDITION);

  // A second recording: released untried, leased again, then failed.
  const int64_t failing = IngestRecordedVoiceCall("voice-2");
  ASSERT_TRUE(LeaseAnalysis().has_value());
  ASSERT_GRPC_OK(stub_->LeaseTranscription(InternalContext().get(), lease, &leased));
  ASSERT_TRUE(leased.has_job());
  ASSERT_EQ(leased.job().call_id(), failing);
  v1::ReleaseTranscriptionRequest release;
  release.set_call_id(failing);
  release.set_token(leased.job().token());
  ASSERT_GRPC_OK(stub_->ReleaseTranscription(InternalContext().get(), release, &empty));
  ASSERT_GRPC_OK(stub_->LeaseTranscription(InternalContext().get(), lease, &leased));
  ASSERT_TRUE(leased.has_job());
  EXPECT_EQ(leased.job().call_id(), failing);
  EXPECT_EQ(leased.job().attempts(), 1);
  v1::FailTranscriptionRequest fail;
  fail.set_call_id(failing);
  fail.set_token(leased.job().token());
  fail.set_message("the recognizer gave up");
  ASSERT_GRPC_OK(stub_->FailTranscription(InternalContext().get(), fail, &empty));
  EXPECT_EQ(Read("voice-2").transcription_status(), "failed");
  EXPECT_EQ(stub_->FailTranscription(InternalContext().get(), fail, &empty).error_code(),
            grpc::FAILED_PRECONDITION);
}

// RecordAnalysis with audio_stage_only records the audio stage of a voice call whose
// transcription still runs (the call is `computed`); once the transcript is in, the call is
// leased again for the transcript stage with the audio results it kept.
TEST_P(CallsServiceTest, AudioStageThenTranscriptStage) {
  const int64_t call_id = IngestRecordedVoiceCall("two-stages");
  std::optional<v1::AnalysisJob> audio = LeaseAnalysis();
  ASSERT_TRUE(audio.has_value());
  ASSERT_EQ(audio->call_id(), call_id);
  EXPECT_FALSE(audio->audio_stage_done());
  ASSERT_FALSE(audio->planned_metric_ids().empty());

  v1::RecordAnalysisRequest record;
  record.set_call_id(call_id);
  record.set_token(audio->token());
  record.set_duration_seconds(12.4);
  record.set_audio_stage_only(true);
  v1::StandardMetricResult planned;
  planned.set_metric_id(audio->planned_metric_ids(0));
  planned.set_status("completed");
  planned.set_score(0.5);
  *record.add_results() = planned;
  v1::StandardMetricResult kept = planned;
  kept.set_score(0.25);
  *record.add_audio_results() = kept;
  google::protobuf::Empty empty;
  ASSERT_GRPC_OK(stub_->RecordAnalysis(InternalContext().get(), record, &empty));
  v1::Call computed = Read("two-stages");
  EXPECT_EQ(computed.analysis_status(), "computed");
  EXPECT_EQ(computed.duration_seconds(), 12);
  EXPECT_FALSE(LeaseAnalysis().has_value());  // waits for its transcript

  v1::LeaseTranscriptionRequest lease;
  lease.set_lease_seconds(60);
  lease.set_max_attempts(3);
  v1::LeaseTranscriptionResponse transcription;
  ASSERT_GRPC_OK(stub_->LeaseTranscription(InternalContext().get(), lease, &transcription));
  ASSERT_TRUE(transcription.has_job());
  v1::RecordTranscriptionRequest transcript;
  transcript.set_call_id(call_id);
  transcript.set_token(transcription.job().token());
  v1::Turn* turn = transcript.add_transcript();
  turn->set_role("User");
  turn->set_content("Hello?");
  ASSERT_GRPC_OK(stub_->RecordTranscription(InternalContext().get(), transcript, &empty));

  std::optional<v1::AnalysisJob> second = LeaseAnalysis();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->call_id(), call_id);
  EXPECT_TRUE(second->audio_stage_done());
  EXPECT_EQ(second->transcription_status(), "completed");
  ASSERT_THAT(second->generated_transcript(), SizeIs(1));
  EXPECT_EQ(second->generated_transcript(0).content(), "Hello?");
  ASSERT_THAT(second->audio_results(), SizeIs(1));
  EXPECT_EQ(second->audio_results(0).metric_id(), kept.metric_id());
  EXPECT_EQ(second->audio_results(0).score(), 0.25);
}

// The edge calls the table's handlers in process (CallInProcess, as DirectInvoker::RegisterTable
// does): they answer exactly what the RPCs answer.
TEST_P(CallsServiceTest, HandlersAnswerLikeTheRpcs) {
  const v1::Call call = Ingest(TextCall("known", agent_id_));
  for (const std::string& authorization : {key_header(), testing::Bearer(tenants_.foreign_key),
                                           testing::Bearer(tenants_.revoked_key), std::string()}) {
    Metadata metadata;
    if (!authorization.empty()) metadata.push_back({"authorization", authorization});
    SCOPED_TRACE(authorization);
    for (const std::string& key :
         {std::string("known"), absl::StrCat(call.id()), std::string("unknown")}) {
      v1::GetCallRequest request;
      request.set_call_identifier_or_id(key);
      v1::Call direct, remote;
      const absl::Status direct_status =
          testing::CallInProcess(*service_, "GetCall", authorization, request, &direct);
      const grpc::Status remote_status =
          stub_->GetCall(ContextWith(metadata).get(), request, &remote);
      if (direct_status.ok()) {
        ASSERT_GRPC_OK(remote_status);
        EXPECT_EQ(direct.SerializeAsString(), remote.SerializeAsString());
      } else {
        testing::ExpectSameOutcome(direct_status, remote_status);
      }
    }
    {
      v1::Call direct, remote;
      const v1::IngestCallRequest duplicate = TextCall("known", agent_id_);
      testing::ExpectSameOutcome(
          testing::CallInProcess(*service_, "IngestCall", authorization, duplicate, &direct),
          stub_->IngestCall(ContextWith(metadata).get(), duplicate, &remote));
    }
    {
      v1::ListCallsRequest request;
      request.set_observation_type("video");
      v1::ListCallsResponse direct, remote;
      testing::ExpectSameOutcome(
          testing::CallInProcess(*service_, "ListCalls", authorization, request, &direct),
          stub_->ListCalls(ContextWith(metadata).get(), request, &remote));
    }
  }
  // An ingest through the entry point runs the hook too.
  v1::Call direct;
  ASSERT_TRUE(testing::CallInProcess(*service_, "IngestCall", key_header(),
                                     TextCall("direct", agent_id_), &direct)
                  .ok());
  ASSERT_THAT(ingested(), SizeIs(2));
  EXPECT_EQ(ingested()[1].id(), direct.id());
}

// Where a call's recording is stored, as an edge asks it: from the store in process, or over
// the internal GetRecordingLocation; a call with no stored recording is NOT_FOUND either way.
TEST_P(CallsServiceTest, RecordingLocationAnswersTheSameInProcessAndOverGrpc) {
  const int64_t recorded = IngestRecordedVoiceCall("located");
  ASSERT_NE(recorded, 0);
  const v1::Call text = Ingest(TextCall("not-recorded", agent_id_));
  absl::StatusOr<StoredRecording> stored = store_->GetRecording(recorded);
  ASSERT_TRUE(stored.ok()) << stored.status();
  absl::StatusOr<BlobInfo> object = recordings_->Stat(stored->key);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->size, 44);

  RecordingLocator remote = NewGrpcRecordingLocator(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  for (const RecordingLocator& locator : {StoreRecordingLocator(store_.get()), remote}) {
    absl::StatusOr<StoredRecording> location = locator(recorded);
    ASSERT_TRUE(location.ok()) << location.status();
    EXPECT_EQ(location->key, stored->key);
    EXPECT_EQ(location->content_type, "audio/wav");
    EXPECT_EQ(location->bytes, 44);
    EXPECT_EQ(locator(text.id()).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(locator(text.id() + 1000).status().code(), absl::StatusCode::kNotFound);
  }
  // A key is not the credential.
  RecordingLocator keyed = NewGrpcRecordingLocator(
      CreateInternalChannel(server_->address(), tenants_.key));
  EXPECT_EQ(keyed(recorded).status().code(), absl::StatusCode::kUnauthenticated);
}

// A runs worker's calls (services/runs/run_calls.h) are stored and read the same in process
// and over the internal methods: the run's origin from the request's own fields, a recording
// the worker stored named by its key, the ingest hook run; a recording whose call is not stored
// is deleted. An API key is refused.
TEST_P(CallsServiceTest, RunCallsAnswerTheSameInProcessAndOverGrpc) {
  std::vector<int64_t> hooked;
  InProcessRunCalls local(store_.get(), [&hooked](const v1::Call& call) {
    hooked.push_back(call.id());
  });
  std::unique_ptr<runs::RunCalls> remote =
      NewGrpcRunCalls(CreateInternalChannel(server_->address(), kTestInternalCredential));
  auto origin_of = [&](int64_t call_id) {
    std::pair<int64_t, int64_t> origin{-1, -1};
    EXPECT_TRUE(db()->Read([&](db::Connection& c) -> absl::Status {
                      ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT run_id, scenario_id FROM "
                                                            "calls WHERE id = ?"));
                      stmt.Bind(1, call_id);
                      ASSIGN_OR_RETURN(bool row, stmt.Step());
                      if (row) origin = {stmt.Int64(0), stmt.Int64(1)};
                      return absl::OkStatus();
                    })
                    .ok());
    return origin;
  };
  auto put = [&](const std::string& key) {
    EXPECT_TRUE(recordings_->Put(key, StringBlobSource("RIFF-run"), "audio/wav").ok());
    return runs::RunRecording{key, "audio/wav", 8};
  };
  auto exists = [&](const std::string& key) { return recordings_->Stat(key).ok(); };

  int n = 0;
  for (runs::RunCalls* calls : {static_cast<runs::RunCalls*>(&local), remote.get()}) {
    SCOPED_TRACE(calls == remote.get() ? "over gRPC" : "in process");
    const std::string tag = absl::StrCat(++n);
    const size_t hooks_before = calls == remote.get() ? ingested().size() : hooked.size();

    // A text run: its transcript, its origin.
    v1::IngestCallRequest text = TextCall("run-text-" + tag, agent_id_);
    absl::StatusOr<v1::Call> stored =
        calls->Ingest(tenants_.own, text, runs::RunCallOrigin{40 + n, 7}, std::nullopt);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->observation_type(), "text");
    EXPECT_EQ(origin_of(stored->id()), std::make_pair(int64_t{40 + n}, int64_t{7}));

    // A voice run: the recording the worker stored is the call's, with nothing to download.
    v1::IngestCallRequest voice;
    voice.set_call_identifier("run-voice-" + tag);
    voice.set_agent_id(agent_id_);
    const runs::RunRecording recording = put("runs/voice-" + tag);
    // With the version of the agent the platform said took the call (Retell's agent_version).
    absl::StatusOr<v1::Call> recorded =
        calls->Ingest(tenants_.own, voice, runs::RunCallOrigin{50 + n, 8, "7"}, recording);
    ASSERT_TRUE(recorded.ok()) << recorded.status();
    EXPECT_EQ(recorded->observation_type(), "voice");
    EXPECT_EQ(recorded->platform_version(), "7");
    EXPECT_EQ(Read("run-voice-" + tag).platform_version(), "7");
    EXPECT_FALSE(stored->has_platform_version());
    EXPECT_FALSE(recorded->has_recording_url());
    absl::StatusOr<StoredRecording> kept = store_->GetRecording(recorded->id());
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(kept->key, recording.key);
    EXPECT_EQ(kept->content_type, "audio/wav");
    EXPECT_EQ(kept->bytes, 8);
    EXPECT_TRUE(exists(recording.key));
    EXPECT_EQ(origin_of(recorded->id()), std::make_pair(int64_t{50 + n}, int64_t{8}));
    EXPECT_EQ((calls == remote.get() ? ingested().size() : hooked.size()) - hooks_before, 2u);

    // A resumed run finds its call taken: AlreadyExists, and the second recording goes.
    const runs::RunRecording again = put("runs/voice-again-" + tag);
    EXPECT_EQ(calls->Ingest(tenants_.own, voice, runs::RunCallOrigin{50 + n, 8}, again)
                  .status()
                  .code(),
              absl::StatusCode::kAlreadyExists);
    EXPECT_FALSE(exists(again.key));
    // A refused call (no such agent) deletes its recording too.
    v1::IngestCallRequest orphan = voice;
    orphan.set_call_identifier("run-orphan-" + tag);
    orphan.set_agent_id(agent_id_ + 1000);
    const runs::RunRecording refused = put("runs/orphan-" + tag);
    EXPECT_FALSE(calls->Ingest(tenants_.own, orphan, runs::RunCallOrigin{}, refused).ok());
    EXPECT_FALSE(exists(refused.key));
    // Only the runs workers' recordings are named this way, never another call's object.
    EXPECT_EQ(calls
                  ->Ingest(tenants_.own, orphan, runs::RunCallOrigin{},
                           runs::RunRecording{CallsStore::RecordingKey(stored->id()), "", 1})
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument);

    // Read back by id and by identifier, in the workspace only.
    absl::StatusOr<v1::Call> by_id = calls->Get(tenants_.own, absl::StrCat(recorded->id()));
    ASSERT_TRUE(by_id.ok()) << by_id.status();
    EXPECT_EQ(by_id->SerializeAsString(), Read("run-voice-" + tag).SerializeAsString());
    absl::StatusOr<v1::Call> by_key = calls->Get(tenants_.own, "run-text-" + tag);
    ASSERT_TRUE(by_key.ok()) << by_key.status();
    EXPECT_EQ(by_key->id(), stored->id());
    EXPECT_EQ(calls->Get(tenants_.granted, "run-text-" + tag).status().code(),
              absl::StatusCode::kNotFound);

    // The figures of a batch comparison: the workspace's calls in the order asked, the others
    // left out.
    absl::StatusOr<v1::CallFiguresList> figures =
        calls->Figures(tenants_.own, {recorded->id(), 999999, stored->id()});
    ASSERT_TRUE(figures.ok()) << figures.status();
    ASSERT_EQ(figures->calls_size(), 2);
    EXPECT_EQ(figures->calls(0).call_id(), recorded->id());
    EXPECT_EQ(figures->calls(0).observation_type(), "voice");
    EXPECT_EQ(figures->calls(1).call_id(), stored->id());
    EXPECT_EQ(figures->calls(1).observation_type(), "text");
    EXPECT_EQ(
        figures->SerializeAsString(),
        local.Figures(tenants_.own, {recorded->id(), 999999, stored->id()})->SerializeAsString());
    absl::StatusOr<v1::CallFiguresList> foreign =
        calls->Figures(tenants_.granted, {recorded->id(), stored->id()});
    ASSERT_TRUE(foreign.ok()) << foreign.status();
    EXPECT_EQ(foreign->calls_size(), 0);
  }

  // An API key stores and reads nothing.
  v1::IngestRunCallRequest ingest;
  ingest.set_workspace_id(tenants_.own);
  *ingest.mutable_call() = TextCall("run-keyed", agent_id_);
  ingest.set_run_id(1);
  v1::Call refused;
  EXPECT_EQ(stub_->IngestRunCall(Keyed().get(), ingest, &refused).error_code(),
            grpc::UNAUTHENTICATED);
  v1::GetWorkspaceCallRequest get;
  get.set_workspace_id(tenants_.own);
  get.set_call_identifier_or_id("run-text-1");
  EXPECT_EQ(stub_->GetWorkspaceCall(Keyed().get(), get, &refused).error_code(),
            grpc::UNAUTHENTICATED);
  EXPECT_EQ(store_->Get(tenants_.own, "run-keyed").status().code(), absl::StatusCode::kNotFound);
  v1::GetCallFiguresRequest figures;
  figures.set_workspace_id(tenants_.own);
  figures.add_call_ids(1);
  v1::CallFiguresList none;
  EXPECT_EQ(stub_->GetCallFigures(Keyed().get(), figures, &none).error_code(),
            grpc::UNAUTHENTICATED);
}

// What a batch comparison reads of a call: the custom metrics' results (a number or a boolean
// as a value, the structured_output's outcome) and the latency metric's average.
TEST(CallFiguresTest, TheCustomResultsAndTheMeanLatency) {
  v1::Call call;
  call.set_id(5);
  call.set_observation_type("voice");
  v1::StandardMetricResult* latency = call.add_standard_metrics();
  latency->set_standard_metric_key("latency");
  latency->set_status("completed");
  latency->set_score(912.5);
  v1::StandardMetricResult* wpm = call.add_standard_metrics();
  wpm->set_standard_metric_key("words_per_minute");
  wpm->set_status("completed");
  wpm->set_score(150);
  v1::MetricResult* judged = call.add_metric_results();
  judged->set_metric_id(7);
  judged->set_name("Confirmed");
  judged->set_metrics_type("specific_text_/_phrase_check");
  judged->set_result_type("boolean");
  judged->set_status("completed");
  judged->mutable_value()->set_bool_value(true);
  judged->mutable_structured_output()->set_outcome_classification("meets_expectations");
  v1::MetricResult* rating = call.add_metric_results();
  rating->set_metric_id(8);
  rating->set_result_type("rating");
  rating->set_status("completed");
  rating->mutable_value()->set_number_value(4);
  v1::MetricResult* text = call.add_metric_results();
  text->set_metric_id(9);
  text->set_result_type("enum");
  text->set_status("completed");
  text->mutable_value()->set_string_value("polite");
  v1::MetricResult* standard = call.add_metric_results();
  standard->set_metric_id(12);
  standard->set_metrics_type("standard");

  const v1::CallFigures figures = CallFiguresOf(call);
  EXPECT_EQ(figures.call_id(), 5);
  EXPECT_EQ(figures.observation_type(), "voice");
  EXPECT_DOUBLE_EQ(figures.latency_mean_ms(), 912.5);
  ASSERT_EQ(figures.metrics_size(), 3);
  EXPECT_EQ(figures.metrics(0).metric_id(), 7);
  EXPECT_EQ(figures.metrics(0).name(), "Confirmed");
  EXPECT_DOUBLE_EQ(figures.metrics(0).value(), 1);
  EXPECT_EQ(figures.metrics(0).outcome(), "meets_expectations");
  EXPECT_DOUBLE_EQ(figures.metrics(1).value(), 4);
  EXPECT_FALSE(figures.metrics(1).has_outcome());
  EXPECT_FALSE(figures.metrics(2).has_value());
  // A latency that did not complete is no figure.
  latency->set_status("not_applicable");
  EXPECT_FALSE(CallFiguresOf(call).has_latency_mean_ms());
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(CallsServiceTest);

}  // namespace
}  // namespace calleval::calls

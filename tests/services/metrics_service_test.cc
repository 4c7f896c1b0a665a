// The Metrics adapter on a real gRPC server over the real metrics, agents and calls stores, the
// real code sandbox, and a local stand-in for the LLM provider (the one third party): what the
// adapter decides itself (authentication, workspace, validation of validate_code, test_code
// and generate, 503 without a sandbox or a provider, shedding when a bounded pool is full) and
// that every method reaches its store and answers with what it did.

#include "services/metrics/metrics_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/synchronization/notification.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "common/errors.h"
#include "common/internal_credential.h"
#include "common/llm_client.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "services/agents/agents_store.h"
#include "services/agents/in_process_agent_directory.h"
#include "services/agents/scenarios_store.h"
#include "services/calls/calls_store.h"
#include "services/calls/owner_directories.h"
#include "services/judges/sandbox.h"
#include "services/metrics/grpc_metrics_clients.h"
#include "services/metrics/in_process_metric_directory.h"
#include "services/metrics/metrics_store.h"
#include "tests/services/service_test_support.h"
#include "tests/support/fake_openai_server.h"

namespace calleval::metrics {
namespace {

using ::calleval::testing::ContextWith;
using ::calleval::testing::ContextWithKey;
using ::calleval::testing::Metadata;
using ::calleval::testing::WireErrorInfo;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

v1::MetricFields LlmMetric(const std::string& name) {
  v1::MetricFields fields;
  fields.set_name(name);
  fields.set_description("Whether the agent greets the caller.");
  fields.set_metrics_type("custom_evaluation");
  fields.set_result_type("boolean");
  fields.set_llm_instructions("Did the agent greet the caller?");
  return fields;
}

// The fields of the first error detail of each issue, in order.
std::vector<std::string> DetailFields(const grpc::Status& status) {
  std::vector<std::string> fields;
  const v1::ErrorInfo info = WireErrorInfo(status);
  for (const v1::ErrorDetail& detail : info.details()) fields.push_back(detail.field());
  return fields;
}

// Occupies every thread and queue slot of a bounded pool until released, so the next task is
// refused as it would be under load.
class PoolBlocker {
 public:
  PoolBlocker(ThreadPool* pool, int threads, int queue) {
    // Each thread is taken before the queue is filled, or the queue would refuse a blocker
    // that a thread had not picked up yet.
    for (int i = 0; i < threads; ++i) {
      auto running = std::make_shared<absl::Notification>();
      EXPECT_TRUE(pool->TrySchedule([running, release = release_] {
        running->Notify();
        release->WaitForNotification();
      }));
      running->WaitForNotification();
    }
    for (int i = 0; i < queue; ++i) {
      EXPECT_TRUE(pool->TrySchedule([release = release_] { release->WaitForNotification(); }));
    }
  }
  ~PoolBlocker() { release_->Notify(); }

 private:
  std::shared_ptr<absl::Notification> release_ = std::make_shared<absl::Notification>();
};

class MetricsServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    if (HasFatalFailure()) return;
    recordings_dir_ = testing::MakeTempDir("metrics_service");
    agents_ = std::make_unique<agents::AgentsStore>(db());
    metric_directory_ = std::make_unique<InProcessMetricDirectory>(db());
    scenarios_ = std::make_unique<agents::ScenariosStore>(db(), metric_directory_.get());
    directory_ = std::make_unique<agents::InProcessAgentDirectory>(agents_.get(), scenarios_.get());
    store_ = std::make_unique<MetricsStore>(db(), directory_.get());
    calls::CallsStore::Options calls_options;
    agents::AgentsStore* agents = agents_.get();
    calls_ = std::make_unique<calls::CallsStore>(
        db(),
        [agents](int64_t workspace_id, int64_t agent_id) -> absl::StatusOr<calls::AgentInfo> {
          RETURN_IF_ERROR(agents->Get(workspace_id, agent_id).status());
          return calls::AgentInfo{};
        },
        calls_options);
    LlmConfig llm;
    llm.base_url = provider_.base_url();
    llm.api_key = provider_.api_key();
    llm.model = "test-model";
    llm.max_attempts = 1;
    llm_ = NewOpenAiCompatibleClient(std::move(llm));
    service_ = std::make_unique<MetricsService>(MakeDependencies(/*with_sandbox=*/true,
                                                                 /*with_llm=*/true));
    server_ = testing::TestGrpcServer::Serve(service_.get());
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Metrics::NewStub(server_->channel());

    v1::AgentFields agent;
    agent.set_name("Booking");
    agent.set_phone_number("+14155550123");
    agent.set_language_id(1);
    agent.set_instructions("Take table bookings.");
    absl::StatusOr<v1::Agent> created = agents_->Create(tenants_.own, agent);
    ASSERT_TRUE(created.ok()) << created.status();
    agent_id_ = created->id();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(recordings_dir_);
  }

  // What cmd/calleval/server.cc gives the adapter, over this suite's stores.
  MetricsService::Dependencies MakeDependencies(bool with_sandbox, bool with_llm) {
    MetricsService::Dependencies deps;
    deps.store = store_.get();
    deps.authenticator = authenticator_.get();
    deps.pool = &pool_;
    deps.sandbox_pool = &sandbox_pool_;
    deps.llm_pool = &llm_pool_;
    deps.sandbox = with_sandbox ? &sandbox_ : nullptr;
    deps.llm = with_llm ? llm_.get() : nullptr;
    deps.internal_credential = testing::kTestInternalCredential;
    calls::CallsStore* calls = calls_.get();
    agents::AgentsStore* agents = agents_.get();
    deps.calls = [calls](int64_t workspace_id, int64_t call_id) {
      return calls->Get(workspace_id, absl::StrCat(call_id));
    };
    deps.agents = [agents](int64_t workspace_id, int64_t agent_id) -> absl::StatusOr<v1::JobAgent> {
      ASSIGN_OR_RETURN(v1::Agent agent, agents->Get(workspace_id, agent_id));
      v1::JobAgent out;
      out.set_id(agent.id());
      out.set_name(agent.name());
      out.set_agent_source(agent.agent_source());
      return out;
    };
    deps.agent_briefs = [agents](int64_t workspace_id,
                                 int64_t agent_id) -> absl::StatusOr<AgentBrief> {
      ASSIGN_OR_RETURN(v1::Agent agent, agents->Get(workspace_id, agent_id));
      return AgentBrief{agent.name(), agent.instructions(), agent.opening_message().text()};
    };
    return deps;
  }

  std::unique_ptr<grpc::ClientContext> Keyed() { return ContextWithKey(tenants_.key); }

  v1::Metric CreateMetric(const v1::MetricFields& fields) {
    v1::CreateMetricRequest request;
    *request.mutable_metric() = fields;
    v1::Metric metric;
    const grpc::Status status = stub_->CreateMetric(Keyed().get(), request, &metric);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return metric;
  }

  int64_t IngestTextCall(int64_t workspace_id, int64_t agent_id, const std::string& identifier) {
    v1::IngestCallRequest request;
    request.set_call_identifier(identifier);
    request.set_agent_id(agent_id);
    v1::Turn* turn = request.add_transcript();
    turn->set_role("AI Assistant");
    turn->set_content("Good evening, how can I help?");
    turn->set_start_time(0);
    turn->set_end_time(2);
    absl::StatusOr<v1::Call> call = calls_->Ingest(workspace_id, request);
    EXPECT_TRUE(call.ok()) << call.status();
    return call.ok() ? call->id() : 0;
  }

  std::string recordings_dir_;
  FakeOpenAiServer provider_;
  ThreadPool pool_{4};
  // Bounded like the server's (ServerConfig::sandbox_pool_*, llm_pool_*), small enough to fill.
  ThreadPool sandbox_pool_{1, 1};
  ThreadPool llm_pool_{1, 1};
  judges::PythonSandbox sandbox_;
  std::unique_ptr<LlmClient> llm_;
  std::unique_ptr<agents::AgentsStore> agents_;
  std::unique_ptr<InProcessMetricDirectory> metric_directory_;
  std::unique_ptr<agents::ScenariosStore> scenarios_;
  std::unique_ptr<agents::InProcessAgentDirectory> directory_;
  std::unique_ptr<MetricsStore> store_;
  std::unique_ptr<calls::CallsStore> calls_;
  std::unique_ptr<MetricsService> service_;
  std::unique_ptr<testing::TestGrpcServer> server_;
  std::unique_ptr<v1::Metrics::Stub> stub_;
  int64_t agent_id_ = 0;
};

TEST_P(MetricsServiceTest, EveryPublicMethodAuthenticatesAndResolvesTheWorkspace) {
  const auto* service = testing::ServiceNamed(v1::Metrics::service_full_name());
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseUnauthenticated(server_->channel(), service, tenants_),
      SizeIs(12));
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseForeignWorkspace(server_->channel(), service, tenants_),
      IsEmpty());
  EXPECT_EQ(provider_.chat_calls(), 0);
}

TEST_P(MetricsServiceTest, MetricLifecycle) {
  v1::MetricFields fields = LlmMetric("Greets the caller");
  fields.add_agent_ids(agent_id_);
  const v1::Metric created = CreateMetric(fields);
  EXPECT_GT(created.id(), 12);  // past the standard metrics
  EXPECT_EQ(created.client_id(), tenants_.own);
  EXPECT_EQ(created.name(), "Greets the caller");
  EXPECT_EQ(created.description(), "Whether the agent greets the caller.");
  EXPECT_EQ(created.metrics_type(), "custom_evaluation");
  EXPECT_EQ(created.llm_instructions(), "Did the agent greet the caller?");
  EXPECT_THAT(created.agent_ids(), ElementsAre(agent_id_));

  v1::GetMetricRequest get;
  get.set_id(created.id());
  v1::Metric read;
  ASSERT_GRPC_OK(stub_->GetMetric(Keyed().get(), get, &read));
  EXPECT_EQ(read.SerializeAsString(), created.SerializeAsString());
  get.set_id(1);  // a standard metric, the same for every workspace
  ASSERT_GRPC_OK(stub_->GetMetric(Keyed().get(), get, &read));
  EXPECT_EQ(read.standard_metric_key(), "latency");

  v1::UpdateMetricRequest update;
  update.set_id(created.id());
  update.mutable_metric()->set_name("Greets warmly");
  v1::Metric updated;
  ASSERT_GRPC_OK(stub_->UpdateMetric(Keyed().get(), update, &updated));
  EXPECT_EQ(updated.name(), "Greets warmly");
  EXPECT_EQ(updated.llm_instructions(), "Did the agent greet the caller?");

  CreateMetric(LlmMetric("Confirms the time"));
  v1::ListMetricsRequest list;
  list.set_search("warmly");  // the filter reaches the store
  v1::ListMetricsResponse listed;
  ASSERT_GRPC_OK(stub_->ListMetrics(Keyed().get(), list, &listed));
  ASSERT_THAT(listed.data(), SizeIs(1));
  EXPECT_EQ(listed.data(0).id(), created.id());

  v1::DeleteMetricRequest remove;
  remove.set_id(created.id());
  google::protobuf::Empty empty;
  ASSERT_GRPC_OK(stub_->DeleteMetric(Keyed().get(), remove, &empty));
  get.set_id(created.id());
  EXPECT_GRPC_ERROR(stub_->GetMetric(Keyed().get(), get, &read), grpc::NOT_FOUND, "not_found");
  // Standard metrics are not the workspace's to change.
  remove.set_id(1);
  EXPECT_EQ(stub_->DeleteMetric(Keyed().get(), remove, &empty).error_code(),
            grpc::PERMISSION_DENIED);
}

TEST_P(MetricsServiceTest, InvalidMetricIsRefusedWithItsFieldIssues) {
  v1::MetricFields fields = LlmMetric("");
  fields.set_result_type("colour");
  v1::CreateMetricRequest request;
  *request.mutable_metric() = fields;
  v1::Metric metric;
  const grpc::Status status = stub_->CreateMetric(Keyed().get(), request, &metric);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "validation_failed");
  EXPECT_THAT(DetailFields(status), ::testing::IsSupersetOf({"name", "result_type"}));
}

TEST_P(MetricsServiceTest, ClientIdActsOnAGrantedWorkspace) {
  v1::CreateMetricRequest create;
  create.set_client_id(tenants_.granted);
  *create.mutable_metric() = LlmMetric("Of the granted workspace");
  v1::Metric metric;
  ASSERT_GRPC_OK(stub_->CreateMetric(Keyed().get(), create, &metric));
  EXPECT_EQ(metric.client_id(), tenants_.granted);
  v1::GetMetricRequest get;
  get.set_id(metric.id());
  v1::Metric read;
  EXPECT_GRPC_ERROR(stub_->GetMetric(Keyed().get(), get, &read), grpc::NOT_FOUND, "not_found");
  get.set_client_id(tenants_.granted);
  ASSERT_GRPC_OK(stub_->GetMetric(Keyed().get(), get, &read));
  EXPECT_EQ(read.id(), metric.id());
}

TEST_P(MetricsServiceTest, BulkCreateSkipsTakenNames) {
  CreateMetric(LlmMetric("Already here"));
  v1::BulkCreateMetricsRequest request;
  request.mutable_body()->set_agent_id(agent_id_);
  *request.mutable_body()->add_metrics() = LlmMetric("New one");
  *request.mutable_body()->add_metrics() = LlmMetric("already HERE");
  v1::BulkCreateMetricsResponse response;
  ASSERT_GRPC_OK(stub_->BulkCreateMetrics(Keyed().get(), request, &response));
  ASSERT_THAT(response.created(), SizeIs(1));
  EXPECT_EQ(response.created(0).name(), "New one");
  EXPECT_THAT(response.created(0).agent_ids(), ElementsAre(agent_id_));
  ASSERT_THAT(response.skipped(), SizeIs(1));
  EXPECT_EQ(response.skipped(0).name(), "already HERE");
  EXPECT_EQ(response.skipped(0).reason(), "duplicate_name");
}

TEST_P(MetricsServiceTest, AgentTogglesAndUsableMetrics) {
  v1::MetricFields fields = LlmMetric("Greets the caller");
  fields.set_mark_as_global(true);
  const v1::Metric custom = CreateMetric(fields);

  v1::SetAgentStandardMetricsRequest standard;
  standard.set_agent_id(agent_id_);
  standard.mutable_body()->add_disabled_metric_keys("silence_detection");
  standard.mutable_body()->add_disabled_metric_keys("latency");
  v1::AgentStandardMetrics standard_set;
  ASSERT_GRPC_OK(stub_->SetAgentStandardMetrics(Keyed().get(), standard, &standard_set));
  EXPECT_EQ(standard_set.agent_id(), agent_id_);
  EXPECT_THAT(standard_set.disabled_metric_keys(), ElementsAre("latency", "silence_detection"));

  v1::SetAgentLlmMetricsRequest llm;
  llm.set_agent_id(agent_id_);
  llm.mutable_body()->add_disabled_llm_metric_ids(custom.id());
  v1::AgentLlmMetrics llm_set;
  ASSERT_GRPC_OK(stub_->SetAgentLlmMetrics(Keyed().get(), llm, &llm_set));
  EXPECT_EQ(llm_set.agent_id(), agent_id_);
  EXPECT_THAT(llm_set.disabled_llm_metric_ids(), ElementsAre(custom.id()));

  v1::ListUsableMetricsRequest usable;
  usable.set_agent_id(agent_id_);
  v1::ListUsableMetricsResponse listed;
  ASSERT_GRPC_OK(stub_->ListUsableMetrics(Keyed().get(), usable, &listed));
  std::map<int64_t, bool> enabled;
  for (const v1::UsableMetric& m : listed.data()) enabled[m.id()] = m.enabled();
  EXPECT_FALSE(enabled.at(1));  // latency
  EXPECT_FALSE(enabled.at(5));  // silence_detection
  EXPECT_TRUE(enabled.at(2));
  EXPECT_FALSE(enabled.at(custom.id()));

  standard.mutable_body()->add_disabled_metric_keys("loudness");
  EXPECT_GRPC_ERROR(stub_->SetAgentStandardMetrics(Keyed().get(), standard, &standard_set),
                    grpc::INVALID_ARGUMENT, "validation_failed");
  llm.set_agent_id(agent_id_ + 1000);
  EXPECT_GRPC_ERROR(stub_->SetAgentLlmMetrics(Keyed().get(), llm, &llm_set), grpc::NOT_FOUND,
                    "not_found");
}

TEST_P(MetricsServiceTest, ValidateCodeInTheSandbox) {
  v1::ValidateCodeRequest request;
  v1::ValidateCodeResponse response;
  grpc::Status status = stub_->ValidateCode(Keyed().get(), request, &response);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "validation_failed");
  EXPECT_THAT(DetailFields(status), ElementsAre("code"));
  request.mutable_body()->set_code(std::string(100001, '#'));
  status = stub_->ValidateCode(Keyed().get(), request, &response);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "validation_failed");
  EXPECT_THAT(DetailFields(status), ElementsAre("code"));

  request.mutable_body()->set_code("metric['result'] = True\n");
  ASSERT_GRPC_OK(stub_->ValidateCode(Keyed().get(), request, &response));
  EXPECT_TRUE(response.valid());
  EXPECT_THAT(response.errors(), IsEmpty());
  request.mutable_body()->set_code("x = 1\nif x\n    metric['result'] = x\n");
  ASSERT_GRPC_OK(stub_->ValidateCode(Keyed().get(), request, &response));
  EXPECT_FALSE(response.valid());
  ASSERT_THAT(response.errors(), SizeIs(1));
  EXPECT_EQ(response.errors(0).line(), 2);
}

TEST_P(MetricsServiceTest, TestCodeRunsAgainstACallOfTheWorkspace) {
  const int64_t call_id = IngestTextCall(tenants_.own, agent_id_, "tested");
  v1::TestCodeRequest request;
  request.mutable_body()->set_code(
      "metric['result'] = context['agent']['name'] == 'Booking' and "
      "len(context['transcript']) == 1\nmetric['explanation'] = 'checked'\n");
  request.mutable_body()->set_call_observation_id(call_id);
  request.mutable_body()->set_result_type("boolean");
  v1::TestCodeResponse response;
  ASSERT_GRPC_OK(stub_->TestCode(Keyed().get(), request, &response));
  EXPECT_FALSE(response.has_error()) << response.error().DebugString();
  EXPECT_TRUE(response.result().bool_value());
  EXPECT_EQ(response.explanation(), "checked");
  EXPECT_EQ(response.call().id(), call_id);
  EXPECT_EQ(response.call().identifier(), "tested");

  // A result of the wrong type is the snippet's error, not the request's.
  request.mutable_body()->set_code("metric['result'] = 'yes'\n");
  ASSERT_GRPC_OK(stub_->TestCode(Keyed().get(), request, &response));
  EXPECT_EQ(response.error().type(), "ResultTypeError");

  // A call of another workspace is no call here.
  v1::AgentFields agent;
  agent.set_name("Foreign");
  agent.set_phone_number("+14155550123");
  agent.set_language_id(1);
  agent.set_instructions("i");
  const int64_t foreign_agent = agents_->Create(tenants_.foreign, agent)->id();
  request.mutable_body()->set_call_observation_id(
      IngestTextCall(tenants_.foreign, foreign_agent, "foreign"));
  const grpc::Status status = stub_->TestCode(Keyed().get(), request, &response);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "call_not_found");
  EXPECT_THAT(DetailFields(status), ElementsAre("call_observation_id"));
}

TEST_P(MetricsServiceTest, GenerateProposesThroughTheProvider) {
  provider_.SetDefault(nlohmann::json{{"metrics",
                                       {{{"name", "Confirms the booking time"},
                                         {"result_type", "boolean"},
                                         {"llm_instructions", "Did the agent confirm it?"}}}}}
                           .dump());
  v1::GenerateMetricsRequest request;
  request.mutable_body()->set_agent_id(agent_id_);
  request.mutable_body()->set_number_of_metrics(1);
  v1::GenerateMetricsResponse response;
  ASSERT_GRPC_OK(stub_->GenerateMetrics(Keyed().get(), request, &response));
  ASSERT_THAT(response.metrics(), SizeIs(1));
  EXPECT_EQ(response.metrics(0).name(), "Confirms the booking time");
  EXPECT_EQ(response.metrics(0).metrics_type(), "custom_evaluation");
  EXPECT_THAT(response.metrics(0).agent_ids(), ElementsAre(agent_id_));
  ASSERT_EQ(provider_.chat_calls(), 1);
  // The agent's brief reached the prompt.
  EXPECT_THAT(provider_.chat_requests()[0].dump(), ::testing::HasSubstr("Take table bookings."));

  request.mutable_body()->clear_agent_id();
  request.mutable_body()->set_number_of_metrics(11);
  grpc::Status status = stub_->GenerateMetrics(Keyed().get(), request, &response);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "validation_failed");
  EXPECT_THAT(DetailFields(status), ElementsAre("agent_id", "number_of_metrics"));
  request.mutable_body()->set_agent_id(agent_id_ + 1000);
  request.mutable_body()->set_number_of_metrics(1);
  status = stub_->GenerateMetrics(Keyed().get(), request, &response);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "agent_not_found");
  EXPECT_THAT(DetailFields(status), ElementsAre("agent_id"));
  EXPECT_EQ(provider_.chat_calls(), 1);
}

// An installation without a sandbox or a provider answers 503 with a code saying which.
TEST_P(MetricsServiceTest, WithoutSandboxOrProviderTheMethodsAreUnavailable) {
  MetricsService bare(MakeDependencies(/*with_sandbox=*/false, /*with_llm=*/false));
  auto server = testing::TestGrpcServer::Serve(&bare);
  ASSERT_NE(server, nullptr);
  auto stub = v1::Metrics::NewStub(server->channel());
  v1::ValidateCodeRequest validate;
  validate.mutable_body()->set_code("metric['result'] = True");
  v1::ValidateCodeResponse validated;
  EXPECT_GRPC_ERROR(stub->ValidateCode(Keyed().get(), validate, &validated), grpc::UNAVAILABLE,
                    "sandbox_unavailable");
  v1::TestCodeRequest test;
  test.mutable_body()->set_code("metric['result'] = True");
  test.mutable_body()->set_call_observation_id(IngestTextCall(tenants_.own, agent_id_, "c"));
  v1::TestCodeResponse tested;
  EXPECT_GRPC_ERROR(stub->TestCode(Keyed().get(), test, &tested), grpc::UNAVAILABLE,
                    "sandbox_unavailable");
  v1::GenerateMetricsRequest generate;
  generate.mutable_body()->set_agent_id(agent_id_);
  v1::GenerateMetricsResponse generated;
  EXPECT_GRPC_ERROR(stub->GenerateMetrics(Keyed().get(), generate, &generated), grpc::UNAVAILABLE,
                    "llm_unavailable");
}

// Code runs and generation wait in bounded pools: a full one sheds the call at once as
// UNAVAILABLE "overloaded" (503 with Retry-After at the edge), and the rest keep working.
TEST_P(MetricsServiceTest, FullBoundedPoolsShedTheirMethods) {
  {
    PoolBlocker busy(&sandbox_pool_, 1, 1);
    v1::ValidateCodeRequest validate;
    validate.mutable_body()->set_code("metric['result'] = True");
    v1::ValidateCodeResponse validated;
    EXPECT_GRPC_ERROR(stub_->ValidateCode(Keyed().get(), validate, &validated), grpc::UNAVAILABLE,
                      "overloaded");
    v1::TestCodeRequest test;
    v1::TestCodeResponse tested;
    EXPECT_GRPC_ERROR(stub_->TestCode(Keyed().get(), test, &tested), grpc::UNAVAILABLE,
                      "overloaded");
    v1::GenerateMetricsRequest generate;
    v1::GenerateMetricsResponse generated;
    EXPECT_GRPC_ERROR(stub_->GenerateMetrics(Keyed().get(), generate, &generated),
                      grpc::INVALID_ARGUMENT, "validation_failed");  // its own pool is free
    v1::ListMetricsResponse listed;
    ASSERT_GRPC_OK(stub_->ListMetrics(Keyed().get(), {}, &listed));
  }
  PoolBlocker busy(&llm_pool_, 1, 1);
  v1::GenerateMetricsRequest generate;
  generate.mutable_body()->set_agent_id(agent_id_);
  v1::GenerateMetricsResponse generated;
  EXPECT_GRPC_ERROR(stub_->GenerateMetrics(Keyed().get(), generate, &generated), grpc::UNAVAILABLE,
                    "overloaded");
  EXPECT_EQ(provider_.chat_calls(), 0);
}

// The edge calls the table's handlers in process (CallInProcess, as DirectInvoker::RegisterTable
// does): they answer exactly what the RPCs answer.
TEST_P(MetricsServiceTest, HandlersAnswerLikeTheRpcs) {
  const v1::Metric metric = CreateMetric(LlmMetric("Greets the caller"));
  for (const std::string& authorization : {key_header(), testing::Bearer(tenants_.foreign_key),
                                           testing::Bearer(tenants_.revoked_key), std::string()}) {
    Metadata metadata;
    if (!authorization.empty()) metadata.push_back({"authorization", authorization});
    SCOPED_TRACE(authorization);
    for (int64_t id : {int64_t{1}, metric.id(), metric.id() + 1000}) {
      v1::GetMetricRequest request;
      request.set_id(id);
      v1::Metric direct, remote;
      const absl::Status direct_status =
          testing::CallInProcess(*service_, "GetMetric", authorization, request, &direct);
      const grpc::Status remote_status =
          stub_->GetMetric(ContextWith(metadata).get(), request, &remote);
      if (direct_status.ok()) {
        ASSERT_GRPC_OK(remote_status);
        EXPECT_EQ(direct.SerializeAsString(), remote.SerializeAsString());
      } else {
        testing::ExpectSameOutcome(direct_status, remote_status);
      }
    }
    {
      v1::ListMetricsRequest request;
      v1::ListMetricsResponse direct, remote;
      const absl::Status direct_status =
          testing::CallInProcess(*service_, "ListMetrics", authorization, request, &direct);
      const grpc::Status remote_status =
          stub_->ListMetrics(ContextWith(metadata).get(), request, &remote);
      if (direct_status.ok()) {
        ASSERT_GRPC_OK(remote_status);
        EXPECT_EQ(direct.SerializeAsString(), remote.SerializeAsString());
      } else {
        testing::ExpectSameOutcome(direct_status, remote_status);
      }
    }
    {
      v1::ValidateCodeRequest request;
      v1::ValidateCodeResponse direct, remote;
      testing::ExpectSameOutcome(
          testing::CallInProcess(*service_, "ValidateCode", authorization, request, &direct),
          stub_->ValidateCode(ContextWith(metadata).get(), request, &remote));
    }
  }
}

// What the agents service asks of the metrics table, the same over both implementations: the
// in-process directory (roles in one process) and the gRPC client of ExistingMetrics (apart).
TEST_P(MetricsServiceTest, MetricDirectoryAnswersTheSameInProcessAndOverGrpc) {
  const v1::Metric own = CreateMetric(LlmMetric("Greets the caller"));
  v1::CreateMetricRequest granted_request;
  granted_request.set_client_id(tenants_.granted);
  *granted_request.mutable_metric() = LlmMetric("Greets in the other workspace");
  v1::Metric granted;
  ASSERT_GRPC_OK(stub_->CreateMetric(Keyed().get(), granted_request, &granted));
  const int64_t missing = granted.id() + 1000;

  std::unique_ptr<agents::MetricDirectory> remote = NewGrpcMetricDirectory(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  for (agents::MetricDirectory* directory : {static_cast<agents::MetricDirectory*>(
                                                 metric_directory_.get()),
                                             remote.get()}) {
    SCOPED_TRACE(directory == remote.get() ? "over gRPC" : "in process");
    // A standard id is not a custom metric: the scenarios store decides those itself.
    auto existing = directory->ExistingMetrics(tenants_.own,
                                               {own.id(), granted.id(), missing, 3, own.id()});
    ASSERT_TRUE(existing.ok()) << existing.status();
    EXPECT_THAT(*existing, ::testing::UnorderedElementsAre(own.id()));
    existing = directory->ExistingMetrics(tenants_.granted, {own.id(), granted.id()});
    ASSERT_TRUE(existing.ok()) << existing.status();
    EXPECT_THAT(*existing, ::testing::UnorderedElementsAre(granted.id()));

    // The scenarios store built with either judges a scenario's metric ids by the answer.
    agents::ScenariosStore scenarios(db(), directory);
    v1::ScenarioFields fields;
    fields.set_agent_id(agent_id_);
    fields.set_name("Booking");
    fields.set_goal("Book a table");
    fields.add_metric_ids(own.id());
    fields.add_metric_ids(1);
    absl::StatusOr<v1::Scenario> created = scenarios.Create(tenants_.own, fields);
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_THAT(created->metric_ids(), ElementsAre(own.id(), 1));
    fields.add_metric_ids(granted.id());
    absl::StatusOr<v1::Scenario> refused = scenarios.Create(tenants_.own, fields);
    EXPECT_EQ(ErrorInfoOf(refused.status()).code(), "metric_not_found") << refused.status();
    ASSERT_EQ(ErrorInfoOf(refused.status()).details_size(), 1) << refused.status();
    EXPECT_EQ(ErrorInfoOf(refused.status()).details(0).field(), "metric_ids[2]");
  }
  auto wrong = NewGrpcMetricDirectory(
      CreateInternalChannel(server_->address(), "not-this-installations-credential"));
  EXPECT_EQ(wrong->ExistingMetrics(tenants_.own, {own.id()}).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// The definitions a runs worker judges a run's call by (and, later, the calls store) are the
// same in process and over GetMetricDefinitions: those that exist in the workspace, standard
// ones included, in the order asked. An API key is refused.
TEST_P(MetricsServiceTest, MetricDefinitionsAnswerTheSameInProcessAndOverGrpc) {
  const v1::Metric own = CreateMetric(LlmMetric("Greets the caller"));
  const v1::Metric second = CreateMetric(LlmMetric("Says goodbye"));
  v1::CreateMetricRequest granted_request;
  granted_request.set_client_id(tenants_.granted);
  *granted_request.mutable_metric() = LlmMetric("Greets in the other workspace");
  v1::Metric granted;
  ASSERT_GRPC_OK(stub_->CreateMetric(Keyed().get(), granted_request, &granted));
  const std::vector<int64_t> asked = {second.id(), granted.id(), 1, own.id(), granted.id() + 1000};

  absl::StatusOr<std::vector<v1::Metric>> local = store_->Definitions(tenants_.own, asked);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_THAT(*local, SizeIs(3));
  EXPECT_EQ((*local)[0].id(), second.id());
  EXPECT_EQ((*local)[1].id(), 1);
  EXPECT_EQ((*local)[2].id(), own.id());
  const MetricDefinitions remote = NewGrpcMetricDefinitions(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  absl::StatusOr<std::vector<v1::Metric>> answered = remote(tenants_.own, asked);
  ASSERT_TRUE(answered.ok()) << answered.status();
  ASSERT_EQ(answered->size(), local->size());
  for (size_t i = 0; i < local->size(); ++i) {
    EXPECT_EQ((*answered)[i].SerializeAsString(), (*local)[i].SerializeAsString()) << i;
  }
  absl::StatusOr<std::vector<v1::Metric>> none = remote(tenants_.own, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());

  v1::GetMetricDefinitionsRequest request;
  request.set_workspace_id(tenants_.own);
  request.add_ids(own.id());
  v1::MetricDefinitions refused;
  EXPECT_EQ(stub_->GetMetricDefinitions(Keyed().get(), request, &refused).error_code(),
            grpc::UNAUTHENTICATED);
  EXPECT_TRUE(refused.metrics().empty());
  const MetricDefinitions wrong = NewGrpcMetricDefinitions(
      CreateInternalChannel(server_->address(), "not-this-installations-credential"));
  EXPECT_EQ(wrong(tenants_.own, {own.id()}).status().code(), absl::StatusCode::kUnauthenticated);
}

// Deletion notices over gRPC remove the link rows (read here from the table itself: every
// answer of the store already leaves out links to what is gone). A notice for an id that names
// an agent or scenario (a late one, the id handed out again) leaves its links alone.
TEST_P(MetricsServiceTest, DeletionNoticesOverGrpcRemoveTheLinksOfWhatIsGone) {
  v1::ScenarioFields scenario_fields;
  scenario_fields.set_agent_id(agent_id_);
  scenario_fields.set_name("Booking");
  scenario_fields.set_goal("Book a table");
  absl::StatusOr<v1::Scenario> scenario = scenarios_->Create(tenants_.own, scenario_fields);
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  v1::MetricFields fields = LlmMetric("Linked");
  fields.add_agent_ids(agent_id_);
  fields.add_scenario_ids(scenario->id());
  const v1::Metric metric = CreateMetric(fields);
  ASSERT_THAT(metric.agent_ids(), ElementsAre(agent_id_));
  ASSERT_THAT(metric.scenario_ids(), ElementsAre(scenario->id()));
  auto link_rows = [&](const char* table, const char* column, int64_t id) {
    int64_t rows = -1;
    EXPECT_TRUE(db()->Read([&](db::Connection& c) -> absl::Status {
                      ASSIGN_OR_RETURN(auto stmt,
                                       c.Prepare(absl::StrCat("SELECT COUNT(*) FROM ", table,
                                                              " WHERE ", column, " = ?")));
                      stmt.Bind(1, id);
                      ASSIGN_OR_RETURN(bool row, stmt.Step());
                      if (row) rows = stmt.Int64(0);
                      return absl::OkStatus();
                    })
                    .ok());
    return rows;
  };

  std::unique_ptr<agents::DeletionListener> listener = NewGrpcDeletionListener(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  // The agent still exists: a notice about it deletes nothing.
  ASSERT_TRUE(listener->AgentDeleted(tenants_.own, agent_id_).ok());
  ASSERT_TRUE(listener->ScenarioDeleted(tenants_.own, scenario->id()).ok());
  EXPECT_EQ(link_rows("metric_agents", "agent_id", agent_id_), 1);
  EXPECT_EQ(link_rows("metric_scenarios", "scenario_id", scenario->id()), 1);

  ASSERT_TRUE(agents_->Delete(tenants_.own, agent_id_).ok());  // its scenario goes with it
  // A notice names the workspace: another workspace's id is a no-op.
  ASSERT_TRUE(listener->AgentDeleted(tenants_.granted, agent_id_).ok());
  EXPECT_EQ(link_rows("metric_agents", "agent_id", agent_id_), 1);
  ASSERT_TRUE(listener->AgentDeleted(tenants_.own, agent_id_).ok());
  EXPECT_EQ(link_rows("metric_agents", "agent_id", agent_id_), 0);
  EXPECT_EQ(link_rows("metric_scenarios", "scenario_id", scenario->id()), 1);
  ASSERT_TRUE(listener->ScenarioDeleted(tenants_.own, scenario->id()).ok());
  EXPECT_EQ(link_rows("metric_scenarios", "scenario_id", scenario->id()), 0);
  // Idempotent: a repeated notice finds nothing left to do.
  EXPECT_TRUE(listener->ScenarioDeleted(tenants_.own, scenario->id()).ok());

  auto wrong = NewGrpcDeletionListener(
      CreateInternalChannel(server_->address(), "not-this-installations-credential"));
  EXPECT_EQ(wrong->AgentDeleted(tenants_.own, agent_id_).code(),
            absl::StatusCode::kUnauthenticated);
}

// The catalog an ingest plans with, as the calls store sees it: from the metrics store in
// process, or over the internal GetIngestCatalog.
TEST_P(MetricsServiceTest, IngestCatalogAnswersTheSameInProcessAndOverGrpc) {
  v1::MetricFields for_agent_fields = LlmMetric("For the agent");
  for_agent_fields.add_agent_ids(agent_id_);
  for_agent_fields.set_credit_cost(4);
  const v1::Metric for_agent = CreateMetric(for_agent_fields);
  const v1::Metric unlinked = CreateMetric(LlmMetric("Linked to no agent"));

  calls::MetricCatalog local = calls::MetricCatalogFrom(
      [this](int64_t ws, int64_t agent) { return store_->Catalog(ws, agent); });
  calls::MetricCatalog remote = calls::MetricCatalogFrom(calls::NewGrpcIngestCatalogSource(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential)));
  for (const calls::MetricCatalog& catalog : {local, remote}) {
    auto entries = catalog(tenants_.own, agent_id_);
    ASSERT_TRUE(entries.ok()) << entries.status();
    ASSERT_EQ(entries->size(), 2u);
    EXPECT_EQ((*entries)[0].id, for_agent.id());
    EXPECT_EQ((*entries)[0].credit_cost, 4);
    EXPECT_TRUE((*entries)[0].applies_to_agent);
    EXPECT_EQ((*entries)[1].id, unlinked.id());
    EXPECT_EQ((*entries)[1].credit_cost, kLlmMetricCost);
    EXPECT_FALSE((*entries)[1].applies_to_agent);
    auto other = catalog(tenants_.granted, agent_id_);
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_TRUE(other->empty());
  }
  calls::IngestCatalogSource keyed = calls::NewGrpcIngestCatalogSource(
      CreateInternalChannel(server_->address(), tenants_.key));
  EXPECT_EQ(keyed(tenants_.own, agent_id_).status().code(), absl::StatusCode::kUnauthenticated);
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(MetricsServiceTest);

}  // namespace
}  // namespace calleval::metrics

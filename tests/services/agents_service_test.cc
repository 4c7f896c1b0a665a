// The Agents adapter on a real gRPC server over the real agents, scenarios and runs stores:
// what the adapter itself decides (authentication, the workspace a request acts on, which
// client_id wins on PATCH, waking the runs role, 503 when scenarios or runs are not served
// here) and that requests reach the stores and answers come back, for every method.

#include "services/agents/agents_service.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "common/errors.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "common/internal_credential.h"
#include "common/thread_pool.h"
#include "services/agents/agents_store.h"
#include "services/agents/deletion_listener.h"
#include "services/agents/grpc_agents_clients.h"
#include "services/agents/in_process_agent_directory.h"
#include "services/agents/in_process_run_agents.h"
#include "services/agents/in_process_scenario_directory.h"
#include "services/agents/scenarios_store.h"
#include "services/calls/owner_directories.h"
#include "services/metrics/in_process_metric_directory.h"
#include "services/runs/runs_store.h"
#include "tests/services/service_test_support.h"

namespace calleval::agents {
namespace {

using ::calleval::testing::ContextWith;
using ::calleval::testing::ContextWithKey;
using ::calleval::testing::Metadata;
using ::calleval::testing::WireErrorInfo;
using ::testing::ElementsAre;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

v1::AgentFields AgentNamed(const std::string& name) {
  v1::AgentFields fields;
  fields.set_name(name);
  fields.set_phone_number("+14155550123");
  fields.set_language_id(1);
  fields.set_instructions("Take table bookings.");
  fields.set_max_call_duration_seconds(300);
  return fields;
}

v1::ScenarioFields ScenarioFor(int64_t agent_id, const std::string& name) {
  v1::ScenarioFields fields;
  fields.set_agent_id(agent_id);
  fields.set_name(name);
  fields.set_goal("Book a table for two at 8 pm");
  fields.set_persona("A hurried caller");
  fields.set_max_turns(7);
  return fields;
}

// Records the notices the service sends after a delete; fails them when told to.
class RecordingDeletionListener final : public DeletionListener {
 public:
  absl::Status AgentDeleted(int64_t workspace_id, int64_t agent_id) override {
    absl::MutexLock lock(&mu_);
    notices_.push_back(absl::StrCat("agent ", agent_id, " of ", workspace_id));
    return answer_;
  }
  absl::Status ScenarioDeleted(int64_t workspace_id, int64_t scenario_id) override {
    absl::MutexLock lock(&mu_);
    notices_.push_back(absl::StrCat("scenario ", scenario_id, " of ", workspace_id));
    return answer_;
  }
  std::vector<std::string> notices() {
    absl::MutexLock lock(&mu_);
    return notices_;
  }
  void set_answer(absl::Status answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> notices_ ABSL_GUARDED_BY(mu_);
  absl::Status answer_ ABSL_GUARDED_BY(mu_);
};

class AgentsServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    if (HasFatalFailure()) return;
    // A credentials key, so web channel credentials can be stored and read back.
    AgentsStore::Options agents_options;
    agents_options.credentials_key = std::string(32, 'k');
    agents_ = std::make_unique<AgentsStore>(db(), std::move(agents_options));
    metric_directory_ = std::make_unique<metrics::InProcessMetricDirectory>(db());
    scenarios_ = std::make_unique<ScenariosStore>(db(), metric_directory_.get());
    scenario_directory_ =
        std::make_unique<InProcessScenarioDirectory>(agents_.get(), scenarios_.get());
    runs_ = std::make_unique<runs::RunsStore>(db(), scenario_directory_.get());
    integrations_ = std::make_unique<IntegrationsStore>(db(), std::string(32, 'k'));
    service_ =
        std::make_unique<AgentsService>(agents_.get(), authenticator_.get(), &pool_,
                                        scenarios_.get(), runs_.get(), [this] { ++runs_queued_; });
    service_->set_deletion_listener(&deletions_);
    service_->set_integrations(integrations_.get());
    service_->set_internal_credential(testing::kTestInternalCredential);
    server_ = testing::TestGrpcServer::Serve(service_.get());
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Agents::NewStub(server_->channel());
  }

  std::unique_ptr<grpc::ClientContext> Keyed() { return ContextWithKey(tenants_.key); }

  v1::Agent CreateAgent(const v1::AgentFields& fields) {
    v1::Agent agent;
    const grpc::Status status = stub_->CreateAgent(Keyed().get(), fields, &agent);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return agent;
  }

  v1::Scenario CreateScenario(const v1::ScenarioFields& fields) {
    v1::Scenario scenario;
    const grpc::Status status = stub_->CreateScenario(Keyed().get(), fields, &scenario);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return scenario;
  }

  ThreadPool pool_{4};
  std::unique_ptr<AgentsStore> agents_;
  std::unique_ptr<metrics::InProcessMetricDirectory> metric_directory_;
  std::unique_ptr<ScenariosStore> scenarios_;
  std::unique_ptr<InProcessScenarioDirectory> scenario_directory_;
  std::unique_ptr<runs::RunsStore> runs_;
  std::unique_ptr<IntegrationsStore> integrations_;
  std::atomic<int> runs_queued_{0};
  RecordingDeletionListener deletions_;
  std::unique_ptr<AgentsService> service_;
  std::unique_ptr<testing::TestGrpcServer> server_;
  std::unique_ptr<v1::Agents::Stub> stub_;
};

TEST_P(AgentsServiceTest, EveryPublicMethodAuthenticatesAndResolvesTheWorkspace) {
  const auto* service = testing::ServiceNamed(v1::Agents::service_full_name());
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseUnauthenticated(server_->channel(), service, tenants_),
      SizeIs(23));
  // Languages are the same for every workspace.
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseForeignWorkspace(server_->channel(), service, tenants_),
      ElementsAre("ListLanguages"));
  EXPECT_EQ(runs_queued_.load(), 0);
}

TEST_P(AgentsServiceTest, AgentLifecycle) {
  const v1::Agent created = CreateAgent(AgentNamed("Booking"));
  EXPECT_GT(created.id(), 0);
  EXPECT_EQ(created.client_id(), tenants_.own);
  EXPECT_EQ(created.name(), "Booking");
  EXPECT_EQ(created.phone_number(), "+14155550123");
  EXPECT_EQ(created.instructions(), "Take table bookings.");
  EXPECT_EQ(created.max_call_duration_seconds(), 300);

  v1::GetAgentRequest get;
  get.set_id(created.id());
  v1::Agent read;
  ASSERT_GRPC_OK(stub_->GetAgent(Keyed().get(), get, &read));
  EXPECT_EQ(read.SerializeAsString(), created.SerializeAsString());

  v1::UpdateAgentRequest update;
  update.set_id(created.id());
  update.mutable_agent()->set_name("Renamed");
  v1::Agent updated;
  ASSERT_GRPC_OK(stub_->UpdateAgent(Keyed().get(), update, &updated));
  EXPECT_EQ(updated.name(), "Renamed");
  EXPECT_EQ(updated.instructions(), "Take table bookings.");  // untouched by the patch

  CreateAgent(AgentNamed("Second"));
  v1::ListAgentsRequest list;
  list.set_per_page(1);
  v1::ListAgentsResponse listed;
  ASSERT_GRPC_OK(stub_->ListAgents(Keyed().get(), list, &listed));
  ASSERT_THAT(listed.data(), SizeIs(1));       // per_page reached the store
  EXPECT_EQ(listed.data(0).name(), "Second");  // newest first
  EXPECT_EQ(listed.pagination().total_pages(), 2);

  v1::DeleteAgentRequest remove;
  remove.set_id(created.id());
  google::protobuf::Empty empty;
  ASSERT_GRPC_OK(stub_->DeleteAgent(Keyed().get(), remove, &empty));
  EXPECT_GRPC_ERROR(stub_->GetAgent(Keyed().get(), get, &read), grpc::NOT_FOUND, "not_found");
  EXPECT_GRPC_ERROR(stub_->DeleteAgent(Keyed().get(), remove, &empty), grpc::NOT_FOUND,
                    "not_found");
}

// The listener (the metrics store in a server) hears of each delete once it has committed, and
// of no delete that failed; a listener that fails does not fail the delete, which is done.
TEST_P(AgentsServiceTest, DeletesOfAgentsAndScenariosAreToldToTheListener) {
  const v1::Agent agent = CreateAgent(AgentNamed("Booking"));
  const v1::Scenario scenario = CreateScenario(ScenarioFor(agent.id(), "Two at eight"));
  google::protobuf::Empty empty;
  v1::DeleteScenarioRequest remove_scenario;
  remove_scenario.set_id(scenario.id());
  deletions_.set_answer(absl::UnavailableError("metrics are away"));
  ASSERT_GRPC_OK(stub_->DeleteScenario(Keyed().get(), remove_scenario, &empty));
  deletions_.set_answer(absl::OkStatus());
  EXPECT_GRPC_ERROR(stub_->DeleteScenario(Keyed().get(), remove_scenario, &empty), grpc::NOT_FOUND,
                    "not_found");
  v1::DeleteAgentRequest remove_agent;
  remove_agent.set_id(agent.id());
  ASSERT_GRPC_OK(stub_->DeleteAgent(Keyed().get(), remove_agent, &empty));
  EXPECT_GRPC_ERROR(stub_->DeleteAgent(Keyed().get(), remove_agent, &empty), grpc::NOT_FOUND,
                    "not_found");
  const std::string of = absl::StrCat(" of ", tenants_.own);
  EXPECT_THAT(deletions_.notices(), ElementsAre(absl::StrCat("scenario ", scenario.id(), of),
                                                absl::StrCat("agent ", agent.id(), of)));
}

// Validation failures travel with every field issue, which the edge lists in its 422 body.
TEST_P(AgentsServiceTest, InvalidAgentIsRefusedWithItsFieldIssues) {
  v1::AgentFields fields = AgentNamed("");
  fields.set_max_call_duration_seconds(-1);
  v1::Agent agent;
  const grpc::Status status = stub_->CreateAgent(Keyed().get(), fields, &agent);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "validation_failed");
  std::vector<std::string> fields_named;
  const v1::ErrorInfo info = WireErrorInfo(status);
  for (const v1::ErrorDetail& detail : info.details()) {
    fields_named.push_back(detail.field());
  }
  EXPECT_THAT(fields_named, UnorderedElementsAre("name", "max_call_duration_seconds"));
}

TEST_P(AgentsServiceTest, ClientIdActsOnAGrantedWorkspaceOnly) {
  v1::AgentFields fields = AgentNamed("Granted");
  fields.set_client_id(tenants_.granted);
  const v1::Agent agent = CreateAgent(fields);
  EXPECT_EQ(agent.client_id(), tenants_.granted);

  v1::GetAgentRequest get;
  get.set_id(agent.id());
  v1::Agent read;
  // Without client_id the key acts on its own workspace, where the agent is not.
  EXPECT_GRPC_ERROR(stub_->GetAgent(Keyed().get(), get, &read), grpc::NOT_FOUND, "not_found");
  get.set_client_id(tenants_.granted);
  ASSERT_GRPC_OK(stub_->GetAgent(Keyed().get(), get, &read));
  EXPECT_EQ(read.id(), agent.id());
  // The foreign workspace's own key does not reach it either way.
  EXPECT_GRPC_ERROR(stub_->GetAgent(ContextWithKey(tenants_.foreign_key).get(), get, &read),
                    grpc::PERMISSION_DENIED, "workspace_not_accessible");
  get.clear_client_id();
  EXPECT_GRPC_ERROR(stub_->GetAgent(ContextWithKey(tenants_.foreign_key).get(), get, &read),
                    grpc::NOT_FOUND, "not_found");
}

// PATCH may name the workspace in the query or in the body: the query wins, the body's counts
// when the query has none, and either is checked against the key's grants.
TEST_P(AgentsServiceTest, UpdateTakesTheQueryClientIdThenTheBodys) {
  v1::AgentFields fields = AgentNamed("Granted");
  fields.set_client_id(tenants_.granted);
  const v1::Agent agent = CreateAgent(fields);

  v1::UpdateAgentRequest update;
  update.set_id(agent.id());
  update.mutable_agent()->set_name("From the body's workspace");
  update.mutable_agent()->set_client_id(tenants_.granted);
  v1::Agent updated;
  ASSERT_GRPC_OK(stub_->UpdateAgent(Keyed().get(), update, &updated));
  EXPECT_EQ(updated.name(), "From the body's workspace");

  update.set_client_id(tenants_.own);  // the query names the key's own workspace
  EXPECT_GRPC_ERROR(stub_->UpdateAgent(Keyed().get(), update, &updated), grpc::NOT_FOUND,
                    "not_found");

  update.clear_client_id();
  update.mutable_agent()->set_client_id(tenants_.foreign);
  EXPECT_GRPC_ERROR(stub_->UpdateAgent(Keyed().get(), update, &updated), grpc::PERMISSION_DENIED,
                    "workspace_not_accessible");
}

TEST_P(AgentsServiceTest, ListLanguagesNeedsOnlyAValidKey) {
  v1::ListLanguagesResponse languages;
  ASSERT_GRPC_OK(stub_->ListLanguages(Keyed().get(), {}, &languages));
  EXPECT_FALSE(languages.data().empty());
  v1::ListLanguagesResponse foreign;
  ASSERT_GRPC_OK(stub_->ListLanguages(ContextWithKey(tenants_.foreign_key).get(), {}, &foreign));
  EXPECT_EQ(foreign.SerializeAsString(), languages.SerializeAsString());
}

TEST_P(AgentsServiceTest, ScenarioLifecycle) {
  const v1::Agent agent = CreateAgent(AgentNamed("Booking"));
  const v1::Agent other = CreateAgent(AgentNamed("Other"));
  const v1::Scenario created = CreateScenario(ScenarioFor(agent.id(), "Two at eight"));
  EXPECT_EQ(created.client_id(), tenants_.own);
  EXPECT_EQ(created.agent_id(), agent.id());
  EXPECT_EQ(created.name(), "Two at eight");
  EXPECT_EQ(created.goal(), "Book a table for two at 8 pm");
  EXPECT_EQ(created.persona(), "A hurried caller");
  EXPECT_EQ(created.max_turns(), 7);
  CreateScenario(ScenarioFor(other.id(), "Of the other agent"));

  v1::GetScenarioRequest get;
  get.set_id(created.id());
  v1::Scenario read;
  ASSERT_GRPC_OK(stub_->GetScenario(Keyed().get(), get, &read));
  EXPECT_EQ(read.SerializeAsString(), created.SerializeAsString());

  v1::UpdateScenarioRequest update;
  update.set_id(created.id());
  update.mutable_scenario()->set_max_turns(9);
  v1::Scenario updated;
  ASSERT_GRPC_OK(stub_->UpdateScenario(Keyed().get(), update, &updated));
  EXPECT_EQ(updated.max_turns(), 9);
  EXPECT_EQ(updated.name(), "Two at eight");

  v1::ListScenariosRequest list;
  list.set_agent_id(agent.id());  // the filter reaches the store
  v1::ListScenariosResponse listed;
  ASSERT_GRPC_OK(stub_->ListScenarios(Keyed().get(), list, &listed));
  ASSERT_THAT(listed.data(), SizeIs(1));
  EXPECT_EQ(listed.data(0).id(), created.id());

  v1::DeleteScenarioRequest remove;
  remove.set_id(created.id());
  google::protobuf::Empty empty;
  ASSERT_GRPC_OK(stub_->DeleteScenario(Keyed().get(), remove, &empty));
  EXPECT_GRPC_ERROR(stub_->GetScenario(Keyed().get(), get, &read), grpc::NOT_FOUND, "not_found");
}

TEST_P(AgentsServiceTest, ScenarioOfAnAgentOfAnotherWorkspaceIsRefused) {
  v1::AgentFields fields = AgentNamed("Granted");
  fields.set_client_id(tenants_.granted);
  const v1::Agent agent = CreateAgent(fields);
  v1::Scenario scenario;
  const grpc::Status status =
      stub_->CreateScenario(Keyed().get(), ScenarioFor(agent.id(), "Wrong workspace"), &scenario);
  EXPECT_GRPC_ERROR(status, grpc::INVALID_ARGUMENT, "agent_not_found");
  ASSERT_THAT(WireErrorInfo(status).details(), SizeIs(1));
  EXPECT_EQ(WireErrorInfo(status).details(0).field(), "agent_id");
}

// A run or batch queued wakes the runs role; a refused one does not.
TEST_P(AgentsServiceTest, RunsAreQueuedAndWakeTheRunsRole) {
  const v1::Agent agent = CreateAgent(AgentNamed("Booking"));
  const v1::Scenario first = CreateScenario(ScenarioFor(agent.id(), "First"));
  const v1::Scenario second = CreateScenario(ScenarioFor(agent.id(), "Second"));

  v1::RunScenarioRequest run_request;
  run_request.set_id(first.id());
  run_request.set_channel("text");
  v1::Run run;
  ASSERT_GRPC_OK(stub_->RunScenario(Keyed().get(), run_request, &run));
  EXPECT_EQ(run.scenario_id(), first.id());
  EXPECT_EQ(run.agent_id(), agent.id());
  EXPECT_EQ(run.channel(), "text");
  EXPECT_EQ(run.status(), "queued");
  EXPECT_EQ(runs_queued_.load(), 1);

  run_request.set_channel("carrier pigeon");
  v1::Run refused;
  EXPECT_GRPC_ERROR(stub_->RunScenario(Keyed().get(), run_request, &refused),
                    grpc::INVALID_ARGUMENT, "validation_failed");
  run_request.set_id(first.id() + second.id() + 100);
  run_request.set_channel("text");
  EXPECT_GRPC_ERROR(stub_->RunScenario(Keyed().get(), run_request, &refused), grpc::NOT_FOUND,
                    "not_found");
  EXPECT_EQ(runs_queued_.load(), 1);

  v1::GetRunRequest get;
  get.set_id(run.id());
  v1::Run read;
  ASSERT_GRPC_OK(stub_->GetRun(Keyed().get(), get, &read));
  EXPECT_EQ(read.SerializeAsString(), run.SerializeAsString());

  v1::CreateBatchRunRequest batch_request;
  batch_request.set_agent_id(agent.id());
  batch_request.add_scenario_ids(first.id());
  batch_request.add_scenario_ids(second.id());
  batch_request.set_channel("text");
  batch_request.set_concurrency(2);
  v1::BatchRun batch;
  ASSERT_GRPC_OK(stub_->CreateBatchRun(Keyed().get(), batch_request, &batch));
  EXPECT_EQ(batch.agent_id(), agent.id());
  EXPECT_EQ(batch.channel(), "text");
  EXPECT_EQ(batch.concurrency(), 2);
  EXPECT_THAT(batch.run_ids(), SizeIs(2));
  EXPECT_EQ(batch.summary().total(), 2);
  EXPECT_EQ(runs_queued_.load(), 2);

  v1::GetBatchRunRequest get_batch;
  get_batch.set_id(batch.id());
  v1::BatchRun read_batch;
  ASSERT_GRPC_OK(stub_->GetBatchRun(Keyed().get(), get_batch, &read_batch));
  EXPECT_THAT(read_batch.run_ids(), UnorderedElementsAre(batch.run_ids(0), batch.run_ids(1)));

  v1::ListRunsRequest list;
  list.set_batch_run_id(batch.id());  // the filter reaches the store
  v1::ListRunsResponse listed;
  ASSERT_GRPC_OK(stub_->ListRuns(Keyed().get(), list, &listed));
  ASSERT_THAT(listed.data(), SizeIs(2));
  for (const v1::Run& r : listed.data()) EXPECT_EQ(r.batch_run_id(), batch.id());
  list.clear_batch_run_id();
  ASSERT_GRPC_OK(stub_->ListRuns(Keyed().get(), list, &listed));
  EXPECT_THAT(listed.data(), SizeIs(3));

  // Runs of one workspace are not found from another.
  get.set_client_id(tenants_.granted);
  EXPECT_GRPC_ERROR(stub_->GetRun(Keyed().get(), get, &read), grpc::NOT_FOUND, "not_found");
}

// The stats' run counts, as the calls service asks them: from the runs store in process, or
// over the internal CountRuns; by agent and by scenario, per bucket.
TEST_P(AgentsServiceTest, RunCountsAnswerTheSameInProcessAndOverGrpc) {
  const v1::Agent agent = CreateAgent(AgentNamed("Booking"));
  const v1::Scenario first = CreateScenario(ScenarioFor(agent.id(), "First"));
  const v1::Scenario second = CreateScenario(ScenarioFor(agent.id(), "Second"));
  for (int64_t scenario : {first.id(), first.id(), second.id()}) {
    v1::RunScenarioRequest request;
    request.set_id(scenario);
    request.set_channel("text");
    v1::Run run;
    ASSERT_GRPC_OK(stub_->RunScenario(Keyed().get(), request, &run));
  }
  runs::RunCountQuery by_agent;
  by_agent.workspace_id = tenants_.own;
  by_agent.agent_id = agent.id();
  by_agent.from = absl::ToUnixSeconds(absl::Now()) - 3600;
  by_agent.to = by_agent.from + 7200;
  by_agent.width = 7200;
  runs::RunCountQuery by_scenario = by_agent;
  by_scenario.agent_id.reset();
  by_scenario.scenario_id = first.id();
  runs::RunCountQuery other_workspace = by_agent;
  other_workspace.workspace_id = tenants_.granted;

  calls::RunCounter local = [this](const runs::RunCountQuery& q) { return runs_->CountRuns(q); };
  calls::RunCounter remote = calls::NewGrpcRunCounter(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  for (const calls::RunCounter& count : {local, remote}) {
    auto agent_runs = count(by_agent);
    ASSERT_TRUE(agent_runs.ok()) << agent_runs.status();
    ASSERT_EQ(agent_runs->size(), 1u);
    EXPECT_EQ(agent_runs->begin()->first, 0);
    EXPECT_EQ(agent_runs->begin()->second.queued, 3);
    EXPECT_EQ(agent_runs->begin()->second.passed, 0);
    auto scenario_runs = count(by_scenario);
    ASSERT_TRUE(scenario_runs.ok()) << scenario_runs.status();
    ASSERT_EQ(scenario_runs->size(), 1u);
    EXPECT_EQ(scenario_runs->begin()->second.queued, 2);
    auto none = count(other_workspace);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_TRUE(none->empty());
  }
}

// A runs worker reads the workspace's integration settings with their secrets (the carrier's
// auth token, to place a call and check its webhooks) the same in process and over the internal
// method; an API key reads none of it.
TEST_P(AgentsServiceTest, RunIntegrationsAnswerTheSameInProcessAndOverGrpc) {
  google::protobuf::Struct twilio;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"account_sid": "AC0123456789abcdef0123456789abcdef",
                      "auth_token": "secret-token",
                      "caller_numbers": ["+14155550100", "+14155550101"]})",
                  &twilio)
                  .ok());
  ASSERT_TRUE(integrations_->Write(tenants_.own, "twilio", twilio, /*replace=*/true).ok());

  InProcessRunAgents local(agents_.get(), scenarios_.get(), integrations_.get());
  std::unique_ptr<runs::RunAgents> remote = NewGrpcRunAgents(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  for (runs::RunAgents* run_agents : {static_cast<runs::RunAgents*>(&local), remote.get()}) {
    SCOPED_TRACE(run_agents == remote.get() ? "over gRPC" : "in process");
    absl::StatusOr<std::optional<IntegrationSettings>> settings =
        run_agents->GetIntegration(tenants_.own, "twilio");
    ASSERT_TRUE(settings.ok()) << settings.status();
    ASSERT_TRUE(settings->has_value());
    EXPECT_EQ((**settings).provider, "twilio");
    EXPECT_EQ((**settings).fields.value("account_sid", ""), "AC0123456789abcdef0123456789abcdef");
    EXPECT_EQ((**settings).fields["caller_numbers"],
              nlohmann::json::array({"+14155550100", "+14155550101"}));
    EXPECT_EQ((**settings).secrets.value("auth_token", ""), "secret-token");
    EXPECT_FALSE((**settings).fields.contains("auth_token"));

    // None stored, another workspace's: nullopt. An unknown provider: NotFound.
    settings = run_agents->GetIntegration(tenants_.own, "plivo");
    ASSERT_TRUE(settings.ok()) << settings.status();
    EXPECT_FALSE(settings->has_value());
    settings = run_agents->GetIntegration(tenants_.granted, "twilio");
    ASSERT_TRUE(settings.ok()) << settings.status();
    EXPECT_FALSE(settings->has_value());
    EXPECT_EQ(run_agents->GetIntegration(tenants_.own, "skype").status().code(),
              absl::StatusCode::kNotFound);
  }

  v1::RunIntegrationRequest request;
  request.set_workspace_id(tenants_.own);
  request.set_provider("twilio");
  v1::RunIntegration refused;
  EXPECT_EQ(stub_->GetRunIntegration(Keyed().get(), request, &refused).error_code(),
            grpc::UNAUTHENTICATED);
  EXPECT_TRUE(refused.secrets().empty());
}

// A process that serves agents without the scenarios, runs and integrations stores answers their
// methods 503, so the edge can tell the client to retry elsewhere.
TEST_P(AgentsServiceTest, ScenariosAndRunsNotServedHereAreUnavailable) {
  AgentsService agents_only(agents_.get(), authenticator_.get(), &pool_);
  auto server = testing::TestGrpcServer::Serve(&agents_only);
  ASSERT_NE(server, nullptr);
  const auto* service = testing::ServiceNamed(v1::Agents::service_full_name());
  int unavailable = 0;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* method = service->method(i);
    auto request = testing::NewMessage(method->input_type());
    auto response = testing::NewMessage(method->output_type());
    const grpc::Status status = testing::CallMethod(
        server->channel(), method, *request, response.get(), {{"authorization", key_header()}});
    if (status.error_code() != grpc::UNAVAILABLE) continue;
    ++unavailable;
    EXPECT_THAT(method->name(),
                ::testing::AnyOf(::testing::HasSubstr("Scenario"), ::testing::HasSubstr("Run"),
                                 ::testing::HasSubstr("Integration"),
                                 ::testing::HasSubstr("Replay")));
  }
  // Five scenario methods, a call's replay, RunScenario, GetRun, ListRuns, the three batch
  // methods and the five integration settings methods.
  EXPECT_EQ(unavailable, 17);
  v1::ListAgentsResponse listed;
  ASSERT_GRPC_OK(v1::Agents::NewStub(server->channel())->ListAgents(Keyed().get(), {}, &listed));
}

// The edge calls the table's handlers in process (CallInProcess, as DirectInvoker::RegisterTable
// does): they answer exactly what the RPCs answer.
TEST_P(AgentsServiceTest, HandlersAnswerLikeTheRpcs) {
  const v1::Agent agent = CreateAgent(AgentNamed("Booking"));
  const v1::Scenario scenario = CreateScenario(ScenarioFor(agent.id(), "First"));
  for (const std::string& authorization : {key_header(), testing::Bearer(tenants_.foreign_key),
                                           testing::Bearer(tenants_.revoked_key), std::string()}) {
    Metadata metadata;
    if (!authorization.empty()) metadata.push_back({"authorization", authorization});
    SCOPED_TRACE(authorization);
    for (int64_t id : {agent.id(), agent.id() + 1000}) {
      v1::GetAgentRequest request;
      request.set_id(id);
      v1::Agent direct, remote;
      const absl::Status direct_status =
          testing::CallInProcess(*service_, "GetAgent", authorization, request, &direct);
      const grpc::Status remote_status =
          stub_->GetAgent(ContextWith(metadata).get(), request, &remote);
      if (direct_status.ok()) {
        ASSERT_GRPC_OK(remote_status);
        EXPECT_EQ(direct.SerializeAsString(), remote.SerializeAsString());
      } else {
        testing::ExpectSameOutcome(direct_status, remote_status);
      }
    }
    {
      v1::ListScenariosRequest request;
      v1::ListScenariosResponse direct, remote;
      const absl::Status direct_status =
          testing::CallInProcess(*service_, "ListScenarios", authorization, request, &direct);
      const grpc::Status remote_status =
          stub_->ListScenarios(ContextWith(metadata).get(), request, &remote);
      if (direct_status.ok()) {
        ASSERT_GRPC_OK(remote_status);
        EXPECT_EQ(direct.SerializeAsString(), remote.SerializeAsString());
      } else {
        testing::ExpectSameOutcome(direct_status, remote_status);
      }
    }
    {
      v1::AgentFields invalid = AgentNamed("");
      v1::Agent direct, remote;
      testing::ExpectSameOutcome(
          testing::CallInProcess(*service_, "CreateAgent", authorization, invalid, &direct),
          stub_->CreateAgent(ContextWith(metadata).get(), invalid, &remote));
    }
  }
  // A run queued through the entry point wakes the runs role too.
  v1::RunScenarioRequest run;
  run.set_id(scenario.id());
  run.set_channel("text");
  v1::Run queued;
  ASSERT_TRUE(testing::CallInProcess(*service_, "RunScenario", key_header(), run, &queued).ok());
  EXPECT_EQ(queued.scenario_id(), scenario.id());
  EXPECT_EQ(runs_queued_.load(), 1);
}

// What the other services ask of the agents and scenarios tables, the same over both
// implementations: the in-process directories over the stores (roles in one process) and the
// gRPC clients of the internal methods (roles apart).
TEST_P(AgentsServiceTest, DirectoriesAnswerTheSameInProcessAndOverGrpc) {
  v1::AgentFields phoneless = AgentNamed("Web only");
  phoneless.clear_phone_number();
  auto& web = *phoneless.mutable_web_channel()->mutable_fields();
  web["transport"].set_string_value("websocket");
  web["websocket_url"].set_string_value("wss://agent.example.com/media");
  const v1::Agent with_phone = CreateAgent(AgentNamed("Booking"));
  const v1::Agent without_phone = CreateAgent(phoneless);
  const v1::Scenario first = CreateScenario(ScenarioFor(with_phone.id(), "First"));
  const v1::Scenario second = CreateScenario(ScenarioFor(without_phone.id(), "Second"));
  // An agent and a scenario of another workspace are not there for this one.
  v1::AgentFields foreign_fields = AgentNamed("Foreign");
  foreign_fields.set_client_id(tenants_.granted);
  const v1::Agent foreign = CreateAgent(foreign_fields);
  const int64_t missing = second.id() + 1000;

  auto channel = CreateInternalChannel(server_->address(), testing::kTestInternalCredential);
  InProcessAgentDirectory local_agents(agents_.get(), scenarios_.get());
  std::unique_ptr<metrics::AgentDirectory> remote_agents = NewGrpcAgentDirectory(channel);
  std::unique_ptr<runs::ScenarioDirectory> remote_scenarios = NewGrpcScenarioDirectory(channel);
  const int64_t ws = tenants_.own;
  for (auto [agent_directory, scenario_directory] :
       {std::pair<metrics::AgentDirectory*, runs::ScenarioDirectory*>{&local_agents,
                                                                      scenario_directory_.get()},
        {remote_agents.get(), remote_scenarios.get()}}) {
    SCOPED_TRACE(agent_directory == &local_agents ? "in process" : "over gRPC");
    auto agents = agent_directory->ExistingAgents(
        ws, {with_phone.id(), foreign.id(), missing, without_phone.id(), with_phone.id()});
    ASSERT_TRUE(agents.ok()) << agents.status();
    EXPECT_THAT(*agents, UnorderedElementsAre(with_phone.id(), without_phone.id()));
    auto scenarios = agent_directory->ExistingScenarios(ws, {second.id(), missing, first.id()});
    ASSERT_TRUE(scenarios.ok()) << scenarios.status();
    EXPECT_THAT(*scenarios, UnorderedElementsAre(first.id(), second.id()));
    auto none = agent_directory->ExistingAgents(ws, {});
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_TRUE(none->empty());

    // The toggles' list: each kind replaces its own part and keeps the other.
    auto standard = agent_directory->ReplaceDisabledMetrics(
        ws, with_phone.id(), metrics::AgentDirectory::MetricKind::kStandard, {3, 1});
    ASSERT_TRUE(standard.ok()) << standard.status();
    EXPECT_THAT(*standard, ElementsAre(1, 3));
    auto custom = agent_directory->ReplaceDisabledMetrics(
        ws, with_phone.id(), metrics::AgentDirectory::MetricKind::kCustom, {5000});
    ASSERT_TRUE(custom.ok()) << custom.status();
    EXPECT_THAT(*custom, ElementsAre(1, 3, 5000));
    auto disabled = agent_directory->DisabledMetrics(ws, with_phone.id());
    ASSERT_TRUE(disabled.ok()) << disabled.status();
    EXPECT_THAT(*disabled, ElementsAre(1, 3, 5000));
    ASSERT_TRUE(agent_directory
                    ->ReplaceDisabledMetrics(ws, with_phone.id(),
                                             metrics::AgentDirectory::MetricKind::kCustom, {})
                    .ok());
    EXPECT_EQ(agent_directory->DisabledMetrics(ws, foreign.id()).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(agent_directory
                  ->ReplaceDisabledMetrics(ws, missing,
                                           metrics::AgentDirectory::MetricKind::kStandard, {1})
                  .status()
                  .code(),
              absl::StatusCode::kNotFound);

    // What the runs store asks when it queues runs.
    auto callees = scenario_directory->ScenarioAgents(ws, {first.id(), second.id(), missing});
    ASSERT_TRUE(callees.ok()) << callees.status();
    ASSERT_EQ(callees->size(), 2u);
    EXPECT_EQ(callees->at(first.id()).agent_id, with_phone.id());
    EXPECT_TRUE(callees->at(first.id()).agent_has_phone);
    EXPECT_EQ(callees->at(second.id()).agent_id, without_phone.id());
    EXPECT_FALSE(callees->at(second.id()).agent_has_phone);
    auto foreign_callees = scenario_directory->ScenarioAgents(tenants_.granted, {first.id()});
    ASSERT_TRUE(foreign_callees.ok()) << foreign_callees.status();
    EXPECT_TRUE(foreign_callees->empty());
    absl::StatusOr<bool> has_phone = scenario_directory->AgentHasPhone(ws, with_phone.id());
    ASSERT_TRUE(has_phone.ok()) << has_phone.status();
    EXPECT_TRUE(*has_phone);
    has_phone = scenario_directory->AgentHasPhone(ws, without_phone.id());
    ASSERT_TRUE(has_phone.ok()) << has_phone.status();
    EXPECT_FALSE(*has_phone);
    EXPECT_EQ(scenario_directory->AgentHasPhone(ws, foreign.id()).status().code(),
              absl::StatusCode::kNotFound);
  }
  EXPECT_THAT(agents_->Get(ws, with_phone.id())->disabled_metric_ids(), ElementsAre(1, 3));
}

// What a call asks of its agent, as the calls store sees it: from the agents store in process,
// or over the internal GetCallAgent; an agent of another workspace, or none, is ingest's 422
// agent_not_found either way.
TEST_P(AgentsServiceTest, CallAgentAnswersTheSameInProcessAndOverGrpc) {
  v1::AgentFields fields = AgentNamed("Booking");
  fields.set_silence_threshold_ms(2500);
  const v1::Agent agent = CreateAgent(fields);
  ASSERT_TRUE(agents_
                  ->ReplaceDisabledMetrics(tenants_.own, agent.id(),
                                           [](int64_t) { return true; }, {11, 4})
                  .ok());
  v1::AgentFields foreign_fields = AgentNamed("Foreign");
  foreign_fields.set_client_id(tenants_.granted);
  const v1::Agent foreign = CreateAgent(foreign_fields);

  calls::AgentLookup local = calls::AgentLookupFrom(
      [this](int64_t ws, int64_t id) { return agents_->GetCallAgent(ws, id); });
  calls::AgentLookup remote = calls::AgentLookupFrom(calls::NewGrpcCallAgentSource(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential)));
  for (const calls::AgentLookup& lookup : {local, remote}) {
    absl::StatusOr<calls::AgentInfo> info = lookup(tenants_.own, agent.id());
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_THAT(info->disabled_metric_ids, ElementsAre(4, 11));
    EXPECT_EQ(info->silence_threshold_ms, 2500);
    EXPECT_EQ(info->name, "Booking");
    EXPECT_EQ(info->agent_source, agent.agent_source());
    for (int64_t other : {foreign.id(), foreign.id() + 1000}) {
      absl::Status missing = lookup(tenants_.own, other).status();
      EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument) << missing;
      EXPECT_EQ(ErrorInfoOf(missing).code(), "agent_not_found") << missing;
    }
  }
  // Without the credential the calls store learns nothing.
  calls::CallAgentSource keyed = calls::NewGrpcCallAgentSource(
      CreateInternalChannel(server_->address(), tenants_.key));
  EXPECT_EQ(keyed(tenants_.own, agent.id()).status().code(), absl::StatusCode::kUnauthenticated);
}

// What a runs worker reads of its run (services/runs/run_agents.h) is the same in process and
// over the internal methods: the scenario and agent as the public reads answer them, and the
// agent's web channel with its credential's value, which no public answer carries.
TEST_P(AgentsServiceTest, RunAgentsAnswerTheSameInProcessAndOverGrpc) {
  v1::AgentFields voice = AgentNamed("Voice");
  voice.clear_phone_number();
  auto& web = *voice.mutable_web_channel()->mutable_fields();
  web["transport"].set_string_value("websocket");
  web["websocket_url"].set_string_value("wss://agent.example.com/media");
  web["auth_token"].set_string_value("tok-run");
  const v1::Agent with_channel = CreateAgent(voice);
  const v1::Agent without_channel = CreateAgent(AgentNamed("Phone only"));
  const v1::Scenario scenario = CreateScenario(ScenarioFor(with_channel.id(), "Books"));
  v1::AgentFields foreign_fields = AgentNamed("Foreign");
  foreign_fields.set_client_id(tenants_.granted);
  const v1::Agent foreign = CreateAgent(foreign_fields);
  const int64_t ws = tenants_.own;

  InProcessRunAgents local(agents_.get(), scenarios_.get());
  std::unique_ptr<runs::RunAgents> remote = NewGrpcRunAgents(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  using google::protobuf::util::MessageDifferencer;
  for (runs::RunAgents* run_agents : {static_cast<runs::RunAgents*>(&local), remote.get()}) {
    SCOPED_TRACE(run_agents == remote.get() ? "over gRPC" : "in process");
    absl::StatusOr<v1::Scenario> read_scenario = run_agents->GetScenario(ws, scenario.id());
    ASSERT_TRUE(read_scenario.ok()) << read_scenario.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*read_scenario, scenario))
        << read_scenario->DebugString();
    absl::StatusOr<v1::Agent> read_agent = run_agents->GetAgent(ws, with_channel.id());
    ASSERT_TRUE(read_agent.ok()) << read_agent.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*read_agent, with_channel)) << read_agent->DebugString();

    absl::StatusOr<std::optional<WebChannel>> channel =
        run_agents->GetWebChannel(ws, with_channel.id());
    ASSERT_TRUE(channel.ok()) << channel.status();
    ASSERT_TRUE(channel->has_value());
    EXPECT_EQ((**channel).fields.value("transport", ""), "websocket");
    EXPECT_EQ((**channel).fields.value("websocket_url", ""), "wss://agent.example.com/media");
    EXPECT_EQ((**channel).credentials.value("auth_token", ""), "tok-run");
    EXPECT_FALSE((**channel).fields.contains("auth_token"));
    channel = run_agents->GetWebChannel(ws, without_channel.id());
    ASSERT_TRUE(channel.ok()) << channel.status();
    EXPECT_FALSE(channel->has_value());

    // Another workspace's agent, a scenario that is not there: NotFound, as the public reads.
    EXPECT_EQ(run_agents->GetAgent(ws, foreign.id()).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(run_agents->GetWebChannel(ws, foreign.id()).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(run_agents->GetScenario(ws, scenario.id() + 1000).status().code(),
              absl::StatusCode::kNotFound);
  }

  // An API key reads none of it, the credential least of all.
  v1::WorkspaceItemRequest item;
  item.set_workspace_id(ws);
  item.set_id(with_channel.id());
  v1::AgentWebChannel refused_channel;
  EXPECT_EQ(stub_->GetAgentWebChannel(Keyed().get(), item, &refused_channel).error_code(),
            grpc::UNAUTHENTICATED);
  EXPECT_TRUE(refused_channel.credentials().empty());
  v1::Agent refused_agent;
  EXPECT_EQ(stub_->GetRunAgent(Keyed().get(), item, &refused_agent).error_code(),
            grpc::UNAUTHENTICATED);
  item.set_id(scenario.id());
  v1::Scenario refused_scenario;
  EXPECT_EQ(stub_->GetRunScenario(Keyed().get(), item, &refused_scenario).error_code(),
            grpc::UNAUTHENTICATED);
}

// The run queue a runs worker leases (services/runs/run_queue.h) behaves the same through the
// runs store and over the internal methods: a lease hands out the run once, a renewal, the
// call and the outcome need the token that holds it (a stale one is refused and changes
// nothing), a release does not count the attempt, and a restarted holder gives back its leases.
TEST_P(AgentsServiceTest, RunQueueAnswersTheSameInProcessAndOverGrpc) {
  const v1::Agent agent = CreateAgent(AgentNamed("Booking"));
  const v1::Scenario scenario = CreateScenario(ScenarioFor(agent.id(), "Books"));
  auto queue_run = [&] {
    v1::RunScenarioRequest request;
    request.set_id(scenario.id());
    request.set_channel("text");
    v1::Run run;
    const grpc::Status status = stub_->RunScenario(Keyed().get(), request, &run);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return run;
  };
  auto read_run = [&](int64_t id) {
    v1::GetRunRequest request;
    request.set_id(id);
    v1::Run run;
    const grpc::Status status = stub_->GetRun(Keyed().get(), request, &run);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return run;
  };
  const absl::Duration lease = absl::Seconds(30);
  runs::StoreRunQueue local(runs_.get());
  std::unique_ptr<runs::RunQueue> remote = NewGrpcRunQueue(
      CreateInternalChannel(server_->address(), testing::kTestInternalCredential));
  for (runs::RunQueue* queue : {static_cast<runs::RunQueue*>(&local), remote.get()}) {
    SCOPED_TRACE(queue == remote.get() ? "over gRPC" : "in process");
    const std::string holder = queue == remote.get() ? "remote-host/runs" : "local-host/runs";
    const v1::Run queued = queue_run();

    absl::StatusOr<std::optional<runs::RunJob>> leased = queue->Lease(lease, 3, holder);
    ASSERT_TRUE(leased.ok()) << leased.status();
    ASSERT_TRUE(leased->has_value());
    runs::RunJob job = **leased;
    EXPECT_EQ(job.run_id, queued.id());
    EXPECT_EQ(job.workspace_id, tenants_.own);
    EXPECT_EQ(job.scenario_id, scenario.id());
    EXPECT_EQ(job.agent_id, agent.id());
    EXPECT_EQ(job.channel, "text");
    EXPECT_EQ(job.attempts, 1);
    EXPECT_FALSE(job.call_id.has_value());
    EXPECT_FALSE(job.token.empty());
    absl::StatusOr<std::optional<runs::RunJob>> none = queue->Lease(lease, 3, holder);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value());  // held

    EXPECT_TRUE(queue->Renew(job.run_id, job.token, lease).ok());
    const std::string stale = job.token + "-stale";
    EXPECT_EQ(queue->Renew(job.run_id, stale, lease).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(queue->SetCall(job.run_id, stale, 99).code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(queue->SetCall(job.run_id, job.token, 77).ok());
    EXPECT_EQ(read_run(job.run_id).call_id(), 77);

    // Given back untried: the next lease takes it again, the attempt not counted, the call kept.
    ASSERT_TRUE(queue->Release(job.run_id, job.token).ok());
    leased = queue->Lease(lease, 3, holder);
    ASSERT_TRUE(leased.ok() && leased->has_value()) << leased.status();
    EXPECT_EQ((**leased).run_id, job.run_id);
    EXPECT_EQ((**leased).attempts, 1);
    EXPECT_EQ((**leased).call_id, std::optional<int64_t>(77));
    runs::RunOutcome passed{"completed", true, "script_finished", ""};
    // The agent's label and the platform's version of it travel with the outcome.
    passed.agent_version = "prompt-v2";
    passed.platform_version = "7";
    EXPECT_EQ(queue->Finish(job.run_id, job.token, passed).code(),
              absl::StatusCode::kFailedPrecondition);  // the released lease's token
    EXPECT_EQ(read_run(job.run_id).status(), "in_progress");
    job = **leased;
    ASSERT_TRUE(queue->Finish(job.run_id, job.token, passed).ok());
    const v1::Run finished = read_run(job.run_id);
    EXPECT_EQ(finished.status(), "completed");
    EXPECT_TRUE(finished.passed());
    EXPECT_EQ(finished.end_reason(), "script_finished");
    EXPECT_EQ(finished.version(), "prompt-v2");
    EXPECT_EQ(finished.platform_version(), "7");

    // A restarted holder gives back what its previous life held; another holder's stay.
    const v1::Run second = queue_run();
    leased = queue->Lease(lease, 3, holder);
    ASSERT_TRUE(leased.ok() && leased->has_value()) << leased.status();
    EXPECT_EQ((**leased).run_id, second.id());
    absl::StatusOr<int> released = queue->ReleaseLeasesOf("another-host/runs");
    ASSERT_TRUE(released.ok()) << released.status();
    EXPECT_EQ(*released, 0);
    released = queue->ReleaseLeasesOf(holder);
    ASSERT_TRUE(released.ok()) << released.status();
    EXPECT_EQ(*released, 1);
    leased = queue->Lease(lease, 3, holder);
    ASSERT_TRUE(leased.ok() && leased->has_value()) << leased.status();
    EXPECT_EQ((**leased).run_id, second.id());
    EXPECT_EQ((**leased).attempts, 2);
    ASSERT_TRUE(queue->Finish(second.id(), (**leased).token,
                              runs::RunOutcome{"failed", std::nullopt, "", "stopped by the test"})
                    .ok());
    EXPECT_EQ(read_run(second.id()).status(), "failed");
  }

  // An API key leases nothing.
  queue_run();
  v1::LeaseRunRequest lease_request;
  lease_request.set_lease_seconds(30);
  lease_request.set_max_attempts(3);
  v1::LeaseRunResponse refused;
  EXPECT_EQ(stub_->LeaseRun(Keyed().get(), lease_request, &refused).error_code(),
            grpc::UNAUTHENTICATED);
  EXPECT_FALSE(refused.has_run());
  v1::ReleaseRunLeasesOfRequest release_request;
  release_request.set_holder("local-host/runs");
  v1::ReleaseRunLeasesOfResponse released;
  EXPECT_EQ(stub_->ReleaseRunLeasesOf(Keyed().get(), release_request, &released).error_code(),
            grpc::UNAUTHENTICATED);
  absl::StatusOr<std::optional<runs::RunJob>> still_queued = local.Lease(lease, 3, "check");
  ASSERT_TRUE(still_queued.ok()) << still_queued.status();
  EXPECT_TRUE(still_queued->has_value());
}

// The internal methods answer only the installation's credential: a wrong one, an API key, or
// a service never given a credential (which must not match an empty header) are refused.
TEST_P(AgentsServiceTest, InternalMethodsAnswerOnlyTheInternalCredential) {
  const v1::Agent agent = CreateAgent(AgentNamed("Booking"));
  auto wrong = NewGrpcAgentDirectory(
      CreateInternalChannel(server_->address(), "not-this-installations-credential"));
  EXPECT_EQ(wrong->ExistingAgents(tenants_.own, {agent.id()}).status().code(),
            absl::StatusCode::kUnauthenticated);
  auto keyed = NewGrpcScenarioDirectory(grpc::CreateCustomChannel(
      server_->address(), grpc::InsecureChannelCredentials(), grpc::ChannelArguments()));
  EXPECT_EQ(keyed->AgentHasPhone(tenants_.own, agent.id()).status().code(),
            absl::StatusCode::kUnauthenticated);

  AgentsService closed(agents_.get(), authenticator_.get(), &pool_, scenarios_.get(),
                       runs_.get());
  auto server = testing::TestGrpcServer::Serve(&closed);
  ASSERT_NE(server, nullptr);
  for (const std::string& credential :
       {std::string(testing::kTestInternalCredential), std::string()}) {
    auto channel = CreateInternalChannel(server->address(), credential);
    EXPECT_EQ(NewGrpcAgentDirectory(channel)->ExistingAgents(tenants_.own, {agent.id()})
                  .status()
                  .code(),
              absl::StatusCode::kUnauthenticated)
        << credential;
  }
}

// A deadline is set on every call: a peer that accepts the connection and never answers (a
// socket listening, nothing reading it) fails the question in time instead of hanging the
// metrics or runs request that asked.
TEST_P(AgentsServiceTest, DirectoryCallsHaveADeadline) {
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(silent, 8), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string target = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  auto channel = CreateInternalChannel(target, testing::kTestInternalCredential);
  auto agents = NewGrpcAgentDirectory(channel, absl::Milliseconds(300));
  auto scenarios = NewGrpcScenarioDirectory(channel, absl::Milliseconds(300));
  auto run_agents = NewGrpcRunAgents(channel, absl::Milliseconds(300));
  auto run_queue = NewGrpcRunQueue(channel, absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  EXPECT_EQ(run_queue->Lease(absl::Seconds(30), 3, "holder").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(run_agents->GetWebChannel(tenants_.own, 1).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(agents->ExistingAgents(tenants_.own, {1}).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(scenarios->AgentHasPhone(tenants_.own, 1).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  close(silent);
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(AgentsServiceTest);

}  // namespace
}  // namespace calleval::agents

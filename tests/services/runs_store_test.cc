#include "services/runs/runs_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "common/errors.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "services/agents/agents_store.h"
#include "services/agents/in_process_scenario_directory.h"
#include "services/agents/scenarios_store.h"
#include "services/metrics/in_process_metric_directory.h"
#include "tests/support/test_database.h"

namespace calleval::runs {
namespace {

// Every case on a SQLite file and on PostgreSQL.
class RunsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts::AccountsStore accounts(db_.get());
    ws_ = accounts.CreateWorkspace("w", 0)->id;
    agents_ = std::make_unique<agents::AgentsStore>(db_.get());
    agents::AgentsStore& agents = *agents_;
    v1::AgentFields agent;
    agent.set_name("a");
    agent.set_phone_number("+16502530000");
    agent.set_language_id(1);
    agent.set_instructions("i");
    agent_ = agents.Create(ws_, agent)->id();
    metric_directory_ = std::make_unique<metrics::InProcessMetricDirectory>(db_.get());
    scenarios_store_ =
        std::make_unique<agents::ScenariosStore>(db_.get(), metric_directory_.get());
    agents::ScenariosStore& scenarios = *scenarios_store_;
    for (int i = 0; i < 3; ++i) {
      v1::ScenarioFields s;
      s.set_agent_id(agent_);
      s.set_name("s");
      s.set_goal("g");
      auto created = scenarios.Create(ws_, s);
      ASSERT_TRUE(created.ok()) << created.status();
      scenarios_.push_back(created->id());
    }
    scenario_directory_ =
        std::make_unique<agents::InProcessScenarioDirectory>(agents_.get(), scenarios_store_.get());
    store_ = std::make_unique<RunsStore>(db_.get(), scenario_directory_.get());
  }
  void TearDown() override {
    store_.reset();
    scenario_directory_.reset();
    scenarios_store_.reset();
    metric_directory_.reset();
    agents_.reset();
    db_.reset();
    database_.reset();
  }

  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<agents::AgentsStore> agents_;
  std::unique_ptr<metrics::InProcessMetricDirectory> metric_directory_;
  std::unique_ptr<agents::ScenariosStore> scenarios_store_;
  std::unique_ptr<agents::InProcessScenarioDirectory> scenario_directory_;
  std::unique_ptr<RunsStore> store_;
  int64_t ws_ = 0, agent_ = 0;
  std::vector<int64_t> scenarios_;
};

TEST_P(RunsStoreTest, ALeaseThatExpiresIsTakenOverAndAttemptsRunOut) {
  auto run = store_->CreateRun(ws_, scenarios_[0], std::string("text"));
  ASSERT_TRUE(run.ok()) << run.status();
  auto first = store_->Lease(absl::ZeroDuration(), 2);  // a worker that dies at once
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ(store_->GetRun(ws_, run->id())->status(), "in_progress");
  auto second = store_->Lease(absl::ZeroDuration(), 2);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->attempts, 2);
  // The first worker's report is refused.
  EXPECT_EQ(store_->Finish(run->id(), (*first)->token, {"completed", true, "x", ""}).code(),
            absl::StatusCode::kFailedPrecondition);
  // Released untried (a stopping worker): the attempt does not count.
  ASSERT_TRUE(store_->Release(run->id(), (*second)->token).ok());
  auto third = store_->Lease(absl::ZeroDuration(), 2);
  ASSERT_TRUE(third.ok() && third->has_value());
  EXPECT_EQ((*third)->attempts, 2);
  // Out of attempts: failed, never in_progress forever.
  EXPECT_FALSE(store_->Lease(absl::Minutes(1), 2)->has_value());
  v1::Run failed = *store_->GetRun(ws_, run->id());
  EXPECT_EQ(failed.status(), "failed");
  EXPECT_EQ(failed.error(), "the run did not finish after 2 attempts");
}

TEST_P(RunsStoreTest, RenewWithTheTokenExtendsAndAStaleTokenIsRefused) {
  auto run = store_->CreateRun(ws_, scenarios_[0], std::string("text"));
  ASSERT_TRUE(run.ok()) << run.status();
  auto first = store_->Lease(absl::ZeroDuration(), 3, "host-a/runs");  // expired at once
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->token.rfind("host-a/runs:", 0), 0u) << (*first)->token;
  // The heartbeat renews it before anyone took it: held again.
  ASSERT_TRUE(store_->Renew(run->id(), (*first)->token, absl::Minutes(1)).ok());
  EXPECT_FALSE(store_->Lease(absl::Minutes(1), 3)->has_value());
  // Lapsed and taken over: the first worker's renewal is refused.
  ASSERT_TRUE(store_->Renew(run->id(), (*first)->token, absl::ZeroDuration()).ok());
  auto second = store_->Lease(absl::Minutes(1), 3, "host-b/runs");
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ(store_->Renew(run->id(), (*first)->token, absl::Minutes(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store_->Renew(run->id(), (*second)->token, absl::Minutes(1)).ok());
}

TEST_P(RunsStoreTest, RestartReleasesExactlyTheHoldersRuns) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store_->CreateRun(ws_, scenarios_[i], std::string("text")).ok());
  }
  auto a = store_->Lease(absl::Hours(1), 3, "a");
  auto ab = store_->Lease(absl::Hours(1), 3, "ab");
  auto b = store_->Lease(absl::Hours(1), 3, "b");
  ASSERT_TRUE(a.ok() && a->has_value() && ab.ok() && ab->has_value() && b.ok() &&
              b->has_value());
  EXPECT_FALSE(store_->Lease(absl::Hours(1), 3)->has_value());
  EXPECT_EQ(store_->ReleaseLeasesOf("").status().code(), absl::StatusCode::kInvalidArgument);
  auto released = store_->ReleaseLeasesOf("a");
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 1);
  EXPECT_EQ(store_->Renew((*a)->run_id, (*a)->token, absl::Hours(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  auto again = store_->Lease(absl::Hours(1), 3, "a");
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->run_id, (*a)->run_id);
  EXPECT_EQ((*again)->attempts, 2);
  EXPECT_TRUE(store_->Renew((*ab)->run_id, (*ab)->token, absl::Hours(1)).ok());
  EXPECT_TRUE(store_->Renew((*b)->run_id, (*b)->token, absl::Hours(1)).ok());
}

TEST_P(RunsStoreTest, TheCallIdSurvivesARetriedLease) {
  auto run = store_->CreateRun(ws_, scenarios_[0], std::string("text"));
  auto first = store_->Lease(absl::ZeroDuration(), 3);
  ASSERT_TRUE(first.ok() && first->has_value());
  ASSERT_TRUE(store_->SetCall(run->id(), (*first)->token, 77).ok());
  auto second = store_->Lease(absl::Minutes(1), 3);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->call_id, 77);
  ASSERT_TRUE(store_->Finish(run->id(), (*second)->token, {"completed", false, "max_turns", ""}).ok());
  v1::Run done = *store_->GetRun(ws_, run->id());
  EXPECT_EQ(done.status(), "completed");
  EXPECT_FALSE(done.passed());
  EXPECT_EQ(done.call_id(), 77);
  EXPECT_EQ(done.end_reason(), "max_turns");
  EXPECT_FALSE(done.has_version());
  EXPECT_FALSE(done.has_platform_version());
}

// The agent's version label the worker read at the run's start is stored with its outcome, and
// so is the platform's version of the agent its call reached.
TEST_P(RunsStoreTest, TheOutcomeRecordsTheAgentsVersion) {
  auto run = store_->CreateRun(ws_, scenarios_[0], std::string("text"));
  auto leased = store_->Lease(absl::Minutes(1), 3);
  ASSERT_TRUE(leased.ok() && leased->has_value());
  runs::RunOutcome outcome{"completed", true, "script_finished", ""};
  outcome.agent_version = "prompt-v7";
  outcome.platform_version = "12";
  ASSERT_TRUE(store_->Finish(run->id(), (*leased)->token, outcome).ok());
  EXPECT_EQ(store_->GetRun(ws_, run->id())->version(), "prompt-v7");
  // The platform's version of the agent, as the platform answered the run (Retell's).
  EXPECT_EQ(store_->GetRun(ws_, run->id())->platform_version(), "12");
  v1::ListRunsRequest list;
  absl::StatusOr<v1::ListRunsResponse> listed = store_->ListRuns(ws_, list);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->data_size(), 1);
  EXPECT_EQ(listed->data(0).platform_version(), "12");
}

TEST_P(RunsStoreTest, ABatchHoldsNoMoreThanItsConcurrencyInProgress) {
  v1::CreateBatchRunRequest request;
  request.set_agent_id(agent_);
  for (int64_t s : scenarios_) request.add_scenario_ids(s);
  request.set_channel("text");
  request.set_concurrency(2);
  auto batch = store_->CreateBatch(ws_, request);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->status(), "queued");
  auto a = store_->Lease(absl::Minutes(1), 3);
  auto b = store_->Lease(absl::Minutes(1), 3);
  ASSERT_TRUE(a->has_value() && b->has_value());
  EXPECT_FALSE(store_->Lease(absl::Minutes(1), 3)->has_value());  // two in progress already
  EXPECT_EQ(store_->GetBatch(ws_, batch->id())->status(), "in_progress");
  ASSERT_TRUE(store_->Finish((*a)->run_id, (*a)->token, {"completed", true, "", ""}).ok());
  auto c = store_->Lease(absl::Minutes(1), 3);
  ASSERT_TRUE(c->has_value());
  ASSERT_TRUE(store_->Finish((*b)->run_id, (*b)->token, {"failed", std::nullopt, "", "no"}).ok());
  ASSERT_TRUE(store_->Finish((*c)->run_id, (*c)->token, {"completed", false, "", ""}).ok());
  v1::BatchRun done = *store_->GetBatch(ws_, batch->id());
  EXPECT_EQ(done.status(), "completed");
  EXPECT_EQ(done.summary().total(), 3);
  EXPECT_EQ(done.summary().completed(), 2);
  EXPECT_EQ(done.summary().failed(), 1);
  EXPECT_EQ(done.summary().passed(), 1);
  EXPECT_DOUBLE_EQ(done.summary().pass_rate(), 0.5);
}

// The field the first detail of a 422 names.
std::string FirstField(const absl::Status& status) {
  const v1::ErrorInfo info = ErrorInfoOf(status);
  return info.details_size() > 0 ? info.details(0).field() : "";
}

TEST_P(RunsStoreTest, ABatchQueuesEachScenarioRepeatTimesAndKeepsItsBaseline) {
  v1::CreateBatchRunRequest request;
  request.set_agent_id(agent_);
  request.add_scenario_ids(scenarios_[0]);
  request.add_scenario_ids(scenarios_[1]);
  request.set_channel("text");
  auto baseline = store_->CreateBatch(ws_, request);
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  EXPECT_EQ(baseline->repeat(), 1);
  EXPECT_FALSE(baseline->has_baseline_batch_run_id());
  EXPECT_EQ(baseline->run_ids_size(), 2);

  request.set_repeat(3);
  request.set_baseline_batch_run_id(baseline->id());
  auto batch = store_->CreateBatch(ws_, request);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->repeat(), 3);
  EXPECT_EQ(batch->baseline_batch_run_id(), baseline->id());
  EXPECT_EQ(batch->summary().total(), 6);
  const v1::BatchRun read = *store_->GetBatch(ws_, batch->id());
  EXPECT_EQ(read.repeat(), 3);
  EXPECT_EQ(read.baseline_batch_run_id(), baseline->id());
  // Round by round: every scenario once, then again.
  auto runs = store_->BatchRuns(ws_, batch->id());
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 6u);
  for (size_t i = 0; i < runs->size(); ++i) {
    EXPECT_EQ((*runs)[i].scenario_id(), scenarios_[i % 2]) << i;
    EXPECT_EQ((*runs)[i].batch_run_id(), batch->id());
  }
  EXPECT_EQ(HttpStatusFor(store_->BatchRuns(ws_ + 1, batch->id()).status()), 404);
  EXPECT_EQ(HttpStatusFor(store_->BatchRuns(ws_, batch->id() + 100).status()), 404);
}

TEST_P(RunsStoreTest, RepeatAndBaselineAreChecked) {
  v1::CreateBatchRunRequest request;
  request.set_agent_id(agent_);
  request.add_scenario_ids(scenarios_[0]);
  request.set_channel("text");
  for (int repeat : {0, -1, 51}) {
    request.set_repeat(repeat);
    absl::Status refused = store_->CreateBatch(ws_, request).status();
    EXPECT_EQ(HttpStatusFor(refused), 422) << repeat;
    EXPECT_EQ(FirstField(refused), "repeat") << repeat;
  }
  request.set_repeat(50);
  EXPECT_TRUE(store_->CreateBatch(ws_, request).ok());
  // 21 scenarios x 50 runs is over the 1,000 runs a batch may hold; 20 x 50 is not.
  request.clear_scenario_ids();
  for (int i = 0; i < 21; ++i) request.add_scenario_ids(scenarios_[i % 3]);
  absl::Status too_many = store_->CreateBatch(ws_, request).status();
  EXPECT_EQ(HttpStatusFor(too_many), 422);
  EXPECT_EQ(FirstField(too_many), "repeat");
  request.mutable_scenario_ids()->RemoveLast();
  EXPECT_EQ(store_->CreateBatch(ws_, request)->summary().total(), 1000);

  request.clear_scenario_ids();
  request.add_scenario_ids(scenarios_[0]);
  request.clear_repeat();
  request.set_baseline_batch_run_id(999999);
  absl::Status missing = store_->CreateBatch(ws_, request).status();
  EXPECT_EQ(HttpStatusFor(missing), 422);
  EXPECT_EQ(ErrorInfoOf(missing).code(), "batch_run_not_found");
  EXPECT_EQ(FirstField(missing), "baseline_batch_run_id");
  // Another workspace's batch is as absent as one that does not exist.
  accounts::AccountsStore accounts(db_.get());
  const int64_t other_ws = accounts.CreateWorkspace("other", 0)->id;
  v1::AgentFields agent;
  agent.set_name("b");
  agent.set_phone_number("+16502530001");
  agent.set_language_id(1);
  agent.set_instructions("i");
  const int64_t other_agent = agents_->Create(other_ws, agent)->id();
  v1::ScenarioFields scenario;
  scenario.set_agent_id(other_agent);
  scenario.set_name("s");
  scenario.set_goal("g");
  const int64_t other_scenario = scenarios_store_->Create(other_ws, scenario)->id();
  v1::CreateBatchRunRequest theirs;
  theirs.set_agent_id(other_agent);
  theirs.add_scenario_ids(other_scenario);
  theirs.set_channel("text");
  auto their_batch = store_->CreateBatch(other_ws, theirs);
  ASSERT_TRUE(their_batch.ok()) << their_batch.status();
  request.set_baseline_batch_run_id(their_batch->id());
  EXPECT_EQ(ErrorInfoOf(store_->CreateBatch(ws_, request).status()).code(), "batch_run_not_found");
}

TEST_P(RunsStoreTest, DefaultChannelFollowsThePhoneNumber) {
  auto run = store_->CreateRun(ws_, scenarios_[0], std::nullopt);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->channel(), "phone");
  EXPECT_EQ(HttpStatusFor(store_->CreateRun(ws_, scenarios_[0], std::string("sms")).status()), 422);
  EXPECT_EQ(HttpStatusFor(store_->CreateRun(ws_ + 1, scenarios_[0], std::nullopt).status()), 404);
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(RunsStoreTest);

}  // namespace
}  // namespace calleval::runs

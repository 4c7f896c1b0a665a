// The runs workers against fakes of the interfaces they reach other services through
// (services/runs/run_queue.h, run_agents.h, run_calls.h): what ends a run and what gives its
// lease back to be tried again. With the owners in other processes, an error that is not
// NotFound is an owner that could not answer (a restart, a deadline), not a run that is broken.

#include "services/runs/run_worker.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace calleval::runs {
namespace {

// One queued run; records what the workers report.
class FakeRunQueue final : public RunQueue {
 public:
  explicit FakeRunQueue(RunJob job) { queued_.push_back(std::move(job)); }

  absl::StatusOr<std::optional<RunJob>> Lease(absl::Duration, int, absl::string_view) override {
    absl::MutexLock lock(&mu_);
    if (queued_.empty()) return std::nullopt;
    RunJob job = queued_.front();
    queued_.pop_front();
    job.token = absl::StrCat("token-", ++leases_);
    leased_ = job;
    return job;
  }
  absl::Status Renew(int64_t, absl::string_view, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status SetCall(int64_t, absl::string_view, int64_t) override { return absl::OkStatus(); }
  absl::Status Finish(int64_t, absl::string_view, const RunOutcome& outcome) override {
    absl::MutexLock lock(&mu_);
    outcomes_.push_back(outcome);
    return absl::OkStatus();
  }
  absl::Status Release(int64_t, absl::string_view) override {
    absl::MutexLock lock(&mu_);
    ++releases_;
    queued_.push_back(leased_);  // ready again
    return absl::OkStatus();
  }
  absl::StatusOr<int> ReleaseLeasesOf(absl::string_view) override { return 0; }

  // Waits until a run was reported, at most 10 s.
  std::vector<RunOutcome> WaitForOutcome() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::vector<RunOutcome>* o) { return !o->empty(); }, &outcomes_),
                         absl::Seconds(10));
    return outcomes_;
  }
  int releases() {
    absl::MutexLock lock(&mu_);
    return releases_;
  }

 private:
  absl::Mutex mu_;
  std::deque<RunJob> queued_ ABSL_GUARDED_BY(mu_);
  RunJob leased_ ABSL_GUARDED_BY(mu_);  // the one run, as last handed out
  std::vector<RunOutcome> outcomes_ ABSL_GUARDED_BY(mu_);
  int leases_ ABSL_GUARDED_BY(mu_) = 0;
  int releases_ ABSL_GUARDED_BY(mu_) = 0;
};

// Answers each GetScenario with the next of `scenario_answers`; the agent is never reached
// in these tests unless the scenario is read.
class FakeRunAgents final : public RunAgents {
 public:
  explicit FakeRunAgents(std::vector<absl::Status> scenario_answers)
      : scenario_answers_(std::move(scenario_answers)) {}

  absl::StatusOr<v1::Scenario> GetScenario(int64_t, int64_t) override {
    absl::MutexLock lock(&mu_);
    const absl::Status answer = asked_ < scenario_answers_.size() ? scenario_answers_[asked_]
                                                                  : scenario_answers_.back();
    ++asked_;
    return answer;
  }
  absl::StatusOr<v1::Agent> GetAgent(int64_t, int64_t) override {
    return absl::NotFoundError("agent 3 not found");
  }
  absl::StatusOr<std::optional<agents::WebChannel>> GetWebChannel(int64_t, int64_t) override {
    return std::nullopt;
  }
  absl::StatusOr<std::optional<agents::IntegrationSettings>> GetIntegration(
      int64_t, absl::string_view) override {
    return std::nullopt;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Status> scenario_answers_;
  size_t asked_ ABSL_GUARDED_BY(mu_) = 0;
};

class NoCalls final : public RunCalls {
 public:
  absl::StatusOr<v1::Call> Ingest(int64_t, const v1::IngestCallRequest&, const RunCallOrigin&,
                                  const std::optional<RunRecording>&) override {
    return absl::InternalError("no call is ingested in these tests");
  }
  absl::StatusOr<v1::Call> Get(int64_t, const std::string&) override {
    return absl::InternalError("no call is read in these tests");
  }
  absl::StatusOr<v1::CallFiguresList> Figures(int64_t, const std::vector<int64_t>&) override {
    return absl::InternalError("no batch is compared in these tests");
  }
};

RunJob TextJob() {
  RunJob job;
  job.run_id = 7;
  job.workspace_id = 1;
  job.scenario_id = 2;
  job.agent_id = 3;
  job.channel = "text";
  return job;
}

RunWorkers::Options OptionsWith(RunAgents* agents, RunCalls* calls) {
  RunWorkers::Options options;
  options.workers = 1;
  options.poll_interval = absl::Milliseconds(10);
  options.lease = absl::ZeroDuration();  // no heartbeat
  options.deps.agents = agents;
  options.deps.calls = calls;
  return options;
}

TEST(RunWorkersTest, AScenarioThatIsGoneEndsTheRunFailed) {
  FakeRunQueue queue(TextJob());
  FakeRunAgents agents({absl::NotFoundError("scenario 2 not found")});
  NoCalls calls;
  RunWorkers workers(&queue, OptionsWith(&agents, &calls));
  workers.Start();
  const std::vector<RunOutcome> outcomes = queue.WaitForOutcome();
  workers.Stop();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status, "failed");
  EXPECT_EQ(outcomes[0].error, "scenario 2 is gone");
  EXPECT_EQ(queue.releases(), 0);
}

TEST(RunWorkersTest, AnAgentsServiceThatCannotAnswerGivesTheLeaseBack) {
  FakeRunQueue queue(TextJob());
  // Unavailable twice (the agents role restarting), then the scenario is read: NotFound here,
  // so the run ends once the answer is a real one.
  FakeRunAgents agents({absl::UnavailableError("connection refused"),
                        absl::DeadlineExceededError("deadline"),
                        absl::NotFoundError("scenario 2 not found")});
  NoCalls calls;
  RunWorkers workers(&queue, OptionsWith(&agents, &calls));
  workers.Start();
  const std::vector<RunOutcome> outcomes = queue.WaitForOutcome();
  workers.Stop();
  EXPECT_EQ(queue.releases(), 2);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].error, "scenario 2 is gone");
}

// A run whose call is scored is judged by its metrics' definitions: while the metrics role
// cannot answer, it is asked again rather than judged without them (a failed metric with a
// structured_output would let the run pass).
// A scenario and a websocket agent that can be read; the agent's web channel answers each
// read with the next of `web_channel_answers` (none: it has none).
class ReadableRunAgents final : public RunAgents {
 public:
  explicit ReadableRunAgents(std::vector<absl::Status> web_channel_answers = {},
                             std::vector<absl::Status> integration_answers = {})
      : web_channel_answers_(std::move(web_channel_answers)),
        integration_answers_(std::move(integration_answers)) {}

  absl::StatusOr<v1::Scenario> GetScenario(int64_t, int64_t id) override {
    v1::Scenario scenario;
    scenario.set_id(id);
    return scenario;
  }
  absl::StatusOr<v1::Agent> GetAgent(int64_t, int64_t id) override {
    v1::Agent agent;
    agent.set_id(id);
    (*agent.mutable_web_channel()->mutable_fields())["transport"].set_string_value("websocket");
    agent.set_transport("websocket");
    agent.set_phone_number("+14155550100");
    agent.set_telephony_carrier("twilio");
    return agent;
  }
  absl::StatusOr<std::optional<agents::WebChannel>> GetWebChannel(int64_t, int64_t) override {
    absl::MutexLock lock(&mu_);
    if (web_channel_answers_.empty()) return std::nullopt;
    const absl::Status answer = web_channel_asked_ < web_channel_answers_.size()
                                    ? web_channel_answers_[web_channel_asked_]
                                    : web_channel_answers_.back();
    ++web_channel_asked_;
    return answer;
  }
  // The workspace's integration settings: each read answers the next of
  // `integration_answers` (an OK one: the workspace has none).
  absl::StatusOr<std::optional<agents::IntegrationSettings>> GetIntegration(
      int64_t, absl::string_view) override {
    absl::MutexLock lock(&mu_);
    if (integration_answers_.empty()) return std::nullopt;
    const absl::Status answer = integration_asked_ < integration_answers_.size()
                                    ? integration_answers_[integration_asked_]
                                    : integration_answers_.back();
    ++integration_asked_;
    if (answer.ok()) return std::nullopt;
    return answer;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Status> web_channel_answers_;
  size_t web_channel_asked_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Status> integration_answers_;
  size_t integration_asked_ ABSL_GUARDED_BY(mu_) = 0;
};

class ScoredCall final : public RunCalls {
 public:
  absl::StatusOr<v1::Call> Ingest(int64_t, const v1::IngestCallRequest&, const RunCallOrigin&,
                                  const std::optional<RunRecording>&) override {
    return absl::InternalError("the run's call is ingested already");
  }
  absl::StatusOr<v1::Call> Get(int64_t, const std::string&) override {
    v1::Call call;
    call.set_analysis_status("completed");
    v1::MetricResult* result = call.add_metric_results();
    result->set_metric_id(101);
    result->set_status("failed");
    if (platform_version) call.set_platform_version(*platform_version);
    return call;
  }
  absl::StatusOr<v1::CallFiguresList> Figures(int64_t, const std::vector<int64_t>&) override {
    return absl::InternalError("no batch is compared in these tests");
  }

  // The platform's version of the agent, as the call recorded it at its ingest.
  std::optional<std::string> platform_version;
};

TEST(RunWorkersTest, AMetricsServiceThatCannotAnswerIsAskedAgainBeforeTheRunIsJudged) {
  RunJob job = TextJob();
  job.call_id = 42;  // the conversation was held and ingested in an earlier lease
  FakeRunQueue queue(job);
  ReadableRunAgents agents;
  ScoredCall calls;
  RunWorkers::Options options = OptionsWith(&agents, &calls);
  absl::Mutex mu;
  int asked = 0;
  options.deps.metric_definitions =
      [&](int64_t, const std::vector<int64_t>& ids) -> absl::StatusOr<std::vector<v1::Metric>> {
    absl::MutexLock lock(&mu);
    if (++asked <= 2) return absl::UnavailableError("connection refused");
    v1::Metric judged;
    judged.set_id(ids.at(0));
    judged.add_structured_output()->set_outcome_classification("meets_expectations");
    return std::vector<v1::Metric>{judged};
  };
  RunWorkers workers(&queue, options);
  workers.Start();
  const std::vector<RunOutcome> outcomes = queue.WaitForOutcome();
  workers.Stop();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status, "completed");
  ASSERT_TRUE(outcomes[0].passed.has_value());
  EXPECT_FALSE(*outcomes[0].passed);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(asked, 3);
}

// A run resumed after its call was ingested (an earlier lease made the platform's call) still
// records the platform's version of the agent: the call has it.
TEST(RunWorkersTest, AResumedRunTakesThePlatformsVersionFromItsCall) {
  RunJob job = TextJob();
  job.call_id = 42;
  FakeRunQueue queue(job);
  ReadableRunAgents agents;
  ScoredCall calls;
  calls.platform_version = "7";
  RunWorkers::Options options = OptionsWith(&agents, &calls);
  options.deps.metric_definitions =
      [](int64_t, const std::vector<int64_t>& ids) -> absl::StatusOr<std::vector<v1::Metric>> {
    v1::Metric judged;
    judged.set_id(ids.at(0));
    return std::vector<v1::Metric>{judged};
  };
  RunWorkers workers(&queue, options);
  workers.Start();
  const std::vector<RunOutcome> outcomes = queue.WaitForOutcome();
  workers.Stop();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status, "completed");
  EXPECT_EQ(outcomes[0].platform_version, "7");
}

// The agent's web channel, with its credentials, comes from the agents role too: while it
// cannot be read the lease goes back, and only an agent that is gone ends the run.
TEST(RunWorkersTest, AWebChannelThatCannotBeReadGivesTheLeaseBack) {
  RunJob job = TextJob();
  job.channel = "web";
  FakeRunQueue queue(job);
  ReadableRunAgents agents({absl::UnavailableError("connection refused"),
                            absl::NotFoundError("agent 3 not found")});
  NoCalls calls;
  RunWorkers workers(&queue, OptionsWith(&agents, &calls));
  workers.Start();
  const std::vector<RunOutcome> outcomes = queue.WaitForOutcome();
  workers.Stop();
  EXPECT_EQ(queue.releases(), 1);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status, "failed");
  EXPECT_EQ(outcomes[0].error, "agent 3 is gone");
}

// A phone run needs its line's URLs served to the carrier (by the edge or the media listener).
TEST(RunWorkersTest, PhoneRunsWithoutAnyoneServingTheirLinesFailSayingSo) {
  RunJob job = TextJob();
  job.channel = "phone";
  FakeRunQueue queue(job);
  ReadableRunAgents agents;
  NoCalls calls;
  RunWorkers workers(&queue, OptionsWith(&agents, &calls));
  workers.Start();
  const std::vector<RunOutcome> outcomes = queue.WaitForOutcome();
  workers.Stop();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status, "failed");
  EXPECT_NE(outcomes[0].error.find("--media-addr is off"), std::string::npos)
      << outcomes[0].error;
}

// The carrier account comes from the agents role: while it cannot answer the lease goes back;
// a workspace without settings for the carrier ends the run saying what to set.
TEST(RunWorkersTest, IntegrationSettingsThatCannotBeReadGiveTheLeaseBack) {
  RunJob job = TextJob();
  job.channel = "phone";
  FakeRunQueue queue(job);
  ReadableRunAgents agents({}, {absl::UnavailableError("connection refused"), absl::OkStatus()});
  NoCalls calls;
  PhoneLines lines("https://calls.example.com");
  RunWorkers::Options options = OptionsWith(&agents, &calls);
  options.deps.phone_lines = &lines;
  RunWorkers workers(&queue, options);
  workers.Start();
  const std::vector<RunOutcome> outcomes = queue.WaitForOutcome();
  workers.Stop();
  EXPECT_EQ(queue.releases(), 1);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status, "failed");
  EXPECT_NE(outcomes[0].error.find("PUT /api/v1/integrations/twilio"), std::string::npos)
      << outcomes[0].error;
}

}  // namespace
}  // namespace calleval::runs

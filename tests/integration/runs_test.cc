// Scenarios run against agents (docs/api.md §5), end to end over HTTP against the real server (all
// roles in one process, SQLite in a temporary data dir) with a local OpenAI-compatible
// provider playing the internal agent and, without a caller_script, the caller.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

constexpr char kAgentAnswer[] =
    R"({"message": "Done, your appointment is moved. Anything else?", "end_call": false})";

class RunsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    llm_ = new FakeOpenAiServer();
    // The agent's answers; caller answers are scripted per test on their prompt.
    llm_->SetDefault(kAgentAnswer);
    dir_ = new std::string(testing::MakeTempDir("runs"));
    ServerConfig config = testing::TestServerConfig(*dir_);
    config.workers = 2;
    // More run workers than any batch's concurrency: the batch is what bounds it.
    config.run_workers = 8;
    config.llm_base_url = llm_->base_url();
    config.llm_api_key = llm_->api_key();
    config.llm_model = "gpt-test";
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    key_ = new std::string(server_->bootstrap()->key.api_key);
  }

  static void TearDownTestSuite() {
    delete server_;
    delete llm_;
    std::filesystem::remove_all(*dir_);
  }

  void SetUp() override {
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(*key_);
  }

  int64_t Create(const std::string& path, const json& body) {
    HttpResponse r = client_->Post(path, body);
    EXPECT_EQ(r.status, 201) << path << ": " << r.body;
    return r.json().value("id", int64_t{0});
  }

  int64_t CreateAgent(json extra = json::object()) {
    json body = {{"name", "Scheduler"},
                 {"language_id", 1},
                 {"instructions", "You reschedule appointments for Smile Clinic."},
                 {"opening_message", {{"text", "Smile Clinic, how can I help?"}}},
                 {"phone_number", "+14155550123"}};
    body.update(extra);
    return Create("/api/v1/agents", body);
  }

  // A phrase check on what the caller said, passing when it names Friday.
  int64_t FridayMetric(int64_t agent) {
    return Create("/api/v1/metrics",
                  {{"name", absl::StrCat("Caller chose Friday ", agent)},
                   {"metrics_type", "specific_text_/_phrase_check"},
                   {"phrases", {"Friday"}},
                   {"speaker", "User"},
                   {"agent_ids", {agent}},
                   {"structured_output",
                    {{{"condition", "equals"},
                      {"set_metrics_name", "friday"},
                      {"as_metrics_expected_value", "true"},
                      {"outcome_classification", "meets_expectations"}},
                     {{"condition", "equals"},
                      {"set_metrics_name", "friday"},
                      {"as_metrics_expected_value", "false"},
                      {"outcome_classification", "requires_attention"}}}}});
  }

  json WaitRun(int64_t id) {
    json run;
    for (int i = 0; i < 1200; ++i) {
      run = client_->Get(absl::StrCat("/api/v1/runs/", id)).json();
      const std::string status = run.value("status", "");
      if (status == "completed" || status == "failed" || status == "cancelled") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return run;
  }

  static FakeOpenAiServer* llm_;
  static std::string* dir_;
  static Server* server_;
  static std::string* key_;
  std::unique_ptr<HttpClient> client_;
};

FakeOpenAiServer* RunsTest::llm_ = nullptr;
std::string* RunsTest::dir_ = nullptr;
Server* RunsTest::server_ = nullptr;
std::string* RunsTest::key_ = nullptr;

TEST_F(RunsTest, ScriptedTextRunBecomesAScoredCall) {
  const int64_t agent = CreateAgent();
  const int64_t metric = FridayMetric(agent);
  const int64_t scenario =
      Create("/api/v1/scenarios",
             {{"agent_id", agent},
              {"name", "Move to Friday"},
              {"caller_script", {"I need to move my appointment.", "Friday works for me."}},
              {"metric_ids", {metric}}});
  HttpResponse queued =
      client_->Post(absl::StrCat("/api/v1/scenarios/", scenario, "/run"), json{{"channel", "text"}});
  ASSERT_EQ(queued.status, 202) << queued.body;
  EXPECT_EQ(queued.json()["status"], "queued");
  EXPECT_EQ(queued.json()["channel"], "text");
  EXPECT_TRUE(queued.json()["batch_run_id"].is_null());

  const json run = WaitRun(queued.json()["id"]);
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["passed"], true);
  EXPECT_EQ(run["end_reason"], "script_finished");
  EXPECT_TRUE(run["error"].is_null());
  EXPECT_TRUE(run["started_at"].is_string());
  EXPECT_TRUE(run["ended_at"].is_string());

  // The conversation is a text call named after the run, scored like any other.
  const json call = client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(call["call_identifier"], absl::StrCat("run-", run["id"].get<int64_t>()));
  EXPECT_EQ(call["observation_type"], "text");
  EXPECT_EQ(call["analysis_status"], "completed");
  const json expected_roles = {"AI Assistant", "User", "AI Assistant", "User", "AI Assistant"};
  ASSERT_EQ(call["transcript"].size(), expected_roles.size()) << call["transcript"].dump();
  for (size_t i = 0; i < expected_roles.size(); ++i) {
    EXPECT_EQ(call["transcript"][i]["role"], expected_roles[i]);
  }
  EXPECT_EQ(call["transcript"][0]["content"], "Smile Clinic, how can I help?");
  EXPECT_EQ(call["transcript"][3]["content"], "Friday works for me.");
  EXPECT_EQ(call["transcript"][4]["content"], "Done, your appointment is moved. Anything else?");
  ASSERT_EQ(call["metric_results"].size(), 1u);
  EXPECT_EQ(call["metric_results"][0]["structured_output"]["outcome_classification"],
            "meets_expectations");

  // The agent was played from its instructions, with the conversation so far.
  bool saw_instructions = false;
  for (const json& request : llm_->chat_requests()) {
    const std::string system = request["messages"][0]["content"];
    if (system.find("You reschedule appointments for Smile Clinic.") != std::string::npos) {
      saw_instructions = true;
    }
  }
  EXPECT_TRUE(saw_instructions);
  json listed = client_->Get(absl::StrCat("/api/v1/runs?scenario_id=", scenario)).json();
  ASSERT_EQ(listed["data"].size(), 1u);
  EXPECT_EQ(listed["data"][0]["id"], run["id"]);

  // The scenario's stats and its agent's count the run, and the call it made with its outcome.
  for (const std::string& path : {absl::StrCat("/api/v1/scenarios/", scenario, "/stats"),
                                  absl::StrCat("/api/v1/agents/", agent, "/stats?bucket=hour")}) {
    HttpResponse stats = client_->Get(path);
    ASSERT_EQ(stats.status, 200) << path << ": " << stats.body;
    const json total = stats.json()["total"];
    EXPECT_EQ(total["runs"]["passed"], 1) << path;
    EXPECT_EQ(total["runs"]["pass_rate"], 1.0) << path;
    EXPECT_EQ(total["calls"]["completed"], 1) << path;
    ASSERT_EQ(total["metric_outcomes"].size(), 1u) << path;
    EXPECT_EQ(total["metric_outcomes"][0]["metric_id"], metric);
    EXPECT_EQ(total["metric_outcomes"][0]["outcome"], "meets_expectations");
  }
}

TEST_F(RunsTest, LlmCallerPlaysPersonaAndGoalUntilTheGoalIsReached) {
  llm_->AnswerInTurn("You play a caller",
                     {R"({"message": "Hi, can I move my cleaning to Friday?", "goal_reached": false})",
                      R"({"message": "Great, thanks, bye.", "goal_reached": true})"});
  const int64_t agent = CreateAgent({{"opening_message", {{"mode", "user_speaks_first"}}}});
  const int64_t scenario = Create("/api/v1/scenarios", {{"agent_id", agent},
                                                        {"name", "Persona"},
                                                        {"persona", "A polite patient"},
                                                        {"goal", "Move the cleaning to Friday"},
                                                        {"metric_ids", {FridayMetric(agent)}}});
  HttpResponse queued =
      client_->Post(absl::StrCat("/api/v1/scenarios/", scenario, "/run"), json{{"channel", "text"}});
  ASSERT_EQ(queued.status, 202) << queued.body;
  const json run = WaitRun(queued.json()["id"]);
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "goal_reached");
  EXPECT_EQ(run["passed"], true);
  const json call = client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  ASSERT_EQ(call["transcript"].size(), 3u) << call["transcript"].dump();
  EXPECT_EQ(call["transcript"][0]["role"], "User");  // the user speaks first
  EXPECT_EQ(call["transcript"][0]["content"], "Hi, can I move my cleaning to Friday?");
  EXPECT_EQ(call["transcript"][1]["role"], "AI Assistant");
  EXPECT_EQ(call["transcript"][2]["content"], "Great, thanks, bye.");
}

TEST_F(RunsTest, BatchOfTwentyAtConcurrencyFourSummarizesCorrectly) {
  const int64_t agent = CreateAgent();
  const int64_t metric = FridayMetric(agent);
  std::vector<int64_t> scenarios;
  for (int i = 0; i < 20; ++i) {
    // 12 callers pick Friday (pass), 8 pick Monday (requires attention).
    const std::string day = i < 12 ? "Friday" : "Monday";
    scenarios.push_back(Create("/api/v1/scenarios",
                               {{"agent_id", agent},
                                {"name", absl::StrCat("batch ", i)},
                                {"caller_script", {absl::StrCat("Please move me to ", day, ".")}},
                                {"metric_ids", {metric}}}));
  }
  HttpResponse created = client_->Post(
      "/api/v1/batch_runs",
      json{{"agent_id", agent}, {"scenario_ids", scenarios}, {"channel", "text"}, {"concurrency", 4}});
  ASSERT_EQ(created.status, 202) << created.body;
  const json batch = created.json();
  EXPECT_EQ(batch["run_ids"].size(), 20u);
  EXPECT_EQ(batch["summary"]["total"], 20);
  EXPECT_TRUE(batch["summary"]["pass_rate"].is_null());
  const std::string path = absl::StrCat("/api/v1/batch_runs/", batch["id"].get<int64_t>());

  json now;
  int most_in_progress = 0;
  for (int i = 0; i < 2400; ++i) {
    now = client_->Get(path).json();
    json runs = client_->Get(absl::StrCat("/api/v1/runs?per_page=100&batch_run_id=",
                                          batch["id"].get<int64_t>()))
                    .json();
    int in_progress = 0;
    for (const json& r : runs["data"]) in_progress += r["status"] == "in_progress";
    most_in_progress = std::max(most_in_progress, in_progress);
    if (now["status"] == "completed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(now["status"], "completed") << now.dump();
  EXPECT_LE(most_in_progress, 4);
  EXPECT_GE(most_in_progress, 1);
  EXPECT_EQ(now["summary"]["total"], 20);
  EXPECT_EQ(now["summary"]["completed"], 20);
  EXPECT_EQ(now["summary"]["failed"], 0);
  EXPECT_EQ(now["summary"]["passed"], 12);
  EXPECT_DOUBLE_EQ(now["summary"]["pass_rate"].get<double>(), 0.6);
}

TEST_F(RunsTest, ChannelsThisInstallationCannotServeFailWithAReason) {
  const int64_t phone_agent = CreateAgent();
  const int64_t scenario =
      Create("/api/v1/scenarios", {{"agent_id", phone_agent}, {"name", "p"}, {"goal", "g"}});
  // Default channel: phone, since the agent has a number.
  HttpResponse queued = client_->Post(absl::StrCat("/api/v1/scenarios/", scenario, "/run"), json::object());
  ASSERT_EQ(queued.status, 202) << queued.body;
  EXPECT_EQ(queued.json()["channel"], "phone");
  json run = WaitRun(queued.json()["id"]);
  EXPECT_EQ(run["status"], "failed");
  EXPECT_NE(run["error"].get<std::string>().find("integrations/twilio"), std::string::npos)
      << run.dump();
  EXPECT_TRUE(run["passed"].is_null());

  run = WaitRun(client_->Post(absl::StrCat("/api/v1/scenarios/", scenario, "/run"),
                              json{{"channel", "web"}})
                    .json()["id"]);
  EXPECT_EQ(run["status"], "failed");
  EXPECT_NE(run["error"].get<std::string>().find("no web_channel"), std::string::npos);

  const int64_t room_agent =
      CreateAgent({{"web_channel",
                    {{"transport", "daily"},
                     {"room_management", "client"},
                     {"bot_runner_url", "https://bots.example.com/start"}}}});
  const int64_t room_scenario =
      Create("/api/v1/scenarios", {{"agent_id", room_agent}, {"name", "r"}, {"goal", "g"}});
  run = WaitRun(client_->Post(absl::StrCat("/api/v1/scenarios/", room_scenario, "/run"),
                              json{{"channel", "web"}})
                    .json()["id"]);
  EXPECT_EQ(run["status"], "failed");
  EXPECT_NE(run["error"].get<std::string>().find("Daily's room signalling"), std::string::npos)
      << run.dump();

  const int64_t external = CreateAgent({{"agent_source", "external_vapi"}, {"assistant_id", "a1"}});
  const int64_t external_scenario =
      Create("/api/v1/scenarios", {{"agent_id", external}, {"name", "e"}, {"goal", "g"}});
  run = WaitRun(client_->Post(absl::StrCat("/api/v1/scenarios/", external_scenario, "/run"),
                              json{{"channel", "text"}})
                    .json()["id"]);
  EXPECT_EQ(run["status"], "failed");
  EXPECT_NE(run["error"].get<std::string>().find("internal agents only"), std::string::npos);
}

TEST_F(RunsTest, Rejections) {
  const int64_t agent = CreateAgent();
  const int64_t other_agent = CreateAgent();
  const int64_t scenario =
      Create("/api/v1/scenarios", {{"agent_id", agent}, {"name", "x"}, {"goal", "g"}});
  const int64_t others =
      Create("/api/v1/scenarios", {{"agent_id", other_agent}, {"name", "y"}, {"goal", "g"}});
  EXPECT_EQ(client_->Post("/api/v1/scenarios/999999/run", json::object()).status, 404);
  HttpResponse fax =
      client_->Post(absl::StrCat("/api/v1/scenarios/", scenario, "/run"), json{{"channel", "fax"}});
  EXPECT_EQ(fax.status, 422);
  EXPECT_EQ(fax.json()["error"]["details"][0]["field"], "channel");
  EXPECT_EQ(client_->Get("/api/v1/runs/999999").status, 404);
  EXPECT_EQ(client_->Get("/api/v1/batch_runs/999999").status, 404);
  auto batch = [&](json body) { return client_->Post("/api/v1/batch_runs", body); };
  EXPECT_EQ(batch({{"scenario_ids", {scenario}}}).status, 422);
  EXPECT_EQ(batch({{"agent_id", 999999}, {"scenario_ids", {scenario}}}).json()["error"]["code"],
            "agent_not_found");
  HttpResponse foreign = batch({{"agent_id", agent}, {"scenario_ids", {scenario, others}}});
  EXPECT_EQ(foreign.status, 422);
  EXPECT_EQ(foreign.json()["error"]["details"][0]["field"], "scenario_ids[1]");
  EXPECT_EQ(batch({{"agent_id", agent}, {"scenario_ids", json::array()}}).status, 422);
  EXPECT_EQ(batch({{"agent_id", agent}, {"scenario_ids", {scenario}}, {"concurrency", 0}}).status,
            422);
}

}  // namespace
}  // namespace calleval

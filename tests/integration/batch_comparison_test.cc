// A batch run compared with its baseline (docs/api.md §5.6, "Comparison with a baseline"), end
// to end over HTTP against the real server (all roles in one process, SQLite in a temporary
// data dir). The internal agent is played by a local OpenAI-compatible provider: its replies are
// the test double. The scenario's metric is a phrase check on what the agent said, which needs
// no LLM, so each conversation passes or fails on the reply alone.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "common/database.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

// The agent's replies: the good one says the phrase the metric looks for, the worse one does not.
constexpr char kGoodReply[] =
    R"({"message": "Done, your confirmation number is 4417. Anything else?", "end_call": false})";
constexpr char kWorseReply[] = R"({"message": "Done. Anything else?", "end_call": false})";
// Only the agent's instructions carry these, so only the agent's turns match them (a judge's
// prompt carries the transcript, never the instructions).
constexpr char kGoodVersion[] = "Agent under test, version good-7f3a.";
constexpr char kWorseVersion[] = "Agent under test, version worse-91c2.";
constexpr char kNoisyVersion[] = "Agent under test, version noisy-5d08.";

constexpr int kRepeat = 10;

class BatchRunComparisonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    llm_ = new FakeOpenAiServer();
    llm_->AnswerWhen(kGoodVersion, kGoodReply);
    // The worse agent omits the phrase in 7 of every 10 conversations: whichever order the
    // batch's conversations reach the provider in, 7 of its 10 get a worse reply.
    llm_->AnswerInTurn(kWorseVersion,
                       {kGoodReply, kWorseReply, kWorseReply, kWorseReply, kGoodReply, kWorseReply,
                        kWorseReply, kGoodReply, kWorseReply, kWorseReply});
    // Anything else (the standard LLM metrics' judges) gets an answer that is no verdict; those
    // metrics are not compared.
    // An agent that forgets the phrase 3 times in 7: a cycle that 10 runs do not divide, so
    // consecutive batches of it pass different numbers of runs (5 or 6 of 10).
    llm_->AnswerInTurn(kNoisyVersion, {kGoodReply, kWorseReply, kGoodReply, kGoodReply, kWorseReply,
                                       kGoodReply, kWorseReply});
    llm_->SetDefault(R"({"note": "not a judge"})");
    dir_ = new std::string(testing::MakeTempDir("batch-comparison"));
    ServerConfig config = testing::TestServerConfig(*dir_);
    config.workers = 2;
    config.run_workers = 4;
    config.llm_base_url = llm_->base_url();
    config.llm_api_key = llm_->api_key();
    config.llm_model = "gpt-test";
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    key_ = new std::string(server_->bootstrap()->key.api_key);
    // A second workspace, made the way callevalctl does it: on the same database file.
    auto db = db::Database::Open(*dir_ + "/calleval.db", SchemaMigrations());
    ASSERT_TRUE(db.ok()) << db.status();
    accounts::AccountsStore store(db->get());
    auto other = store.CreateWorkspace("other", 100);
    ASSERT_TRUE(other.ok()) << other.status();
    other_key_ = new std::string(store.CreateKey(other->id, {})->api_key);
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

  static int64_t Create(HttpClient& client, const std::string& path, const json& body) {
    HttpResponse r = client.Post(path, body);
    EXPECT_EQ(r.status, 201) << path << ": " << r.body;
    return r.json().value("id", int64_t{0});
  }

  // An agent, its phrase check and a one-line scenario judged by it.
  struct Setup {
    int64_t agent = 0;
    int64_t metric = 0;
    int64_t scenario = 0;
  };
  static Setup MakeAgent(HttpClient& client, const std::string& name,
                         const std::string& instructions = kGoodVersion) {
    Setup made;
    made.agent = Create(client, "/api/v1/agents",
                        {{"name", name},
                         {"language_id", 1},
                         {"instructions", instructions},
                         {"version", "good"},
                         {"opening_message", {{"text", "Smile Clinic, how can I help?"}}},
                         {"phone_number", "+14155550123"}});
    made.metric = Create(client, "/api/v1/metrics",
                         {{"name", absl::StrCat("Gave a confirmation number ", made.agent)},
                          {"metrics_type", "specific_text_/_phrase_check"},
                          {"phrases", {"confirmation number"}},
                          {"speaker", "AI Assistant"},
                          {"agent_ids", {made.agent}},
                          {"structured_output",
                           {{{"condition", "equals"},
                             {"set_metrics_name", "confirmed"},
                             {"as_metrics_expected_value", "true"},
                             {"outcome_classification", "meets_expectations"}},
                            {{"condition", "equals"},
                             {"set_metrics_name", "confirmed"},
                             {"as_metrics_expected_value", "false"},
                             {"outcome_classification", "requires_attention"}}}}});
    made.scenario = Create(client, "/api/v1/scenarios",
                           {{"agent_id", made.agent},
                            {"name", "Move an appointment"},
                            {"caller_script", {"Please move my appointment to Friday."}},
                            {"metric_ids", {made.metric}}});
    return made;
  }

  json StartBatch(const Setup& made, std::optional<int64_t> baseline) {
    json body = {{"agent_id", made.agent},
                 {"scenario_ids", {made.scenario}},
                 {"channel", "text"},
                 {"concurrency", 4},
                 {"repeat", kRepeat}};
    if (baseline) body["baseline_batch_run_id"] = *baseline;
    HttpResponse r = client_->Post("/api/v1/batch_runs", body);
    EXPECT_EQ(r.status, 202) << r.body;
    return r.json();
  }

  json WaitBatch(int64_t id) {
    json batch;
    for (int i = 0; i < 2400; ++i) {
      batch = client_->Get(absl::StrCat("/api/v1/batch_runs/", id)).json();
      if (batch.value("status", "") == "completed") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(batch.value("status", ""), "completed") << batch.dump();
    return batch;
  }

  json Comparison(int64_t id, const std::string& query = "") {
    HttpResponse r = client_->Get(absl::StrCat("/api/v1/batch_runs/", id, "/comparison", query));
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json();
  }

  static FakeOpenAiServer* llm_;
  static std::string* dir_;
  static Server* server_;
  static std::string* key_;
  static std::string* other_key_;
  std::unique_ptr<HttpClient> client_;
};

FakeOpenAiServer* BatchRunComparisonTest::llm_ = nullptr;
std::string* BatchRunComparisonTest::dir_ = nullptr;
Server* BatchRunComparisonTest::server_ = nullptr;
std::string* BatchRunComparisonTest::key_ = nullptr;
std::string* BatchRunComparisonTest::other_key_ = nullptr;

// The figure named `metric` of the comparison's only scenario.
json FigureOf(const json& comparison, const std::string& metric) {
  for (const json& figure : comparison["scenarios"][0]["metrics"]) {
    if (figure["metric"] == metric) return figure;
  }
  ADD_FAILURE() << "no figure " << metric << " in " << comparison.dump();
  return json::object();
}

TEST_F(BatchRunComparisonTest, AnUntouchedAgentIsUnchangedAndAWorseOneRegressed) {
  const Setup made = MakeAgent(*client_, "Scheduler");
  const std::string metric_name = absl::StrCat("Gave a confirmation number ", made.agent);

  const json baseline = StartBatch(made, std::nullopt);
  EXPECT_EQ(baseline["repeat"], kRepeat);
  EXPECT_TRUE(baseline["baseline_batch_run_id"].is_null());
  EXPECT_EQ(baseline["run_ids"].size(), static_cast<size_t>(kRepeat));
  const int64_t baseline_id = baseline["id"];
  const json baseline_done = WaitBatch(baseline_id);
  EXPECT_EQ(baseline_done["summary"]["passed"], kRepeat);
  // A batch without a baseline has nothing to be compared with unless the query names one.
  HttpResponse none = client_->Get(absl::StrCat("/api/v1/batch_runs/", baseline_id, "/comparison"));
  EXPECT_EQ(none.status, 422) << none.body;
  EXPECT_EQ(none.json()["error"]["code"], "no_baseline") << none.body;

  // (a) The same agent again: nothing moved.
  const json same = StartBatch(made, baseline_id);
  EXPECT_EQ(same["baseline_batch_run_id"], baseline_id);
  const int64_t same_id = same["id"];
  const json early = Comparison(same_id);
  EXPECT_EQ(early["batch_run_id"], same_id);
  EXPECT_EQ(early["baseline_batch_run_id"], baseline_id);
  WaitBatch(same_id);
  const json unchanged = Comparison(same_id);
  EXPECT_EQ(unchanged["complete"], true);
  EXPECT_EQ(unchanged["verdict"], "unchanged") << unchanged.dump();
  ASSERT_EQ(unchanged["scenarios"].size(), 1u) << unchanged.dump();
  EXPECT_EQ(unchanged["scenarios"][0]["scenario_id"], made.scenario);
  // A text run has no latency: the run's pass and the phrase check, in that order.
  ASSERT_EQ(unchanged["scenarios"][0]["metrics"].size(), 2u) << unchanged.dump();
  const json passed = unchanged["scenarios"][0]["metrics"][0];
  EXPECT_EQ(passed["metric"], "passed");
  EXPECT_TRUE(passed["metric_id"].is_null());
  EXPECT_EQ(passed["kind"], "pass_rate");
  EXPECT_EQ(passed["baseline"], 1.0);
  EXPECT_EQ(passed["current"], 1.0);
  EXPECT_EQ(passed["difference"], 0.0);
  EXPECT_TRUE(passed["ci_low"].is_number());
  EXPECT_TRUE(passed["ci_high"].is_number());
  EXPECT_LE(passed["ci_low"].get<double>(), 0.0);
  EXPECT_GE(passed["ci_high"].get<double>(), 0.0);
  EXPECT_EQ(passed["p_value"], 1.0);
  EXPECT_EQ(passed["baseline_runs"], kRepeat);
  EXPECT_EQ(passed["current_runs"], kRepeat);
  EXPECT_EQ(passed["verdict"], "unchanged");
  const json phrase = unchanged["scenarios"][0]["metrics"][1];
  EXPECT_EQ(phrase["metric_id"], made.metric);
  EXPECT_EQ(phrase["metric"], metric_name);
  EXPECT_EQ(phrase["kind"], "pass_rate");
  EXPECT_EQ(phrase["baseline"], 1.0);
  EXPECT_EQ(phrase["current"], 1.0);
  EXPECT_EQ(phrase["baseline_runs"], kRepeat);
  EXPECT_EQ(phrase["current_runs"], kRepeat);
  EXPECT_EQ(phrase["verdict"], "unchanged");
  // The same answer read again (the random draws are seeded by the batches).
  EXPECT_EQ(Comparison(same_id), unchanged);

  // (b) A new version of the agent that forgets the confirmation number 7 times in 10.
  HttpResponse patched =
      client_->Patch(absl::StrCat("/api/v1/agents/", made.agent),
                     json{{"instructions", kWorseVersion}, {"version", "worse"}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  const json worse = StartBatch(made, baseline_id);
  const int64_t worse_id = worse["id"];
  WaitBatch(worse_id);
  const json regressed = Comparison(worse_id);
  EXPECT_EQ(regressed["verdict"], "regressed") << regressed.dump();
  EXPECT_EQ(regressed["complete"], true);
  const json worse_passed = FigureOf(regressed, "passed");
  EXPECT_EQ(worse_passed["baseline"], 1.0);
  EXPECT_DOUBLE_EQ(worse_passed["current"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(worse_passed["difference"].get<double>(), -0.7);
  // Newcombe's hybrid score interval from the two Wilson intervals (10/10: [0.7225, 1];
  // 3/10: [0.1078, 0.6032]), worked out by hand.
  EXPECT_NEAR(worse_passed["ci_low"].get<double>(), -0.8922, 1e-4);
  EXPECT_NEAR(worse_passed["ci_high"].get<double>(), -0.2889, 1e-4);
  // Fisher's exact test on 10/10 against 3/10 is 2 x 120/77520; Holm's correction over the two
  // figures doubles the smaller of two equal p-values.
  EXPECT_NEAR(worse_passed["p_value"].get<double>(), 4 * 120.0 / 77520.0, 1e-9);
  EXPECT_EQ(worse_passed["verdict"], "regressed");
  const json worse_phrase = FigureOf(regressed, metric_name);
  EXPECT_DOUBLE_EQ(worse_phrase["current"].get<double>(), 0.3);
  EXPECT_EQ(worse_phrase["verdict"], "regressed");

  // Read the other way round (the query's baseline instead of the recorded one): improved.
  const json improved = Comparison(baseline_id, absl::StrCat("?baseline_batch_run_id=", worse_id));
  EXPECT_EQ(improved["baseline_batch_run_id"], worse_id);
  EXPECT_EQ(improved["verdict"], "improved") << improved.dump();
  EXPECT_DOUBLE_EQ(FigureOf(improved, "passed")["difference"].get<double>(), 0.7);
}

// Batches of an agent left alone differ by chance only: none of the 21 comparisons between 7 of
// them (every pair, the later against the earlier) calls a figure improved or regressed.
TEST_F(BatchRunComparisonTest, AnAgentLeftAloneRaisesNoFalseAlarm) {
  const Setup made = MakeAgent(*client_, "Noisy", kNoisyVersion);
  std::vector<int64_t> batches;
  std::set<int> pass_counts;
  for (int i = 0; i < 7; ++i) {
    const int64_t id = StartBatch(made, std::nullopt)["id"];
    pass_counts.insert(WaitBatch(id)["summary"]["passed"].get<int>());
    batches.push_back(id);
  }
  EXPECT_GT(pass_counts.size(), 1u) << "the batches should differ";
  int comparisons = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    for (size_t j = i + 1; j < batches.size(); ++j) {
      const json comparison =
          Comparison(batches[j], absl::StrCat("?baseline_batch_run_id=", batches[i]));
      ++comparisons;
      EXPECT_THAT(comparison["verdict"].get<std::string>(),
                  ::testing::AnyOf("unchanged", "inconclusive"))
          << comparison.dump();
    }
  }
  EXPECT_EQ(comparisons, 21);
}

TEST_F(BatchRunComparisonTest, BatchesAndBaselinesOutsideTheWorkspaceAreRefused) {
  const Setup made = MakeAgent(*client_, "Receptionist");
  const json ours = StartBatch(made, std::nullopt);
  const int64_t ours_id = ours["id"];

  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  const Setup theirs = MakeAgent(other, "Their agent");
  HttpResponse their_batch = other.Post(
      "/api/v1/batch_runs",
      json{{"agent_id", theirs.agent}, {"scenario_ids", {theirs.scenario}}, {"channel", "text"}});
  ASSERT_EQ(their_batch.status, 202) << their_batch.body;
  const int64_t their_id = their_batch.json()["id"];

  // Another workspace's batch, as a path or as a baseline, is as absent as a missing one.
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/batch_runs/", their_id, "/comparison")).status, 404);
  EXPECT_EQ(client_->Get("/api/v1/batch_runs/999999/comparison").status, 404);
  for (int64_t foreign : {their_id, int64_t{999999}}) {
    HttpResponse refused = client_->Get(absl::StrCat(
        "/api/v1/batch_runs/", ours_id, "/comparison?baseline_batch_run_id=", foreign));
    EXPECT_EQ(refused.status, 422) << refused.body;
    EXPECT_EQ(refused.json()["error"]["code"], "batch_run_not_found") << refused.body;
    HttpResponse create =
        client_->Post("/api/v1/batch_runs", json{{"agent_id", made.agent},
                                                 {"scenario_ids", {made.scenario}},
                                                 {"channel", "text"},
                                                 {"baseline_batch_run_id", foreign}});
    EXPECT_EQ(create.status, 422) << create.body;
    EXPECT_EQ(create.json()["error"]["code"], "batch_run_not_found") << create.body;
    EXPECT_EQ(create.json()["error"]["details"][0]["field"], "baseline_batch_run_id");
  }
  // Compared with itself: refused.
  HttpResponse itself = client_->Get(
      absl::StrCat("/api/v1/batch_runs/", ours_id, "/comparison?baseline_batch_run_id=", ours_id));
  EXPECT_EQ(itself.status, 422) << itself.body;
  // repeat out of range, or too many runs in all.
  for (const json& repeat : {json(0), json(51)}) {
    HttpResponse bad = client_->Post("/api/v1/batch_runs", json{{"agent_id", made.agent},
                                                                {"scenario_ids", {made.scenario}},
                                                                {"channel", "text"},
                                                                {"repeat", repeat}});
    EXPECT_EQ(bad.status, 422) << bad.body;
    EXPECT_EQ(bad.json()["error"]["details"][0]["field"], "repeat") << bad.body;
  }
  json many = json::array();
  for (int i = 0; i < 21; ++i) many.push_back(made.scenario);
  HttpResponse too_many = client_->Post(
      "/api/v1/batch_runs",
      json{{"agent_id", made.agent}, {"scenario_ids", many}, {"channel", "text"}, {"repeat", 50}});
  EXPECT_EQ(too_many.status, 422) << too_many.body;
  EXPECT_EQ(too_many.json()["error"]["details"][0]["field"], "repeat") << too_many.body;
  WaitBatch(ours_id);
}

}  // namespace
}  // namespace calleval

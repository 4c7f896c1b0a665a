// Replays and agent versions against the real server (all roles in one process, SQLite in a
// temporary data dir) with a local OpenAI-compatible provider for the agent's answers and the
// persona (tests/support/fake_openai_server.h): a scored call becomes a scenario whose run says
// the call's caller lines again, masked; runs and calls record the agent's version label.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::HttpClient;
using testing::HttpResponse;
using ::testing::Not;

constexpr char kAgentAnswer[] =
    R"({"message": "I can help with that. Anything else?", "end_call": false})";

class ReplayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    llm_ = new FakeOpenAiServer();
    llm_->SetDefault(kAgentAnswer);
    dir_ = new std::string(testing::MakeTempDir("replay"));
    ServerConfig config = testing::TestServerConfig(*dir_);
    config.workers = 2;
    config.run_workers = 2;
    config.llm_base_url = llm_->base_url();
    config.llm_api_key = llm_->api_key();
    config.llm_model = "gpt-test";
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    key_ = new std::string(server_->bootstrap()->key.api_key);
    // A second workspace, made the way callevalctl does it: on the same database file.
    auto db = db::Database::Open(*dir_ + "/calleval.db", SchemaMigrations());
    ASSERT_TRUE(db.ok());
    accounts::AccountsStore store(db->get());
    auto other = store.CreateWorkspace("other", 100);
    ASSERT_TRUE(other.ok());
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

  int64_t Create(const std::string& path, const json& body) {
    HttpResponse r = client_->Post(path, body);
    EXPECT_EQ(r.status, 201) << path << ": " << r.body;
    return r.json().value("id", int64_t{0});
  }

  int64_t CreateAgent(const std::string& version) {
    return Create("/api/v1/agents", {{"name", "Bookings"},
                                     {"language_id", 1},
                                     {"instructions", "You book tables for Chez Test."},
                                     {"opening_message", {{"text", "Chez Test, hello."}}},
                                     {"phone_number", "+14155550123"},
                                     {"version", version}});
  }

  // A phrase check on what the caller said, failing when it does not name Friday.
  int64_t FridayMetric(int64_t agent) {
    return Create("/api/v1/metrics", {{"name", absl::StrCat("Caller chose Friday ", agent)},
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

  json IngestCall(const std::string& id, int64_t agent) {
    HttpResponse r = client_->Post(
        "/api/public/v1/calls",
        json{{"call_identifier", id},
             {"agent_id", agent},
             {"metadata", {{"customer_name", "Ada Lovelace"}, {"crm_id", "A-1"}}},
             {"transcript",
              {{{"role", "AI Assistant"}, {"content", "Chez Test, hello."}},
               {{"role", "User"}, {"content", "Hi, this is Ada Lovelace, a table for two please."}},
               {{"role", "AI Assistant"}, {"content", "Which day?"}},
               {{"role", "User"},
                {"content", "Saturday. Call me on +1 (415) 555-0199 or mail ada@example.org."}},
               {{"role", "AI Assistant"}, {"content", "And to hold it?"}},
               {{"role", "User"}, {"content", "My card is 4111 1111 1111 1111, thanks."}}}}});
    EXPECT_EQ(r.status, 201) << r.body;
    return client_->WaitForAnalysis(id);
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
  static std::string* other_key_;
  std::unique_ptr<HttpClient> client_;
};

FakeOpenAiServer* ReplayTest::llm_ = nullptr;
std::string* ReplayTest::dir_ = nullptr;
Server* ReplayTest::server_ = nullptr;
std::string* ReplayTest::key_ = nullptr;
std::string* ReplayTest::other_key_ = nullptr;

const json kMaskedLines = {"Hi, this is [customer_name], a table for two please.",
                           "Saturday. Call me on [phone] or mail [email].",
                           "My card is [card], thanks."};

TEST_F(ReplayTest, ScriptReplayRepeatsTheCallersMaskedLinesAndRecordsVersions) {
  // The workspace masks the customer's name too (phones, emails and cards by default).
  HttpResponse privacy = client_->Put("/api/v1/integrations/privacy",
                                      json{{"mask_metadata_keys", {"customer_name"}}}.dump());
  ASSERT_EQ(privacy.status, 200) << privacy.body;

  const int64_t agent = CreateAgent("prompt-v1");
  const int64_t metric = FridayMetric(agent);
  const json call = IngestCall("replay-1", agent);
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  EXPECT_EQ(call["version"], "prompt-v1");

  HttpResponse made = client_->Post(
      absl::StrCat("/api/v1/calls/", call["id"].get<int64_t>(), "/scenario"), json::object());
  ASSERT_EQ(made.status, 201) << made.body;
  const json scenario = made.json();
  EXPECT_EQ(scenario["source_call_id"], call["id"]);
  EXPECT_EQ(scenario["agent_id"], agent);
  EXPECT_EQ(scenario["name"], "Replay of call replay-1");
  EXPECT_EQ(scenario["caller_script"], kMaskedLines);
  EXPECT_EQ(scenario["metric_ids"], json({metric}));
  // It reads back the same.
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/scenarios", "/", scenario["id"].get<int64_t>()))
                .json()["source_call_id"],
            call["id"]);

  // A new version of the agent; the run records the version it started with.
  HttpResponse patched =
      client_->Patch(absl::StrCat("/api/v1/agents/", agent), json{{"version", "prompt-v2"}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json()["version"], "prompt-v2");
  HttpResponse queued =
      client_->Post(absl::StrCat("/api/v1/scenarios/", scenario["id"].get<int64_t>(), "/run"),
                    json{{"channel", "text"}});
  ASSERT_EQ(queued.status, 202) << queued.body;
  const json run = WaitRun(queued.json()["id"]);
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["version"], "prompt-v2");
  EXPECT_EQ(run["passed"], false);  // it still does not name Friday
  const json replayed =
      client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(replayed["version"], "prompt-v2");
  json said = json::array();
  for (const json& turn : replayed["transcript"]) {
    if (turn["role"] == "User") said.push_back(turn["content"]);
  }
  EXPECT_EQ(said, kMaskedLines);
}

TEST_F(ReplayTest, PersonaReplayIsWrittenFromTheMaskedLines) {
  const int64_t agent = CreateAgent("p1");
  const json call = IngestCall("replay-persona", agent);
  llm_->AnswerWhen("The caller's lines",
                   R"({"persona": "You are a regular who books by phone.",
                       "goal": "Book a table for two on Saturday and hold it with a card."})");
  HttpResponse made =
      client_->Post(absl::StrCat("/api/v1/calls/", call["id"].get<int64_t>(), "/scenario"),
                    json{{"mode", "persona"}, {"name", "Saturday regular"}});
  ASSERT_EQ(made.status, 201) << made.body;
  EXPECT_EQ(made.json()["name"], "Saturday regular");
  EXPECT_EQ(made.json()["persona"], "You are a regular who books by phone.");
  EXPECT_EQ(made.json()["goal"], "Book a table for two on Saturday and hold it with a card.");
  EXPECT_TRUE(made.json()["caller_script"].empty());
  // The provider saw the masked lines, never the address or the card.
  bool asked = false;
  for (const json& request : llm_->chat_requests()) {
    const std::string user = request["messages"].back()["content"];
    if (user.find("The caller's lines") == std::string::npos) continue;
    asked = true;
    EXPECT_THAT(user, HasSubstr("[email]"));
    EXPECT_THAT(user, Not(HasSubstr("ada@example.org")));
    EXPECT_THAT(user, Not(HasSubstr("4111")));
  }
  EXPECT_TRUE(asked);
}

TEST_F(ReplayTest, RefusesWhatCannotBeReplayed) {
  const int64_t agent = CreateAgent("r1");
  const json call = IngestCall("replay-refused", agent);
  const std::string path = absl::StrCat("/api/v1/calls/", call["id"].get<int64_t>(), "/scenario");

  HttpResponse bad_mode = client_->Post(path, json{{"mode", "dream"}});
  EXPECT_EQ(bad_mode.status, 422) << bad_mode.body;
  EXPECT_THAT(bad_mode.body, HasSubstr("mode"));

  EXPECT_EQ(client_->Post("/api/v1/calls/999999/scenario", json::object()).status, 404);

  // Another workspace's call is not found.
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  EXPECT_EQ(other.Post(path, json::object()).status, 404);

  // A call whose agent is gone: 422 naming agent_id.
  ASSERT_EQ(client_->Delete(absl::StrCat("/api/v1/agents/", agent)).status, 204);
  HttpResponse orphan = client_->Post(path, json::object());
  EXPECT_EQ(orphan.status, 422) << orphan.body;
  EXPECT_THAT(orphan.body, HasSubstr("agent_id"));
}

}  // namespace
}  // namespace calleval

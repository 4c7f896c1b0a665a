// Drives every route of the foundation over real HTTP against the real server (all roles in
// one process, SQLite in a temporary data dir, port 0).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cmd/calleval/server.h"
#include "common/crypto.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "tests/edge/bad_bodies.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::HttpClient;
using testing::HttpResponse;

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir("api"));
    ServerConfig config = testing::TestServerConfig(*dir_);
    config.max_body_bytes = 1 << 20;
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    ASSERT_TRUE(server_->bootstrap().has_value());
    key_ = new std::string(server_->bootstrap()->key.api_key);

    // A second workspace with its own key, and a key of workspace 1 granted workspace 2's
    // access, made the way callevalctl does it: on the same database file.
    auto db = db::Database::Open(*dir_ + "/calleval.db", SchemaMigrations());
    ASSERT_TRUE(db.ok());
    accounts::AccountsStore store(db->get());
    auto other = store.CreateWorkspace("other", 100);
    ASSERT_TRUE(other.ok());
    other_workspace_ = other->id;
    other_key_ = new std::string(store.CreateKey(other->id, {})->api_key);
    granted_key_ = new std::string(store.CreateKey(1, {other->id})->api_key);
  }

  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*dir_);
  }

  void SetUp() override {
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(*key_);
  }

  // An internal agent in the key's workspace.
  int64_t CreateAgent(HttpClient& client, const std::string& name = "Support bot") {
    HttpResponse r = client.Post("/api/v1/agents", json{{"name", name},
                                                        {"phone_number", "+14155550123"},
                                                        {"language_id", 1},
                                                        {"instructions", "Help callers."}});
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json().value("id", int64_t{0});
  }

  json TranscriptCall(const std::string& identifier, int64_t agent_id) {
    return json{{"call_identifier", identifier},
                {"agent_id", agent_id},
                {"transcript",
                 {{{"role", "AI Assistant"},
                   {"content", "Hello, how can I help?"},
                   {"start_time", 0.4},
                   {"end_time", 2.1}},
                  {{"role", "User"},
                   {"content", "My card is lost."},
                   {"start_time", 2.9},
                   {"end_time", 4.6}}}},
                {"metadata", {{"crm", "A-1"}, {"keep", true}}}};
  }

  // Polls a call until `done` holds or 10 s pass.
  json PollCall(const std::string& key, const std::function<bool(const json&)>& done) {
    json call;
    for (int i = 0; i < 200; ++i) {
      call = client_->Get("/api/public/v1/calls/" + key).json();
      if (done(call)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return call;
  }

  static void ExpectError(const HttpResponse& r, int status, const std::string& code = "") {
    EXPECT_EQ(r.status, status) << r.body;
    json body = r.json();
    ASSERT_TRUE(body.contains("error")) << r.body;
    EXPECT_EQ(body["error"]["status"], status);
    EXPECT_TRUE(body["error"]["message"].is_string());
    EXPECT_TRUE(body["error"]["details"].is_array());
    if (!code.empty()) {
      EXPECT_EQ(body["error"]["code"], code) << r.body;
    }
  }

  static std::string* dir_;
  static Server* server_;
  static std::string* key_;
  static std::string* other_key_;
  static std::string* granted_key_;
  static int64_t other_workspace_;
  std::unique_ptr<HttpClient> client_;
};

std::string* ApiTest::dir_ = nullptr;
Server* ApiTest::server_ = nullptr;
std::string* ApiTest::key_ = nullptr;
std::string* ApiTest::other_key_ = nullptr;
std::string* ApiTest::granted_key_ = nullptr;
int64_t ApiTest::other_workspace_ = 0;

TEST_F(ApiTest, HealthAndOpenApiNeedNoKey) {
  HttpClient anonymous(server_->http_base_url());
  EXPECT_EQ(anonymous.Get("/healthz").status, 200);
  EXPECT_EQ(anonymous.Get("/readyz").status, 200);
  HttpResponse openapi = anonymous.Get("/openapi.json");
  ASSERT_EQ(openapi.status, 200);
  json doc = openapi.json();
  EXPECT_EQ(doc["openapi"], "3.0.3");
  for (const char* path :
       {"/api/public/v1/calls", "/api/public/v1/calls/{call_identifier_or_id}", "/api/v1/agents",
        "/api/v1/agents/{id}", "/api/v1/languages", "/api/v1/workspaces/current"}) {
    EXPECT_TRUE(doc["paths"].contains(path)) << path;
  }
}

TEST_F(ApiTest, BootstrapKeyWrittenPrivately) {
  std::ifstream in(*dir_ + "/bootstrap-key");
  std::string key;
  in >> key;
  EXPECT_EQ(key, *key_);
  auto perms = std::filesystem::status(*dir_ + "/bootstrap-key").permissions();
  EXPECT_EQ(perms & std::filesystem::perms::group_all, std::filesystem::perms::none);
  EXPECT_EQ(perms & std::filesystem::perms::others_all, std::filesystem::perms::none);
}

TEST_F(ApiTest, AuthenticationRequired) {
  HttpClient anonymous(server_->http_base_url());
  ExpectError(anonymous.Get("/api/public/v1/calls"), 401, "unauthenticated");
  anonymous.set_api_key("cev_notakey");
  ExpectError(anonymous.Get("/api/public/v1/calls"), 401);
  ExpectError(anonymous.Get("/api/v1/workspaces/current"), 401);
}

TEST_F(ApiTest, CurrentWorkspaceAndGrants) {
  HttpResponse r = client_->Get("/api/v1/workspaces/current");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json(), (json{{"id", 1}, {"name", "default"}, {"credit_balance", 10000}}));
  ExpectError(client_->Get(absl::StrCat("/api/v1/workspaces/current?client_id=", other_workspace_)),
              403, "workspace_not_accessible");
  HttpClient granted(server_->http_base_url());
  granted.set_api_key(*granted_key_);
  r = granted.Get(absl::StrCat("/api/v1/workspaces/current?client_id=", other_workspace_));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["name"], "other");
}

TEST_F(ApiTest, WorkspacesOfTheKeyOwnFirstThenGranted) {
  HttpClient granted(server_->http_base_url());
  granted.set_api_key(*granted_key_);
  HttpResponse r = granted.Get("/api/v1/workspaces");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json()["data"].size(), 2u) << r.body;
  EXPECT_EQ(r.json()["data"][0]["id"], 1);
  EXPECT_EQ(r.json()["data"][0]["name"], "default");
  EXPECT_TRUE(r.json()["data"][0]["credit_balance"].is_number_integer());
  EXPECT_EQ(r.json()["data"][1],
            (json{{"id", other_workspace_}, {"name", "other"}, {"credit_balance", 100}}));
  // A key without grants: its own workspace alone, whichever workspace that is.
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  r = other.Get("/api/v1/workspaces");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json(), (json{{"data", {{{"id", other_workspace_}, {"name", "other"},
                                       {"credit_balance", 100}}}}}));
  EXPECT_EQ(client_->Get("/api/v1/workspaces").json()["data"].size(), 1u);
  HttpClient anonymous(server_->http_base_url());
  ExpectError(anonymous.Get("/api/v1/workspaces"), 401, "unauthenticated");
}

TEST_F(ApiTest, Languages) {
  HttpResponse r = client_->Get("/api/v1/languages");
  ASSERT_EQ(r.status, 200);
  EXPECT_GE(r.json()["data"].size(), 10u);
  EXPECT_TRUE(r.json()["data"][0]["id"].is_number_integer());
}

TEST_F(ApiTest, AgentLifecycle) {
  HttpResponse created =
      client_->Post("/api/v1/agents", json{{"name", "Billing"},
                                           {"phone_number", "+447911123456"},
                                           {"language_id", 2},
                                           {"instructions", "Answer billing questions."},
                                           {"first_message", "Hello from billing"},
                                           {"call_directions", {"inbound", "outbound"}}});
  ASSERT_EQ(created.status, 201) << created.body;
  json agent = created.json();
  EXPECT_EQ(agent["telephony_carrier"], "twilio");
  EXPECT_EQ(agent["agent_source"], "internal");
  EXPECT_EQ(agent["opening_message"]["mode"], "agent_speaks_first");
  EXPECT_EQ(agent["opening_message"]["text"], "Hello from billing");
  EXPECT_EQ(agent["max_call_duration_seconds"], 600);
  EXPECT_TRUE(agent["transport"].is_null());
  EXPECT_TRUE(agent["web_channel"].is_null());
  const std::string path = absl::StrCat("/api/v1/agents/", agent["id"].get<int64_t>());

  EXPECT_EQ(client_->Get(path).json()["name"], "Billing");
  HttpResponse patched = client_->Patch(path, json{{"name", "Billing 2"}, {"model", nullptr}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json()["name"], "Billing 2");
  EXPECT_EQ(patched.json()["phone_number"], "+447911123456");

  HttpResponse list = client_->Get("/api/v1/agents?per_page=1");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.json()["data"].size(), 1u);
  EXPECT_EQ(list.json()["pagination"]["per_page"], 1);

  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  ExpectError(other.Get(path), 404);

  HttpResponse deleted = client_->Delete(path);
  EXPECT_EQ(deleted.status, 204);
  EXPECT_TRUE(deleted.body.empty());
  ExpectError(client_->Get(path), 404);
}

TEST_F(ApiTest, AgentValidation) {
  HttpResponse r = client_->Post(
      "/api/v1/agents",
      json{{"name", "x"}, {"phone_number", "12345"}, {"language_id", 1}, {"instructions", "i"}});
  ExpectError(r, 422);
  EXPECT_THAT(r.body, HasSubstr("phone_number"));
  ExpectError(
      client_->Post("/api/v1/agents", json{{"name", "x"}, {"phone_number", "+14155550123"}}), 422);
}

TEST_F(ApiTest, AgentWebChannelOverHttp) {
  HttpResponse created = client_->Post(
      "/api/v1/agents", json{{"name", "Web only"},
                             {"language_id", 1},
                             {"instructions", "Answer questions."},
                             {"web_channel",
                              {{"transport", "websocket"},
                               {"websocket_url", "wss://agent.example.com/media"},
                               {"auth_token", "tok-secret"}}}});
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_THAT(created.body, ::testing::Not(HasSubstr("tok-secret")));
  json agent = created.json();
  EXPECT_TRUE(agent["phone_number"].is_null());
  EXPECT_TRUE(agent["telephony_carrier"].is_null());
  EXPECT_EQ(agent["transport"], "websocket");
  EXPECT_EQ(agent["web_channel"], (json{{"transport", "websocket"},
                                        {"websocket_url", "wss://agent.example.com/media"},
                                        {"protocol", "twilio_media_streams"},
                                        {"auth_token_set", true}}));
  const std::string path = absl::StrCat("/api/v1/agents/", agent["id"].get<int64_t>());
  EXPECT_EQ(client_->Get(path).json()["web_channel"], agent["web_channel"]);

  // PATCH merges key by key; a key sent as null goes; web_channel null removes the channel.
  HttpResponse patched =
      client_->Patch(path, json{{"web_channel", {{"protocol", "pcm16"}, {"auth_token", nullptr}}}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json()["web_channel"]["protocol"], "pcm16");
  EXPECT_EQ(patched.json()["web_channel"]["websocket_url"], "wss://agent.example.com/media");
  EXPECT_EQ(patched.json()["web_channel"]["auth_token_set"], false);
  patched = client_->Patch(path, json{{"phone_number", "+14155550123"}, {"web_channel", nullptr}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_TRUE(patched.json()["web_channel"].is_null());
  EXPECT_TRUE(patched.json()["transport"].is_null());

  // The seed's rejections, each naming its field.
  const json base = {{"name", "w"}, {"language_id", 1}, {"instructions", "x"}};
  auto rejected = [&](json extra, const std::string& field) {
    json body = base;
    if (extra.is_object()) body.update(extra);
    HttpResponse r = client_->Post("/api/v1/agents", body);
    ExpectError(r, 422);
    EXPECT_EQ(r.json()["error"]["details"][0]["field"], field) << r.body;
  };
  rejected({{"web_channel", {{"transport", "websocket"}, {"websocket_url", "ws://localhost/x"}}}},
           "web_channel.websocket_url");
  rejected({{"web_channel", {{"transport", "websocket"}, {"websocket_url", "wss://10.0.0.8/x"}}}},
           "web_channel.websocket_url");
  rejected({{"web_channel", {{"transport", "websocket"}}}}, "web_channel.websocket_url");
  rejected({{"transport", "websocket"}}, "web_channel.websocket_url");
  rejected({{"web_channel", {{"transport", "livekit"}, {"room_management", "client"}}}},
           "web_channel.bot_runner_url");
  rejected({}, "phone_number");
}

TEST_F(ApiTest, ScenarioLifecycleAndRejections) {
  const int64_t agent = CreateAgent(*client_, "scenario target");
  HttpResponse created = client_->Post(
      "/api/v1/scenarios", json{{"agent_id", agent},
                                {"name", "Reschedule"},
                                {"persona", "A busy parent"},
                                {"goal", "Move Tuesday's appointment to Friday"},
                                {"expected_outcome", "The appointment is on Friday"},
                                {"caller_script", {"Hi, I need to move my appointment.", "Friday."}},
                                {"max_turns", 6},
                                {"metric_ids", {12, 1, 12}}});
  ASSERT_EQ(created.status, 201) << created.body;
  json scenario = created.json();
  EXPECT_EQ(scenario["agent_id"], agent);
  EXPECT_EQ(scenario["caller_script"].size(), 2u);
  EXPECT_EQ(scenario["max_turns"], 6);
  EXPECT_EQ(scenario["metric_ids"], (json{12, 1}));
  EXPECT_TRUE(scenario["max_duration_seconds"].is_null());
  EXPECT_TRUE(scenario["language_id"].is_null());
  const std::string path = absl::StrCat("/api/v1/scenarios/", scenario["id"].get<int64_t>());
  EXPECT_EQ(client_->Get(path).json(), scenario);

  // PATCH: sent keys change, null restores defaults; a caller with neither script nor goal is
  // refused and changes nothing.
  HttpResponse patched = client_->Patch(path, json{{"name", "Reschedule 2"}, {"max_turns", nullptr}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json()["name"], "Reschedule 2");
  EXPECT_EQ(patched.json()["max_turns"], 20);
  EXPECT_EQ(patched.json()["goal"], scenario["goal"]);
  HttpResponse no_caller = client_->Patch(path, json{{"goal", nullptr}, {"caller_script", nullptr}});
  ExpectError(no_caller, 422, "validation_failed");
  EXPECT_EQ(no_caller.json()["error"]["details"][0]["field"], "goal");
  EXPECT_EQ(client_->Get(path).json()["name"], "Reschedule 2");

  // Listing, all or one agent's.
  const int64_t other_agent = CreateAgent(*client_, "another target");
  ASSERT_EQ(client_->Post("/api/v1/scenarios",
                          json{{"agent_id", other_agent}, {"name", "x"}, {"goal", "g"}})
                .status,
            201);
  EXPECT_EQ(client_->Get("/api/v1/scenarios").json()["pagination"]["total_count"], 2);
  json mine = client_->Get(absl::StrCat("/api/v1/scenarios?agent_id=", agent)).json();
  ASSERT_EQ(mine["data"].size(), 1u);
  EXPECT_EQ(mine["data"][0]["id"], scenario["id"]);
  ExpectError(client_->Get("/api/v1/scenarios?per_page=0"), 422);

  // Rejections.
  auto rejected = [&](json body, const std::string& code, const std::string& field) {
    HttpResponse r = client_->Post("/api/v1/scenarios", body);
    ExpectError(r, 422, code);
    EXPECT_EQ(r.json()["error"]["details"][0]["field"], field) << r.body;
  };
  rejected(json{{"name", "x"}, {"goal", "g"}}, "validation_failed", "agent_id");
  rejected(json{{"agent_id", 999999}, {"name", "x"}, {"goal", "g"}}, "agent_not_found", "agent_id");
  rejected(json{{"agent_id", agent}, {"goal", "g"}}, "validation_failed", "name");
  rejected(json{{"agent_id", agent}, {"name", "x"}}, "validation_failed", "goal");
  rejected(json{{"agent_id", agent}, {"name", "x"}, {"goal", "g"}, {"max_turns", 0}},
           "validation_failed", "max_turns");
  rejected(json{{"agent_id", agent}, {"name", "x"}, {"caller_script", {"fine", " "}}},
           "validation_failed", "caller_script[1]");
  rejected(json{{"agent_id", agent}, {"name", "x"}, {"goal", "g"}, {"metric_ids", {1, 999}}},
           "metric_not_found", "metric_ids[1]");
  rejected(json{{"agent_id", agent}, {"name", "x"}, {"goal", "g"}, {"language_id", 999}},
           "validation_failed", "language_id");

  // Metrics name scenarios of their workspace only.
  HttpResponse metric = client_->Post(
      "/api/v1/metrics", json{{"name", "Rescheduled"},
                              {"metrics_type", "specific_text_/_phrase_check"},
                              {"phrases", {"Friday"}},
                              {"scenario_ids", {scenario["id"]}}});
  ASSERT_EQ(metric.status, 201) << metric.body;
  EXPECT_EQ(metric.json()["scenario_ids"], (json{scenario["id"]}));
  ExpectError(client_->Post("/api/v1/metrics", json{{"name", "Nope"},
                                                    {"metrics_type", "specific_text_/_phrase_check"},
                                                    {"phrases", {"x"}},
                                                    {"scenario_ids", {424242}}}),
              422);

  // Another workspace sees none of it; deletion is final.
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  ExpectError(other.Get(path), 404);
  ExpectError(other.Patch(path, json{{"name", "mine"}}), 404);
  EXPECT_EQ(other.Get("/api/v1/scenarios").json()["data"].size(), 0u);
  EXPECT_EQ(client_->Delete(path).status, 204);
  ExpectError(client_->Get(path), 404);
  ExpectError(client_->Delete(path), 404);
  // Deleting an agent deletes its scenarios.
  EXPECT_EQ(client_->Delete(absl::StrCat("/api/v1/agents/", other_agent)).status, 204);
  EXPECT_EQ(client_->Get("/api/v1/scenarios").json()["pagination"]["total_count"], 0);
}

// Integration settings over HTTP (docs/api.md §5.8): secrets write-only, PUT replaces, PATCH
// merges, each workspace its own, the client_id of a granted key honoured.
TEST_F(ApiTest, IntegrationSettingsOverHttp) {
  const std::string path = "/api/v1/integrations/twilio";
  ExpectError(client_->Get(path), 404, "integration_not_found");
  ExpectError(client_->Get("/api/v1/integrations/skype"), 404, "unknown_provider");
  HttpResponse put = client_->Put(
      path, json{{"account_sid", "AC0123456789abcdef0123456789abcdef"},
                 {"auth_token", "twilio-secret-token"},
                 {"caller_numbers", {"+1 (415) 555-2671"}}}.dump());
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(put.body.find("twilio-secret-token"), std::string::npos);
  json settings = put.json()["settings"];
  EXPECT_EQ(settings["auth_token_set"], true);
  EXPECT_EQ(settings["caller_numbers"], (json{"+14155552671"}));
  EXPECT_EQ(put.json()["provider"], "twilio");

  HttpResponse patched = client_->Patch(path, json{{"caller_numbers", nullptr}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json()["settings"]["caller_numbers"], json::array());
  EXPECT_EQ(patched.json()["settings"]["auth_token_set"], true);
  HttpResponse bad = client_->Patch(path, json{{"auth_token", nullptr}, {"caller_numbers", 5}});
  ExpectError(bad, 422, "validation_failed");
  EXPECT_EQ(bad.json()["error"]["details"][0]["field"], "caller_numbers");
  ExpectError(client_->Put(path, std::string("[1]")), 400);

  HttpResponse listed = client_->Get("/api/v1/integrations");
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(listed.json()["data"].size(), 1u);
  EXPECT_EQ(listed.json()["data"][0]["provider"], "twilio");
  EXPECT_EQ(listed.body.find("twilio-secret-token"), std::string::npos);

  // Another workspace has its own; a key granted it writes there with client_id.
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  ExpectError(other.Get(path), 404, "integration_not_found");
  HttpClient granted(server_->http_base_url());
  granted.set_api_key(*granted_key_);
  const std::string retell =
      absl::StrCat("/api/v1/integrations/retell?client_id=", other_workspace_);
  ASSERT_EQ(granted.Put(retell, json{{"api_key", "key_other"}}.dump()).status, 200);
  EXPECT_EQ(other.Get("/api/v1/integrations/retell").json()["settings"]["api_key_set"], true);
  ExpectError(client_->Get("/api/v1/integrations/retell"), 404, "integration_not_found");
  ExpectError(other.Put(absl::StrCat("/api/v1/integrations/retell?client_id=1"),
                        json{{"api_key", "x"}}.dump()),
              403);

  EXPECT_EQ(client_->Delete(path).status, 204);
  ExpectError(client_->Delete(path), 404, "integration_not_found");
  EXPECT_EQ(client_->Get("/api/v1/integrations").json()["data"].size(), 0u);
}

TEST_F(ApiTest, IngestTranscriptCallAndRead) {
  int64_t agent = CreateAgent(*client_);
  HttpResponse r = client_->Post("/api/public/v1/calls", TranscriptCall("crm-1", agent));
  ASSERT_EQ(r.status, 201) << r.body;
  json call = r.json();
  EXPECT_TRUE(call["id"].is_number_integer());
  EXPECT_EQ(call["client_id"], 1);
  EXPECT_EQ(call["agent_id"], agent);
  EXPECT_EQ(call["observation_type"], "text");
  EXPECT_EQ(call["analysis_status"], "pending");
  EXPECT_EQ(call["transcription_status"], "completed");
  EXPECT_EQ(call["call_direction"], "inbound");
  EXPECT_EQ(call["duration_seconds"], 5);
  EXPECT_EQ(call["transcript_source"], "provided");
  EXPECT_TRUE(call["presigned_recording_url"].is_null());
  EXPECT_TRUE(call["recording_url"].is_null());
  EXPECT_TRUE(call["label"].is_null());
  EXPECT_TRUE(call["failure_reason"].is_null());
  EXPECT_FALSE(call.contains("ignored_metric_ids"));
  EXPECT_EQ(call["metadata"], (json{{"crm", "A-1"}, {"keep", true}}));
  EXPECT_EQ(call["transcript"][1]["role"], "User");
  EXPECT_EQ(call["credits_used"], 0);

  const std::string id = std::to_string(call["id"].get<int64_t>());
  json by_id = client_->Get("/api/public/v1/calls/" + id).json();
  json by_identifier = client_->Get("/api/public/v1/calls/crm-1").json();
  // The scoring workers may move the call on between the two reads.
  for (const char* moving : {"analysis_status", "updated_at", "standard_metrics",
                             "metric_results", "credits_used"}) {
    by_id.erase(moving);
    by_identifier.erase(moving);
  }
  EXPECT_EQ(by_id, by_identifier);
  EXPECT_EQ(by_id["call_identifier"], "crm-1");
}

TEST_F(ApiTest, IngestRejections) {
  int64_t agent = CreateAgent(*client_);
  ASSERT_EQ(client_->Post("/api/public/v1/calls", TranscriptCall("dup-1", agent)).status, 201);
  HttpResponse dup = client_->Post("/api/public/v1/calls", TranscriptCall("dup-1", agent));
  ExpectError(dup, 409);
  EXPECT_EQ(dup.json()["error"]["details"][0]["field"], "call_identifier");
  EXPECT_THAT(dup.json()["error"]["details"][0]["issue"].get<std::string>(),
              HasSubstr("already submitted as call"));

  json bad_role = TranscriptCall("role-1", agent);
  bad_role["transcript"][1]["role"] = "Customer";
  HttpResponse role = client_->Post("/api/public/v1/calls", bad_role);
  ExpectError(role, 422, "invalid_role");
  EXPECT_EQ(role.json()["error"]["details"][0]["field"], "transcript[1].role");

  ExpectError(client_->Post("/api/public/v1/calls",
                            json{{"call_identifier", "none-1"}, {"agent_id", agent}}),
              422, "recording_or_transcript_required");
  ExpectError(client_->Post("/api/public/v1/calls", TranscriptCall("agent-404", 999999)), 422,
              "agent_not_found");

  json private_url = TranscriptCall("url-1", agent);
  private_url["recording_url"] = "http://10.0.0.5/r.wav";
  ExpectError(client_->Post("/api/public/v1/calls", private_url), 422, "url_not_public");
  private_url["recording_url"] = "file:///etc/passwd";
  ExpectError(client_->Post("/api/public/v1/calls", private_url), 422);

  json wrong_type = TranscriptCall("type-1", agent);
  wrong_type["duration_seconds"] = "long";
  ExpectError(client_->Post("/api/public/v1/calls", wrong_type), 422);
  json wrong_ids = TranscriptCall("type-2", agent);
  wrong_ids["metric_ids"] = json::array({1, "two"});
  ExpectError(client_->Post("/api/public/v1/calls", wrong_ids), 422);
}

TEST_F(ApiTest, SameIdentifierInAnotherWorkspaceIsNotADuplicate) {
  int64_t agent = CreateAgent(*client_);
  ASSERT_EQ(client_->Post("/api/public/v1/calls", TranscriptCall("shared-1", agent)).status, 201);
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  int64_t other_agent = CreateAgent(other);
  EXPECT_EQ(other.Post("/api/public/v1/calls", TranscriptCall("shared-1", other_agent)).status,
            201);
  // And the other workspace's agent cannot be used from workspace 1.
  ExpectError(client_->Post("/api/public/v1/calls", TranscriptCall("x-ws", other_agent)), 422,
              "agent_not_found");
}

TEST_F(ApiTest, IgnoredMetricIds) {
  int64_t agent = CreateAgent(*client_);
  json body = TranscriptCall("metrics-1", agent);
  body["metric_ids"] = {999, 1, 12};  // unknown, audio without recording, usable
  HttpResponse r = client_->Post("/api/public/v1/calls", body);
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.json()["ignored_metric_ids"], json({999, 1}));
  EXPECT_EQ(r.json()["metric_ids"], json({12}));
  // Not in later reads.
  EXPECT_FALSE(
      client_->Get("/api/public/v1/calls/metrics-1").json().contains("ignored_metric_ids"));
}

TEST_F(ApiTest, UsableMetrics) {
  HttpResponse r = client_->Get("/api/public/v1/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  // The suite shares one server: other tests' custom metrics may be listed too, after the
  // twelve standard ones.
  const json listed = r.json()["data"];
  json data = json::array();
  for (const json& m : listed) {
    if (m["metrics_type"] == "standard") data.push_back(m);
  }
  ASSERT_EQ(data.size(), 12u);
  EXPECT_EQ(data[0], (json{{"id", 1},
                           {"name", "Latency"},
                           {"metrics_type", "standard"},
                           {"standard_metric_key", "latency"},
                           {"requires_audio", true},
                           {"enabled", true}}));
  EXPECT_EQ(data[11]["standard_metric_key"], "task_completion");
  EXPECT_EQ(data[11]["requires_audio"], false);

  HttpResponse agent = client_->Post("/api/v1/agents", json{{"name", "quiet"},
                                                            {"phone_number", "+14155550123"},
                                                            {"language_id", 1},
                                                            {"instructions", "x"},
                                                            {"disabled_metric_ids", {5, 12}}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  const int64_t id = agent.json()["id"];
  data = client_->Get(absl::StrCat("/api/public/v1/metrics?agent_id=", id)).json()["data"];
  for (const json& m : data) {
    EXPECT_EQ(m["enabled"], m["id"] != 5 && m["id"] != 12) << m.dump();
  }
  ExpectError(client_->Get("/api/public/v1/metrics?agent_id=999999"), 404);

  // A disabled metric named in metric_ids is ignored for that agent's calls.
  json body = TranscriptCall("disabled-1", id);
  body["metric_ids"] = {12, 11};
  r = client_->Post("/api/public/v1/calls", body);
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.json()["ignored_metric_ids"], json({12}));
  EXPECT_EQ(r.json()["metric_ids"], json({11}));
}

TEST_F(ApiTest, UpdateCall) {
  int64_t agent = CreateAgent(*client_);
  ASSERT_EQ(client_->Post("/api/public/v1/calls", TranscriptCall("upd-1", agent)).status, 201);
  HttpResponse r =
      client_->Patch("/api/public/v1/calls/upd-1",
                     json{{"label", "reviewed"},
                          {"tag", "vip"},
                          {"metadata", {{"crm", "B-2"}, {"keep", nullptr}, {"new", 1}}},
                          {"call_identifier", "renamed"},  // immutable: ignored
                          {"agent_id", 424242},            // immutable: ignored
                          {"transcript", json::array()}});
  ASSERT_EQ(r.status, 200) << r.body;
  json call = r.json();
  EXPECT_EQ(call["label"], "reviewed");
  EXPECT_EQ(call["tag"], "vip");
  EXPECT_EQ(call["metadata"], (json{{"crm", "B-2"}, {"new", 1}}));
  EXPECT_EQ(call["call_identifier"], "upd-1");
  EXPECT_EQ(call["agent_id"], agent);
  EXPECT_EQ(call["transcript"].size(), 2u);

  r = client_->Patch("/api/public/v1/calls/upd-1", json{{"label", nullptr}});
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.json()["label"].is_null());
  EXPECT_EQ(r.json()["tag"], "vip");

  ExpectError(client_->Patch(absl::StrCat("/api/public/v1/calls/upd-1?agent_id=", agent + 1000),
                             json{{"label", "x"}}),
              404);
  EXPECT_EQ(
      client_
          ->Patch(absl::StrCat("/api/public/v1/calls/upd-1?agent_id=", agent), json{{"label", "y"}})
          .status,
      200);
  ExpectError(client_->Patch("/api/public/v1/calls/no-such-call", json{{"label", "x"}}), 404);
}

TEST_F(ApiTest, ListFiltersAndPagination) {
  int64_t agent = CreateAgent(*client_, "lister");
  for (int i = 0; i < 5; ++i) {
    json body = TranscriptCall(absl::StrCat("list-", i), agent);
    if (i % 2 == 0) body["tag"] = "even";
    ASSERT_EQ(client_->Post("/api/public/v1/calls", body).status, 201);
  }
  HttpResponse r =
      client_->Get(absl::StrCat("/api/public/v1/calls?agent_id=", agent, "&per_page=2&page=2"));
  ASSERT_EQ(r.status, 200) << r.body;
  json page = r.json();
  EXPECT_EQ(page["pagination"],
            (json{{"current_page", 2}, {"total_pages", 3}, {"total_count", 5}, {"per_page", 2}}));
  ASSERT_EQ(page["data"].size(), 2u);
  EXPECT_EQ(page["data"][0]["call_identifier"], "list-2");  // newest first
  r = client_->Get(absl::StrCat("/api/public/v1/calls?agent_id=", agent, "&tag=even"));
  EXPECT_EQ(r.json()["pagination"]["total_count"], 3);
  r = client_->Get(
      absl::StrCat("/api/public/v1/calls?agent_id=", agent, "&observation_type=voice"));
  EXPECT_EQ(r.json()["pagination"]["total_count"], 0);
  ExpectError(client_->Get("/api/public/v1/calls?per_page=1000"), 422);
  ExpectError(client_->Get("/api/public/v1/calls?analysis_status=done"), 422);
  ExpectError(client_->Get("/api/public/v1/calls?observation_type=video"), 422);
  // Text calls are analysed at once (their LLM-judged metrics fail without a provider).
  int64_t completed = 0;
  for (int i = 0; i < 200 && completed != 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    completed = client_
                    ->Get(absl::StrCat("/api/public/v1/calls?agent_id=", agent,
                                       "&analysis_status=completed"))
                    .json()["pagination"]["total_count"];
  }
  EXPECT_EQ(completed, 5);
  ExpectError(client_->Get("/api/public/v1/calls?page=abc"), 422);
}

TEST_F(ApiTest, ListByTranscriptionStatusTimeAndSearch) {
  int64_t agent = CreateAgent(*client_, "searcher");
  int64_t first_id = 0;
  for (const auto& [identifier, timestamp] : std::vector<std::pair<std::string, std::string>>{
           {"find-50%a", "2026-11-22T10:00:00Z"},
           {"find-50xa", "2026-11-22T11:00:00Z"},
           {"find-x", "2026-11-22T12:00:00Z"}}) {
    json body = TranscriptCall(identifier, agent);
    body["call_timestamp"] = timestamp;
    HttpResponse r = client_->Post("/api/public/v1/calls", body);
    ASSERT_EQ(r.status, 201) << r.body;
    if (first_id == 0) first_id = r.json()["id"];
  }
  auto identifiers = [&](const std::string& query) {
    HttpResponse r = client_->Get(absl::StrCat("/api/public/v1/calls?agent_id=", agent, query));
    EXPECT_EQ(r.status, 200) << query << ": " << r.body;
    const json listed = r.json();
    std::vector<std::string> out;
    for (const json& call : listed["data"]) out.push_back(call["call_identifier"]);
    return out;
  };
  // %25 is a literal %, not a wildcard.
  EXPECT_THAT(identifiers("&search=find-50%25"), ElementsAre("find-50%a"));
  EXPECT_THAT(identifiers("&search=find-50"), ElementsAre("find-50xa", "find-50%a"));
  EXPECT_THAT(identifiers(absl::StrCat("&search=", first_id)), ElementsAre("find-50%a"));
  EXPECT_THAT(identifiers("&call_timestamp_from=2026-11-22T11:00:00Z"
                          "&call_timestamp_to=2026-11-22T12:00:00Z"),
              ElementsAre("find-50xa"));
  // An offset, its + sent as %2B.
  EXPECT_THAT(identifiers("&call_timestamp_from=2026-11-22T12:00:00%2B01:00"),
              ElementsAre("find-x", "find-50xa"));
  EXPECT_THAT(identifiers("&transcription_status=completed&search=find-&"
                          "call_timestamp_to=2026-11-22T11:00:00Z"),
              ElementsAre("find-50%a"));
  EXPECT_THAT(identifiers("&transcription_status=pending"), ElementsAre());
  HttpResponse refused = client_->Get(
      "/api/public/v1/calls?call_timestamp_to=soon&transcription_status=computed");
  ExpectError(refused, 422, "validation_failed");
  EXPECT_EQ(refused.json()["error"]["details"],
            (json{{{"field", "transcription_status"},
                   {"issue", "must be one of pending, processing, completed, failed"}},
                  {{"field", "call_timestamp_to"},
                   {"issue", "must be an RFC 3339 date-time, for example 2026-11-22T10:15:00Z"}}}));
}

TEST_F(ApiTest, CrossWorkspaceIsolation) {
  int64_t agent = CreateAgent(*client_);
  HttpResponse r = client_->Post("/api/public/v1/calls", TranscriptCall("secret-1", agent));
  ASSERT_EQ(r.status, 201);
  const std::string id = std::to_string(r.json()["id"].get<int64_t>());
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  ExpectError(other.Get("/api/public/v1/calls/" + id), 404);
  ExpectError(other.Get("/api/public/v1/calls/secret-1"), 404);
  ExpectError(other.Patch("/api/public/v1/calls/" + id, json{{"label", "x"}}), 404);
  ExpectError(other.Delete("/api/public/v1/calls/" + id), 404);
  ExpectError(other.Get("/api/public/v1/calls?client_id=1"), 403, "workspace_not_accessible");
  json body = TranscriptCall("foreign-1", agent);
  body["client_id"] = 1;
  ExpectError(other.Post("/api/public/v1/calls", body), 403);
  EXPECT_EQ(other.Get("/api/public/v1/calls").json()["data"].size(),
            other.Get("/api/public/v1/calls").json()["pagination"]["total_count"].get<size_t>());
  // The granted key may act on the other workspace explicitly.
  HttpClient granted(server_->http_base_url());
  granted.set_api_key(*granted_key_);
  EXPECT_EQ(granted.Get(absl::StrCat("/api/public/v1/calls?client_id=", other_workspace_)).status,
            200);
}

TEST_F(ApiTest, DeleteCall) {
  int64_t agent = CreateAgent(*client_);
  ASSERT_EQ(client_->Post("/api/public/v1/calls", TranscriptCall("del-1", agent)).status, 201);
  HttpResponse r = client_->Delete("/api/public/v1/calls/del-1");
  EXPECT_EQ(r.status, 204);
  ExpectError(client_->Get("/api/public/v1/calls/del-1"), 404);
  ExpectError(client_->Delete("/api/public/v1/calls/del-1"), 404);
  // The identifier can be used again once deleted.
  EXPECT_EQ(client_->Post("/api/public/v1/calls", TranscriptCall("del-1", agent)).status, 201);
}

TEST_F(ApiTest, EdgeErrorStatuses) {
  ExpectError(client_->Post("/api/public/v1/calls", std::string("{\"call_identifier\": ")), 400,
              "malformed_json");
  ExpectError(client_->Post("/api/public/v1/calls", std::string("[1,2]")), 400);
  ExpectError(client_->Post("/api/public/v1/calls", std::string(2 << 20, ' ')), 413);
  ExpectError(client_->Get("/api/public/v1/nothing"), 404);
  HttpResponse wrong_method = client_->Put("/api/public/v1/calls", "{}");
  ExpectError(wrong_method, 405);
  EXPECT_FALSE(wrong_method.headers["allow"].empty());
}

TEST_F(ApiTest, RequestIdEchoed) {
  HttpResponse r =
      client_->Send("GET", "/api/v1/languages", nullptr, {{"X-Request-Id", "req-abc-123"}});
  EXPECT_EQ(r.headers["x-request-id"], "req-abc-123");
  r = client_->Get("/api/v1/languages");
  EXPECT_FALSE(r.headers["x-request-id"].empty());
}

TEST_F(ApiTest, KeepAliveReusesOneConnection) {
  for (int i = 0; i < 5; ++i) ASSERT_EQ(client_->Get("/api/v1/languages").status, 200);
  EXPECT_EQ(client_->connections_opened(), 0);  // the last request opened none
}

TEST_F(ApiTest, MalformedBodiesNeverGive5xx) {
  int64_t agent = CreateAgent(*client_);
  (void)agent;
  std::vector<std::string> bodies = testdata::GenerateBadBodies();
  ASSERT_GE(bodies.size(), 200u);
  int checked = 0;
  for (const std::string& body : bodies) {
    HttpResponse r = client_->Post("/api/public/v1/calls", body);
    EXPECT_GE(r.status, 400) << body.substr(0, 200);
    EXPECT_LT(r.status, 500) << body.substr(0, 200) << " -> " << r.body.substr(0, 300);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(bodies.size()));
  // The server still answers normally.
  EXPECT_EQ(client_->Get("/healthz").status, 200);
}

class RecordingTest : public ApiTest {
 protected:
  void SetUp() override {
    ApiTest::SetUp();
    agent_ = CreateAgent(*client_);
  }
  json Ingest(const std::string& identifier, const std::string& url) {
    json body = TranscriptCall(identifier, agent_);
    body["recording_url"] = url;
    HttpResponse r = client_->Post("/api/public/v1/calls", body);
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json();
  }
  int64_t agent_ = 0;
  TestHttpServer files_;
};

TEST_F(RecordingTest, DownloadedStoredAndServedThroughSignedLink) {
  std::string wav = "RIFF....WAVEfmt fake audio bytes " + std::string(100000, 'x');
  files_.Serve("/calls/r1.wav", wav, "audio/wav");
  json call = Ingest("rec-1", files_.url("/calls/r1.wav"));
  EXPECT_EQ(call["observation_type"], "voice");
  EXPECT_EQ(call["transcription_status"], "pending");
  EXPECT_TRUE(call["presigned_recording_url"].is_null());
  call = PollCall("rec-1", [](const json& c) { return !c["presigned_recording_url"].is_null(); });
  ASSERT_TRUE(call["presigned_recording_url"].is_string()) << call.dump();
  const std::string link = call["presigned_recording_url"];

  HttpClient anonymous(server_->http_base_url());
  HttpResponse audio = anonymous.Get(link);
  ASSERT_EQ(audio.status, 200);
  EXPECT_EQ(audio.body, wav);
  EXPECT_EQ(audio.headers["content-type"], "audio/wav");
  EXPECT_EQ(audio.headers["accept-ranges"], "bytes");

  // A player seeking: single ranges are answered 206 with exactly those bytes.
  const std::string size = std::to_string(wav.size());
  HttpResponse part = anonymous.Send("GET", link, nullptr, {{"Range", "bytes=4-11"}});
  ASSERT_EQ(part.status, 206) << part.body;
  EXPECT_EQ(part.body, wav.substr(4, 8));
  EXPECT_EQ(part.headers["content-range"], "bytes 4-11/" + size);
  EXPECT_EQ(part.headers["content-length"], "8");
  EXPECT_EQ(part.headers["content-type"], "audio/wav");
  part = anonymous.Send("GET", link, nullptr, {{"Range", "bytes=99990-"}});
  ASSERT_EQ(part.status, 206);
  EXPECT_EQ(part.body, wav.substr(99990));
  part = anonymous.Send("GET", link, nullptr, {{"Range", "bytes=-5"}});
  ASSERT_EQ(part.status, 206);
  EXPECT_EQ(part.body, wav.substr(wav.size() - 5));
  EXPECT_EQ(part.headers["content-range"],
            absl::StrCat("bytes ", wav.size() - 5, "-", wav.size() - 1, "/", size));
  part = anonymous.Send("GET", link, nullptr, {{"Range", "bytes=" + size + "-"}});
  EXPECT_EQ(part.status, 416);
  EXPECT_EQ(part.headers["content-range"], "bytes */" + size);
  // Several ranges are not served piecewise: the whole file, as RFC 9110 allows.
  part = anonymous.Send("GET", link, nullptr, {{"Range", "bytes=0-1,5-6"}});
  EXPECT_EQ(part.status, 200);
  EXPECT_EQ(part.body, wav);
  // The signature is checked before the range.
  std::string tampered_range = link;
  tampered_range.back() = tampered_range.back() == '0' ? '1' : '0';
  EXPECT_EQ(anonymous.Send("GET", tampered_range, nullptr, {{"Range", "bytes=0-3"}}).status, 403);

  std::string tampered = link;
  tampered.back() = tampered.back() == '0' ? '1' : '0';
  ExpectError(anonymous.Get(tampered), 403);
  std::string other_call = absl::StrReplaceAll(
      link, {{absl::StrCat("/recordings/", call["id"].get<int64_t>()), "/recordings/999999"}});
  ExpectError(anonymous.Get(other_call), 403);

  // A correctly signed link whose expiry has passed.
  std::ifstream key_file(*dir_ + "/signing-key", std::ios::binary);
  std::string key((std::istreambuf_iterator<char>(key_file)), std::istreambuf_iterator<char>());
  int64_t id = call["id"];
  int64_t expired = 1700000000;
  std::string signature = HexEncode(HmacSha256(key, absl::StrCat(id, ".", expired)));
  ExpectError(anonymous.Get(absl::StrCat(server_->http_base_url(), "/recordings/", id,
                                         "?expires=", expired, "&signature=", signature)),
              403);
  // Deleting the call deletes the recording. Once the call has settled: a delete that meets
  // the settlement's refunds on their way answers 503 "try again" (CallsStore::Delete), and the
  // fake recording fails its analysis while the links above are checked.
  call = PollCall("rec-1", [](const json& c) {
    return c["analysis_status"] == "completed" || c["analysis_status"] == "failed";
  });
  ASSERT_TRUE(call["analysis_status"] == "completed" || call["analysis_status"] == "failed")
      << call.dump();
  EXPECT_EQ(client_->Delete("/api/public/v1/calls/rec-1").status, 204);
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/recordings/" + std::to_string(id)));
}

TEST_F(RecordingTest, FailedDownloadEndsCallFailed) {
  files_.Status("/missing.wav", 404);
  Ingest("rec-404", files_.url("/missing.wav"));
  json call = PollCall("rec-404", [](const json& c) { return c["analysis_status"] == "failed"; });
  EXPECT_EQ(call["analysis_status"], "failed");
  EXPECT_EQ(call["failure_reason"], "download_failed");
  EXPECT_THAT(call["failure_message"].get<std::string>(), HasSubstr("404"));
  EXPECT_TRUE(call["presigned_recording_url"].is_null());
}

TEST_F(RecordingTest, RedirectToLoopbackNameRefused) {
  files_.Redirect("/redirect.wav", absl::StrCat("http://localhost:", files_.port(), "/never.wav"));
  files_.Serve("/never.wav", "secret", "audio/wav");
  Ingest("rec-redirect", files_.url("/redirect.wav"));
  json call =
      PollCall("rec-redirect", [](const json& c) { return c["analysis_status"] == "failed"; });
  EXPECT_EQ(call["failure_reason"], "download_failed");
  EXPECT_EQ(files_.hits("/never.wav"), 0);
}

}  // namespace
}  // namespace calleval

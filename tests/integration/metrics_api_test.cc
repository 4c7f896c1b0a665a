// The Metrics service over real HTTP against the real server (all roles in one process, SQLite
// in a temporary data dir, the real sandbox): every metric route and its 4xx answers, the agent
// toggles, and calls scored on phrase, options and code metrics with outcome classifications.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::HttpClient;
using testing::HttpResponse;

// The generated test corpus (tests/corpus).
const std::string kCorpus = CALLEVAL_CORPUS_DIR;

class MetricsApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir("metrics_api"));
    ServerConfig config = testing::TestServerConfig(*dir_);
    config.workers = 2;
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    key_ = new std::string(server_->bootstrap()->key.api_key);
    auto db = db::Database::Open(*dir_ + "/calleval.db", SchemaMigrations());
    ASSERT_TRUE(db.ok());
    accounts::AccountsStore store(db->get());
    auto other = store.CreateWorkspace("other", 100);
    ASSERT_TRUE(other.ok());
    other_workspace_ = other->id;
    other_key_ = new std::string(store.CreateKey(other->id, {})->api_key);
  }

  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*dir_);
  }

  void SetUp() override {
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(*key_);
  }

  int64_t CreateAgent(HttpClient& client, const std::string& name) {
    HttpResponse r = client.Post("/api/v1/agents", json{{"name", name},
                                                        {"phone_number", "+14155550123"},
                                                        {"language_id", 1},
                                                        {"instructions", "Help callers."}});
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json().value("id", int64_t{0});
  }

  json CreateMetric(const json& body, int status = 201) {
    HttpResponse r = client_->Post("/api/v1/metrics", body);
    EXPECT_EQ(r.status, status) << r.body;
    return r.json();
  }

  static void ExpectError(const HttpResponse& r, int status, const std::string& code = "",
                          const std::string& field = "") {
    EXPECT_EQ(r.status, status) << r.body;
    json body = r.json();
    ASSERT_TRUE(body.contains("error")) << r.body;
    EXPECT_EQ(body["error"]["status"], status);
    if (!code.empty()) {
      EXPECT_EQ(body["error"]["code"], code) << r.body;
    }
    if (!field.empty()) {
      bool found = false;
      for (const json& d : body["error"]["details"]) found = found || d["field"] == field;
      EXPECT_TRUE(found) << "no detail on " << field << ": " << r.body;
    }
  }

  json WaitFinal(const std::string& key) {
    return client_->WaitForAnalysis(key);
  }

  int64_t Balance() { return client_->Get("/api/v1/workspaces/current").json()["credit_balance"]; }

  static const json* Result(const json& call, int64_t metric_id) {
    for (const json& m : call["metric_results"]) {
      if (m["metric_id"] == metric_id) return &m;
    }
    return nullptr;
  }

  static std::string* dir_;
  static Server* server_;
  static std::string* key_;
  static std::string* other_key_;
  static int64_t other_workspace_;
  std::unique_ptr<HttpClient> client_;
};

std::string* MetricsApiTest::dir_ = nullptr;
Server* MetricsApiTest::server_ = nullptr;
std::string* MetricsApiTest::key_ = nullptr;
std::string* MetricsApiTest::other_key_ = nullptr;
int64_t MetricsApiTest::other_workspace_ = 0;

TEST_F(MetricsApiTest, CreateGetUpdateDeleteEachType) {
  const int64_t agent = CreateAgent(*client_, "crud");
  json phrase = CreateMetric({{"name", "Greets"},
                              {"metrics_type", "specific_text_/_phrase_check"},
                              {"phrases", {"thank you for calling"}},
                              {"agent_ids", {agent}},
                              {"structured_output",
                               {{{"condition", "equals"},
                                 {"set_metrics_name", "greeting"},
                                 {"as_metrics_expected_value", "true"},
                                 {"outcome_classification", "meets_expectations"}}}}});
  ASSERT_TRUE(phrase.contains("id")) << phrase.dump();
  EXPECT_GE(phrase["id"].get<int64_t>(), 101);
  EXPECT_EQ(phrase["metrics_type"], "specific_text_/_phrase_check");
  EXPECT_EQ(phrase["result_type"], "boolean");
  EXPECT_EQ(phrase["is_custom"], true);
  EXPECT_EQ(phrase["scope"], "agent");
  EXPECT_EQ(phrase["standard_metric_key"], nullptr);
  EXPECT_EQ(phrase["agent_ids"], json({agent}));
  EXPECT_EQ(phrase["scenario_ids"], json::array());
  EXPECT_EQ(phrase["evaluation_trigger"]["type"], "always");
  EXPECT_EQ(phrase["match"], "any");
  EXPECT_EQ(phrase["speaker"], "AI Assistant");
  EXPECT_EQ(phrase["credit_cost"], 1);
  EXPECT_TRUE(phrase["created_at"].is_string());
  // Every metric carries every type-specific field, null where it does not apply to its type.
  const std::vector<std::string> kTypeSpecific = {
      "enum_values", "llm_instructions",  "code_snippet",      "phrases",      "match",
      "speaker",     "case_sensitive",    "permitted_options", "forbidden_options",
      "judge_samples"};
  auto expect_null_except = [&](const json& metric, const std::set<std::string>& applies) {
    for (const std::string& key : kTypeSpecific) {
      ASSERT_TRUE(metric.contains(key)) << key << " missing from " << metric.dump();
      if (!applies.count(key)) EXPECT_TRUE(metric[key].is_null()) << key << ": " << metric.dump();
    }
  };
  expect_null_except(phrase, {"phrases", "match", "speaker", "case_sensitive"});
  EXPECT_EQ(phrase["case_sensitive"], false);

  json options = CreateMetric({{"name", "Payment options"},
                               {"metrics_type", "permitted_options_check"},
                               {"permitted_options", {"card", "bank transfer"}},
                               {"forbidden_options", {"cash"}},
                               {"mark_as_global", true}});
  EXPECT_EQ(options["scope"], "global");
  expect_null_except(options, {"permitted_options", "forbidden_options", "speaker"});
  EXPECT_EQ(options["forbidden_options"], json({"cash"}));
  json code = CreateMetric({{"name", "Few silences"},
                            {"metrics_type", "code_as_judge"},
                            {"result_type", "numeric"},
                            {"code_snippet", "metric['result'] = 1"}});
  EXPECT_EQ(code["code_snippet"], "metric['result'] = 1");
  expect_null_except(code, {"code_snippet"});
  json llm = CreateMetric({{"name", "Polite"},
                           {"metrics_type", "custom_evaluation"},
                           {"result_type", "enum"},
                           {"enum_values", {"polite", "rude"}},
                           {"llm_instructions", "Was the agent polite?"}});
  EXPECT_EQ(llm["credit_cost"], 2);
  EXPECT_EQ(llm["enum_values"], json({"polite", "rude"}));
  expect_null_except(llm, {"enum_values", "llm_instructions", "judge_samples"});

  // The standard metrics carry the same keys, all null.
  HttpResponse latency = client_->Get("/api/v1/metrics/1");
  ASSERT_EQ(latency.status, 200) << latency.body;
  expect_null_except(latency.json(), {});

  const std::string path = absl::StrCat("/api/v1/metrics/", phrase["id"].get<int64_t>());
  HttpResponse got = client_->Get(path);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json(), phrase);

  HttpResponse put = client_->Put(path, json{{"name", "Greets warmly"}, {"match", "all"}}.dump());
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(put.json()["name"], "Greets warmly");
  EXPECT_EQ(put.json()["match"], "all");
  EXPECT_EQ(put.json()["phrases"], json({"thank you for calling"}));  // kept
  ExpectError(client_->Put(path, json{{"metrics_type", "code_as_judge"}}.dump()), 422,
              "metrics_type_immutable", "metrics_type");

  // Standard metrics: readable, not changeable, not deletable.
  HttpResponse standard = client_->Get("/api/v1/metrics/1");
  ASSERT_EQ(standard.status, 200) << standard.body;
  EXPECT_EQ(standard.json()["standard_metric_key"], "latency");
  EXPECT_EQ(standard.json()["is_custom"], false);
  ExpectError(client_->Put("/api/v1/metrics/1", json{{"name", "x"}}.dump()), 403);
  ExpectError(client_->Delete("/api/v1/metrics/1"), 403);

  // Another workspace sees none of it.
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  ExpectError(other.Get(path), 404, "not_found");
  ExpectError(other.Delete(path), 404);
  ExpectError(other.Put(path, json{{"name", "mine"}}.dump()), 404);

  HttpResponse deleted = client_->Delete(path);
  EXPECT_EQ(deleted.status, 204) << deleted.body;
  EXPECT_TRUE(deleted.body.empty());
  ExpectError(client_->Get(path), 404);
  ExpectError(client_->Delete(path), 404);
}

TEST_F(MetricsApiTest, ValidationErrors) {
  struct Case {
    json body;
    std::string field;
  };
  const Case cases[] = {
      {{{"metrics_type", "code_as_judge"}, {"code_snippet", "x"}}, "name"},
      {{{"name", "a"}}, "metrics_type"},
      {{{"name", "a"}, {"metrics_type", "standard"}}, "metrics_type"},
      {{{"name", "a"}, {"metrics_type", "magic"}}, "metrics_type"},
      {{{"name", "a"}, {"metrics_type", "custom_evaluation"}}, "llm_instructions"},
      {{{"name", "a"}, {"metrics_type", "code_as_judge"}}, "code_snippet"},
      {{{"name", "a"}, {"metrics_type", "specific_text_/_phrase_check"}}, "phrases"},
      {{{"name", "a"}, {"metrics_type", "permitted_options_check"}}, "permitted_options"},
      {{{"name", "a"},
        {"metrics_type", "custom_evaluation"},
        {"llm_instructions", "x"},
        {"result_type", "enum"}},
       "enum_values"},
      {{{"name", "a"},
        {"metrics_type", "custom_evaluation"},
        {"llm_instructions", "x"},
        {"result_type", "percent"}},
       "result_type"},
      {{{"name", "a"},
        {"metrics_type", "specific_text_/_phrase_check"},
        {"phrases", {"x"}},
        {"result_type", "rating"}},
       "result_type"},
      {{{"name", "a"},
        {"metrics_type", "specific_text_/_phrase_check"},
        {"phrases", {"x"}},
        {"speaker", "Robot"}},
       "speaker"},
      {{{"name", "a"},
        {"metrics_type", "code_as_judge"},
        {"code_snippet", "x"},
        {"evaluation_trigger", {{"type", "phrase"}}}},
       "evaluation_trigger.phrases"},
      {{{"name", "a"},
        {"metrics_type", "code_as_judge"},
        {"code_snippet", "x"},
        {"evaluation_trigger", {{"type", "sometimes"}}}},
       "evaluation_trigger.type"},
      {{{"name", "a"},
        {"metrics_type", "code_as_judge"},
        {"code_snippet", "x"},
        {"result_type", "rating"},
        {"structured_output",
         {{{"condition", "at_least"},
           {"as_metrics_expected_value", "9"},
           {"outcome_classification", "meets_expectations"}}}}},
       "structured_output[0].as_metrics_expected_value"},
      {{{"name", "a"},
        {"metrics_type", "code_as_judge"},
        {"code_snippet", "x"},
        {"structured_output",
         {{{"condition", "roughly"},
           {"as_metrics_expected_value", "true"},
           {"outcome_classification", "meets_expectations"}}}}},
       "structured_output[0].condition"},
      {{{"name", "a"},
        {"metrics_type", "code_as_judge"},
        {"code_snippet", "x"},
        {"agent_ids", {999999}}},
       "agent_ids[0]"},
      {{{"name", "Latency"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "x"}}, "name"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.dump());
    ExpectError(client_->Post("/api/v1/metrics", c.body), 422, "", c.field);
  }
  // Types and transport.
  ExpectError(client_->Post("/api/v1/metrics", json{{"name", 5}}), 422, "invalid_type");
  ExpectError(client_->Post("/api/v1/metrics", std::string("{\"name\": ")), 400, "malformed_json");
  ExpectError(client_->Get("/api/v1/metrics/abc"), 422, "invalid_type");
  HttpClient anonymous(server_->http_base_url());
  ExpectError(anonymous.Get("/api/v1/metrics"), 401, "unauthenticated");
  ExpectError(client_->Get(absl::StrCat("/api/v1/metrics?client_id=", other_workspace_)), 403);
  ExpectError(client_->Send("PATCH", "/api/v1/metrics/1", nullptr), 405);
  // A duplicate name.
  CreateMetric({{"name", "Unique one"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "x"}});
  ExpectError(client_->Post("/api/v1/metrics", json{{"name", "unique ONE"},
                                                    {"metrics_type", "code_as_judge"},
                                                    {"code_snippet", "x"}}),
              422, "duplicate_name", "name");
}

TEST_F(MetricsApiTest, ListingSearchPaginationAndAgentFilter) {
  HttpClient client(server_->http_base_url());
  // A fresh workspace keeps the counts exact.
  auto db = db::Database::Open(*dir_ + "/calleval.db", SchemaMigrations());
  ASSERT_TRUE(db.ok());
  accounts::AccountsStore store(db->get());
  auto ws = store.CreateWorkspace("listing", 1000);
  ASSERT_TRUE(ws.ok());
  client.set_api_key(store.CreateKey(ws->id, {})->api_key);
  const int64_t agent = CreateAgent(client, "listed");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(client
                  .Post("/api/v1/metrics", json{{"name", absl::StrCat("Agent metric ", i)},
                                                {"metrics_type", "code_as_judge"},
                                                {"code_snippet", "metric['result'] = True"},
                                                {"agent_ids", {agent}}})
                  .status,
              201);
  }
  ASSERT_EQ(client
                .Post("/api/v1/metrics", json{{"name", "Other agent metric"},
                                              {"metrics_type", "code_as_judge"},
                                              {"code_snippet", "metric['result'] = True"}})
                .status,
            201);
  ASSERT_EQ(client
                .Post("/api/v1/metrics", json{{"name", "Everywhere"},
                                              {"metrics_type", "code_as_judge"},
                                              {"code_snippet", "metric['result'] = True"},
                                              {"mark_as_global", true}})
                .status,
            201);

  json all = client.Get("/api/v1/metrics").json();
  EXPECT_EQ(all["standard_metrics"].size(), 12u);
  EXPECT_EQ(all["standard_metrics"][0]["metrics_type"], "standard");
  EXPECT_EQ(all["data"].size(), 4u);
  EXPECT_EQ(all["data"][0]["name"], "Other agent metric");  // newest first
  EXPECT_EQ(all["global_metrics"].size(), 1u);
  EXPECT_EQ(all["pagination"],
            (json{{"current_page", 1}, {"total_pages", 1}, {"total_count", 4}, {"per_page", 25}}));

  json page = client.Get("/api/v1/metrics?per_page=3&page=2").json();
  EXPECT_EQ(page["data"].size(), 1u);
  EXPECT_EQ(page["pagination"]["total_pages"], 2);

  json search = client.Get("/api/v1/metrics?search=AGENT%20metric").json();
  EXPECT_EQ(search["data"].size(), 4u);
  EXPECT_EQ(search["standard_metrics"].size(), 0u);
  EXPECT_EQ(search["global_metrics"].size(), 0u);
  EXPECT_EQ(client.Get("/api/v1/metrics?search=latency").json()["standard_metrics"].size(), 1u);

  json for_agent = client.Get(absl::StrCat("/api/v1/metrics?agent_id=", agent)).json();
  EXPECT_EQ(for_agent["data"].size(), 3u);
  EXPECT_EQ(for_agent["global_metrics"].size(), 1u);
  ExpectError(client.Get("/api/v1/metrics?per_page=0"), 422);
  ExpectError(client.Get("/api/v1/metrics?per_page=101"), 422);
  ExpectError(client.Get("/api/v1/metrics?agent_id=999999"), 404);
}

TEST_F(MetricsApiTest, BulkCreate) {
  const int64_t agent = CreateAgent(*client_, "bulk");
  HttpResponse r = client_->Post(
      "/api/v1/metrics/bulk_create",
      json{{"agent_id", agent},
           {"metrics",
            {{{"name", "Bulk one"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "x"}},
             {{"name", "Bulk two"},
              {"metrics_type", "custom_evaluation"},
              {"result_type", "boolean"},
              {"llm_instructions", "Did it go well?"}},
             {{"name", "bulk ONE"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "y"}},
             {{"name", "Latency"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "y"}}}}});
  ASSERT_EQ(r.status, 201) << r.body;
  json body = r.json();
  ASSERT_EQ(body["created"].size(), 2u);
  EXPECT_EQ(body["created"][0]["agent_ids"], json({agent}));
  EXPECT_EQ(body["skipped"], (json{{{"name", "bulk ONE"}, {"reason", "duplicate_name"}},
                                   {{"name", "Latency"}, {"reason", "duplicate_name"}}}));
  // Run again: everything is a duplicate now.
  r = client_->Post(
      "/api/v1/metrics/bulk_create",
      json{{"metrics",
            {{{"name", "Bulk one"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "x"}}}}});
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.json()["created"].size(), 0u);
  // An invalid item fails the whole request, naming the item.
  ExpectError(
      client_->Post(
          "/api/v1/metrics/bulk_create",
          json{{"metrics",
                {{{"name", "Fine"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "x"}},
                 {{"name", "Broken"}, {"metrics_type", "code_as_judge"}}}}}),
      422, "", "metrics[1].code_snippet");
  EXPECT_EQ(client_->Get("/api/v1/metrics?search=Fine").json()["data"].size(), 0u);
  ExpectError(client_->Post("/api/v1/metrics/bulk_create", json{{"metrics", json::array()}}), 422);
  ExpectError(
      client_->Post(
          "/api/v1/metrics/bulk_create",
          json{{"agent_id", 999999},
               {"metrics",
                {{{"name", "Z"}, {"metrics_type", "code_as_judge"}, {"code_snippet", "x"}}}}}),
      422, "agent_not_found", "agent_id");
}

TEST_F(MetricsApiTest, ValidateCode) {
  HttpResponse r = client_->Post("/api/v1/metrics/validate_code",
                                 json{{"code", "metric['result'] = context['silence'] is None"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json(), (json{{"valid", true}, {"errors", json::array()}}));

  r = client_->Post("/api/v1/metrics/validate_code",
                    json{{"code", "x = 1\nif x\n  metric['result'] = True\n"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["valid"], false);
  ASSERT_EQ(r.json()["errors"].size(), 1u);
  EXPECT_EQ(r.json()["errors"][0]["line"], 2);
  EXPECT_TRUE(r.json()["errors"][0]["column"].is_number());
  EXPECT_TRUE(r.json()["errors"][0]["message"].is_string());

  r = client_->Post("/api/v1/metrics/validate_code", json{{"code", "x = 1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["valid"], false);
  EXPECT_THAT(r.json()["errors"][0]["message"].get<std::string>(), HasSubstr("metric['result']"));

  ExpectError(client_->Post("/api/v1/metrics/validate_code", json::object()), 422, "", "code");
  ExpectError(client_->Post("/api/v1/metrics/validate_code", json{{"code", 12}}), 422,
              "invalid_type");
}

TEST_F(MetricsApiTest, TestCodeAgainstAStoredCall) {
  const int64_t agent = CreateAgent(*client_, "tested");
  HttpResponse ingest =
      client_->Post("/api/public/v1/calls",
                    json{{"call_identifier", "test-code-1"},
                         {"agent_id", agent},
                         {"metadata", {{"plan", "gold"}}},
                         {"transcript",
                          {{{"role", "AI Assistant"}, {"content", "Hello, how can I help?"}},
                           {{"role", "User"}, {"content", "My card was charged twice."}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  const int64_t call_id = ingest.json()["id"];

  HttpResponse r =
      client_->Post("/api/v1/metrics/test_code",
                    json{{"code",
                          "metric['result'] = 'charged twice' in context['transcript_text'] and "
                          "context['call']['metadata']['plan'] == 'gold'\n"
                          "metric['explanation'] = 'agent ' + context['agent']['name']"},
                         {"call_observation_id", call_id},
                         {"structured_output",
                          {{{"condition", "equals"},
                            {"set_metrics_name", "found"},
                            {"as_metrics_expected_value", "true"},
                            {"outcome_classification", "meets_expectations"}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.json();
  EXPECT_EQ(body["result"], true);
  EXPECT_EQ(body["metric_result"], "pass");
  EXPECT_EQ(body["explanation"], "agent tested");
  EXPECT_EQ(body["error"], nullptr);
  EXPECT_EQ(body["structured_output"]["outcome_classification"], "meets_expectations");
  EXPECT_GT(body["execution_time_ms"].get<double>(), 0);
  EXPECT_EQ(body["call"]["id"], call_id);
  EXPECT_EQ(body["call"]["identifier"], "test-code-1");

  // Text calls have no audio measurements.
  r = client_->Post("/api/v1/metrics/test_code",
                    json{{"code",
                          "metric['result'] = context['silence'] is None and "
                          "context['latency'] is None"},
                         {"call_observation_id", call_id}});
  EXPECT_EQ(r.json()["result"], true) << r.body;

  // A snippet that raises reports the error with its line; the service stays up.
  r = client_->Post("/api/v1/metrics/test_code",
                    json{{"code", "x = 1\ny = x / 0\nmetric['result'] = True"},
                         {"call_observation_id", call_id}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["error"]["type"], "ZeroDivisionError");
  EXPECT_EQ(r.json()["error"]["line"], 2);
  EXPECT_EQ(r.json()["metric_result"], nullptr);

  // Typed results.
  r = client_->Post("/api/v1/metrics/test_code", json{{"code", "metric['result'] = 7"},
                                                      {"call_observation_id", call_id},
                                                      {"result_type", "rating"}});
  EXPECT_EQ(r.json()["error"]["type"], "ResultTypeError") << r.body;
  r = client_->Post("/api/v1/metrics/test_code", json{{"code", "metric['result'] = 4"},
                                                      {"call_observation_id", call_id},
                                                      {"result_type", "rating"}});
  EXPECT_EQ(r.json()["metric_result"], "4") << r.body;

  ExpectError(client_->Post("/api/v1/metrics/test_code", json{{"code", "metric['result'] = 1"},
                                                              {"call_observation_id", 999999}}),
              422, "call_not_found", "call_observation_id");
  ExpectError(client_->Post("/api/v1/metrics/test_code", json{{"code", "metric['result'] = 1"}}),
              422, "", "call_observation_id");
  // Another workspace's call is not found either.
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  ExpectError(other.Post("/api/v1/metrics/test_code",
                         json{{"code", "metric['result'] = 1"}, {"call_observation_id", call_id}}),
              422, "call_not_found");
}

TEST_F(MetricsApiTest, AgentToggles) {
  const int64_t agent = CreateAgent(*client_, "toggled");
  json custom = CreateMetric({{"name", "Toggled code"},
                              {"metrics_type", "code_as_judge"},
                              {"code_snippet", "metric['result'] = True"},
                              {"agent_ids", {agent}}});
  const int64_t custom_id = custom["id"];
  const std::string base = absl::StrCat("/api/v1/agents/", agent);

  HttpResponse r =
      client_->Put(base + "/standard_metrics",
                   json{{"disabled_metric_keys", {"silence_detection", "latency"}}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["agent_id"], agent);
  EXPECT_EQ(r.json()["disabled_metric_keys"], json({"latency", "silence_detection"}));
  EXPECT_EQ(r.json()["enabled_metric_keys"].size(), 10u);

  r = client_->Put(base + "/llm_metrics", json{{"disabled_llm_metric_ids", {custom_id}}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json(), (json{{"agent_id", agent}, {"disabled_llm_metric_ids", {custom_id}}}));

  // Both feed the agent's disabled_metric_ids.
  json stored = client_->Get(base).json();
  EXPECT_EQ(stored["disabled_metric_ids"], json({1, 5, custom_id})) << stored.dump();
  json usable = client_->Get(absl::StrCat("/api/public/v1/metrics?agent_id=", agent)).json();
  int disabled = 0;
  bool listed = false;
  for (const json& m : usable["data"]) {
    if (m["enabled"] == false) ++disabled;
    listed = listed || m["id"] == custom_id;
  }
  EXPECT_EQ(disabled, 3);
  EXPECT_TRUE(listed);

  // Clearing one list keeps the other.
  r = client_->Put(base + "/standard_metrics",
                   json{{"disabled_metric_keys", json::array()}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(client_->Get(base).json()["disabled_metric_ids"], json({custom_id}));

  ExpectError(
      client_->Put(base + "/standard_metrics", json{{"disabled_metric_keys", {"loudness"}}}.dump()),
      422, "", "disabled_metric_keys[0]");
  ExpectError(client_->Put(base + "/llm_metrics", json{{"disabled_llm_metric_ids", {5}}}.dump()),
              422, "", "disabled_llm_metric_ids[0]");
  ExpectError(client_->Put("/api/v1/agents/999999/standard_metrics",
                           json{{"disabled_metric_keys", json::array()}}.dump()),
              404);
  HttpClient other(server_->http_base_url());
  other.set_api_key(*other_key_);
  ExpectError(
      other.Put(base + "/llm_metrics", json{{"disabled_llm_metric_ids", json::array()}}.dump()),
      404);
}

TEST_F(MetricsApiTest, ScoredCallShowsPhraseOptionsAndCodeResults) {
  const int64_t agent = CreateAgent(*client_, "judged");
  auto rule = [](const std::string& condition, const std::string& expected,
                 const std::string& outcome) {
    return json{{"condition", condition},
                {"set_metrics_name", outcome},
                {"as_metrics_expected_value", expected},
                {"outcome_classification", outcome}};
  };
  const int64_t greets = CreateMetric({{"name", "Greets caller"},
                                       {"metrics_type", "specific_text_/_phrase_check"},
                                       {"phrases", {"thank you for calling"}},
                                       {"agent_ids", {agent}},
                                       {"structured_output",
                                        {rule("equals", "true", "meets_expectations"),
                                         rule("equals", "false", "requires_attention")}}})["id"];
  const int64_t offers = CreateMetric({{"name", "Offers payment options"},
                                       {"metrics_type", "permitted_options_check"},
                                       {"permitted_options", {"card", "bank transfer"}},
                                       {"forbidden_options", {"cash"}},
                                       {"agent_ids", {agent}},
                                       {"credit_cost", 3},
                                       {"structured_output",
                                        {rule("equals", "true", "meets_expectations"),
                                         rule("equals", "false", "requires_attention")}}})["id"];
  const int64_t turns =
      CreateMetric({{"name", "Turn count"},
                    {"metrics_type", "code_as_judge"},
                    {"result_type", "numeric"},
                    {"code_snippet",
                     "metric['result'] = len(context['transcript'])\n"
                     "metric['explanation'] = f\"{len(context['transcript'])} turns\""},
                    {"agent_ids", {agent}},
                    {"structured_output",
                     {rule("at_least", "4", "exceeds_expectations"),
                      rule("at_least", "2", "meets_expectations")}}})["id"];
  const int64_t crashes = CreateMetric({{"name", "Crashes"},
                                        {"metrics_type", "code_as_judge"},
                                        {"code_snippet", "raise ValueError('boom')"},
                                        {"agent_ids", {agent}}})["id"];
  const int64_t never =
      CreateMetric({{"name", "Only on refunds"},
                    {"metrics_type", "code_as_judge"},
                    {"code_snippet", "metric['result'] = True"},
                    {"evaluation_trigger", {{"type", "phrase"}, {"phrases", {"refund"}}}},
                    {"agent_ids", {agent}}})["id"];
  const int64_t llm = CreateMetric({{"name", "Empathy"},
                                    {"metrics_type", "custom_evaluation"},
                                    {"llm_instructions", "Was the agent empathetic?"},
                                    {"agent_ids", {agent}}})["id"];
  // A metric of another agent is not scored on this agent's calls.
  const int64_t elsewhere = CreateMetric({{"name", "Elsewhere"},
                                          {"metrics_type", "code_as_judge"},
                                          {"code_snippet", "metric['result'] = True"}})["id"];

  // Global metrics of the workspace (other tests') apply to this agent too.
  const size_t globals = client_->Get("/api/v1/metrics").json()["global_metrics"].size();
  const int64_t before = Balance();
  HttpResponse ingest = client_->Post(
      "/api/public/v1/calls",
      json{
          {"call_identifier", "judged-1"},
          {"agent_id", agent},
          {"transcript",
           {{{"role", "AI Assistant"}, {"content", "Thank you for calling Acme, how can I help?"}},
            {{"role", "User"}, {"content", "How can I pay my bill?"}},
            {{"role", "AI Assistant"}, {"content", "You can pay by card or by bank transfer."}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = WaitFinal("judged-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  ASSERT_EQ(call["metric_results"].size(), 6u + globals) << call.dump();

  const json* r = Result(call, greets);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "completed");
  EXPECT_EQ(r->at("value"), true);
  EXPECT_EQ(r->at("name"), "Greets caller");
  EXPECT_EQ(r->at("metrics_type"), "specific_text_/_phrase_check");
  EXPECT_EQ(r->at("result_type"), "boolean");
  EXPECT_THAT(r->at("explanation").get<std::string>(), HasSubstr("thank you for calling"));
  EXPECT_EQ(r->at("structured_output")["outcome_classification"], "meets_expectations");
  EXPECT_EQ(r->at("credits_used"), 1);
  EXPECT_EQ(r->at("error"), nullptr);

  r = Result(call, offers);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("value"), true);
  EXPECT_THAT(r->at("explanation").get<std::string>(), HasSubstr("card"));
  EXPECT_EQ(r->at("credits_used"), 3);

  r = Result(call, turns);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "completed") << r->dump();
  EXPECT_EQ(r->at("value"), 3);
  EXPECT_EQ(r->at("explanation"), "3 turns");
  EXPECT_EQ(r->at("structured_output")["outcome_classification"], "meets_expectations");

  r = Result(call, crashes);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "failed");
  EXPECT_THAT(r->at("error").get<std::string>(), HasSubstr("ValueError: boom"));
  EXPECT_EQ(r->at("credits_used"), 0);
  EXPECT_EQ(r->at("structured_output"), nullptr);

  r = Result(call, never);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "not_applicable");
  EXPECT_EQ(r->at("credits_used"), 0);

  r = Result(call, llm);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "failed");
  EXPECT_EQ(r->at("error"), "llm_unavailable");
  EXPECT_EQ(Result(call, elsewhere), nullptr);

  // Charged: greets 1, offers 3, turns 1; the crash, the trigger and the LLM metric are
  // refunded, as are the two standard LLM metrics (no provider).
  int64_t mine = 0, total = 0;
  for (const json& m : call["metric_results"]) {
    total += m["credits_used"].get<int64_t>();
    for (int64_t id : {greets, offers, turns, crashes, never, llm}) {
      if (m["metric_id"] == id) mine += m["credits_used"].get<int64_t>();
    }
  }
  for (const json& m : call["standard_metrics"]) total += m["credits_used"].get<int64_t>();
  EXPECT_EQ(mine, 5);
  EXPECT_EQ(call["credits_used"], total);
  EXPECT_EQ(testing::BalanceOnceSettled(*client_, before - total), before - total);

  // metric_ids naming a metric of another agent: ignored.
  HttpResponse chosen =
      client_->Post("/api/public/v1/calls",
                    json{{"call_identifier", "judged-2"},
                         {"agent_id", agent},
                         {"metric_ids", {greets, elsewhere}},
                         {"transcript", {{{"role", "AI Assistant"}, {"content", "Goodbye."}}}}});
  ASSERT_EQ(chosen.status, 201) << chosen.body;
  EXPECT_EQ(chosen.json()["ignored_metric_ids"], json({elsewhere}));
  call = WaitFinal("judged-2");
  ASSERT_EQ(call["metric_results"].size(), 1u) << call.dump();
  EXPECT_EQ(call["metric_results"][0]["value"], false);
  EXPECT_EQ(call["metric_results"][0]["structured_output"]["outcome_classification"],
            "requires_attention");
}

TEST_F(MetricsApiTest, CodeMetricReadsTheAudioMeasurements) {
  const std::string wav = kCorpus + "/basic_stereo.wav";
  ASSERT_TRUE(std::filesystem::exists(wav)) << "no test corpus at " << kCorpus;
  const int64_t agent = CreateAgent(*client_, "audio judged");
  const int64_t code = CreateMetric(
      {{"name", "Silence and latency seen"},
       {"metrics_type", "code_as_judge"},
       {"result_type", "numeric"},
       {"code_snippet",
        "s = context['silence']\n"
        "metric['result'] = s['count']\n"
        "metric['explanation'] = '%d silences, latency count %d, ai %d, wpm %s' % (\n"
        "    s['count'], context['latency']['count'],\n"
        "    context['interruptions']['ai']['count'], context['words_per_minute']['ai_wpm'] > 0)"},
       {"agent_ids", {agent}}})["id"];
  std::ifstream transcript_file(kCorpus + "/basic_stereo.transcript.json");
  const json transcript = json::parse(transcript_file);
  TestHttpServer files;
  files.ServeFile("/basic.wav", wav, "audio/wav");
  HttpResponse ingest =
      client_->Post("/api/public/v1/calls", json{{"call_identifier", "audio-judged-1"},
                                                 {"agent_id", agent},
                                                 {"recording_url", files.url("/basic.wav")},
                                                 {"transcript", transcript}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = WaitFinal("audio-judged-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  const json* r = Result(call, code);
  ASSERT_NE(r, nullptr) << call.dump();
  EXPECT_EQ(r->at("status"), "completed") << r->dump();
  const json* silence = nullptr;
  for (const json& m : call["standard_metrics"]) {
    if (m["standard_metric_key"] == "silence_detection") silence = &m;
  }
  ASSERT_NE(silence, nullptr);
  EXPECT_EQ(r->at("value"), silence->at("result")["count"]);
  EXPECT_THAT(r->at("explanation").get<std::string>(), HasSubstr("wpm True"));
}

}  // namespace
}  // namespace calleval

namespace calleval {
namespace {

// Without a working sandbox, code never runs: code metrics fail closed with a clear error,
// validate_code and test_code answer 503, and everything else keeps working.
TEST(SandboxUnavailableTest, CodeMetricsFailClosed) {
  const std::string dir = testing::MakeTempDir("no_sandbox");
  ServerConfig config = testing::TestServerConfig(dir);
  config.sandbox_bwrap = dir + "/no-such-bwrap";
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  HttpResponse agent = client.Post("/api/v1/agents", json{{"name", "no sandbox"},
                                                          {"phone_number", "+14155550123"},
                                                          {"language_id", 1},
                                                          {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  HttpResponse metric =
      client.Post("/api/v1/metrics", json{{"name", "Needs python"},
                                          {"metrics_type", "code_as_judge"},
                                          {"code_snippet", "metric['result'] = True"},
                                          {"agent_ids", {agent.json()["id"]}}});
  ASSERT_EQ(metric.status, 201) << metric.body;
  HttpResponse phrase =
      client.Post("/api/v1/metrics", json{{"name", "Says hello"},
                                          {"metrics_type", "specific_text_/_phrase_check"},
                                          {"phrases", {"hello"}},
                                          {"agent_ids", {agent.json()["id"]}}});
  ASSERT_EQ(phrase.status, 201) << phrase.body;

  HttpResponse validate =
      client.Post("/api/v1/metrics/validate_code", json{{"code", "metric['result'] = True"}});
  EXPECT_EQ(validate.status, 503) << validate.body;
  EXPECT_EQ(validate.json()["error"]["code"], "sandbox_unavailable");
  EXPECT_THAT(validate.json()["error"]["message"].get<std::string>(),
              ::testing::StartsWith("the code sandbox is unavailable: "));

  HttpResponse ingest =
      client.Post("/api/public/v1/calls",
                  json{{"call_identifier", "no-sandbox-1"},
                       {"agent_id", agent.json()["id"]},
                       {"transcript", {{{"role", "AI Assistant"}, {"content", "Hello"}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  HttpResponse test = client.Post(
      "/api/v1/metrics/test_code",
      json{{"code", "metric['result'] = True"}, {"call_observation_id", ingest.json()["id"]}});
  EXPECT_EQ(test.status, 503) << test.body;

  json call = client.WaitForAnalysis("no-sandbox-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  for (const json& r : call["metric_results"]) {
    if (r["metric_id"] == metric.json()["id"]) {
      EXPECT_EQ(r["status"], "failed");
      EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("the code sandbox is unavailable"));
      EXPECT_EQ(r["credits_used"], 0);
    } else {
      EXPECT_EQ(r["status"], "completed");  // the phrase check does not need the sandbox
      EXPECT_EQ(r["value"], true);
    }
  }
  EXPECT_EQ(call["metric_results"].size(), 2u);
  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calleval

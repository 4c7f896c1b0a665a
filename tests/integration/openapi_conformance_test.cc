// Every route's real answers conform to the served OpenAPI document: the real server (all roles
// in one process, port 0, a local OpenAI-compatible provider) is driven through each operation,
// and each answer's body is checked against that operation's response schema for its status,
// error answers against the error schema. A route the tour misses fails the test too.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "tests/edge/openapi_validator.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"
#include "tests/support/test_http_server.h"
#include "tests/support/test_wav.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;
using ::testing::IsEmpty;

constexpr char kAgentAnswer[] =
    R"({"message": "Done, your table is booked. Anything else?", "end_call": true})";

class OpenApiConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    llm_ = std::make_unique<FakeOpenAiServer>();
    llm_->SetDefault(kAgentAnswer);
    dir_ = testing::MakeTempDir("openapi");
    ServerConfig config = testing::TestServerConfig(dir_);
    config.llm_base_url = llm_->base_url();
    config.llm_api_key = llm_->api_key();
    config.llm_model = "gpt-test";
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(server_->bootstrap()->key.api_key);
    HttpResponse r = client_->Get("/openapi.json");
    ASSERT_EQ(r.status, 200);
    doc_ = r.json();
    ASSERT_TRUE(doc_.contains("paths"));
  }

  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Sends `method` to `path` (an instance of `path_template`), checks the status against
  // `expected` and the body against the document, and returns the body.
  json Send(const std::string& method, const std::string& path_template, const std::string& path,
            const json* body, int expected, HttpClient* client = nullptr) {
    if (client == nullptr) client = client_.get();
    const std::string text = body == nullptr ? "" : body->dump();
    HttpResponse r = client->Send(method, path, body == nullptr ? nullptr : &text);
    const std::string where = absl::StrCat(method, " ", path, " -> ", r.status);
    EXPECT_EQ(r.status, expected) << where << ": " << r.body;
    CheckAnswer(method, path_template, r, where);
    covered_.insert(absl::StrCat(absl::AsciiStrToLower(method), " ", path_template));
    return r.json();
  }

  json Get(const std::string& path_template, const std::string& path, int expected = 200) {
    return Send("GET", path_template, path, nullptr, expected);
  }
  json Post(const std::string& path_template, const std::string& path, const json& body,
            int expected) {
    return Send("POST", path_template, path, &body, expected);
  }

  void CheckAnswer(const std::string& method, const std::string& path_template,
                   const HttpResponse& r, const std::string& where) {
    const std::string op = absl::AsciiStrToLower(method);
    const json::json_pointer responses =
        json::json_pointer("/paths") / path_template / op / "responses";
    ASSERT_TRUE(doc_.contains(responses)) << "no operation for " << where;
    const json& listed = doc_[responses];
    // Errors other than 500 are listed one by one; nothing falls through to "default".
    if (r.status != 500) {
      EXPECT_TRUE(listed.contains(std::to_string(r.status))) << "undocumented status: " << where;
    }
    const json schema =
        testing::ResponseSchema(doc_, path_template, op, static_cast<int>(r.status));
    if (schema.is_null()) {
      EXPECT_TRUE(r.body.empty()) << "a body the document does not describe: " << where;
      return;
    }
    ASSERT_EQ(r.headers.count("content-type"), 1u) << where;
    EXPECT_EQ(r.headers.at("content-type").rfind("application/json", 0), 0u) << where;
    const json value = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(value.is_discarded()) << "not JSON: " << where << ": " << r.body;
    EXPECT_THAT(testing::ValidateSchema(doc_, schema, value), IsEmpty()) << where << ": " << r.body;
  }

  // Polls a run until it ends (the local provider answers at once).
  json WaitRun(int64_t id) {
    json run;
    for (int i = 0; i < 1200; ++i) {
      run = Get("/api/v1/runs/{id}", absl::StrCat("/api/v1/runs/", id));
      const std::string status = run.value("status", "");
      if (status == "completed" || status == "failed" || status == "cancelled") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return run;
  }

  std::unique_ptr<FakeOpenAiServer> llm_;
  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<HttpClient> client_;
  json doc_;
  std::set<std::string> covered_;
};

TEST_F(OpenApiConformanceTest, EveryRouteAnswersAsDocumented) {
  // Service routes.
  Get("/healthz", "/healthz");
  Get("/readyz", "/readyz");
  Get("/openapi.json", "/openapi.json");
  Get("/recordings/{id}", "/recordings/1?expires=1&signature=bad", 403);
  // The platforms' webhooks: an event that makes no call is acknowledged unverified; an
  // end-of-call event of an assistant no agent has, too; one of an agent without the
  // workspace's secret is refused (docs/api.md §5.9).
  Post("/api/public/v1/integrations/vapi/events", "/api/public/v1/integrations/vapi/events",
       {{"message", {{"type", "status-update"}, {"status", "ended"}}}}, 200);
  Post("/api/public/v1/integrations/retell/events", "/api/public/v1/integrations/retell/events",
       {{"event", "call_analyzed"}, {"call", {{"call_id", "c1"}, {"agent_id", "nobody"}}}}, 200);
  Post("/api/public/v1/integrations/retell/events", "/api/public/v1/integrations/retell/events",
       {{"event", "call_analyzed"}}, 422);

  Get("/api/v1/workspaces/current", "/api/v1/workspaces/current");
  Get("/api/v1/workspaces", "/api/v1/workspaces");
  const json languages = Get("/api/v1/languages", "/api/v1/languages");
  ASSERT_FALSE(languages["data"].empty());

  // Agents.
  const json agent = Post("/api/v1/agents", "/api/v1/agents",
                          {{"name", "Booking assistant"},
                           {"phone_number", "+14155550100"},
                           {"language_id", languages["data"][0]["id"]},
                           {"instructions", "You take table bookings for a restaurant."},
                           {"opening_message", {{"text", "Luigi's, how can I help?"}}},
                           {"call_directions", {"inbound"}}},
                          201);
  const int64_t agent_id = agent["id"].get<int64_t>();
  const std::string agent_path = absl::StrCat("/api/v1/agents/", agent_id);
  Get("/api/v1/agents/{id}", agent_path);
  const json agent_patch = {{"silence_threshold_ms", 800}, {"model", nullptr}};
  Send("PATCH", "/api/v1/agents/{id}", agent_path, &agent_patch, 200);
  Get("/api/v1/agents", "/api/v1/agents?page=1&per_page=10");

  // Metrics.
  const json metrics = Get("/api/v1/metrics", "/api/v1/metrics");
  EXPECT_FALSE(metrics["standard_metrics"].empty());
  const json metric = Post("/api/v1/metrics", "/api/v1/metrics",
                           {{"name", "Mentions the booking"},
                            {"metrics_type", "specific_text_/_phrase_check"},
                            {"phrases", {"booked"}},
                            {"speaker", "AI Assistant"},
                            {"agent_ids", {agent_id}},
                            {"structured_output",
                             {{{"condition", "equals"},
                               {"set_metrics_name", "booked"},
                               {"as_metrics_expected_value", "true"},
                               {"outcome_classification", "meets_expectations"}}}}},
                           201);
  const int64_t metric_id = metric["id"].get<int64_t>();
  const std::string metric_path = absl::StrCat("/api/v1/metrics/", metric_id);
  Get("/api/v1/metrics/{id}", metric_path);
  const json metric_put = {{"description", "The agent confirms the booking."}};
  Send("PUT", "/api/v1/metrics/{id}", metric_path, &metric_put, 200);
  Post("/api/v1/metrics/bulk_create", "/api/v1/metrics/bulk_create",
       {{"agent_id", agent_id},
        {"metrics",
         {{{"name", "Polite"},
           {"metrics_type", "custom_evaluation"},
           {"llm_instructions", "Was the agent polite?"}},
          {{"name", "Mentions the booking"},
           {"metrics_type", "custom_evaluation"},
           {"llm_instructions", "Duplicate name: skipped"}}}}},
       201);
  Get("/api/public/v1/metrics", absl::StrCat("/api/public/v1/metrics?agent_id=", agent_id));
  const json standard = {{"disabled_metric_keys", {"talk_ratio"}}};
  Send("PUT", "/api/v1/agents/{agent_id}/standard_metrics",
       absl::StrCat(agent_path, "/standard_metrics"), &standard, 200);
  const json llm_metrics = {{"disabled_llm_metric_ids", json::array()}};
  Send("PUT", "/api/v1/agents/{agent_id}/llm_metrics", absl::StrCat(agent_path, "/llm_metrics"),
       &llm_metrics, 200);
  Post("/api/v1/metrics/validate_code", "/api/v1/metrics/validate_code",
       {{"code", "metric['result'] = True"}}, 200);
  Post("/api/v1/metrics/validate_code", "/api/v1/metrics/validate_code",
       {{"code", "x = 1\nif x\n  metric['result'] = True\n"}}, 200);
  // The provider's answer is not a list of metrics: an error answer, checked all the same.
  {
    const json generate = {{"agent_id", agent_id}, {"number_of_metrics", 2}};
    HttpResponse r = client_->Post("/api/v1/metrics/generate", generate);
    CheckAnswer("POST", "/api/v1/metrics/generate", r, "POST /api/v1/metrics/generate");
    covered_.insert("post /api/v1/metrics/generate");
  }

  // Calls: ingest, scored to the end, read, listed, updated.
  const json call = Post("/api/public/v1/calls", "/api/public/v1/calls",
                         {{"call_identifier", "conformance-1"},
                          {"agent_id", agent_id},
                          {"call_direction", "inbound"},
                          {"call_timestamp", "2026-11-22T10:15:00Z"},
                          {"metadata", {{"crm_id", "A-1"}}},
                          {"transcript",
                           {{{"role", "AI Assistant"},
                             {"content", "Luigi's, how can I help?"},
                             {"start_time", 0.0},
                             {"end_time", 1.5}},
                            {{"role", "User"},
                             {"content", "A table for two at eight, please."},
                             {"start_time", 2.0},
                             {"end_time", 4.0}},
                            {{"role", "AI Assistant"},
                             {"content", "Done, your table is booked."},
                             {"start_time", 4.5},
                             {"end_time", 6.0}}}}},
                         201);
  const int64_t call_id = call["id"].get<int64_t>();
  const json final_call = client_->WaitForAnalysis("conformance-1");
  EXPECT_EQ(final_call["analysis_status"], "completed") << final_call.dump();
  const json read =
      Get("/api/public/v1/calls/{call_identifier_or_id}", "/api/public/v1/calls/conformance-1");
  EXPECT_FALSE(read["standard_metrics"].empty());
  EXPECT_FALSE(read["metric_results"].empty());
  Get("/api/public/v1/calls/{call_identifier_or_id}",
      absl::StrCat("/api/public/v1/calls/", call_id));
  Get("/api/public/v1/calls",
      "/api/public/v1/calls?analysis_status=completed&observation_type=text");
  const json call_patch = {
      {"label", "booked"}, {"tag", nullptr}, {"metadata", {{"crm_id", nullptr}}}};
  Send("PATCH", "/api/public/v1/calls/{call_identifier_or_id}",
       "/api/public/v1/calls/conformance-1", &call_patch, 200);
  Post("/api/v1/metrics/test_code", "/api/v1/metrics/test_code",
       {{"code", "metric['result'] = True"}, {"call_observation_id", call_id}}, 200);
  // The waveform: of a voice call once its audio pass has run; a text call has none (404).
  {
    TestHttpServer files;
    files.Serve("/tone.wav", testing::TestWav(8000, 1.0, {testing::ToneBetween(0.2, 0.8, 0.5)}),
                "audio/wav");
    Post("/api/public/v1/calls", "/api/public/v1/calls",
         {{"call_identifier", "conformance-voice"},
          {"agent_id", agent_id},
          {"recording_url", files.url("/tone.wav")}},
         201);
    for (int i = 0; i < 2400; ++i) {
      if (client_->Get("/api/public/v1/calls/conformance-voice/waveform").status != 404) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    const json waveform = Get("/api/public/v1/calls/{call_identifier_or_id}/waveform",
                              "/api/public/v1/calls/conformance-voice/waveform");
    EXPECT_EQ(waveform["channels"], 1);
    EXPECT_EQ(waveform["buckets"], 50);
    Get("/api/public/v1/calls/{call_identifier_or_id}/waveform",
        "/api/public/v1/calls/conformance-1/waveform", 404);
  }

  // Scenarios and runs.
  const json scenario = Post("/api/v1/scenarios", "/api/v1/scenarios",
                             {{"agent_id", agent_id},
                              {"name", "Book a table for two"},
                              {"goal", "Book a table for two at 8 pm tonight"},
                              {"caller_script", {"A table for two at eight, please."}},
                              {"max_turns", 4}},
                             201);
  const int64_t scenario_id = scenario["id"].get<int64_t>();
  const std::string scenario_path = absl::StrCat("/api/v1/scenarios/", scenario_id);
  Get("/api/v1/scenarios/{id}", scenario_path);
  const json scenario_patch = {{"persona", "A regular who is in a hurry"}};
  Send("PATCH", "/api/v1/scenarios/{id}", scenario_path, &scenario_patch, 200);
  Get("/api/v1/scenarios", absl::StrCat("/api/v1/scenarios?agent_id=", agent_id));
  const json run = Post("/api/v1/scenarios/{id}/run", absl::StrCat(scenario_path, "/run"),
                        {{"channel", "text"}}, 202);
  const json done = WaitRun(run["id"].get<int64_t>());
  EXPECT_EQ(done["status"], "completed") << done.dump();
  // A channel this installation cannot serve: the run ends failed with a reason.
  const json phone_run = Post("/api/v1/scenarios/{id}/run", absl::StrCat(scenario_path, "/run"),
                              {{"channel", "phone"}}, 202);
  WaitRun(phone_run["id"].get<int64_t>());
  Get("/api/v1/runs", absl::StrCat("/api/v1/runs?scenario_id=", scenario_id));
  const json batch = Post("/api/v1/batch_runs", "/api/v1/batch_runs",
                          {{"agent_id", agent_id},
                           {"scenario_ids", {scenario_id}},
                           {"channel", "text"},
                           {"concurrency", 1}},
                          202);
  Get("/api/v1/batch_runs/{id}", absl::StrCat("/api/v1/batch_runs/", batch["id"].get<int64_t>()));
  // Stats, with the completed run and its call in them.
  const json scenario_stats =
      Get("/api/v1/scenarios/{scenario_id}/stats", absl::StrCat(scenario_path, "/stats"));
  EXPECT_EQ(scenario_stats["total"]["runs"]["passed"].get<int64_t>() +
                scenario_stats["total"]["runs"]["failed"].get<int64_t>(),
            1);
  Get("/api/v1/agents/{agent_id}/stats", absl::StrCat(agent_path, "/stats?bucket=week"));
  // A repeated batch compared with the first (whether or not their runs are done yet).
  const json repeated = Post("/api/v1/batch_runs", "/api/v1/batch_runs",
                             {{"agent_id", agent_id},
                              {"scenario_ids", {scenario_id}},
                              {"channel", "text"},
                              {"concurrency", 1},
                              {"repeat", 2},
                              {"baseline_batch_run_id", batch["id"]}},
                             202);
  Get("/api/v1/batch_runs/{id}/comparison",
      absl::StrCat("/api/v1/batch_runs/", repeated["id"].get<int64_t>(), "/comparison"));

  // Integration settings: written, merged, read, listed, deleted.
  const json twilio = {{"account_sid", "AC0123456789abcdef0123456789abcdef"},
                       {"auth_token", "token"},
                       {"caller_numbers", {"+14155552671"}}};
  Send("PUT", "/api/v1/integrations/{provider}", "/api/v1/integrations/twilio", &twilio, 200);
  const json twilio_patch = {{"caller_numbers", nullptr}};
  Send("PATCH", "/api/v1/integrations/{provider}", "/api/v1/integrations/twilio", &twilio_patch,
       200);
  Get("/api/v1/integrations/{provider}", "/api/v1/integrations/twilio");
  Get("/api/v1/integrations", "/api/v1/integrations");
  Send("DELETE", "/api/v1/integrations/{provider}", "/api/v1/integrations/twilio", nullptr, 204);

  // A replay of the call, which has caller lines.
  Post("/api/v1/calls/{id}/scenario", absl::StrCat("/api/v1/calls/", call_id, "/scenario"),
       json::object(), 201);

  // Alert rules: made (with the secret), read, listed, their delivery log, deleted.
  const json rule = Post("/api/v1/alert_rules", "/api/v1/alert_rules",
                         {{"name", "Slow answers"},
                          {"agent_id", agent_id},
                          {"figure", "latency.p95_ms"},
                          {"op", ">"},
                          {"threshold", 1500},
                          {"window", "1h"},
                          {"webhook_url", "http://127.0.0.1:9/hook"},
                          {"format", "slack"}},
                         201);
  EXPECT_TRUE(rule["secret"].is_string());
  const std::string rule_path = absl::StrCat("/api/v1/alert_rules/", rule["id"].get<int64_t>());
  Get("/api/v1/alert_rules/{id}", rule_path);
  Get("/api/v1/alert_rules", "/api/v1/alert_rules?per_page=10");
  Get("/api/v1/alert_rules/{id}/deliveries", rule_path + "/deliveries");
  Send("DELETE", "/api/v1/alert_rules/{id}", rule_path, nullptr, 204);

  // Deletes answer 204 without a body.
  Send("DELETE", "/api/public/v1/calls/{call_identifier_or_id}",
       "/api/public/v1/calls/conformance-1", nullptr, 204);
  Send("DELETE", "/api/v1/metrics/{id}", metric_path, nullptr, 204);
  const json throwaway =
      Post("/api/v1/scenarios", "/api/v1/scenarios",
           {{"agent_id", agent_id}, {"name", "Throwaway"}, {"goal", "None"}}, 201);
  Send("DELETE", "/api/v1/scenarios/{id}",
       absl::StrCat("/api/v1/scenarios/", throwaway["id"].get<int64_t>()), nullptr, 204);
  const json other_agent = Post("/api/v1/agents", "/api/v1/agents",
                                {{"name", "Throwaway"},
                                 {"phone_number", "+14155550111"},
                                 {"language_id", languages["data"][0]["id"]},
                                 {"instructions", "None."}},
                                201);
  Send("DELETE", "/api/v1/agents/{id}",
       absl::StrCat("/api/v1/agents/", other_agent["id"].get<int64_t>()), nullptr, 204);

  // Every operation of the document was exercised.
  for (const auto& [path, item] : doc_["paths"].items()) {
    for (const auto& [method, op] : item.items()) {
      EXPECT_TRUE(covered_.count(absl::StrCat(method, " ", path)))
          << "not exercised: " << method << " " << path;
    }
  }
}

TEST_F(OpenApiConformanceTest, ErrorsAnswerWithTheErrorSchema) {
  HttpClient anonymous(server_->http_base_url());
  Send("GET", "/api/v1/agents", "/api/v1/agents", nullptr, 401, &anonymous);
  Get("/api/v1/agents/{id}", "/api/v1/agents/999999", 404);
  Get("/api/public/v1/calls/{call_identifier_or_id}", "/api/public/v1/calls/missing", 404);
  Get("/api/public/v1/calls", "/api/public/v1/calls?analysis_status=bogus", 422);
  Get("/api/v1/agents", "/api/v1/agents?per_page=0", 422);
  Get("/api/v1/agents", "/api/v1/agents?client_id=999", 403);
  // Validation: details name the fields.
  const json invalid = Post("/api/public/v1/calls", "/api/public/v1/calls",
                            {{"transcript", {{{"role", "Narrator"}}}}}, 422);
  EXPECT_FALSE(invalid["error"]["details"].empty());
  Post("/api/v1/agents", "/api/v1/agents", {{"phone_number", "not a number"}}, 422);
  Post("/api/v1/metrics", "/api/v1/metrics", {{"name", "No type"}}, 422);
  Post("/api/v1/batch_runs", "/api/v1/batch_runs", {{"scenario_ids", json::array()}}, 422);
  // Malformed JSON.
  const std::string broken = "{\"call_identifier\": ";
  HttpResponse r = client_->Send("POST", "/api/public/v1/calls", &broken);
  EXPECT_EQ(r.status, 400);
  CheckAnswer("POST", "/api/public/v1/calls", r, "POST malformed");
}

}  // namespace
}  // namespace calleval

// LLM as judge and AI-generated metrics against the real server (all roles in one process,
// SQLite in a temporary data dir) with a local OpenAI-compatible provider speaking the real
// wire protocol (tests/support/fake_openai_server.h). The provider's answers are scripted per
// question; everything between the HTTP ingest and the provider request is the service's own.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "cmd/calleval/server.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::HttpClient;
using testing::HttpResponse;

class LlmMetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    llm_ = new FakeOpenAiServer();
    dir_ = new std::string(testing::MakeTempDir("llm_metrics"));
    ServerConfig config = testing::TestServerConfig(*dir_);
    config.workers = 2;
    config.llm_base_url = llm_->base_url();
    config.llm_api_key = llm_->api_key();
    config.llm_model = "gpt-test";
    // One question per request, so the fake provider's answers can be scripted per metric;
    // BatchedJudging below runs with the default batching.
    config.llm_batch_size = 1;
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

  int64_t CreateAgent(const std::string& name) {
    HttpResponse r = client_->Post(
        "/api/v1/agents", json{{"name", name},
                               {"phone_number", "+14155550123"},
                               {"language_id", 1},
                               {"instructions", "You book dental appointments for Smile Clinic."},
                               {"opening_message", {{"text", "Smile Clinic, how can I help?"}}}});
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json().value("id", int64_t{0});
  }

  int64_t CreateMetric(const json& body) {
    HttpResponse r = client_->Post("/api/v1/metrics", body);
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json().value("id", int64_t{0});
  }

  json Ingest(const std::string& id, int64_t agent) {
    HttpResponse r = client_->Post(
        "/api/public/v1/calls",
        json{{"call_identifier", id},
             {"agent_id", agent},
             {"transcript",
              {{{"role", "AI Assistant"}, {"content", "Smile Clinic, how can I help?"}},
               {{"role", "User"}, {"content", "I need a cleaning next Tuesday."}},
               {{"role", "Function Call"},
                {"data", {{"name", "book_slot"}, {"arguments", "{\"day\":\"tuesday\"}"}}}},
               {{"role", "Function Call Result"}, {"data", {{"result", "booked 10:00"}}}},
               {{"role", "AI Assistant"}, {"content", "You are booked for 10 am Tuesday."}}}}});
    EXPECT_EQ(r.status, 201) << r.body;
    return client_->WaitForAnalysis(id);
  }

  static const json* Result(const json& call, int64_t metric_id) {
    for (const json& m : call["metric_results"]) {
      if (m["metric_id"] == metric_id) return &m;
    }
    return nullptr;
  }
  static const json* Standard(const json& call, const std::string& key) {
    for (const json& m : call["standard_metrics"]) {
      if (m["standard_metric_key"] == key) return &m;
    }
    return nullptr;
  }

  static FakeOpenAiServer* llm_;
  static std::string* dir_;
  static Server* server_;
  static std::string* key_;
  std::unique_ptr<HttpClient> client_;
};

FakeOpenAiServer* LlmMetricsTest::llm_ = nullptr;
std::string* LlmMetricsTest::dir_ = nullptr;
Server* LlmMetricsTest::server_ = nullptr;
std::string* LlmMetricsTest::key_ = nullptr;

TEST_F(LlmMetricsTest, EachResultTypeScoredEndToEnd) {
  const int64_t agent = CreateAgent("judged by llm");
  auto rule = [](const std::string& condition, const std::string& expected,
                 const std::string& outcome) {
    return json{{"condition", condition},
                {"set_metrics_name", outcome},
                {"as_metrics_expected_value", expected},
                {"outcome_classification", outcome}};
  };
  const int64_t polite = CreateMetric(
      {{"name", "Polite"},
       {"metrics_type", "custom_evaluation"},
       {"llm_instructions", "Q-POLITE: was the agent polite?"},
       {"agent_ids", {agent}},
       {"structured_output", {rule("equals", "true", "meets_expectations")}}});
  const int64_t clarity = CreateMetric({{"name", "Clarity"},
                                        {"metrics_type", "custom_evaluation"},
                                        {"result_type", "rating"},
                                        {"llm_instructions", "Q-CLARITY: rate the clarity."},
                                        {"agent_ids", {agent}},
                                        {"structured_output",
                                         {rule("at_least", "4", "exceeds_expectations"),
                                          rule("at_least", "1", "meets_expectations")}}});
  const int64_t topic = CreateMetric({{"name", "Topic"},
                                      {"metrics_type", "custom_evaluation"},
                                      {"result_type", "enum"},
                                      {"enum_values", {"Booking", "Billing", "Other"}},
                                      {"llm_instructions", "Q-TOPIC: what was the call about?"},
                                      {"agent_ids", {agent}}});
  const int64_t questions =
      CreateMetric({{"name", "Questions asked"},
                    {"metrics_type", "custom_evaluation"},
                    {"result_type", "numeric"},
                    {"llm_instructions", "Q-COUNT: how many questions did the caller ask?"},
                    {"agent_ids", {agent}}});
  // Sampled three times; the judge says true, true, false.
  const int64_t sampled = CreateMetric({{"name", "Confirms the booking"},
                                        {"metrics_type", "custom_evaluation"},
                                        {"llm_instructions", "Q-SAMPLED: did the agent confirm?"},
                                        {"judge_samples", 3},
                                        {"agent_ids", {agent}}});
  // A malformed answer, then a good one after the judge is told what was wrong.
  const int64_t retried = CreateMetric({{"name", "Retried"},
                                        {"metrics_type", "custom_evaluation"},
                                        {"llm_instructions", "Q-RETRY: anything?"},
                                        {"agent_ids", {agent}}});
  // Never usable: a rating of 9, twice.
  const int64_t unusable = CreateMetric({{"name", "Unusable"},
                                         {"metrics_type", "custom_evaluation"},
                                         {"result_type", "rating"},
                                         {"llm_instructions", "Q-BAD: rate it."},
                                         {"agent_ids", {agent}}});
  // Triggered by the LLM: the trigger says no, so the metric is not applicable.
  const int64_t triggered =
      CreateMetric({{"name", "Refund handling"},
                    {"metrics_type", "custom_evaluation"},
                    {"llm_instructions", "Q-REFUND: was the refund handled?"},
                    {"evaluation_trigger", {{"type", "llm"}, {"prompt", "T-REFUND asked"}}},
                    {"agent_ids", {agent}}});
  // A code metric reads the LLM results: they are judged first.
  const int64_t reads = CreateMetric(
      {{"name", "Reads LLM results"},
       {"metrics_type", "code_as_judge"},
       {"result_type", "numeric"},
       {"code_snippet",
        "metric['result'] = len([r for r in context['metric_results'].values() "
        "if r['value'] is not None])\n"
        "assert context['metric_results']['Polite'] == "
        "{'value': True, 'explanation': 'said please'}"},
       {"agent_ids", {agent}}});

  llm_->AnswerWhen("Q-POLITE", R"({"result": true, "explanation": "said please"})");
  llm_->AnswerWhen("Q-CLARITY", "```json\n{\"result\": 4, \"explanation\": \"clear\"}\n```");
  llm_->AnswerWhen("Q-TOPIC", R"({"result": "booking", "explanation": "a cleaning"})");
  llm_->AnswerWhen("Q-COUNT", R"({"result": "1", "explanation": "one request"})");
  llm_->AnswerInTurn("Q-SAMPLED", {R"({"result": true, "explanation": "yes"})",
                                   R"({"result": true, "explanation": "yes"})",
                                   R"({"result": false, "explanation": "no"})"});
  llm_->AnswerInTurn("Q-RETRY", {"I think yes", R"({"result": "yes", "explanation": "ok"})"});
  llm_->AnswerWhen("Q-BAD", R"({"result": 9, "explanation": "very"})");
  llm_->AnswerWhen("T-REFUND", R"({"result": false, "explanation": "no refund"})");
  llm_->AnswerWhen("overall sentiment", R"({"result": "Positive", "explanation": "thanks"})");
  llm_->AnswerWhen("accomplish", R"({"result": true, "explanation": "booked"})");

  const int64_t balance_before =
      client_->Get("/api/v1/workspaces/current").json()["credit_balance"];
  json call = Ingest("llm-1", agent);
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();

  const json* r = Result(call, polite);
  ASSERT_NE(r, nullptr) << call.dump();
  EXPECT_EQ(r->at("status"), "completed") << r->dump();
  EXPECT_EQ(r->at("value"), true);
  EXPECT_EQ(r->at("explanation"), "said please");
  EXPECT_EQ(r->at("structured_output")["outcome_classification"], "meets_expectations");
  EXPECT_EQ(r->at("agreement"), nullptr);
  EXPECT_EQ(r->at("credits_used"), 2);  // docs/api.md §9: an LLM metric costs 2

  r = Result(call, clarity);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("value"), 4) << r->dump();
  EXPECT_EQ(r->at("structured_output")["outcome_classification"], "exceeds_expectations");

  r = Result(call, topic);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("value"), "Booking") << r->dump();  // the defined spelling

  r = Result(call, questions);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("value"), 1) << r->dump();

  r = Result(call, sampled);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("value"), true) << r->dump();
  EXPECT_NEAR(r->at("agreement").get<double>(), 2.0 / 3.0, 1e-9);

  r = Result(call, retried);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "completed") << r->dump();
  EXPECT_EQ(r->at("value"), true);

  r = Result(call, unusable);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "failed") << r->dump();
  EXPECT_THAT(r->at("error").get<std::string>(), HasSubstr("unusable"));
  EXPECT_EQ(r->at("credits_used"), 0);

  r = Result(call, triggered);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "not_applicable") << r->dump();
  EXPECT_EQ(r->at("credits_used"), 0);

  r = Result(call, reads);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->at("status"), "completed") << r->dump();
  EXPECT_EQ(r->at("value"), 6);  // polite, clarity, topic, questions, sampled, retried

  const json* sentiment = Standard(call, "user_sentiment");
  ASSERT_NE(sentiment, nullptr) << call.dump();
  EXPECT_EQ(sentiment->at("status"), "completed") << sentiment->dump();
  EXPECT_EQ(sentiment->at("result")["value"], "positive");
  const json* done = Standard(call, "task_completion");
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(done->at("status"), "completed") << done->dump();
  EXPECT_EQ(done->at("result")["value"], true);
  EXPECT_EQ(done->at("score"), 1.0);

  int64_t total = 0;
  for (const json& m : call["metric_results"]) total += m["credits_used"].get<int64_t>();
  for (const json& m : call["standard_metrics"]) total += m["credits_used"].get<int64_t>();
  EXPECT_EQ(call["credits_used"], total);
  EXPECT_EQ(testing::BalanceOnceSettled(*client_, balance_before - total), balance_before - total);

  // What the provider was asked: the transcript with roles and the tool call, JSON mode, the
  // metric's instructions and what the result must be.
  bool saw_polite = false;
  for (const json& request : llm_->chat_requests()) {
    EXPECT_EQ(request["model"], "gpt-test");
    EXPECT_EQ(request["response_format"]["type"], "json_object");
    std::string text;
    for (const json& m : request["messages"]) text += m["content"].get<std::string>() + "\n";
    if (text.find("Q-POLITE") == std::string::npos) continue;
    saw_polite = true;
    EXPECT_THAT(text, HasSubstr("I need a cleaning next Tuesday."));
    EXPECT_THAT(text, HasSubstr("book_slot"));
    EXPECT_THAT(text, HasSubstr("booked 10:00"));
    EXPECT_THAT(text, HasSubstr("true or false"));
  }
  EXPECT_TRUE(saw_polite);
}

TEST_F(LlmMetricsTest, ProviderDownFailsTheMetricNotTheCall) {
  const int64_t agent = CreateAgent("provider down");
  const int64_t metric = CreateMetric({{"name", "Down"},
                                       {"metrics_type", "custom_evaluation"},
                                       {"llm_instructions", "Q-DOWN: anything?"},
                                       {"agent_ids", {agent}}});
  FakeOpenAiServer::Reply refused;
  refused.status = 400;
  refused.raw_body = OpenAiErrorBody("model not found", "invalid_request_error", "");
  llm_->ReplyWhen("Q-DOWN", refused);
  json call = Ingest("llm-down", agent);
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  const json* result = Result(call, metric);
  ASSERT_NE(result, nullptr) << call.dump();
  EXPECT_EQ(result->at("status"), "failed");
  EXPECT_THAT(result->at("error").get<std::string>(), HasSubstr("model not found"));
  EXPECT_EQ(result->at("credits_used"), 0);
}

TEST_F(LlmMetricsTest, GenerateProposesValidNewDefinitions) {
  const int64_t agent = CreateAgent("generated");
  CreateMetric({{"name", "Already here"},
                {"metrics_type", "custom_evaluation"},
                {"llm_instructions", "exists"}});
  llm_->AnswerWhen("G-CONTEXT", json{{"metrics",
                                      {{{"name", "Confirms appointment time"},
                                        {"description", "The agent repeats the booked time."},
                                        {"result_type", "boolean"},
                                        {"llm_instructions", "Did the agent confirm the time?"}},
                                       {{"name", "already here"},
                                        {"result_type", "boolean"},
                                        {"llm_instructions", "a duplicate name"}},
                                       {{"name", "Broken enum"},
                                        {"result_type", "enum"},
                                        {"llm_instructions", "no values"}},
                                       {{"name", "Booking tone"},
                                        {"result_type", "rating"},
                                        {"llm_instructions", "Rate the tone from 1 to 5."}},
                                       {{"name", "Call reason"},
                                        {"result_type", "enum"},
                                        {"enum_values", {"new", "change", "cancel"}},
                                        {"llm_instructions", "Why did the caller call?"}}}}}
                                    .dump());
  HttpResponse r = client_->Post("/api/v1/metrics/generate",
                                 json{{"agent_id", agent},
                                      {"number_of_metrics", 3},
                                      {"additional_context", "G-CONTEXT focus on bookings"}});
  ASSERT_EQ(r.status, 200) << r.body;
  json metrics = r.json();
  ASSERT_TRUE(metrics.is_array()) << r.body;
  ASSERT_EQ(metrics.size(), 3u) << r.body;
  EXPECT_EQ(metrics[0]["name"], "Confirms appointment time");
  EXPECT_EQ(metrics[1]["name"], "Booking tone");
  EXPECT_EQ(metrics[2]["name"], "Call reason");
  for (const json& m : metrics) {
    EXPECT_EQ(m["metrics_type"], "custom_evaluation");
    EXPECT_EQ(m["agent_ids"], json({agent}));
    // Each proposal is a valid create body.
    json body = m;
    body["name"] = m["name"].get<std::string>() + " (created)";
    HttpResponse created = client_->Post("/api/v1/metrics", body);
    EXPECT_EQ(created.status, 201) << created.body;
  }
  // The model was told about the agent and what already exists.
  bool saw = false;
  for (const json& request : llm_->chat_requests()) {
    std::string text;
    for (const json& m : request["messages"]) text += m["content"].get<std::string>() + "\n";
    if (text.find("G-CONTEXT") == std::string::npos) continue;
    saw = true;
    EXPECT_THAT(text, HasSubstr("You book dental appointments for Smile Clinic."));
    EXPECT_THAT(text, HasSubstr("Smile Clinic, how can I help?"));
    EXPECT_THAT(text, HasSubstr("Already here"));
  }
  EXPECT_TRUE(saw);

  HttpResponse bad = client_->Post("/api/v1/metrics/generate",
                                   json{{"agent_id", agent}, {"number_of_metrics", 11}});
  EXPECT_EQ(bad.status, 422) << bad.body;
  HttpResponse missing = client_->Post("/api/v1/metrics/generate", json{{"agent_id", 999999}});
  EXPECT_EQ(missing.status, 422) << missing.body;
  EXPECT_EQ(missing.json()["error"]["code"], "agent_not_found");
}

TEST(LlmBatchTest, OneRequestForTheCallsQuestionsAndSingleQuestionsForWhatItMissed) {
  FakeOpenAiServer llm;
  const std::string dir = testing::MakeTempDir("llm_batch");
  ServerConfig config = testing::TestServerConfig(dir);
  config.llm_base_url = llm.base_url();
  config.llm_api_key = llm.api_key();
  config.llm_model = "gpt-test";
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  HttpResponse agent = client.Post("/api/v1/agents", json{{"name", "batched"},
                                                          {"phone_number", "+14155550123"},
                                                          {"language_id", 1},
                                                          {"instructions", "Help."}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  const int64_t agent_id = agent.json()["id"];
  auto metric = [&](const std::string& name, const std::string& type,
                    const std::string& question) {
    HttpResponse r = client.Post("/api/v1/metrics", json{{"name", name},
                                                         {"metrics_type", "custom_evaluation"},
                                                         {"result_type", type},
                                                         {"llm_instructions", question},
                                                         {"agent_ids", {agent_id}}});
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json().value("id", int64_t{0});
  };
  const int64_t b1 = metric("B1", "boolean", "Q-B1 greeted?");
  const int64_t b2 = metric("B2", "rating", "Q-B2 how clear?");
  const int64_t b3 = metric("B3", "numeric", "Q-B3 how many?");
  // The batch answer covers m1 and m2 and gives m3 a wrong type: m3 is asked again alone.
  llm.AnswerWhen("Q-B1", R"({"results": {"m1": {"result": true, "explanation": "hi"},
                                        "m2": {"result": 5, "explanation": "clear"},
                                        "m3": {"result": "many", "explanation": "?"}}})");
  llm.AnswerWhen("Q-B3", R"({"result": 3, "explanation": "three"})");
  llm.AnswerWhen("overall sentiment", R"({"results": {"m1": {"result": "neutral",
                                        "explanation": "calm"}, "m2": {"result": false,
                                        "explanation": "unresolved"}}})");
  HttpResponse ingest = client.Post(
      "/api/public/v1/calls",
      json{{"call_identifier", "batched-1"},
           {"agent_id", agent_id},
           {"transcript",
            {{{"role", "AI Assistant"}, {"content", "Hello"}},
             {{"role", "User"}, {"content", "Hi, can I change my address?"}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = client.WaitForAnalysis("batched-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  std::map<int64_t, json> values;
  for (const json& r : call["metric_results"]) values[r["metric_id"]] = r["value"];
  EXPECT_EQ(values[b1], true) << call.dump();
  EXPECT_EQ(values[b2], 5);
  EXPECT_EQ(values[b3], 3);
  std::map<std::string, json> standard;
  for (const json& m : call["standard_metrics"]) standard[m["standard_metric_key"]] = m["result"];
  EXPECT_EQ(standard["user_sentiment"]["value"], "neutral") << call.dump();
  EXPECT_EQ(standard["task_completion"]["value"], false);
  // One request for the two standard questions, one for the batch, one for B3 alone.
  EXPECT_EQ(llm.chat_calls(), 3);
  server->reset();
  std::filesystem::remove_all(dir);
}

TEST(LlmUnavailableTest, GenerateIs503AndLlmMetricsFailWithoutCharge) {
  const std::string dir = testing::MakeTempDir("llm_none");
  ServerConfig config = testing::TestServerConfig(dir);
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  HttpResponse agent = client.Post("/api/v1/agents", json{{"name", "no llm"},
                                                          {"phone_number", "+14155550123"},
                                                          {"language_id", 1},
                                                          {"instructions", "Greet."}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  HttpResponse generate = client.Post("/api/v1/metrics/generate",
                                      json{{"agent_id", agent.json()["id"]}});
  EXPECT_EQ(generate.status, 503) << generate.body;
  EXPECT_EQ(generate.json()["error"]["code"], "llm_unavailable");

  HttpResponse metric = client.Post("/api/v1/metrics", json{{"name", "Judged"},
                                                            {"metrics_type", "custom_evaluation"},
                                                            {"llm_instructions", "Polite?"},
                                                            {"agent_ids", {agent.json()["id"]}}});
  ASSERT_EQ(metric.status, 201) << metric.body;
  const int64_t before = client.Get("/api/v1/workspaces/current").json()["credit_balance"];
  HttpResponse ingest =
      client.Post("/api/public/v1/calls",
                  json{{"call_identifier", "no-llm-1"},
                       {"agent_id", agent.json()["id"]},
                       {"transcript", {{{"role", "AI Assistant"}, {"content", "Hello"}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = client.WaitForAnalysis("no-llm-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  ASSERT_EQ(call["metric_results"].size(), 1u);
  EXPECT_EQ(call["metric_results"][0]["status"], "failed");
  EXPECT_EQ(call["metric_results"][0]["error"], "llm_unavailable");
  for (const json& m : call["standard_metrics"]) {
    EXPECT_EQ(m["status"], "failed") << m.dump();
    EXPECT_EQ(m["error"], "llm_unavailable");
  }
  EXPECT_EQ(call["credits_used"], 0);
  EXPECT_EQ(testing::BalanceOnceSettled(client, before), before);
  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calleval

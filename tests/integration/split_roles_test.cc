// Roles in separate processes (here: two Server instances on one data dir): the edge reaches
// accounts, agents and calls over gRPC, exactly as pods do.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "common/database.h"
#include "common/schema.h"
#include "common/status_macros.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"
#include "tests/support/test_http_server.h"
#include "tests/support/test_postgres.h"

namespace calleval {
namespace {

using ::nlohmann::json;

// A port that was free a moment ago (the edge must know it before it starts, because the
// backend signs recording links with the edge's address).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(SplitRolesTest, EdgeReachesRemoteRolesOverGrpc) {
  const std::string dir = testing::MakeTempDir("split");
  const int edge_port = FreePort();
  const std::string edge_url = absl::StrCat("http://127.0.0.1:", edge_port);

  ServerConfig backend_config;
  backend_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  backend_config.data_dir = dir;
  backend_config.grpc_addr = "127.0.0.1:0";
  backend_config.roles = {"accounts", "agents", "calls"};
  backend_config.public_base_url = edge_url;
  backend_config.allow_private_hosts = {"127.0.0.1"};
  auto backend = Server::Start(backend_config);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->http_port(), 0);
  const std::string grpc_addr = absl::StrCat("127.0.0.1:", (*backend)->grpc_port());

  ServerConfig edge_config;
  edge_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  edge_config.data_dir = dir;
  edge_config.http_addr = absl::StrCat("127.0.0.1:", edge_port);
  edge_config.roles = {"edge"};
  edge_config.accounts_addr = edge_config.agents_addr = edge_config.calls_addr = grpc_addr;
  edge_config.access_log = false;
  auto edge = Server::Start(edge_config);
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ((*edge)->grpc_port(), 0);

  testing::HttpClient client(edge_url);
  client.set_api_key((*backend)->bootstrap()->key.api_key);
  EXPECT_EQ(client.Get("/api/v1/workspaces/current").json()["name"], "default");
  auto agent = client.Post("/api/v1/agents", json{{"name", "split"},
                                                  {"phone_number", "+14155550123"},
                                                  {"language_id", 1},
                                                  {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201) << agent.body;

  TestHttpServer files;
  files.Serve("/r.wav", "RIFF-split", "audio/wav");
  auto ingest = client.Post("/api/public/v1/calls", json{{"call_identifier", "split-1"},
                                                         {"agent_id", agent.json()["id"]},
                                                         {"recording_url", files.url("/r.wav")}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  // Errors keep their code and details across the gRPC hop.
  auto dup = client.Post("/api/public/v1/calls", json{{"call_identifier", "split-1"},
                                                      {"agent_id", agent.json()["id"]},
                                                      {"recording_url", files.url("/r.wav")}});
  EXPECT_EQ(dup.status, 409);
  EXPECT_EQ(dup.json()["error"]["details"][0]["field"], "call_identifier");

  json call;
  for (int i = 0; i < 200; ++i) {
    call = client.Get("/api/public/v1/calls/split-1").json();
    if (!call["presigned_recording_url"].is_null()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(call["presigned_recording_url"].is_string()) << call.dump();
  // The link names the edge, and the edge serves it from the shared data dir.
  const std::string link = call["presigned_recording_url"];
  EXPECT_EQ(link.rfind(edge_url + "/recordings/", 0), 0u) << link;
  testing::HttpClient anonymous(edge_url);
  EXPECT_EQ(anonymous.Get(link).body, "RIFF-split");

  edge->reset();
  backend->reset();
  std::filesystem::remove_all(dir);
}

// Metrics over gRPC from the edge, and a scoring process that leases over gRPC: a custom code
// metric's definition travels in the job and its result comes back in the report.
TEST(SplitRolesTest, ScoringProcessJudgesCustomMetricsOverGrpc) {
  const std::string dir = testing::MakeTempDir("split_scoring");
  // Every process is handed the installation's internal credential, as pods mount one Secret;
  // the scoring process leases with it.
  const std::string secrets = testing::MakeTempDir("split_secrets");
  const std::string credential_file = secrets + "/internal-credential";
  std::ofstream(credential_file) << "split-roles-internal-credential\n";
  ServerConfig backend_config;
  backend_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  backend_config.internal_credential_file = credential_file;
  backend_config.data_dir = dir;
  backend_config.grpc_addr = "127.0.0.1:0";
  backend_config.roles = {"accounts", "agents", "calls", "metrics"};
  backend_config.allow_private_hosts = {"127.0.0.1"};
  auto backend = Server::Start(backend_config);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::string grpc_addr = absl::StrCat("127.0.0.1:", (*backend)->grpc_port());

  ServerConfig scoring_config;
  scoring_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  scoring_config.internal_credential_file = credential_file;
  scoring_config.data_dir = dir;
  scoring_config.grpc_addr = "127.0.0.1:0";
  scoring_config.roles = {"scoring"};
  scoring_config.calls_addr = grpc_addr;
  scoring_config.workers = 1;
  auto scoring = Server::Start(scoring_config);
  ASSERT_TRUE(scoring.ok()) << scoring.status();

  ServerConfig edge_config;
  edge_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  edge_config.internal_credential_file = credential_file;
  edge_config.data_dir = dir;
  edge_config.http_addr = "127.0.0.1:0";
  edge_config.roles = {"edge"};
  edge_config.accounts_addr = edge_config.agents_addr = edge_config.calls_addr =
      edge_config.metrics_addr = grpc_addr;
  edge_config.access_log = false;
  auto edge = Server::Start(edge_config);
  ASSERT_TRUE(edge.ok()) << edge.status();

  testing::HttpClient client((*edge)->http_base_url());
  client.set_api_key((*backend)->bootstrap()->key.api_key);
  auto agent = client.Post("/api/v1/agents", json{{"name", "split scored"},
                                                  {"phone_number", "+14155550123"},
                                                  {"language_id", 1},
                                                  {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  auto metric =
      client.Post("/api/v1/metrics", json{{"name", "Caller spoke"},
                                          {"metrics_type", "code_as_judge"},
                                          {"code_snippet",
                                           "metric['result'] = any(t['role'] == 'User' for t in "
                                           "context['transcript'])\nmetric['explanation'] = "
                                           "context['agent']['name']"},
                                          {"agent_ids", {agent.json()["id"]}}});
  ASSERT_EQ(metric.status, 201) << metric.body;
  // A metric error crosses the gRPC hop with its status and details.
  auto invalid = client.Post("/api/v1/metrics", json{{"name", "no type"}});
  EXPECT_EQ(invalid.status, 422);
  EXPECT_EQ(invalid.json()["error"]["details"][0]["field"], "metrics_type");

  auto ingest = client.Post("/api/public/v1/calls",
                            json{{"call_identifier", "split-scored-1"},
                                 {"agent_id", agent.json()["id"]},
                                 {"transcript", {{{"role", "User"}, {"content", "Hello?"}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = client.WaitForAnalysis("split-scored-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  ASSERT_EQ(call["metric_results"].size(), 1u) << call.dump();
  EXPECT_EQ(call["metric_results"][0]["value"], true);
  EXPECT_EQ(call["metric_results"][0]["explanation"], "split scored");
  EXPECT_EQ(call["metric_results"][0]["credits_used"], 1);

  // A voice call without a transcript: the scoring process records the audio stage, transcribes
  // the recording and judges the code metric on the generated transcript, all over gRPC.
  const std::string wav = CALLEVAL_CORPUS_DIR "/short_stereo.wav";
  if (std::filesystem::exists(wav)) {
    TestHttpServer files;
    files.ServeFile("/short.wav", wav, "audio/wav");
    auto voice = client.Post("/api/public/v1/calls",
                             json{{"call_identifier", "split-voice-1"},
                                  {"agent_id", agent.json()["id"]},
                                  {"recording_url", files.url("/short.wav")}});
    ASSERT_EQ(voice.status, 201) << voice.body;
    call = client.WaitForAnalysis("split-voice-1");
    ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
    EXPECT_EQ(call["transcription_status"], "completed");
    EXPECT_EQ(call["transcript_source"], "generated");
    EXPECT_FALSE(call["transcript"].empty());
    ASSERT_EQ(call["metric_results"].size(), 1u) << call.dump();
    EXPECT_EQ(call["metric_results"][0]["status"], "completed") << call.dump();
    EXPECT_EQ(call["metric_results"][0]["explanation"], "split scored");
  }

  edge->reset();
  scoring->reset();
  backend->reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(secrets);
}

// Accounts in a process of its own: the calls role reserves and refunds over the Accounts
// service's internal methods (services/calls/credits.h NewGrpcCredits), and the balance the edge
// reads back is what stayed charged. Without the credential, or with the ledger unreachable, the
// call would never be leased.
TEST(SplitRolesTest, CallsReserveAndRefundThroughARemoteAccountsRole) {
  const std::string dir = testing::MakeTempDir("split_credits");
  const std::string secrets = testing::MakeTempDir("split_credits_secrets");
  const std::string credential_file = secrets + "/internal-credential";
  std::ofstream(credential_file) << "split-credits-internal-credential\n";
  ServerConfig accounts_config;
  accounts_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  accounts_config.internal_credential_file = credential_file;
  accounts_config.data_dir = dir;
  accounts_config.grpc_addr = "127.0.0.1:0";
  accounts_config.roles = {"accounts"};
  auto accounts = Server::Start(accounts_config);
  ASSERT_TRUE(accounts.ok()) << accounts.status();
  const std::string accounts_addr = absl::StrCat("127.0.0.1:", (*accounts)->grpc_port());

  ServerConfig rest_config;
  rest_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  rest_config.internal_credential_file = credential_file;
  rest_config.data_dir = dir;
  rest_config.grpc_addr = "127.0.0.1:0";
  rest_config.http_addr = "127.0.0.1:0";
  rest_config.roles = {"edge", "agents", "calls", "metrics", "scoring"};
  rest_config.accounts_addr = accounts_addr;
  rest_config.workers = 1;
  rest_config.access_log = false;
  auto rest = Server::Start(rest_config);
  ASSERT_TRUE(rest.ok()) << rest.status();

  testing::HttpClient client((*rest)->http_base_url());
  client.set_api_key((*accounts)->bootstrap()->key.api_key);
  const int64_t before = client.Get("/api/v1/workspaces/current").json()["credit_balance"];
  auto agent = client.Post("/api/v1/agents", json{{"name", "split credits"},
                                                  {"phone_number", "+14155550123"},
                                                  {"language_id", 1},
                                                  {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  // A code metric completes and stays charged; the transcript's standard metrics, without an
  // LLM provider, fail and are refunded.
  auto metric = client.Post("/api/v1/metrics", json{{"name", "Always"},
                                                    {"metrics_type", "code_as_judge"},
                                                    {"code_snippet", "metric['result'] = True"},
                                                    {"agent_ids", {agent.json()["id"]}}});
  ASSERT_EQ(metric.status, 201) << metric.body;
  auto ingest = client.Post("/api/public/v1/calls",
                            json{{"call_identifier", "split-credits-1"},
                                 {"agent_id", agent.json()["id"]},
                                 {"transcript", {{{"role", "User"}, {"content", "Hello?"}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = client.WaitForAnalysis("split-credits-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  const int64_t used = call["credits_used"];
  EXPECT_EQ(used, 1) << call.dump();
  ASSERT_FALSE(call["standard_metrics"].empty()) << call.dump();
  EXPECT_EQ(call["standard_metrics"][0]["status"], "failed") << call.dump();
  // The refunds of what did not complete follow the results' commit.
  int64_t after = 0;
  for (int i = 0; i < 100; ++i) {
    after = client.Get("/api/v1/workspaces/current").json()["credit_balance"];
    if (after == before - used) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(after, before - used) << call.dump();

  rest->reset();
  accounts->reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(secrets);
}

// Agents and metrics in separate processes, each reaching the other over the internal methods
// (docs/architecture.md, "Who owns which table"): the metrics store asks the agents process
// whether linked agents exist and for an agent's disabled metrics, the scenarios store asks the
// metrics process whether a scenario's metrics exist, and an agent's delete tells the metrics
// process, which removes the links. The edge sits with metrics and reaches agents over gRPC.
TEST(SplitRolesTest, AgentsAndMetricsAskEachOtherAcrossProcesses) {
  const std::string dir = testing::MakeTempDir("split_owners");
  const int agents_port = FreePort();
  const int metrics_port = FreePort();
  const std::string agents_addr = absl::StrCat("127.0.0.1:", agents_port);
  const std::string metrics_addr = absl::StrCat("127.0.0.1:", metrics_port);

  // Both processes share the data dir, and with it the internal credential.
  ServerConfig agents_config;
  agents_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  agents_config.data_dir = dir;
  agents_config.grpc_addr = agents_addr;
  agents_config.roles = {"agents"};
  agents_config.metrics_addr = metrics_addr;
  auto agents = Server::Start(agents_config);
  ASSERT_TRUE(agents.ok()) << agents.status();

  ServerConfig metrics_config;
  metrics_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  metrics_config.data_dir = dir;
  metrics_config.grpc_addr = metrics_addr;
  metrics_config.http_addr = "127.0.0.1:0";
  metrics_config.roles = {"edge", "accounts", "calls", "metrics"};
  metrics_config.agents_addr = agents_addr;
  metrics_config.access_log = false;
  auto metrics = Server::Start(metrics_config);
  ASSERT_TRUE(metrics.ok()) << metrics.status();

  testing::HttpClient client((*metrics)->http_base_url());
  client.set_api_key((*metrics)->bootstrap()->key.api_key);
  auto agent = client.Post("/api/v1/agents", json{{"name", "split owners"},
                                                  {"phone_number", "+14155550123"},
                                                  {"language_id", 1},
                                                  {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  const int64_t agent_id = agent.json()["id"];

  // Metrics ask the agents process (ExistingAgents).
  auto metric = client.Post("/api/v1/metrics", json{{"name", "Always"},
                                                    {"metrics_type", "code_as_judge"},
                                                    {"code_snippet", "metric['result'] = True"},
                                                    {"agent_ids", {agent_id}}});
  ASSERT_EQ(metric.status, 201) << metric.body;
  const int64_t metric_id = metric.json()["id"];
  EXPECT_EQ(metric.json()["agent_ids"], json::array({agent_id}));
  auto unknown_agent = client.Post("/api/v1/metrics", json{{"name", "Nobody's"},
                                                           {"metrics_type", "code_as_judge"},
                                                           {"code_snippet", "metric['result'] = 1"},
                                                           {"agent_ids", {agent_id + 1000}}});
  EXPECT_EQ(unknown_agent.status, 422) << unknown_agent.body;
  EXPECT_EQ(unknown_agent.json()["error"]["code"], "agent_not_found") << unknown_agent.body;
  // The toggles read and replace the agent's list in the agents process.
  auto toggled = client.Put(absl::StrCat("/api/v1/agents/", agent_id, "/llm_metrics"),
                            json{{"disabled_llm_metric_ids", {metric_id}}}.dump());
  ASSERT_EQ(toggled.status, 200) << toggled.body;
  EXPECT_EQ(client.Get(absl::StrCat("/api/v1/agents/", agent_id)).json()["disabled_metric_ids"],
            json::array({metric_id}));

  // Scenarios ask the metrics process (ExistingMetrics).
  auto scenario = client.Post("/api/v1/scenarios", json{{"agent_id", agent_id},
                                                        {"name", "Books"},
                                                        {"goal", "Book a table"},
                                                        {"metric_ids", {metric_id, 1}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  EXPECT_EQ(scenario.json()["metric_ids"], json::array({metric_id, 1}));
  auto unknown_metric = client.Post("/api/v1/scenarios", json{{"agent_id", agent_id},
                                                              {"name", "Unknown"},
                                                              {"goal", "Book a table"},
                                                              {"metric_ids", {metric_id + 1000}}});
  EXPECT_EQ(unknown_metric.status, 422) << unknown_metric.body;
  EXPECT_EQ(unknown_metric.json()["error"]["code"], "metric_not_found") << unknown_metric.body;
  auto run = client.Post(absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(),
                                      "/run"),
                         json{{"channel", "text"}});
  ASSERT_EQ(run.status, 202) << run.body;
  EXPECT_EQ(run.json()["agent_id"], agent_id);

  // The delete tells the metrics process, which removes the link rows before the answer.
  ASSERT_EQ(client.Delete(absl::StrCat("/api/v1/agents/", agent_id)).status, 204);
  auto database = db::Database::Open(dir + "/calleval.db", SchemaMigrations());
  ASSERT_TRUE(database.ok()) << database.status();
  int64_t links = -1;
  ASSERT_TRUE((*database)
                  ->Read([&](db::Connection& c) -> absl::Status {
                    ASSIGN_OR_RETURN(auto count, c.Prepare("SELECT COUNT(*) FROM metric_agents "
                                                           "WHERE agent_id = ?"));
                    count.Bind(1, agent_id);
                    ASSIGN_OR_RETURN(bool row, count.Step());
                    if (row) links = count.Int64(0);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(links, 0);
  EXPECT_EQ(client.Get(absl::StrCat("/api/v1/metrics/", metric_id)).json()["agent_ids"],
            json::array());

  database->reset();
  metrics->reset();
  agents->reset();
  std::filesystem::remove_all(dir);
}

// The runs and scoring roles in a process of their own, with a data dir (and so a database)
// of its own, reaching agents, calls and metrics in another by address: the run is leased over
// LeaseRun, its scenario and agent come over GetRunScenario and GetRunAgent, its call goes in
// over IngestRunCall with its origin, is leased and scored over the analysis queue, read back
// over GetWorkspaceCall, judged by the definitions GetMetricDefinitions answers, and the run
// reported over FinishRun. The scenario's stats count the run's call, so its origin crossed
// the hop.
TEST(SplitRolesTest, TextRunInARunsProcessApartCompletesThroughTheOtherRoles) {
  FakeOpenAiServer llm;
  llm.SetDefault(R"({"message": "Done, Friday it is. Anything else?", "end_call": false})");
  const std::string dir = testing::MakeTempDir("split_runs");
  ServerConfig backend_config;
  backend_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  backend_config.data_dir = dir;
  backend_config.grpc_addr = "127.0.0.1:0";
  backend_config.http_addr = "127.0.0.1:0";
  backend_config.roles = {"edge", "accounts", "agents", "calls", "metrics"};
  backend_config.access_log = false;
  auto backend = Server::Start(backend_config);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::string backend_addr = absl::StrCat("127.0.0.1:", (*backend)->grpc_port());

  const std::string runs_dir = testing::MakeTempDir("split_runs_apart");
  ServerConfig runs_config;
  runs_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  runs_config.data_dir = runs_dir;
  runs_config.internal_credential_file = dir + "/internal-credential";
  runs_config.grpc_addr = "127.0.0.1:0";
  runs_config.roles = {"runs", "scoring"};
  runs_config.agents_addr = runs_config.calls_addr = runs_config.metrics_addr = backend_addr;
  runs_config.workers = 1;
  runs_config.run_workers = 1;
  runs_config.llm_base_url = llm.base_url();
  runs_config.llm_api_key = llm.api_key();
  runs_config.llm_model = "gpt-test";
  auto runs_process = Server::Start(runs_config);
  ASSERT_TRUE(runs_process.ok()) << runs_process.status();

  testing::HttpClient client((*backend)->http_base_url());
  client.set_api_key((*backend)->bootstrap()->key.api_key);
  auto agent = client.Post("/api/v1/agents",
                           json{{"name", "Scheduler"},
                                {"phone_number", "+14155550123"},
                                {"language_id", 1},
                                {"instructions", "You reschedule appointments."},
                                {"opening_message", {{"text", "Smile Clinic, how can I help?"}}},
                                {"version", "split-v1"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  const int64_t agent_id = agent.json()["id"];
  // Passes when the caller names Friday: RunPassed reads its structured_output from the
  // definitions.
  auto metric = client.Post("/api/v1/metrics",
                            json{{"name", "Caller chose Friday"},
                                 {"metrics_type", "specific_text_/_phrase_check"},
                                 {"phrases", {"Friday"}},
                                 {"speaker", "User"},
                                 {"agent_ids", {agent_id}},
                                 {"structured_output",
                                  {{{"condition", "equals"},
                                    {"set_metrics_name", "friday"},
                                    {"as_metrics_expected_value", "true"},
                                    {"outcome_classification", "meets_expectations"}},
                                   {{"condition", "equals"},
                                    {"set_metrics_name", "friday"},
                                    {"as_metrics_expected_value", "false"},
                                    {"outcome_classification", "requires_attention"}}}}});
  ASSERT_EQ(metric.status, 201) << metric.body;
  const int64_t metric_id = metric.json()["id"];
  auto scenario = client.Post(
      "/api/v1/scenarios",
      json{{"agent_id", agent_id},
           {"name", "Move to Friday"},
           {"caller_script", {"I need to move my appointment.", "Friday works for me."}},
           {"metric_ids", {metric_id}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  const int64_t scenario_id = scenario.json()["id"];
  auto queued =
      client.Post(absl::StrCat("/api/v1/scenarios/", scenario_id, "/run"), json{{"channel", "text"}});
  ASSERT_EQ(queued.status, 202) << queued.body;

  json run;
  for (int i = 0; i < 1200; ++i) {
    run = client.Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
    if (run["status"] == "completed" || run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["passed"], true) << run.dump();
  EXPECT_EQ(run["end_reason"], "script_finished");
  // The version the runs process read of the agent, reported with the outcome over gRPC.
  EXPECT_EQ(run["version"], "split-v1") << run.dump();

  const json call =
      client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(call["call_identifier"], absl::StrCat("run-", run["id"].get<int64_t>()));
  EXPECT_EQ(call["version"], "split-v1") << call.dump();
  EXPECT_EQ(call["observation_type"], "text");
  EXPECT_EQ(call["analysis_status"], "completed");
  ASSERT_EQ(call["metric_results"].size(), 1u) << call.dump();
  EXPECT_EQ(call["metric_results"][0]["structured_output"]["outcome_classification"],
            "meets_expectations");
  auto stats = client.Get(absl::StrCat("/api/v1/scenarios/", scenario_id, "/stats"));
  ASSERT_EQ(stats.status, 200) << stats.body;
  EXPECT_EQ(stats.json()["total"]["calls"]["completed"], 1) << stats.body;
  EXPECT_EQ(stats.json()["total"]["runs"]["passed"], 1) << stats.body;

  runs_process->reset();
  backend->reset();
  std::filesystem::remove_all(runs_dir);
  std::filesystem::remove_all(dir);
}

// Each process on a PostgreSQL database of its own, sharing nothing with the others but the
// recordings' blob store, the signing key and the internal credential: whatever a role read of
// another's tables itself would be missing from its database, so it must ask the owner, as pods
// on separate nodes do. (SQLite cannot stand in: its tables keep their workspace references.) the calls
// role plans an ingest with the agent and the metric catalog it asks of the agents and metrics
// process, and the edge serves a presigned link from the recording's location it asks of the
// calls process.
TEST(SplitRolesTest, EachRoleOnADatabaseOfItsOwnAsksTheOwners) {
  const std::string owners_dir = testing::MakeTempDir("own_owners");
  const std::string calls_dir = testing::MakeTempDir("own_calls");
  const std::string edge_dir = testing::MakeTempDir("own_edge");
  const std::string shared = testing::MakeTempDir("own_shared");
  const std::string credential_file = shared + "/internal-credential";
  std::ofstream(credential_file) << "own-databases-internal-credential\n";
  const std::string signing_key_file = shared + "/signing-key";
  std::ofstream(signing_key_file) << "own-databases-signing-key-0123456789abcdef\n";
  const std::string recordings_url = shared + "/recordings";
  const int edge_port = FreePort();
  const std::string edge_url = absl::StrCat("http://127.0.0.1:", edge_port);
  absl::StatusOr<testing::TestPostgres*> postgres = testing::TestPostgres::Shared();
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  std::string database_urls[3];
  for (std::string& url : database_urls) {
    absl::StatusOr<std::string> created = (*postgres)->NewDatabase();
    ASSERT_TRUE(created.ok()) << created.status();
    url = *created;
  }

  ServerConfig owners_config;
  owners_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  owners_config.database_url = database_urls[0];
  owners_config.internal_credential_file = credential_file;
  owners_config.signing_key_file = signing_key_file;
  owners_config.data_dir = owners_dir;
  owners_config.grpc_addr = "127.0.0.1:0";
  owners_config.roles = {"accounts", "agents", "metrics"};
  // The agents role reads the calls it replays from the calls process (started below; gRPC
  // connects when first asked).
  const int calls_port = FreePort();
  owners_config.calls_addr = absl::StrCat("127.0.0.1:", calls_port);
  auto owners = Server::Start(owners_config);
  ASSERT_TRUE(owners.ok()) << owners.status();
  const std::string owners_addr = absl::StrCat("127.0.0.1:", (*owners)->grpc_port());

  ServerConfig calls_config;
  calls_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  calls_config.database_url = database_urls[1];
  calls_config.internal_credential_file = credential_file;
  calls_config.signing_key_file = signing_key_file;
  calls_config.recordings_url = recordings_url;
  calls_config.data_dir = calls_dir;
  calls_config.grpc_addr = absl::StrCat("127.0.0.1:", calls_port);
  calls_config.roles = {"calls", "scoring"};
  calls_config.workers = 1;
  calls_config.public_base_url = edge_url;
  calls_config.allow_private_hosts = {"127.0.0.1"};
  calls_config.accounts_addr = calls_config.agents_addr = calls_config.metrics_addr = owners_addr;
  auto calls = Server::Start(calls_config);
  ASSERT_TRUE(calls.ok()) << calls.status();
  const std::string calls_addr = absl::StrCat("127.0.0.1:", (*calls)->grpc_port());

  ServerConfig edge_config;
  edge_config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  edge_config.database_url = database_urls[2];
  edge_config.internal_credential_file = credential_file;
  edge_config.signing_key_file = signing_key_file;
  edge_config.recordings_url = recordings_url;
  edge_config.data_dir = edge_dir;
  edge_config.http_addr = absl::StrCat("127.0.0.1:", edge_port);
  edge_config.roles = {"edge"};
  edge_config.accounts_addr = edge_config.agents_addr = edge_config.metrics_addr = owners_addr;
  edge_config.calls_addr = calls_addr;
  edge_config.access_log = false;
  auto edge = Server::Start(edge_config);
  ASSERT_TRUE(edge.ok()) << edge.status();

  testing::HttpClient client(edge_url);
  client.set_api_key((*owners)->bootstrap()->key.api_key);
  auto agent = client.Post("/api/v1/agents", json{{"name", "own databases"},
                                                  {"phone_number", "+14155550123"},
                                                  {"language_id", 1},
                                                  {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  const int64_t agent_id = agent.json()["id"];
  const std::string agent_path = absl::StrCat("/api/v1/agents/", agent_id);
  ASSERT_EQ(client.Put(agent_path + "/standard_metrics",
                       json{{"disabled_metric_keys", {"user_sentiment"}}}.dump())
                .status,
            200);
  auto for_agent = client.Post("/api/v1/metrics", json{{"name", "For this agent"},
                                                       {"metrics_type", "code_as_judge"},
                                                       {"code_snippet", "metric['result'] = True"},
                                                       {"credit_cost", 3},
                                                       {"agent_ids", {agent_id}}});
  ASSERT_EQ(for_agent.status, 201) << for_agent.body;
  auto other_agent = client.Post("/api/v1/agents", json{{"name", "someone else"},
                                                        {"phone_number", "+14155550124"},
                                                        {"language_id", 1},
                                                        {"instructions", "x"}});
  ASSERT_EQ(other_agent.status, 201) << other_agent.body;
  ASSERT_EQ(client
                .Post("/api/v1/metrics", json{{"name", "For the other agent"},
                                              {"metrics_type", "code_as_judge"},
                                              {"code_snippet", "metric['result'] = True"},
                                              {"agent_ids", {other_agent.json()["id"]}}})
                .status,
            201);

  // Planned from what the owners answered: task_completion (user_sentiment is off for the
  // agent) and the custom metric that applies to it, at its cost; scored in the calls process,
  // the custom metric's definition asked of the metrics process.
  auto ingest = client.Post("/api/public/v1/calls",
                            json{{"call_identifier", "own-1"},
                                 {"agent_id", agent_id},
                                 {"transcript", {{{"role", "User"}, {"content", "Hello?"}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json scored = client.WaitForAnalysis("own-1");
  ASSERT_EQ(scored["analysis_status"], "completed") << scored.dump();
  ASSERT_EQ(scored["standard_metrics"].size(), 1u) << scored.dump();
  EXPECT_EQ(scored["standard_metrics"][0]["standard_metric_key"], "task_completion") << scored.dump();
  ASSERT_EQ(scored["metric_results"].size(), 1u) << scored.dump();
  EXPECT_EQ(scored["metric_results"][0]["metric_id"], for_agent.json()["id"]) << scored.dump();
  EXPECT_EQ(scored["metric_results"][0]["status"], "completed") << scored.dump();
  EXPECT_EQ(scored["credits_used"], 3) << scored.dump();
  // A replay made by the agents process of a call it reads from the calls process, whose
  // database it does not share.
  auto replay = client.Post(absl::StrCat("/api/v1/calls/", scored["id"].get<int64_t>(), "/scenario"),
                            json::object());
  ASSERT_EQ(replay.status, 201) << replay.body;
  EXPECT_EQ(replay.json()["caller_script"], json({"Hello?"})) << replay.body;
  EXPECT_EQ(replay.json()["source_call_id"], scored["id"]) << replay.body;
  EXPECT_EQ(client.Post("/api/v1/calls/987654/scenario", json::object()).status, 404);
  // An agent the owners do not know is ingest's 422, across the hop.
  auto unknown = client.Post("/api/public/v1/calls",
                             json{{"call_identifier", "own-2"},
                                  {"agent_id", agent_id + 1000},
                                  {"transcript", {{{"role", "User"}, {"content", "Hi"}}}}});
  EXPECT_EQ(unknown.status, 422) << unknown.body;
  EXPECT_EQ(unknown.json()["error"]["details"][0]["field"], "agent_id") << unknown.body;

  // A recorded call: downloaded by the calls process into the shared store, its link served by
  // the edge, whose own database has no calls.
  TestHttpServer files;
  files.Serve("/r.wav", "RIFF-own-databases", "audio/wav");
  ASSERT_EQ(client
                .Post("/api/public/v1/calls", json{{"call_identifier", "own-voice"},
                                                   {"agent_id", agent_id},
                                                   {"recording_url", files.url("/r.wav")}})
                .status,
            201);
  json call;
  for (int i = 0; i < 200; ++i) {
    call = client.Get("/api/public/v1/calls/own-voice").json();
    if (call["presigned_recording_url"].is_string()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(call["presigned_recording_url"].is_string()) << call.dump();
  const std::string link = call["presigned_recording_url"];
  testing::HttpClient anonymous(edge_url);
  testing::HttpResponse served = anonymous.Get(link);
  EXPECT_EQ(served.status, 200) << served.body;
  EXPECT_EQ(served.body, "RIFF-own-databases");

  // The agent's stats, answered by the calls process: its calls from its own tables, the runs
  // counted by the agents process (which queued this one; no runs role runs it).
  auto scenario = client.Post("/api/v1/scenarios", json{{"agent_id", agent_id},
                                                        {"name", "Book a table"},
                                                        {"caller_script", {"Hello"}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  auto run = client.Post(absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(),
                                      "/run"),
                         json{{"channel", "text"}});
  ASSERT_EQ(run.status, 202) << run.body;
  auto stats = client.Get(agent_path + "/stats?bucket=day");
  ASSERT_EQ(stats.status, 200) << stats.body;
  EXPECT_EQ(stats.json()["total"]["calls"]["total"], 2) << stats.body;
  EXPECT_EQ(stats.json()["total"]["runs"]["queued"], 1) << stats.body;
  EXPECT_EQ(client.Get(absl::StrCat("/api/v1/agents/", agent_id + 1000, "/stats")).status, 404);

  edge->reset();
  calls->reset();
  owners->reset();
  for (const std::string& dir : {owners_dir, calls_dir, edge_dir, shared}) {
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace calleval

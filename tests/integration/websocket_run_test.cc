// The websocket channel end to end: a run dials a test agent (a small websocket server speaking
// Twilio Media Streams, answering with audio a known delay after the caller stops speaking);
// the run completes, its call has a stereo recording, and the latency metric measured from
// that recording matches the agent's delay.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/mulaw.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"
#include "tests/support/test_http_server.h"
#include "tests/support/websocket_test_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

constexpr int kAgentDelayMs = 1000;

// A tone of `ms` milliseconds at 8 kHz as Twilio media events, 20 ms each.
void SendTone(runs::WebSocketConnection& c, const std::string& stream_sid, int ms, double hz) {
  const int samples = 8 * ms;
  std::vector<int16_t> tone(samples);
  for (int i = 0; i < samples; ++i) {
    tone[i] = static_cast<int16_t>(9000 * std::sin(2 * 3.14159265358979 * hz * i / 8000.0));
  }
  for (int at = 0; at < samples; at += 160) {
    const std::string payload = runs::MuLawEncode(absl::MakeConstSpan(tone).subspan(at, 160));
    (void)c.SendText(json{{"event", "media"},
                          {"streamSid", stream_sid},
                          {"media", {{"payload", Base64Encode(payload)}}}}
                         .dump());
  }
}

// What the test agent saw.
struct AgentLog {
  std::mutex mu;
  std::string auth_token;
  int answers = 0;
  int marks_echoed = 0;
  bool stopped = false;
};

// The agent: greets at once, then answers kAgentDelayMs after each time the caller stops
// speaking (by the stream's media timestamps, as a real bot's voice activity detector would).
void TwilioAgent(runs::WebSocketConnection& c, AgentLog* log) {
  std::string stream_sid;
  int64_t last_loud_end_ms = -1;
  bool caller_spoke = false;
  for (int idle = 0; idle < 3000;) {
    auto messages = c.Poll(absl::Milliseconds(10));
    if (!messages.ok()) return;
    if (messages->empty()) {
      ++idle;
      continue;
    }
    idle = 0;
    for (const auto& m : *messages) {
      json event = json::parse(m.data, nullptr, false);
      const std::string kind = event.value("event", "");
      if (kind == "start") {
        stream_sid = event["start"]["streamSid"];
        std::lock_guard<std::mutex> lock(log->mu);
        log->auth_token = event["start"]["customParameters"].value("auth_token", "");
        SendTone(c, stream_sid, 1200, 300);  // the greeting
        (void)c.SendText(
            json{{"event", "mark"}, {"streamSid", stream_sid}, {"mark", {{"name", "greeting"}}}}
                .dump());
      } else if (kind == "mark") {
        std::lock_guard<std::mutex> lock(log->mu);
        ++log->marks_echoed;
      } else if (kind == "stop") {
        std::lock_guard<std::mutex> lock(log->mu);
        log->stopped = true;
        return;
      } else if (kind == "media") {
        int64_t ts = 0;
        if (!absl::SimpleAtoi(event["media"].value("timestamp", "0"), &ts)) continue;
        const std::vector<int16_t> pcm =
            runs::MuLawDecode(*Base64Decode(event["media"]["payload"].get<std::string>()));
        double energy = 0;
        for (int16_t s : pcm) energy += static_cast<double>(s) * s;
        if (std::sqrt(energy / pcm.size()) > 200) {
          last_loud_end_ms = ts + 20;
          caller_spoke = true;
        }
        // Answer exactly kAgentDelayMs after the caller's last loud frame ended.
        if (caller_spoke && ts + 20 >= last_loud_end_ms + kAgentDelayMs) {
          SendTone(c, stream_sid, 1500, 350);
          caller_spoke = false;
          std::lock_guard<std::mutex> lock(log->mu);
          ++log->answers;
        }
      }
    }
  }
}

TEST(WebsocketRunTest, RunDialsATwilioAgentRecordsStereoAndMeasuresItsLatency) {
  AgentLog log;
  WebSocketTestServer agent_server([&log](runs::WebSocketConnection& c) { TwilioAgent(c, &log); });

  const std::string dir = testing::MakeTempDir("websocket_run");
  ServerConfig config = testing::TestServerConfig(dir);
  config.workers = 2;
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);

  HttpResponse agent = client.Post(
      "/api/v1/agents", json{{"name", "Voice bot"},
                             {"language_id", 1},
                             {"instructions", "Book cleanings."},
                             {"web_channel",
                              {{"transport", "websocket"},
                               {"websocket_url", agent_server.url("/agent")},
                               {"auth_token", "tok-voice"}}}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  HttpResponse scenario = client.Post(
      "/api/v1/scenarios",
      json{{"agent_id", agent.json()["id"]},
           {"name", "Book a cleaning"},
           {"caller_script", {"Hi, I would like to book a cleaning.", "Friday morning, please."}},
           {"metric_ids", {1}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  // Default channel: web, since the agent has no phone number.
  HttpResponse queued = client.Post(
      absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/run"),
      json::object());
  ASSERT_EQ(queued.status, 202) << queued.body;
  EXPECT_EQ(queued.json()["channel"], "web");

  json run;
  for (int i = 0; i < 1200; ++i) {
    run = client.Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
    if (run["status"] == "completed" || run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "script_finished");
  EXPECT_EQ(run["passed"], true);
  {
    std::lock_guard<std::mutex> lock(log.mu);
    EXPECT_EQ(log.auth_token, "tok-voice");
    EXPECT_EQ(log.answers, 2);
    EXPECT_GE(log.marks_echoed, 1);  // the greeting's mark came back once it had played
    EXPECT_TRUE(log.stopped);
  }

  const json call =
      client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(call["observation_type"], "voice");
  EXPECT_TRUE(call["recording_url"].is_null());
  ASSERT_TRUE(call["presigned_recording_url"].is_string()) << call.dump();
  EXPECT_GE(call["duration_seconds"].get<int>(), 8);

  // The recording is a stereo WAV: the agent on the left.
  const std::string link = call["presigned_recording_url"];
  HttpClient raw(link.substr(0, link.find("/recordings/")));
  HttpResponse wav = raw.Get(link.substr(link.find("/recordings/")));
  ASSERT_EQ(wav.status, 200);
  ASSERT_GT(wav.body.size(), 44u);
  EXPECT_EQ(wav.body.substr(0, 4), "RIFF");
  EXPECT_EQ(static_cast<uint8_t>(wav.body[22]), 2);  // channels

  // Latency measured from the recording: the agent's delay, within 100 ms, for both answers.
  const json* latency = nullptr;
  for (const json& m : call["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr);
  ASSERT_EQ(latency->at("status"), "completed") << latency->dump();
  ASSERT_EQ(latency->at("result")["count"], 2) << latency->dump();
  int k = 0;
  for (const json& turn : latency->at("result")["turns"]) {
    EXPECT_NEAR(turn["latency_ms"].get<double>(), kAgentDelayMs, 100) << turn.dump();
    RecordProperty(absl::StrCat("latency_ms_", k++), turn["latency_ms"].dump());
  }

  server->reset();
  std::filesystem::remove_all(dir);
}

// The runs role in a process of its own, reaching the agents, calls and metrics roles of
// another only by address (docs/architecture.md, "In one process or apart"). The runs process
// has a data dir, and so a database and a credentials key, of its own: it leases the run, reads
// the agent and its auth_token, and ingests the call over the other process's internal methods,
// never from the tables. Only the blob store of recordings is shared: the recording the runs
// process stored is the call's, served by the other process's edge.
TEST(WebsocketRunTest, RunsRoleApartReachesTheOtherRolesByAddress) {
  AgentLog log;
  WebSocketTestServer agent_server([&log](runs::WebSocketConnection& c) { TwilioAgent(c, &log); });

  const std::string dir = testing::MakeTempDir("websocket_run_apart");
  ServerConfig backend_config = testing::TestServerConfig(dir);
  backend_config.roles = {"edge", "accounts", "agents", "calls", "metrics", "scoring"};
  backend_config.workers = 2;
  auto backend = Server::Start(backend_config);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::string backend_addr = absl::StrCat("127.0.0.1:", (*backend)->grpc_port());

  const std::string runs_dir = testing::MakeTempDir("websocket_run_apart_runs");
  ServerConfig runs_config = testing::TestServerConfig(runs_dir);
  runs_config.roles = {"runs"};
  runs_config.agents_addr = runs_config.calls_addr = runs_config.metrics_addr = backend_addr;
  runs_config.internal_credential_file = dir + "/internal-credential";
  runs_config.recordings_url = dir + "/recordings";
  auto runs_process = Server::Start(runs_config);
  ASSERT_TRUE(runs_process.ok()) << runs_process.status();

  HttpClient client((*backend)->http_base_url());
  client.set_api_key((*backend)->bootstrap()->key.api_key);
  HttpResponse agent = client.Post(
      "/api/v1/agents", json{{"name", "Voice bot"},
                             {"language_id", 1},
                             {"instructions", "Book cleanings."},
                             {"web_channel",
                              {{"transport", "websocket"},
                               {"websocket_url", agent_server.url("/agent")},
                               {"auth_token", "tok-apart"}}}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  HttpResponse scenario = client.Post(
      "/api/v1/scenarios",
      json{{"agent_id", agent.json()["id"]},
           {"name", "Book a cleaning"},
           {"caller_script", {"Hi, I would like to book a cleaning.", "Friday morning, please."}},
           {"metric_ids", {1}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  HttpResponse queued = client.Post(
      absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/run"),
      json{{"channel", "web"}});
  ASSERT_EQ(queued.status, 202) << queued.body;

  json run;
  for (int i = 0; i < 1200; ++i) {
    run = client.Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
    if (run["status"] == "completed" || run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "script_finished");
  EXPECT_EQ(run["passed"], true);
  {
    std::lock_guard<std::mutex> lock(log.mu);
    EXPECT_EQ(log.auth_token, "tok-apart");
    EXPECT_EQ(log.answers, 2);
  }

  const json call =
      client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(call["call_identifier"], absl::StrCat("run-", run["id"].get<int64_t>()));
  EXPECT_EQ(call["observation_type"], "voice");
  EXPECT_EQ(call["analysis_status"], "completed");
  EXPECT_TRUE(call["recording_url"].is_null());
  ASSERT_TRUE(call["presigned_recording_url"].is_string()) << call.dump();
  const std::string link = call["presigned_recording_url"];
  HttpClient raw(link.substr(0, link.find("/recordings/")));
  HttpResponse wav = raw.Get(link.substr(link.find("/recordings/")));
  ASSERT_EQ(wav.status, 200);
  ASSERT_GT(wav.body.size(), 44u);
  EXPECT_EQ(wav.body.substr(0, 4), "RIFF");
  EXPECT_EQ(static_cast<uint8_t>(wav.body[22]), 2);  // channels
  // The scenario's stats count the run's call: its origin crossed the hop.
  HttpResponse stats = client.Get(
      absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/stats"));
  ASSERT_EQ(stats.status, 200) << stats.body;
  EXPECT_EQ(stats.json()["total"]["calls"]["completed"], 1) << stats.body;
  EXPECT_EQ(stats.json()["total"]["runs"]["passed"], 1) << stats.body;

  runs_process->reset();
  backend->reset();
  std::filesystem::remove_all(runs_dir);
  std::filesystem::remove_all(dir);
}

TEST(WebsocketRunTest, LlmPlayedCallerHearsTheAgentAndEndsAtItsGoal) {
  AgentLog log;
  WebSocketTestServer agent_server([&log](runs::WebSocketConnection& c) { TwilioAgent(c, &log); });
  FakeOpenAiServer llm;
  llm.AnswerInTurn("You play a caller",
                   {R"({"message": "Hello, I would like to book a cleaning.", "goal_reached": false})",
                    R"({"message": "Thank you, goodbye.", "goal_reached": true})"});
  const std::string dir = testing::MakeTempDir("websocket_llm_caller");
  ServerConfig config = testing::TestServerConfig(dir);
  config.llm_base_url = llm.base_url();
  config.llm_api_key = llm.api_key();
  config.llm_model = "gpt-test";
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  HttpResponse agent = client.Post(
      "/api/v1/agents", json{{"name", "Voice bot"},
                             {"language_id", 1},
                             {"instructions", "Book cleanings."},
                             {"web_channel",
                              {{"transport", "websocket"},
                               {"websocket_url", agent_server.url("/agent")}}}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  HttpResponse scenario = client.Post("/api/v1/scenarios",
                                      json{{"agent_id", agent.json()["id"]},
                                           {"name", "Persona caller"},
                                           {"persona", "A patient"},
                                           {"goal", "Book a cleaning"},
                                           {"metric_ids", {1}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  HttpResponse queued = client.Post(
      absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/run"),
      json{{"channel", "web"}});
  ASSERT_EQ(queued.status, 202) << queued.body;
  json run;
  for (int i = 0; i < 1200; ++i) {
    run = client.Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
    if (run["status"] == "completed" || run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "goal_reached");
  {
    std::lock_guard<std::mutex> lock(log.mu);
    EXPECT_EQ(log.answers, 2);  // both lines were spoken and answered
  }
  // The caller was asked twice; the second time the conversation held its first line.
  int caller_requests = 0;
  bool saw_first_line = false;
  for (const json& request : llm.chat_requests()) {
    if (request["messages"][0]["content"].get<std::string>().find("You play a caller") ==
        std::string::npos) {
      continue;
    }
    ++caller_requests;
    for (const json& m : request["messages"]) {
      if (m["content"] == "Hello, I would like to book a cleaning.") saw_first_line = true;
    }
  }
  EXPECT_EQ(caller_requests, 2);
  EXPECT_TRUE(saw_first_line);
  const json call =
      client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  const json* latency = nullptr;
  for (const json& m : call["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr);
  ASSERT_EQ(latency->at("result")["count"], 2) << latency->dump();
  for (const json& turn : latency->at("result")["turns"]) {
    EXPECT_NEAR(turn["latency_ms"].get<double>(), kAgentDelayMs, 100) << turn.dump();
  }
  server->reset();
  std::filesystem::remove_all(dir);
}

// The same agent over raw PCM16 (16 kHz, 20 ms binary frames; stream time by frame count).
void Pcm16Agent(runs::WebSocketConnection& c, AgentLog* log) {
  auto tone = [](int ms, double hz) {
    std::string bytes;
    for (int i = 0; i < 16 * ms; ++i) {
      const auto v = static_cast<int16_t>(9000 * std::sin(2 * 3.14159265358979 * hz * i / 16000.0));
      bytes.push_back(static_cast<char>(v & 0xFF));
      bytes.push_back(static_cast<char>((v >> 8) & 0xFF));
    }
    return bytes;
  };
  (void)c.SendBinary(tone(1200, 300));  // the greeting, in one burst
  int64_t frames = 0;
  int64_t last_loud_end_ms = -1;
  bool caller_spoke = false;
  for (int idle = 0; idle < 300;) {
    auto messages = c.Poll(absl::Milliseconds(10));
    if (!messages.ok()) break;
    if (messages->empty()) {
      ++idle;
      continue;
    }
    idle = 0;
    for (const auto& m : *messages) {
      if (!m.binary) continue;
      double energy = 0;
      const size_t n = m.data.size() / 2;
      for (size_t i = 0; i < n; ++i) {
        const auto s = static_cast<int16_t>(static_cast<uint8_t>(m.data[2 * i]) |
                                            (static_cast<uint8_t>(m.data[2 * i + 1]) << 8));
        energy += static_cast<double>(s) * s;
      }
      const int64_t ts = 20 * frames++;
      if (n > 0 && std::sqrt(energy / n) > 200) {
        last_loud_end_ms = ts + 20;
        caller_spoke = true;
      }
      if (caller_spoke && ts + 20 >= last_loud_end_ms + kAgentDelayMs) {
        (void)c.SendBinary(tone(1500, 350));
        caller_spoke = false;
        std::lock_guard<std::mutex> lock(log->mu);
        ++log->answers;
      }
    }
  }
  std::lock_guard<std::mutex> lock(log->mu);
  log->stopped = true;
}

TEST(WebsocketRunTest, Pcm16AgentWithTheCallerVoicedByASpeechEndpoint) {
  AgentLog log;
  WebSocketTestServer agent_server([&log](runs::WebSocketConnection& c) { Pcm16Agent(c, &log); });
  // A local OpenAI-compatible /v1/audio/speech: 1.2 s of 24 kHz PCM per line.
  TestHttpServer speech;
  std::atomic<int> lines{0};
  speech.Handle("/v1/audio/speech", [&lines](const TestHttpServer::Request& r) {
    ++lines;
    TestHttpServer::Response response;
    response.content_type = "audio/pcm";
    for (int i = 0; i < 24 * 1200; ++i) {
      const auto v = static_cast<int16_t>(7000 * std::sin(2 * 3.14159265358979 * 200 * i / 24000.0));
      response.body.push_back(static_cast<char>(v & 0xFF));
      response.body.push_back(static_cast<char>((v >> 8) & 0xFF));
    }
    return response;
  });

  const std::string dir = testing::MakeTempDir("websocket_pcm16");
  ServerConfig config = testing::TestServerConfig(dir);
  config.tts_base_url = speech.url("/v1");
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  HttpResponse agent = client.Post(
      "/api/v1/agents", json{{"name", "PCM bot"},
                             {"language_id", 1},
                             {"instructions", "x"},
                             {"web_channel",
                              {{"transport", "websocket"},
                               {"protocol", "pcm16"},
                               {"websocket_url", agent_server.url("/pcm")}}}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  HttpResponse scenario = client.Post("/api/v1/scenarios",
                                      json{{"agent_id", agent.json()["id"]},
                                           {"name", "two lines"},
                                           {"caller_script", {"One.", "Two."}},
                                           {"metric_ids", {1}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  HttpResponse queued = client.Post(
      absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/run"),
      json{{"channel", "web"}});
  ASSERT_EQ(queued.status, 202) << queued.body;
  json run;
  for (int i = 0; i < 1200; ++i) {
    run = client.Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
    if (run["status"] == "completed" || run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(lines.load(), 2);
  const json call =
      client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  const json* latency = nullptr;
  for (const json& m : call["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr);
  ASSERT_EQ(latency->at("result")["count"], 2) << latency->dump();
  for (const json& turn : latency->at("result")["turns"]) {
    EXPECT_NEAR(turn["latency_ms"].get<double>(), kAgentDelayMs, 100) << turn.dump();
  }
  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calleval

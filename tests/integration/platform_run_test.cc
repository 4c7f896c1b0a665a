// External agents end to end against local Vapi and Retell APIs (tests/support/fake_vapi_server.h,
// fake_retell_server.h): an agent's instructions, opening message and language are pulled from
// the platform when it is created (and again when a PATCH sends its assistant_id); the
// platform's refusals reach the client with the platform's message; a Vapi web run talks over
// the call's websocket to a test agent answering PCM16 a known delay after the caller stops,
// and the latency measured from the run's recording is that delay; a Retell web run fails with
// the reason.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_retell_server.h"
#include "tests/support/fake_vapi_server.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

constexpr int kAgentDelayMs = 700;
constexpr char kVapiKey[] = "vapi-private-key-1";
constexpr char kRetellKey[] = "key_retell_1";

// 16 kHz PCM16 little-endian tone.
std::string Tone(int ms, double hz) {
  std::string bytes;
  for (int i = 0; i < 16 * ms; ++i) {
    const auto v = static_cast<int16_t>(9000 * std::sin(2 * 3.14159265358979 * hz * i / 16000.0));
    bytes.push_back(static_cast<char>(v & 0xFF));
    bytes.push_back(static_cast<char>((v >> 8) & 0xFF));
  }
  return bytes;
}

struct AgentLog {
  std::mutex mu;
  int answers = 0;
  int control_messages = 0;  // text frames the caller sent
};

// The assistant behind the Vapi call: greets at once (firstMessage), then answers
// kAgentDelayMs after each time the caller stops speaking, by stream time (20 ms a frame, as
// the caller paces them), with a Vapi speech-update text frame before each answer.
void Assistant(runs::WebSocketConnection& c, AgentLog* log) {
  (void)c.SendBinary(Tone(1200, 300));
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
      if (!m.binary) {
        std::lock_guard<std::mutex> lock(log->mu);
        ++log->control_messages;
        continue;
      }
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
        (void)c.SendText(
            json{{"type", "speech-update"}, {"status", "started"}, {"role", "assistant"}}.dump());
        (void)c.SendBinary(Tone(1500, 350));
        caller_spoke = false;
        std::lock_guard<std::mutex> lock(log->mu);
        ++log->answers;
      }
    }
  }
}

json VapiAssistant(const std::string& prompt) {
  return json{{"name", "Sparkle front desk"},
              {"firstMessage", "Hello, Sparkle Cleaning, how can I help?"},
              {"firstMessageMode", "assistant-speaks-first"},
              {"model",
               {{"provider", "openai"},
                {"model", "gpt-4o"},
                {"messages", {{{"role", "system"}, {"content", prompt}}}}}},
              {"voice", {{"provider", "11labs"}, {"voiceId", "burt"}}},
              {"transcriber", {{"provider", "deepgram"}, {"model", "nova-2"}, {"language", "en"}}}};
}

class PlatformRunTest : public ::testing::Test {
 protected:
  PlatformRunTest()
      : vapi_(kVapiKey, [this](runs::WebSocketConnection& c) { Assistant(c, &log_); }),
        retell_(kRetellKey) {
    // The caller's voice: a local OpenAI-compatible /v1/audio/speech answering 1.2 s of a
    // 24 kHz tone per line, so where the caller stops is exact (no fading synthesized tail).
    speech_.Handle("/v1/audio/speech", [](const TestHttpServer::Request&) {
      TestHttpServer::Response response;
      response.content_type = "audio/pcm";
      for (int i = 0; i < 24 * 1200; ++i) {
        const auto v =
            static_cast<int16_t>(7000 * std::sin(2 * 3.14159265358979 * 200 * i / 24000.0));
        response.body.push_back(static_cast<char>(v & 0xFF));
        response.body.push_back(static_cast<char>((v >> 8) & 0xFF));
      }
      return response;
    });
  }

  void SetUp() override {
    dir_ = testing::MakeTempDir("platform_run");
    ServerConfig config = testing::TestServerConfig(dir_);
    config.workers = 2;
    config.vapi_api_url = vapi_.base_url();
    config.retell_api_url = retell_.base_url();
    config.tts_base_url = speech_.url("/v1");
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(server_->bootstrap()->key.api_key);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  json WaitRun(int64_t scenario_id) {
    HttpResponse queued = client_->Post(absl::StrCat("/api/v1/scenarios/", scenario_id, "/run"),
                                        json{{"channel", "web"}});
    EXPECT_EQ(queued.status, 202) << queued.body;
    json run;
    for (int i = 0; i < 1200; ++i) {
      run = client_->Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
      if (run["status"] == "completed" || run["status"] == "failed") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return run;
  }

  int64_t Scenario(int64_t agent_id) {
    HttpResponse scenario = client_->Post(
        "/api/v1/scenarios",
        json{{"agent_id", agent_id},
             {"name", "Book a cleaning"},
             {"caller_script", {"Hi, I would like to book a cleaning.", "Friday morning, please."}},
             {"metric_ids", {1}}});
    EXPECT_EQ(scenario.status, 201) << scenario.body;
    return scenario.json()["id"];
  }

  AgentLog log_;
  TestHttpServer speech_;
  FakeVapiServer vapi_;
  FakeRetellServer retell_;
  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(PlatformRunTest, VapiWebRunIsScoredAndItsLatencyIsTheAssistantsDelay) {
  vapi_.AddAssistant("asst-sparkle", VapiAssistant("You book cleanings for Sparkle."));
  HttpResponse agent =
      client_->Post("/api/v1/agents",
                    json{{"name", "Sparkle on Vapi"},
                         {"agent_source", "external_vapi"},
                         {"assistant_id", "asst-sparkle"},
                         {"web_channel", {{"transport", "vapi"}, {"platform_api_key", kVapiKey}}}});
  ASSERT_EQ(agent.status, 201) << agent.body;

  const json run = WaitRun(Scenario(agent.json()["id"]));
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "script_finished");
  EXPECT_EQ(run["passed"], true);
  // Vapi's API has no version of an assistant: none on the run nor on its call.
  EXPECT_TRUE(run["platform_version"].is_null()) << run.dump();
  ASSERT_EQ(vapi_.calls().size(), 1u);
  const json created = vapi_.calls()[0];
  EXPECT_EQ(created["assistantId"], "asst-sparkle");
  EXPECT_EQ(created["transport"]["provider"], "vapi.websocket");
  EXPECT_EQ(created["transport"]["audioFormat"]["format"], "pcm_s16le");
  EXPECT_EQ(created["transport"]["audioFormat"]["sampleRate"], 16000);
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_EQ(log_.answers, 2);
    EXPECT_EQ(log_.control_messages, 1);
  }
  // The caller ended the call as Vapi documents it: the hangup control message, then the close.
  EXPECT_EQ(json(vapi_.control_messages()), json::parse(R"([{"type": "hangup"}])"));

  const json call =
      client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(call["observation_type"], "voice");
  EXPECT_EQ(call["analysis_status"], "completed");
  EXPECT_EQ(call["metadata"]["platform"], "vapi") << call["metadata"].dump();
  EXPECT_TRUE(call["platform_version"].is_null()) << call.dump();
  ASSERT_EQ(vapi_.call_ids().size(), 1u);
  EXPECT_EQ(call["metadata"]["platform_call_id"], vapi_.call_ids()[0]);
  ASSERT_TRUE(call["presigned_recording_url"].is_string()) << call.dump();
  const json* latency = nullptr;
  for (const json& m : call["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr);
  ASSERT_EQ(latency->at("status"), "completed") << latency->dump();
  ASSERT_EQ(latency->at("result")["count"], 2) << latency->dump();
  int k = 0;
  for (const json& turn : latency->at("result")["turns"]) {
    const double measured = turn["latency_ms"].get<double>();
    EXPECT_NEAR(measured, kAgentDelayMs, 30) << turn.dump();
    RecordProperty(absl::StrCat("latency_error_ms_", k++),
                   std::to_string(measured - kAgentDelayMs));
  }
}

TEST_F(PlatformRunTest, AgentsArePulledFromVapiAndRetell) {
  vapi_.AddAssistant("asst-sparkle", VapiAssistant("You book cleanings for Sparkle."));
  HttpResponse vapi_agent =
      client_->Post("/api/v1/agents",
                    json{{"name", "Sparkle on Vapi"},
                         {"agent_source", "external_vapi"},
                         {"assistant_id", "asst-sparkle"},
                         {"instructions", "stale instructions the platform replaces"},
                         {"web_channel", {{"transport", "vapi"}, {"platform_api_key", kVapiKey}}}});
  ASSERT_EQ(vapi_agent.status, 201) << vapi_agent.body;
  EXPECT_EQ(vapi_agent.json()["instructions"], "You book cleanings for Sparkle.");
  EXPECT_EQ(vapi_agent.json()["opening_message"]["mode"], "agent_speaks_first");
  EXPECT_EQ(vapi_agent.json()["opening_message"]["text"],
            "Hello, Sparkle Cleaning, how can I help?");
  EXPECT_EQ(vapi_agent.json()["language_id"], 1);  // "en": en-US
  EXPECT_EQ(vapi_agent.body.find(kVapiKey), std::string::npos);

  // Changed on the platform: a PATCH sending the assistant_id again pulls afresh.
  json waits = VapiAssistant("You book cleanings for Sparkle, Fridays only.");
  waits["firstMessageMode"] = "assistant-waits-for-user";
  waits["transcriber"]["language"] = "de";
  vapi_.AddAssistant("asst-sparkle", waits);
  const std::string path = absl::StrCat("/api/v1/agents/", vapi_agent.json()["id"].get<int64_t>());
  HttpResponse refreshed = client_->Patch(path, json{{"assistant_id", "asst-sparkle"}}.dump());
  ASSERT_EQ(refreshed.status, 200) << refreshed.body;
  EXPECT_EQ(refreshed.json()["instructions"], "You book cleanings for Sparkle, Fridays only.");
  EXPECT_EQ(refreshed.json()["opening_message"]["mode"], "user_speaks_first");
  EXPECT_EQ(refreshed.json()["language_id"], 6);  // de-DE
  // A PATCH that does not send it pulls nothing.
  HttpResponse renamed = client_->Patch(path, json{{"name", "Sparkle (Vapi)"}}.dump());
  ASSERT_EQ(renamed.status, 200) << renamed.body;
  EXPECT_EQ(renamed.json()["instructions"], "You book cleanings for Sparkle, Fridays only.");

  // Retell: the agent's language, its Retell LLM's prompt and opening, with the workspace's key.
  retell_.AddAgent("agent_6b1f", json{{"agent_name", "Recepción"}, {"language", "es-ES"}},
                   "llm_93a2",
                   json{{"general_prompt", "Eres la recepcionista de Sparkle."},
                        {"begin_message", "Hola, Sparkle, ¿en qué puedo ayudarle?"},
                        {"start_speaker", "agent"}});
  ASSERT_EQ(
      client_->Put("/api/v1/integrations/retell", json{{"api_key", kRetellKey}}.dump()).status,
      200);
  HttpResponse retell_agent =
      client_->Post("/api/v1/agents", json{{"name", "Sparkle on Retell"},
                                           {"agent_source", "external_retell"},
                                           {"assistant_id", "agent_6b1f"},
                                           {"web_channel", {{"transport", "retell"}}}});
  ASSERT_EQ(retell_agent.status, 201) << retell_agent.body;
  EXPECT_EQ(retell_agent.json()["instructions"], "Eres la recepcionista de Sparkle.");
  EXPECT_EQ(retell_agent.json()["opening_message"]["mode"], "agent_speaks_first");
  EXPECT_EQ(retell_agent.json()["opening_message"]["text"],
            "Hola, Sparkle, ¿en qué puedo ayudarle?");
  EXPECT_EQ(retell_agent.json()["language_id"], 3);  // es-ES

  // A Retell web run creates a web call (its room is joined in tests/integration/room_run_test);
  // this stand-in hands out no room, and the run says what Retell answered.
  const json run = WaitRun(Scenario(retell_agent.json()["id"]));
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_NE(run["error"].get<std::string>().find("web calls are not set up on this stand-in"),
            std::string::npos)
      << run.dump();
}

TEST_F(PlatformRunTest, PlatformRefusalsCarryThePlatformsMessage) {
  vapi_.AddAssistant("asst-sparkle", VapiAssistant("You book cleanings for Sparkle."));
  // A bad key: the client must fix it, and is told which.
  HttpResponse bad_key =
      client_->Post("/api/v1/agents",
                    json{{"name", "x"},
                         {"agent_source", "external_vapi"},
                         {"assistant_id", "asst-sparkle"},
                         {"web_channel", {{"transport", "vapi"}, {"platform_api_key", "wrong"}}}});
  ASSERT_EQ(bad_key.status, 422) << bad_key.body;
  EXPECT_EQ(bad_key.json()["error"]["code"], "platform_refused");
  EXPECT_EQ(bad_key.json()["error"]["details"][0]["field"], "web_channel.platform_api_key");
  EXPECT_NE(bad_key.body.find("Invalid Key"), std::string::npos) << bad_key.body;
  EXPECT_EQ(bad_key.body.find("wrong"), std::string::npos) << bad_key.body;

  // An unknown assistant.
  HttpResponse unknown =
      client_->Post("/api/v1/agents",
                    json{{"name", "x"},
                         {"agent_source", "external_vapi"},
                         {"assistant_id", "asst-nope"},
                         {"web_channel", {{"transport", "vapi"}, {"platform_api_key", kVapiKey}}}});
  ASSERT_EQ(unknown.status, 422) << unknown.body;
  EXPECT_EQ(unknown.json()["error"]["details"][0]["field"], "assistant_id");
  EXPECT_NE(unknown.body.find("Couldn't Get Assistant"), std::string::npos) << unknown.body;

  // Retell refuses the key too, in its own words.
  HttpResponse retell_down =
      client_->Post("/api/v1/agents",
                    json{{"name", "x"},
                         {"agent_source", "external_retell"},
                         {"assistant_id", "agent_gone"},
                         {"web_channel", {{"transport", "retell"}, {"platform_api_key", "k"}}}});
  EXPECT_EQ(retell_down.status, 422) << retell_down.body;
  EXPECT_NE(retell_down.body.find("Invalid API Key"), std::string::npos) << retell_down.body;

  // Without a key nothing is pulled at creation; the run says which key is missing.
  HttpResponse keyless =
      client_->Post("/api/v1/agents", json{{"name", "keyless"},
                                           {"agent_source", "external_vapi"},
                                           {"assistant_id", "asst-sparkle"},
                                           {"web_channel", {{"transport", "vapi"}}}});
  ASSERT_EQ(keyless.status, 201) << keyless.body;
  json run = WaitRun(Scenario(keyless.json()["id"]));
  EXPECT_EQ(run["status"], "failed");
  EXPECT_NE(run["error"].get<std::string>().find("no Vapi API key"), std::string::npos)
      << run.dump();

  // Out of credit when the run creates its call: the run fails with Vapi's message.
  ASSERT_EQ(client_->Put("/api/v1/integrations/vapi", json{{"api_key", kVapiKey}}.dump()).status,
            200);
  vapi_.FailCalls(402, "Your org is out of credits. Please top up to continue.");
  run = WaitRun(Scenario(keyless.json()["id"]));
  EXPECT_EQ(run["status"], "failed");
  EXPECT_NE(run["error"].get<std::string>().find("out of credits"), std::string::npos)
      << run.dump();
  EXPECT_TRUE(vapi_.calls().empty());
}

}  // namespace
}  // namespace calleval

// The web channel's livekit transport end to end: a run joins a LiveKit room of the local
// stand-in (tests/support/fake_livekit.h), whose test agent greets and answers a known delay
// after the caller stops speaking, over real webrtcbin peers on loopback. Both room modes:
// `rubric` (the service creates the room with the agent's credentials, joins with a token it
// mints, deletes the room after) and `client` (the agent's bot runner hands the room out). A
// server that never answers the join, an agent that never publishes and a media connection
// that drops each end the run `failed` with the reason.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "services/runs/livekit_api.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_livekit.h"
#include "tests/support/fake_retell_server.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::HttpClient;
using testing::HttpResponse;

constexpr int kAgentDelayMs = 700;

struct RoomRun {
  json run;
  json call;  // when completed
  absl::Duration elapsed;
};

// Runs a two-line scenario against an agent with `web_channel` and waits for the run's end.
// `configure` changes the server's configuration; `agent_extra` is merged into the agent.
RoomRun RunInRoom(const json& web_channel, const std::string& tag,
                  const std::function<void(ServerConfig&)>& configure = nullptr,
                  const json& agent_extra = json::object()) {
  const std::string dir = testing::MakeTempDir(tag);
  ServerConfig config = testing::TestServerConfig(dir);
  config.workers = 2;
  if (configure) configure(config);
  auto server = Server::Start(config);
  EXPECT_TRUE(server.ok()) << server.status();
  RoomRun out;
  if (!server.ok()) return out;
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  json agent_body = json{{"name", "Room bot"},
                         {"language_id", 1},
                         {"instructions", "Book cleanings."},
                         {"web_channel", web_channel}};
  if (agent_extra.contains("agent_source")) {  // an external agent's fields come from its platform
    agent_body.erase("instructions");
    agent_body.erase("language_id");
  }
  agent_body.update(agent_extra);
  HttpResponse agent = client.Post("/api/v1/agents", agent_body);
  EXPECT_EQ(agent.status, 201) << agent.body;
  HttpResponse scenario = client.Post(
      "/api/v1/scenarios",
      json{{"agent_id", agent.json()["id"]},
           {"name", "Book a cleaning"},
           {"caller_script", {"Hi, I would like to book a cleaning.", "Friday morning, please."}},
           {"metric_ids", {1}}});
  EXPECT_EQ(scenario.status, 201) << scenario.body;
  const absl::Time start = absl::Now();
  HttpResponse queued =
      client.Post(absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/run"),
                  json{{"channel", "web"}});
  EXPECT_EQ(queued.status, 202) << queued.body;
  for (int i = 0; i < 1200; ++i) {
    out.run = client.Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
    if (out.run["status"] == "completed" || out.run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  out.elapsed = absl::Now() - start;
  if (out.run["status"] == "completed") {
    out.call =
        client.Get(absl::StrCat("/api/public/v1/calls/", out.run["call_id"].get<int64_t>())).json();
  }
  server->reset();
  std::filesystem::remove_all(dir);
  return out;
}

// The latency metric's turns: each within 40 ms of the agent's delay.
void ExpectLatency(const json& call) {
  const json* latency = nullptr;
  for (const json& m : call["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr) << call.dump();
  ASSERT_EQ(latency->at("status"), "completed") << latency->dump();
  ASSERT_EQ(latency->at("result")["count"], 2) << latency->dump();
  for (const json& turn : latency->at("result")["turns"]) {
    std::cerr << "agent latency " << turn["latency_ms"] << " ms (delay " << kAgentDelayMs << ")\n";
    EXPECT_NEAR(turn["latency_ms"].get<double>(), kAgentDelayMs, 40) << turn.dump();
  }
}

json RubricChannel(const FakeLiveKit& livekit) {
  return json{{"transport", "livekit"},
              {"room_management", "rubric"},
              {"room_server_url", livekit.ws_url()},
              {"room_api_key", livekit.api_key()},
              {"room_api_secret", livekit.api_secret()}};
}

TEST(RoomRunTest, RubricRoomIsCreatedJoinedScoredAndDeleted) {
  FakeLiveKit livekit;
  FakeRoomAgentOptions agent;
  agent.delay = absl::Milliseconds(kAgentDelayMs);
  livekit.EnableMedia(agent);
  json channel = RubricChannel(livekit);
  channel["agent_name"] = "cleaning-agent";
  RoomRun r = RunInRoom(channel, "room_rubric");
  ASSERT_EQ(r.run["status"], "completed") << r.run.dump();
  // The named agent was dispatched into the run's room.
  ASSERT_EQ(livekit.dispatches().size(), 1u);
  EXPECT_EQ(livekit.dispatches()[0].agent_name, "cleaning-agent");
  ASSERT_EQ(livekit.deleted_rooms().size(), 1u);
  EXPECT_EQ(livekit.dispatches()[0].room, livekit.deleted_rooms()[0]);
  std::cerr << "run queued to completed: " << r.elapsed << "\n";
  EXPECT_EQ(r.run["end_reason"], "script_finished");
  // An agent of the workspace's own is on no platform.
  EXPECT_TRUE(r.run["platform_version"].is_null()) << r.run.dump();
  EXPECT_TRUE(r.call["platform_version"].is_null());
  ExpectLatency(r.call);
  ASSERT_EQ(livekit.participants().size(), 1u);
  EXPECT_EQ(livekit.deleted_rooms().size(), 1u);
  EXPECT_TRUE(livekit.rooms().empty());
  EXPECT_EQ(livekit.answers().size(), 2u);
}

TEST(RoomRunTest, ClientRoomComesFromTheBotRunner) {
  FakeLiveKit livekit;
  FakeRoomAgentOptions agent;
  agent.delay = absl::Milliseconds(kAgentDelayMs);
  livekit.EnableMedia(agent);
  TestHttpServer bot_runner;
  std::atomic<int> asked{0};
  bot_runner.Handle("/start", [&](const TestHttpServer::Request& request) {
    ++asked;
    TestHttpServer::Response response;
    response.content_type = "application/json";
    absl::StatusOr<std::string> token = runs::MintLiveKitToken(
        runs::CallerToken(livekit.api_key(), livekit.api_secret(), "bot-room", "caller"));
    response.body = json{{"room_url", livekit.ws_url()}, {"token", *token}}.dump();
    return response;
  });
  RoomRun r = RunInRoom(json{{"transport", "livekit"},
                             {"room_management", "client"},
                             {"bot_runner_url", bot_runner.url("/start")}},
                        "room_client");
  ASSERT_EQ(r.run["status"], "completed") << r.run.dump();
  EXPECT_EQ(asked.load(), 1);
  ExpectLatency(r.call);
  ASSERT_EQ(livekit.participants().size(), 1u);
  EXPECT_EQ(livekit.participants()[0].room, "bot-room");
}

// A Retell web call is a LiveKit room: the run creates the call (POST /v2/create-web-call) and
// joins the room its access token opens, at the installation's --retell-room-url. The version
// of the agent Retell says takes the call is the run's and the call's platform_version.
TEST(RoomRunTest, RetellWebCallIsJoinedAndScored) {
  FakeLiveKit livekit;
  FakeRoomAgentOptions agent;
  agent.delay = absl::Milliseconds(kAgentDelayMs);
  livekit.EnableMedia(agent);
  FakeRetellServer retell("retell-key");
  retell.AddAgent("agent_room", json{{"agent_name", "Room"}, {"language", "en-US"}}, "llm_room",
                  json{{"general_prompt", "You book cleanings."},
                       {"begin_message", "Hello, how can I help?"},
                       {"start_speaker", "agent"}});
  retell.SetAgentVersion("agent_room", 7);
  retell.HandWebCallsWith([&livekit](const std::string& call_id) {
    return *runs::MintLiveKitToken(runs::CallerToken(livekit.api_key(), livekit.api_secret(),
                                                     "retell-" + call_id, "caller-" + call_id));
  });
  RoomRun r = RunInRoom(
      json{{"transport", "retell"}, {"platform_api_key", "retell-key"}}, "room_retell",
      [&](ServerConfig& config) {
        config.retell_api_url = retell.base_url();
        config.retell_room_url = livekit.ws_url();
      },
      json{{"agent_source", "external_retell"}, {"assistant_id", "agent_room"}});
  ASSERT_EQ(r.run["status"], "completed") << r.run.dump();
  EXPECT_EQ(r.run["platform_version"], "7") << r.run.dump();
  EXPECT_EQ(r.call["platform_version"], "7");
  // The workspace's own label is another thing: this agent has none.
  EXPECT_TRUE(r.run["version"].is_null()) << r.run.dump();
  ExpectLatency(r.call);
  ASSERT_EQ(retell.web_calls().size(), 1u);
  EXPECT_EQ(retell.web_calls()[0]["agent_id"], "agent_room");
  ASSERT_EQ(livekit.participants().size(), 1u);
  EXPECT_EQ(livekit.participants()[0].room, "retell-call_web_1");
  std::cerr << "call metadata: " << r.call["metadata"].dump() << "\n";
}

TEST(RoomRunTest, AServerThatNeverAnswersTheJoinFailsTheRun) {
  FakeLiveKit livekit;
  livekit.EnableMedia({});
  livekit.SetAnswerJoin(false);
  RoomRun r = RunInRoom(RubricChannel(livekit), "room_nojoin");
  ASSERT_EQ(r.run["status"], "failed") << r.run.dump();
  std::cerr << "run error: " << r.run["error"] << "\n";
  EXPECT_THAT(r.run["error"].get<std::string>(), HasSubstr("cannot join the agent's LiveKit room"));
  EXPECT_EQ(livekit.deleted_rooms().size(), 1u);
}

TEST(RoomRunTest, AnAgentThatNeverPublishesFailsTheRun) {
  FakeLiveKit livekit;
  FakeRoomAgentOptions agent;
  agent.publishes = false;
  livekit.EnableMedia(agent);
  RoomRun r = RunInRoom(RubricChannel(livekit), "room_shy");
  ASSERT_EQ(r.run["status"], "failed") << r.run.dump();
  std::cerr << "run error: " << r.run["error"] << "\n";
  EXPECT_THAT(r.run["error"].get<std::string>(), HasSubstr("never published its audio"));
}

TEST(RoomRunTest, AMediaConnectionThatDropsFailsTheRun) {
  FakeLiveKit livekit;
  FakeRoomAgentOptions agent;
  agent.delay = absl::Milliseconds(kAgentDelayMs);
  agent.drop_media_after = absl::Seconds(3);
  livekit.EnableMedia(agent);
  RoomRun r = RunInRoom(RubricChannel(livekit), "room_drop");
  ASSERT_EQ(r.run["status"], "failed") << r.run.dump();
  std::cerr << "run error: " << r.run["error"] << "\n";
  EXPECT_THAT(r.run["error"].get<std::string>(), HasSubstr("media connection"));
}

}  // namespace
}  // namespace calleval

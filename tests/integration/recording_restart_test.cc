// A server stopped in the middle of a recording download gives the download back, and the next
// start finishes it: no call is lost or left stuck.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;

std::unique_ptr<Server> StartServer(const std::string& dir) {
  auto server = Server::Start(testing::TestServerConfig(dir));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(RecordingRestartTest, ShutdownMidDownloadResumesOnNextStart) {
  const std::string dir = testing::MakeTempDir("restart");
  TestHttpServer files;
  // First the recording server stalls: the download is in progress when the server stops.
  files.Delay("/slow.wav", absl::Seconds(120), "late");

  auto server = StartServer(dir);
  ASSERT_TRUE(server);
  const std::string key = server->bootstrap()->key.api_key;
  testing::HttpClient client(server->http_base_url());
  client.set_api_key(key);
  auto agent = client.Post("/api/v1/agents", json{{"name", "a"},
                                                  {"phone_number", "+14155550123"},
                                                  {"language_id", 1},
                                                  {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  auto ingest =
      client.Post("/api/public/v1/calls", json{{"call_identifier", "restart-1"},
                                               {"agent_id", agent.json()["id"]},
                                               {"recording_url", files.url("/slow.wav")}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  for (int i = 0; i < 100 && files.hits("/slow.wav") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(files.hits("/slow.wav"), 1);

  auto started = std::chrono::steady_clock::now();
  server->Shutdown();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));

  // The recording is now available; the next start downloads it.
  std::string wav = "RIFF-restart-" + std::string(5000, 'y');
  files.Serve("/slow.wav", wav, "audio/wav");
  server = StartServer(dir);
  ASSERT_TRUE(server);
  testing::HttpClient again(server->http_base_url());
  again.set_api_key(key);
  json call;
  for (int i = 0; i < 200; ++i) {
    call = again.Get("/api/public/v1/calls/restart-1").json();
    if (!call["presigned_recording_url"].is_null()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(call["presigned_recording_url"].is_string()) << call.dump();
  EXPECT_EQ(again.Get(call["presigned_recording_url"].get<std::string>()).body, wav);
  // The bytes are no audio: the analysis that follows ends the call unsupported_audio.
  for (int i = 0; i < 200 && call["analysis_status"] != "failed"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    call = again.Get("/api/public/v1/calls/restart-1").json();
  }
  EXPECT_EQ(call["failure_reason"], "unsupported_audio");
  server.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calleval

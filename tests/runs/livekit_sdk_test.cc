// The service's LiveKit tokens and the LiveKit stand-in held to LiveKit's official server SDK
// (livekit-server-sdk, pinned in tools/livekit-sdk, installed by scripts/setup, run by
// tests/runs/livekit_sdk_check.js): the SDK's TokenVerifier must accept the tokens the service
// mints, with the claims it meant, and refuse them under another secret; and the SDK's own room
// and dispatch clients must work against the stand-in, so the stand-in accepts what a real
// client sends and answers what a real client reads.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/runs/livekit_api.h"
#include "tests/support/fake_livekit.h"

namespace calleval::runs {
namespace {

using nlohmann::json;

// The SDK's answers to `cases`, in order.
json SdkAnswers(const json& cases) {
  const std::string dir = CALLEVAL_LIVEKIT_SDK_DIR;
  EXPECT_TRUE(std::filesystem::exists(dir + "/node_modules/livekit-server-sdk/package.json"))
      << "LiveKit's server SDK is not installed in " << dir
      << " (run scripts/setup, or `npm ci` there)";
  const std::string file =
      absl::StrCat(testing::TempDir(), "/livekit_sdk_cases_", getpid(), ".json");
  std::ofstream(file) << cases.dump();
  const std::string command =
      absl::StrCat("node '", CALLEVAL_LIVEKIT_SDK_CHECK, "' '", dir, "' '", file, "'");
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  size_t n = 0;
  while (pipe != nullptr && (n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = pipe == nullptr ? -1 : pclose(pipe);
  std::filesystem::remove(file);
  EXPECT_EQ(status, 0) << command << ": " << out;
  json answers = json::parse(out, nullptr, false);
  EXPECT_TRUE(answers.is_array() && answers.size() == cases.size()) << out;
  return answers.is_array() ? answers : json::array();
}

TEST(LiveKitSdkTest, TheSdkVerifiesTheServicesTokens) {
  LiveKitToken caller =
      CallerToken("APIsdkcheck", "sdk-check-secret-0123456789abcdef", "run-5", "calleval-caller-5");
  caller.room_agents = {{"support-agent", "{\"run\":5}"}};
  LiveKitToken server;
  server.api_key = "APIsdkcheck";
  server.api_secret = "sdk-check-secret-0123456789abcdef";
  server.video.room_admin = true;
  server.video.room = "run-5";
  const std::string caller_jwt = MintLiveKitToken(caller).value();
  const std::string server_jwt = MintLiveKitToken(server).value();
  json cases = json::array({
      {{"op", "verify"},
       {"token", caller_jwt},
       {"api_key", "APIsdkcheck"},
       {"api_secret", "sdk-check-secret-0123456789abcdef"}},
      {{"op", "verify"},
       {"token", server_jwt},
       {"api_key", "APIsdkcheck"},
       {"api_secret", "sdk-check-secret-0123456789abcdef"}},
      {{"op", "verify"},
       {"token", caller_jwt},
       {"api_key", "APIsdkcheck"},
       {"api_secret", "another-secret-0123456789abcdef01"}},
      {{"op", "verify"},
       {"token", caller_jwt},
       {"api_key", "APIanotherkey"},
       {"api_secret", "sdk-check-secret-0123456789abcdef"}},
  });
  json answers = SdkAnswers(cases);
  ASSERT_EQ(answers.size(), 4u);
  ASSERT_TRUE(answers[0]["ok"].get<bool>()) << answers[0];
  const json& claims = answers[0]["claims"];
  EXPECT_EQ(claims["iss"], "APIsdkcheck");
  EXPECT_EQ(claims["sub"], "calleval-caller-5");
  EXPECT_EQ(claims["video"], json::parse(R"({"roomJoin": true, "room": "run-5",
      "canPublish": true, "canSubscribe": true, "canPublishData": true})"));
  // The SDK reads roomConfig as LiveKit's RoomConfiguration.
  EXPECT_EQ(claims["roomConfig"]["agents"][0]["agentName"], "support-agent");
  EXPECT_EQ(claims["roomConfig"]["agents"][0]["metadata"], "{\"run\":5}");
  ASSERT_TRUE(answers[1]["ok"].get<bool>()) << answers[1];
  EXPECT_EQ(answers[1]["claims"]["video"], json::parse(R"({"roomAdmin": true, "room": "run-5"})"));
  EXPECT_FALSE(answers[1]["claims"].contains("sub"));
  EXPECT_FALSE(answers[2]["ok"].get<bool>()) << answers[2];
  EXPECT_FALSE(answers[3]["ok"].get<bool>()) << answers[3];
}

TEST(LiveKitSdkTest, TheSdksRoomAndDispatchClientsWorkAgainstTheStandIn) {
  FakeLiveKit livekit;
  json cases = json::array({
      {{"op", "room_api"},
       {"url", livekit.api_url()},
       {"api_key", livekit.api_key()},
       {"api_secret", livekit.api_secret()},
       {"room", "sdk-room"},
       {"agent_name", "sdk-agent"}},
      {{"op", "room_api"},
       {"url", livekit.api_url()},
       {"api_key", livekit.api_key()},
       {"api_secret", "not-the-secret-0123456789abcdef0123"},
       {"room", "refused"},
       {"agent_name", "sdk-agent"}},
  });
  json answers = SdkAnswers(cases);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0]["room"], "sdk-room") << answers[0];
  EXPECT_EQ(answers[0]["dispatch_agent"], "sdk-agent") << answers[0];
  EXPECT_EQ(answers[0]["dispatch_id"].get<std::string>().rfind("AD_", 0), 0u) << answers[0];
  ASSERT_EQ(livekit.dispatches().size(), 1u);
  EXPECT_EQ(livekit.dispatches()[0].agent_name, "sdk-agent");
  EXPECT_EQ(livekit.dispatches()[0].metadata, "sdk");
  EXPECT_EQ(livekit.deleted_rooms(), std::vector<std::string>{"sdk-room"});
  // Under another secret the stand-in refuses, as LiveKit does, and the SDK reports it.
  EXPECT_TRUE(answers[1].contains("error")) << answers[1];
  EXPECT_EQ(answers[1]["status"], 401) << answers[1];
  EXPECT_TRUE(livekit.rooms().empty());
}

}  // namespace
}  // namespace calleval::runs

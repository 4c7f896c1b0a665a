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
#include "common/crypto.h"
#include "livekit/signal.pb.h"
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

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// proto/livekit/signal.proto against LiveKit's own generated classes (@livekit/protocol): frames
// LiveKit encodes read here with the fields they carry, and frames encoded here read there.
TEST(LiveKitSdkTest, TheWireFormatMatchesLiveKitsOwnProtocolClasses) {
  std::vector<livekit::SignalRequest> requests(9);
  requests[0].mutable_offer()->set_type("offer");
  requests[0].mutable_offer()->set_sdp("v=0 publisher");
  requests[0].mutable_offer()->set_id(2);
  requests[1].mutable_answer()->set_type("answer");
  requests[1].mutable_answer()->set_sdp("v=0 subscriber");
  requests[1].mutable_answer()->set_id(4);
  requests[2].mutable_trickle()->set_candidateinit(R"({"candidate":"c","sdpMid":"0"})");
  requests[2].mutable_trickle()->set_target(livekit::SUBSCRIBER);
  requests[2].mutable_trickle()->set_final(true);
  requests[3].mutable_add_track()->set_cid("caller-voice");
  requests[3].mutable_add_track()->set_name("caller");
  requests[3].mutable_add_track()->set_type(livekit::AUDIO);
  requests[3].mutable_add_track()->set_source(livekit::MICROPHONE);
  requests[3].mutable_add_track()->set_disable_red(true);
  requests[4].mutable_leave()->set_reason(livekit::CLIENT_INITIATED);
  requests[4].mutable_leave()->set_action(livekit::LeaveRequest::DISCONNECT);
  requests[5].mutable_ping_req()->set_timestamp(1800000000123);
  requests[5].mutable_ping_req()->set_rtt(30);
  requests[6].set_ping(1800000000123);
  requests[7].mutable_mute()->set_sid("TR_caller");
  requests[7].mutable_mute()->set_muted(true);
  requests[8].mutable_subscription()->add_track_sids("TR_agent");
  requests[8].mutable_subscription()->set_subscribe(true);
  json frames = json::array();
  for (const auto& request : requests) frames.push_back(HexEncode(request.SerializeAsString()));
  json answers = SdkAnswers(
      json::array({{{"op", "encode_responses"}}, {{"op", "decode_requests"}, {"frames", frames}}}));
  ASSERT_EQ(answers.size(), 2u);

  const json& decoded = answers[1];
  ASSERT_EQ(decoded.size(), requests.size()) << decoded;
  EXPECT_EQ(decoded[0], json::parse(R"({"offer": {"type": "offer", "sdp": "v=0 publisher",
                                        "id": 2}})"));
  EXPECT_EQ(decoded[1], json::parse(R"({"answer": {"type": "answer", "sdp": "v=0 subscriber",
                                        "id": 4}})"));
  EXPECT_EQ(decoded[2], json::parse(R"({"trickle": {"candidateInit":
      "{\"candidate\":\"c\",\"sdpMid\":\"0\"}", "target": "SUBSCRIBER", "final": true}})"));
  EXPECT_EQ(decoded[3], json::parse(R"({"addTrack": {"cid": "caller-voice", "name": "caller",
                                        "source": "MICROPHONE", "disableRed": true}})"));
  EXPECT_EQ(decoded[4], json::parse(R"({"leave": {"reason": "CLIENT_INITIATED"}})"));
  EXPECT_EQ(decoded[5], json::parse(R"({"pingReq": {"timestamp": "1800000000123",
                                        "rtt": "30"}})"));
  EXPECT_EQ(decoded[6], json::parse(R"({"ping": "1800000000123"})"));
  EXPECT_EQ(decoded[7], json::parse(R"({"mute": {"sid": "TR_caller", "muted": true}})"));
  EXPECT_EQ(decoded[8], json::parse(R"({"subscription": {"trackSids": ["TR_agent"],
                                        "subscribe": true}})"));

  const json& encoded = answers[0];
  ASSERT_EQ(encoded.size(), 11u) << encoded;
  std::vector<livekit::SignalResponse> responses(encoded.size());
  for (size_t i = 0; i < encoded.size(); ++i) {
    ASSERT_TRUE(responses[i].ParseFromString(FromHex(encoded[i].get<std::string>()))) << i;
  }
  const livekit::JoinResponse& join = responses[0].join();
  EXPECT_EQ(join.room().sid(), "RM_sdk");
  EXPECT_EQ(join.room().name(), "sdk-room");
  EXPECT_EQ(join.room().num_participants(), 2u);
  EXPECT_EQ(join.participant().identity(), "caller");
  ASSERT_EQ(join.other_participants_size(), 1);
  EXPECT_EQ(join.other_participants(0).kind(), livekit::ParticipantInfo::AGENT);
  EXPECT_EQ(join.other_participants(0).state(), livekit::ParticipantInfo::ACTIVE);
  ASSERT_EQ(join.other_participants(0).tracks_size(), 1);
  EXPECT_EQ(join.other_participants(0).tracks(0).source(), livekit::MICROPHONE);
  EXPECT_EQ(join.other_participants(0).tracks(0).mime_type(), "audio/opus");
  EXPECT_EQ(join.server_version(), "1.9.0");
  ASSERT_EQ(join.ice_servers_size(), 1);
  EXPECT_EQ(join.ice_servers(0).urls(0), "turn:turn.example.com:3478");
  EXPECT_EQ(join.ice_servers(0).username(), "u");
  EXPECT_EQ(join.ice_servers(0).credential(), "c");
  EXPECT_TRUE(join.subscriber_primary());
  EXPECT_EQ(join.ping_timeout(), 15);
  EXPECT_EQ(join.ping_interval(), 5);
  EXPECT_EQ(join.server_info().protocol(), 16);
  EXPECT_EQ(join.server_info().region(), "eu");
  EXPECT_EQ(responses[1].offer().sdp(), "v=0 subscriber");
  EXPECT_EQ(responses[1].offer().id(), 4u);
  EXPECT_EQ(responses[1].offer().mid_to_track_id().at("0"), "TR_agent");
  EXPECT_EQ(responses[2].answer().sdp(), "v=0 publisher");
  EXPECT_EQ(responses[3].trickle().candidateinit(), R"({"candidate":"c"})");
  EXPECT_EQ(responses[3].trickle().target(), livekit::SUBSCRIBER);
  EXPECT_TRUE(responses[3].trickle().final());
  EXPECT_EQ(responses[4].track_published().cid(), "caller-voice");
  EXPECT_EQ(responses[4].track_published().track().sid(), "TR_caller");
  EXPECT_EQ(responses[5].pong_resp().last_ping_timestamp(), 1800000000123);
  EXPECT_EQ(responses[5].pong_resp().timestamp(), 1800000000150);
  EXPECT_EQ(responses[6].pong(), 1800000000150);
  EXPECT_EQ(responses[7].leave().reason(), livekit::ROOM_DELETED);
  ASSERT_EQ(responses[8].update().participants_size(), 1);
  EXPECT_EQ(responses[8].update().participants(0).state(), livekit::ParticipantInfo::DISCONNECTED);
  EXPECT_EQ(responses[8].update().participants(0).disconnect_reason(), livekit::AGENT_ERROR);
  EXPECT_EQ(responses[9].refresh_token(), "new-token");
  EXPECT_EQ(responses[10].track_subscribed().track_sid(), "TR_agent");
}

}  // namespace
}  // namespace calleval::runs

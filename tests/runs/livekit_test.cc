// LiveKit rooms without media: access tokens checked independently of the code that mints them,
// the signalling client against a local LiveKit stand-in over a real websocket, the Twirp server
// API's requests as sent, and the bot runner's answers.

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/runs/livekit_api.h"
#include "services/runs/livekit_signal.h"
#include "tests/support/fake_livekit.h"
#include "tests/support/test_http_server.h"

namespace calleval::runs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string FromBase64Url(std::string text) {
  for (char& c : text) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  while (text.size() % 4 != 0) text.push_back('=');
  std::optional<std::string> decoded = Base64Decode(text);
  EXPECT_TRUE(decoded.has_value()) << text;
  return decoded.value_or("");
}

std::string RawHmac(const std::string& key, const std::string& data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return std::string(reinterpret_cast<char*>(mac), len);
}

LiveKitSignalOptions LocalOptions() {
  LiveKitSignalOptions options;
  options.websocket.guard.allowed_hosts = {"127.0.0.1"};
  options.websocket.connect_timeout = absl::Seconds(5);
  options.websocket.field = "web_channel.room_server_url";
  options.join_timeout = absl::Seconds(5);
  return options;
}

UrlGuardOptions LocalGuard() {
  UrlGuardOptions guard;
  guard.allowed_hosts = {"127.0.0.1"};
  return guard;
}

// Polls until a response matches (the stand-in answers within milliseconds; the deadline only
// keeps a broken build from hanging).
livekit::SignalResponse WaitFor(LiveKitSignal& signal,
                                const std::function<bool(const livekit::SignalResponse&)>& match,
                                absl::Time now) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    absl::StatusOr<std::vector<livekit::SignalResponse>> responses =
        signal.Poll(absl::Milliseconds(20), now);
    if (!responses.ok()) {
      ADD_FAILURE() << responses.status();
      return {};
    }
    for (const livekit::SignalResponse& response : *responses) {
      if (match(response)) return response;
    }
  }
  ADD_FAILURE() << "no matching SignalResponse";
  return {};
}

TEST(LiveKitTokenTest, ClaimsAndSignatureCheckIndependently) {
  LiveKitToken token = CallerToken("APIkey123", "s3cret-s3cret", "run-42", "calleval-caller-42");
  token.room_agents = {{"support-agent", "{\"run\":42}"}};
  token.ttl = absl::Minutes(15);
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  absl::StatusOr<std::string> jwt = MintLiveKitToken(token, now);
  ASSERT_TRUE(jwt.ok()) << jwt.status();

  std::vector<std::string> parts = absl::StrSplit(*jwt, '.');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(FromBase64Url(parts[2]), RawHmac("s3cret-s3cret", parts[0] + "." + parts[1]));
  EXPECT_NE(FromBase64Url(parts[2]), RawHmac("another-secret", parts[0] + "." + parts[1]));
  EXPECT_EQ(nlohmann::json::parse(FromBase64Url(parts[0])),
            nlohmann::json::parse(R"({"alg": "HS256", "typ": "JWT"})"));
  nlohmann::json claims = nlohmann::json::parse(FromBase64Url(parts[1]));
  EXPECT_EQ(claims["iss"], "APIkey123");
  EXPECT_EQ(claims["sub"], "calleval-caller-42");
  EXPECT_EQ(claims["nbf"], 1800000000);
  EXPECT_EQ(claims["exp"], 1800000000 + 15 * 60);
  EXPECT_EQ(claims["video"], nlohmann::json::parse(R"({"roomJoin": true, "room": "run-42",
      "canPublish": true, "canSubscribe": true, "canPublishData": true})"));
  EXPECT_EQ(claims["roomConfig"], nlohmann::json::parse(
                                      R"({"agents": [{"agentName": "support-agent",
                                          "metadata": "{\"run\":42}"}]})"));

  // The stand-in's verifier agrees, and refuses the token under another secret or after exp.
  EXPECT_TRUE(VerifyLiveKitToken(*jwt, "APIkey123", "s3cret-s3cret", now).ok());
  EXPECT_FALSE(VerifyLiveKitToken(*jwt, "APIkey123", "wrong", now).ok());
  EXPECT_FALSE(
      VerifyLiveKitToken(*jwt, "APIkey123", "s3cret-s3cret", now + absl::Minutes(16)).ok());
}

TEST(LiveKitTokenTest, ServerTokensHaveNoIdentityAndNeedAKey) {
  LiveKitToken token;
  token.api_key = "APIkey";
  token.api_secret = "secret";
  token.video.room_create = true;
  absl::StatusOr<std::string> jwt = MintLiveKitToken(token);
  ASSERT_TRUE(jwt.ok());
  std::vector<std::string> parts = absl::StrSplit(*jwt, '.');
  nlohmann::json claims = nlohmann::json::parse(FromBase64Url(parts[1]));
  EXPECT_FALSE(claims.contains("sub"));
  EXPECT_EQ(claims["video"], nlohmann::json::parse(R"({"roomCreate": true})"));
  token.api_secret.clear();
  EXPECT_EQ(MintLiveKitToken(token).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LiveKitSignalTest, SignalUrl) {
  LiveKitSignalOptions options;
  EXPECT_EQ(LiveKitSignalUrl("https://example.livekit.cloud/", "a.b+c", options).value(),
            "wss://example.livekit.cloud/rtc?access_token=a.b%2Bc&auto_subscribe=1&sdk=cpp"
            "&version=1.0.0&protocol=16");
  EXPECT_EQ(LiveKitSignalUrl("ws://10.0.0.1:7880", "t", options).value(),
            "ws://10.0.0.1:7880/rtc?access_token=t&auto_subscribe=1&sdk=cpp&version=1.0.0"
            "&protocol=16");
  EXPECT_EQ(LiveKitSignalUrl("wss://h/?x=1", "t", options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LiveKitSignalUrl("wss://h", "", options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LiveKitApiBase("wss://example.livekit.cloud/"), "https://example.livekit.cloud");
  EXPECT_EQ(LiveKitApiBase("ws://127.0.0.1:7880"), "http://127.0.0.1:7880");
}

TEST(LiveKitSignalTest, JoinOfferAnswerTrickleAddTrackPingAndLeave) {
  FakeLiveKit livekit;
  livekit.SetPing(2, 6);
  const std::string token =
      MintLiveKitToken(CallerToken(livekit.api_key(), livekit.api_secret(), "run-7", "caller-7"))
          .value();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::unique_ptr<LiveKitSignal>> joined =
      LiveKitSignal::Join(livekit.ws_url(), token, LocalOptions(), t0);
  ASSERT_TRUE(joined.ok()) << joined.status();
  LiveKitSignal& signal = **joined;
  EXPECT_EQ(signal.join().room().name(), "run-7");
  EXPECT_EQ(signal.join().participant().identity(), "caller-7");
  EXPECT_TRUE(signal.join().subscriber_primary());
  EXPECT_EQ(signal.ping_interval(), absl::Seconds(2));
  EXPECT_EQ(signal.ping_timeout(), absl::Seconds(6));
  ASSERT_EQ(livekit.participants().size(), 1u);
  EXPECT_THAT(livekit.participants()[0].query,
              HasSubstr("&auto_subscribe=1&sdk=cpp&version=1.0.0&protocol=16"));

  // The server's subscriber offer, answered.
  livekit::SignalResponse offer = WaitFor(
      signal, [](const auto& r) { return r.has_offer(); }, t0);
  EXPECT_THAT(offer.offer().sdp(), HasSubstr("fake-livekit-subscriber"));
  ASSERT_TRUE(signal.SendAnswer("v=0\r\ns=caller-subscriber-answer\r\n", offer.offer().id()).ok());

  // The caller's track, announced before the publisher offer.
  ASSERT_TRUE(signal.AddTrack("caller-voice", "caller", livekit::MICROPHONE).ok());
  livekit::SignalResponse published = WaitFor(
      signal, [](const auto& r) { return r.has_track_published(); }, t0);
  EXPECT_EQ(published.track_published().cid(), "caller-voice");
  EXPECT_EQ(published.track_published().track().source(), livekit::MICROPHONE);
  EXPECT_THAT(published.track_published().track().sid(), HasSubstr("TR_"));

  ASSERT_TRUE(signal.SendOffer("v=0\r\ns=caller-publisher-offer\r\n", 3).ok());
  livekit::SignalResponse answer = WaitFor(
      signal, [](const auto& r) { return r.has_answer(); }, t0);
  EXPECT_EQ(answer.answer().type(), "answer");
  EXPECT_EQ(answer.answer().id(), 3u);

  const std::string candidate =
      CandidateInitJson("candidate:1 1 udp 2122260223 192.0.2.10 50000 typ host", "0", 0);
  ASSERT_TRUE(signal.SendTrickle(candidate, livekit::PUBLISHER).ok());
  livekit::SignalResponse trickle = WaitFor(
      signal, [](const auto& r) { return r.has_trickle(); }, t0);
  EXPECT_EQ(trickle.trickle().target(), livekit::PUBLISHER);
  nlohmann::json server_candidate = nlohmann::json::parse(trickle.trickle().candidateinit());
  EXPECT_THAT(server_candidate["candidate"].get<std::string>(), HasSubstr("typ host"));
  EXPECT_EQ(server_candidate["sdpMid"], "0");

  // The first Poll pinged at join time (the clock given to Poll stood at t0 since); its pong
  // has come back by now.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (signal.pongs() < 1 && absl::Now() < deadline) {
    ASSERT_TRUE(signal.Poll(absl::Milliseconds(20), t0).ok());
  }
  EXPECT_EQ(signal.pongs(), 1);
  EXPECT_EQ(signal.last_rtt(), absl::ZeroDuration());
  auto count_pings = [&] {
    int pings = 0;
    for (const auto& r : livekit.requests()) pings += r.has_ping_req() ? 1 : 0;
    return pings;
  };
  // No second ping before the interval; one when it is due, whose pong is read 30 ms later
  // (the round trip is timed by the clock of the Poll that reads the pong: over loopback the
  // stand-in may answer so fast that the Poll which sent the ping reads it too).
  ASSERT_TRUE(signal.Poll(absl::ZeroDuration(), t0 + absl::Seconds(1)).ok());
  EXPECT_EQ(count_pings(), 1);
  ASSERT_TRUE(signal.Poll(absl::ZeroDuration(), t0 + absl::Seconds(2)).ok());
  const absl::Duration expected_rtt =
      signal.pongs() == 2 ? absl::ZeroDuration() : absl::Milliseconds(30);
  while (signal.pongs() < 2 && absl::Now() < deadline) {
    ASSERT_TRUE(signal.Poll(absl::Milliseconds(20), t0 + absl::Milliseconds(2030)).ok());
  }
  EXPECT_EQ(signal.pongs(), 2);
  EXPECT_EQ(count_pings(), 2);
  EXPECT_EQ(signal.last_rtt(), expected_rtt);
  std::vector<livekit::SignalRequest> so_far = livekit.requests();
  int64_t last_ping_timestamp = 0;
  for (const auto& r : so_far) {
    if (r.has_ping_req()) last_ping_timestamp = r.ping_req().timestamp();
  }
  EXPECT_EQ(last_ping_timestamp, absl::ToUnixMillis(t0 + absl::Seconds(2)));

  ASSERT_TRUE(signal.Leave().ok());
  EXPECT_EQ(signal.Poll(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  while (livekit.sessions_ended() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::vector<livekit::SignalRequest> requests = livekit.requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_TRUE(requests.back().has_leave());
  EXPECT_EQ(requests.back().leave().reason(), livekit::CLIENT_INITIATED);
  int answers = 0, offers = 0, tracks = 0, trickles = 0;
  for (const auto& r : requests) {
    if (r.has_answer()) {
      ++answers;
      EXPECT_THAT(r.answer().sdp(), HasSubstr("caller-subscriber-answer"));
      EXPECT_EQ(r.answer().type(), "answer");
    }
    if (r.has_offer()) ++offers;
    if (r.has_add_track()) {
      ++tracks;
      EXPECT_EQ(r.add_track().type(), livekit::AUDIO);
      EXPECT_EQ(r.add_track().name(), "caller");
    }
    if (r.has_trickle()) {
      ++trickles;
      EXPECT_EQ(r.trickle().candidateinit(), candidate);
    }
  }
  EXPECT_EQ(answers, 1);
  EXPECT_EQ(offers, 1);
  EXPECT_EQ(tracks, 1);
  EXPECT_EQ(trickles, 1);
}

TEST(LiveKitSignalTest, NoPongWithinTheTimeoutFails) {
  FakeLiveKit livekit;
  livekit.SetPing(1, 3);
  livekit.SetAnswerPings(false);
  const std::string token =
      MintLiveKitToken(CallerToken(livekit.api_key(), livekit.api_secret(), "r", "c")).value();
  const absl::Time t0 = absl::Now();
  auto signal = LiveKitSignal::Join(livekit.ws_url(), token, LocalOptions(), t0);
  ASSERT_TRUE(signal.ok()) << signal.status();
  EXPECT_TRUE((*signal)->Poll(absl::ZeroDuration(), t0).ok());
  EXPECT_TRUE((*signal)->Poll(absl::ZeroDuration(), t0 + absl::Seconds(3)).ok());
  absl::StatusOr<std::vector<livekit::SignalResponse>> late =
      (*signal)->Poll(absl::ZeroDuration(), t0 + absl::Seconds(4));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(late.status().message(), HasSubstr("no pong"));
}

TEST(LiveKitSignalTest, AServerThatNeverAnswersTheJoinFailsWithinTheTimeout) {
  FakeLiveKit livekit;
  livekit.SetAnswerJoin(false);
  const std::string token =
      MintLiveKitToken(CallerToken(livekit.api_key(), livekit.api_secret(), "r", "c")).value();
  LiveKitSignalOptions options = LocalOptions();
  options.join_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto signal = LiveKitSignal::Join(livekit.ws_url(), token, options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // bounded, not a timing measurement
  EXPECT_EQ(signal.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(signal.status().message(), HasSubstr("did not answer the join within 300ms"));
  EXPECT_EQ(ErrorInfoOf(signal.status()).code(), "livekit_signal_failed");
}

TEST(LiveKitSignalTest, ATokenUnderTheWrongSecretIsRefusedAndNeverQuoted) {
  FakeLiveKit livekit;
  const std::string token =
      MintLiveKitToken(CallerToken(livekit.api_key(), "not-the-secret", "r", "c")).value();
  auto signal = LiveKitSignal::Join(livekit.ws_url(), token, LocalOptions());
  EXPECT_EQ(signal.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(signal.status().message(), Not(HasSubstr(token)));
  EXPECT_THAT(signal.status().message(), HasSubstr("<token>"));
  EXPECT_EQ(livekit.refused_upgrades(), 1);
  EXPECT_TRUE(livekit.participants().empty());
}

TEST(LiveKitSignalTest, TheOutboundUrlRuleApplies) {
  FakeLiveKit livekit;
  const std::string token =
      MintLiveKitToken(CallerToken(livekit.api_key(), livekit.api_secret(), "r", "c")).value();
  LiveKitSignalOptions options = LocalOptions();
  options.websocket.guard.allowed_hosts.clear();
  auto signal = LiveKitSignal::Join(livekit.ws_url(), token, options);
  EXPECT_EQ(signal.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorInfoOf(signal.status()).code(), "url_not_public");
  EXPECT_THAT(signal.status().message(), Not(HasSubstr(token)));
  EXPECT_TRUE(livekit.participants().empty());
  EXPECT_EQ(livekit.refused_upgrades(), 0);
}

TEST(LiveKitServerApiTest, CreateRoomDispatchAndDeleteRequestsAsSent) {
  FakeLiveKit livekit;
  const UrlGuardOptions guard = LocalGuard();
  LiveKitApiOptions options;
  options.url = livekit.api_url();
  options.api_key = livekit.api_key();
  options.api_secret = livekit.api_secret();
  options.guard = &guard;
  LiveKitServerApi api(options);

  absl::StatusOr<LiveKitRoom> room =
      api.CreateRoom("run-9", absl::Seconds(30), 3, {{"support-agent", "{\"run\":9}"}});
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_EQ(room->name, "run-9");
  EXPECT_THAT(room->sid, HasSubstr("RM_"));
  absl::StatusOr<std::string> dispatch = api.CreateDispatch("run-9", "support-agent", "meta");
  ASSERT_TRUE(dispatch.ok()) << dispatch.status();
  EXPECT_THAT(*dispatch, HasSubstr("AD_"));
  ASSERT_TRUE(api.DeleteRoom("run-9").ok());

  std::vector<TestHttpServer::Request> requests = livekit.http().requests();
  ASSERT_EQ(requests.size(), 3u);
  struct Expected {
    const char* path;
    const char* body;
    const char* video;
  };
  const Expected expected[] = {
      {"/twirp/livekit.RoomService/CreateRoom",
       R"({"name": "run-9", "empty_timeout": 30, "max_participants": 3,
           "agents": [{"agent_name": "support-agent", "metadata": "{\"run\":9}"}]})",
       R"({"roomCreate": true})"},
      {"/twirp/livekit.AgentDispatchService/CreateDispatch",
       R"({"agent_name": "support-agent", "room": "run-9", "metadata": "meta"})",
       R"({"roomAdmin": true, "room": "run-9"})"},
      {"/twirp/livekit.RoomService/DeleteRoom", R"({"room": "run-9"})", R"({"roomCreate": true})"},
  };
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(expected[i].path);
    EXPECT_EQ(requests[i].method, "POST");
    EXPECT_EQ(requests[i].path, expected[i].path);
    EXPECT_EQ(requests[i].Header("content-type"), "application/json");
    EXPECT_EQ(nlohmann::json::parse(requests[i].body), nlohmann::json::parse(expected[i].body));
    std::string auth = requests[i].Header("authorization");
    ASSERT_EQ(auth.rfind("Bearer ", 0), 0u);
    absl::StatusOr<nlohmann::json> claims =
        VerifyLiveKitToken(auth.substr(7), livekit.api_key(), livekit.api_secret());
    ASSERT_TRUE(claims.ok()) << claims.status();
    EXPECT_EQ((*claims)["video"], nlohmann::json::parse(expected[i].video));
    EXPECT_LE((*claims)["exp"].get<int64_t>() - (*claims)["nbf"].get<int64_t>(), 5 * 60);
  }
  ASSERT_EQ(livekit.dispatches().size(), 1u);
  EXPECT_EQ(livekit.dispatches()[0].agent_name, "support-agent");
  EXPECT_EQ(livekit.dispatches()[0].room, "run-9");
  EXPECT_TRUE(livekit.rooms().empty());
  EXPECT_EQ(livekit.deleted_rooms(), std::vector<std::string>{"run-9"});
}

TEST(LiveKitServerApiTest, ABadSecretIsRefusedWithLiveKitsMessage) {
  FakeLiveKit livekit;
  LiveKitApiOptions options;
  options.url = livekit.api_url();
  options.api_key = livekit.api_key();
  options.api_secret = "not-the-secret";
  LiveKitServerApi api(options);
  absl::StatusOr<LiveKitRoom> room = api.CreateRoom("run-1", absl::Seconds(30), 2);
  EXPECT_EQ(room.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorInfoOf(room.status()).code(), "livekit_api_failed");
  EXPECT_THAT(room.status().message(),
              HasSubstr("LiveKit CreateRoom failed: HTTP 401 from http://127.0.0.1:"));
  EXPECT_THAT(room.status().message(), HasSubstr(": invalid token signature"));
  EXPECT_THAT(room.status().message(), Not(HasSubstr("\"code\"")));
  EXPECT_EQ(livekit.http().requests().size(), 1u);  // refusals are not retried
  EXPECT_TRUE(livekit.rooms().empty());
}

TEST(LiveKitServerApiTest, DeletingAnUnknownRoomQuotesTwirpsMessage) {
  FakeLiveKit livekit;
  LiveKitServerApi api({livekit.api_url(), livekit.api_key(), livekit.api_secret()});
  absl::Status deleted = api.DeleteRoom("no-such-room");
  EXPECT_EQ(deleted.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(deleted.message(), HasSubstr("HTTP 404"));
  EXPECT_THAT(deleted.message(), HasSubstr("requested room does not exist"));
}

TEST(LiveKitServerApiTest, TheOutboundUrlRuleApplies) {
  FakeLiveKit livekit;
  const UrlGuardOptions guard;  // no private host allowed
  LiveKitApiOptions options;
  options.url = livekit.ws_url();
  options.api_key = livekit.api_key();
  options.api_secret = livekit.api_secret();
  options.guard = &guard;
  absl::StatusOr<LiveKitRoom> room = LiveKitServerApi(options).CreateRoom("r", absl::Seconds(5), 2);
  EXPECT_EQ(room.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorInfoOf(room.status()).code(), "url_not_public");
  EXPECT_TRUE(livekit.http().requests().empty());
}

TEST(BotRunnerTest, ParsesTheCommonAnswers) {
  auto a = ParseBotRunnerAnswer(R"({"url": "wss://lk.example.com", "token": "t1"})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->url, "wss://lk.example.com");
  EXPECT_EQ(a->token, "t1");
  auto b = ParseBotRunnerAnswer(R"({"room_url": "https://lk.example.com", "token": "t2"})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->url, "https://lk.example.com");
  auto c = ParseBotRunnerAnswer(
      R"({"serverUrl": "wss://lk.example.com", "participantToken": "t3", "extra": 1})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->token, "t3");
  for (const char* bad : {"not json", "[]", R"({"token": "t"})", R"({"url": "wss://h"})",
                          R"({"url": 5, "token": "t"})", R"({"url": "ftp://h", "token": "t"})"}) {
    SCOPED_TRACE(bad);
    auto parsed = ParseBotRunnerAnswer(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(ErrorInfoOf(parsed.status()).code(), "bot_runner_bad_answer");
  }
}

TEST(BotRunnerTest, PostsOnceGuardedAndBounded) {
  TestHttpServer runner;
  runner.Serve("/start", R"({"room_url": "wss://lk.example.com", "token": "tok"})",
               "application/json");
  runner.Status("/broken", 500, R"({"error": "no bots left"})");
  const UrlGuardOptions guard = LocalGuard();
  BotRunnerRequest request;
  request.url = runner.url("/start");
  request.body = R"({"createDailyRoom": false})";
  request.headers = {"Authorization: Bearer agent-secret"};
  request.guard = &guard;
  absl::StatusOr<LiveKitRoomAccess> access = RequestBotRunnerRoom(request);
  ASSERT_TRUE(access.ok()) << access.status();
  EXPECT_EQ(access->url, "wss://lk.example.com");
  ASSERT_EQ(runner.requests().size(), 1u);
  EXPECT_EQ(runner.requests()[0].method, "POST");
  EXPECT_EQ(runner.requests()[0].Header("authorization"), "Bearer agent-secret");
  EXPECT_EQ(runner.requests()[0].body, R"({"createDailyRoom": false})");

  request.url = runner.url("/broken");
  absl::StatusOr<LiveKitRoomAccess> broken = RequestBotRunnerRoom(request);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(broken.status().message(), HasSubstr("no bots left"));
  EXPECT_EQ(runner.hits("/broken"), 1);  // a bot runner starts a bot per POST: never retried

  const UrlGuardOptions strict;
  request.guard = &strict;
  EXPECT_EQ(ErrorInfoOf(RequestBotRunnerRoom(request).status()).code(), "url_not_public");
  EXPECT_EQ(runner.hits("/broken"), 1);
}

}  // namespace
}  // namespace calleval::runs

#pragma once

// A local stand-in for a LiveKit server, for tests only: the signalling websocket at /rtc
// speaking LiveKit's protobuf frames (proto/livekit/signal.proto), and the Twirp server API
// (RoomService CreateRoom/DeleteRoom, AgentDispatchService CreateDispatch), both on 127.0.0.1.
// Without media (the default) the SDP it answers with is a placeholder, which is all the
// signalling needs; with EnableMedia() each participant's session is also a test agent on two
// webrtcbin peers (services/runs/webrtc_peer.h) that answers with a known delay.
//
// Like a LiveKit server it checks every token: the HS256 signature under the API secret, iss =
// the API key, nbf/exp, and the grant the request needs (video.roomJoin + room to join,
// roomCreate for CreateRoom/DeleteRoom, roomAdmin + room for CreateDispatch). A bad token is
// refused the way LiveKit refuses it: HTTP 401 on the websocket upgrade, Twirp's
// {"code": "unauthenticated", "msg": ...} on the API.
//
// Signalling: the join is answered with a JoinResponse (the room, the participant, the ping
// interval and timeout set here), followed by the subscriber connection's offer; a publisher
// offer is answered; every trickled candidate is answered with one of the server's own for the
// same connection; AddTrackRequest gets TrackPublishedResponse; pings get pongs; a
// LeaveRequest ends the session.
//
//   FakeLiveKit livekit;
//   LiveKitServerApi api({livekit.api_url(), livekit.api_key(), livekit.api_secret()});
//   api.CreateRoom("run-1", ...);
//   auto signal = LiveKitSignal::Join(livekit.ws_url(), token, options);

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "livekit/signal.pb.h"
#include "nlohmann/json.hpp"
#include "services/runs/websocket_client.h"
#include "tests/support/test_http_server.h"

namespace calleval {

// The claims of a LiveKit token after checking its HS256 signature under `secret`, iss ==
// `api_key` and nbf <= now < exp. kUnauthenticated with the reason otherwise. Uses OpenSSL's
// HMAC directly, apart from the service's own code.
absl::StatusOr<nlohmann::json> VerifyLiveKitToken(const std::string& token,
                                                  const std::string& api_key,
                                                  const std::string& secret,
                                                  absl::Time now = absl::Now());

// The test agent in each room of a stand-in with media: it greets (1.2 s of a 300 Hz tone), then
// answers (1 s of 400 Hz) each time the caller stops speaking, exactly `delay` after the end of
// the caller's last loud frame (by the time it arrived, as an agent's voice activity detector
// hears it). Between its turns it publishes silence, as LiveKit agents do.
struct FakeRoomAgentOptions {
  absl::Duration delay = absl::Milliseconds(600);
  // > 0: once it has heard the caller's first line this long it answers at once, talking over
  // the caller.
  absl::Duration interrupt_after = absl::ZeroDuration();
  // false: the agent joins but never publishes its audio track (the subscriber offer carries no
  // audio).
  bool publishes = true;
  // > 0: this long after the join the agent's media connections stop dead, as a dropped ICE
  // connection does (the signalling stays up).
  absl::Duration drop_media_after = absl::ZeroDuration();
  // > 0: this long after the join the agent leaves the room, which stays open: its media stops
  // and the server tells the caller (a ParticipantUpdate with the agent DISCONNECTED).
  absl::Duration leave_after = absl::ZeroDuration();
};

class FakeLiveKit {
 public:
  struct Dispatch {
    std::string id;
    std::string agent_name;
    std::string room;
    std::string metadata;
  };
  struct Participant {
    std::string identity;
    std::string room;
    std::string query;  // the /rtc query as sent
  };

  explicit FakeLiveKit(std::string api_key = "APIfakeLiveKitKey",
                       std::string api_secret = "fake-livekit-secret-0123456789abcdef");
  ~FakeLiveKit();
  FakeLiveKit(const FakeLiveKit&) = delete;
  FakeLiveKit& operator=(const FakeLiveKit&) = delete;

  const std::string& api_key() const { return api_key_; }
  const std::string& api_secret() const { return api_secret_; }
  // ws://127.0.0.1:<port>: the room URL, where the server API answers too (api_url() is the
  // same API on a port of its own).
  std::string ws_url() const;
  std::string api_url() const { return http_.url(""); }  // http://127.0.0.1:<port>
  TestHttpServer& http() { return http_; }

  // The JoinResponse's ping interval and timeout, seconds.
  void SetPing(int interval_seconds, int timeout_seconds);
  // false: the websocket is upgraded but the join is never answered (a server that hangs).
  void SetAnswerJoin(bool answer);
  // false: pings go unanswered.
  void SetAnswerPings(bool answer);
  // Every session from now on has the test agent's media (see FakeRoomAgentOptions).
  void EnableMedia(FakeRoomAgentOptions agent);
  // The agent's answers so far, over all rooms, and when each one's first frame was sent.
  std::vector<std::chrono::steady_clock::time_point> answers() const;

  std::vector<std::string> rooms() const;  // the rooms that exist, by name
  std::vector<std::string> deleted_rooms() const;
  std::vector<Dispatch> dispatches() const;
  std::vector<Participant> participants() const;  // every accepted join
  // Every SignalRequest received, in order, over all sessions.
  std::vector<livekit::SignalRequest> requests() const;
  int refused_upgrades() const { return refused_upgrades_.load(); }
  int sessions_ended() const { return sessions_ended_.load(); }

 private:
  void AcceptLoop();
  void Serve(int fd);
  void ServeTwirp(int fd);
  void Session(runs::WebSocketConnection& connection, const Participant& participant);
  TestHttpServer::Response HandleTwirp(const TestHttpServer::Request& request);

  const std::string api_key_, api_secret_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> refused_upgrades_{0};
  std::atomic<int> sessions_ended_{0};
  std::atomic<int> next_id_{1};
  mutable std::mutex mu_;
  int ping_interval_ = 5, ping_timeout_ = 15;      // guarded by mu_
  bool answer_join_ = true, answer_pings_ = true;  // guarded by mu_
  bool media_ = false;                             // guarded by mu_
  FakeRoomAgentOptions agent_;                     // guarded by mu_
  std::vector<std::chrono::steady_clock::time_point> answers_;  // guarded by mu_
  std::map<std::string, std::string> rooms_;       // name -> sid; guarded by mu_
  std::vector<std::string> deleted_rooms_;         // guarded by mu_
  std::vector<Dispatch> dispatches_;               // guarded by mu_
  std::vector<Participant> participants_;          // guarded by mu_
  std::vector<livekit::SignalRequest> requests_;   // guarded by mu_
  std::vector<std::thread> sessions_;              // guarded by mu_
  std::thread acceptor_;
  TestHttpServer http_;  // last: stopped first, while the state its handlers use is alive
};

}  // namespace calleval

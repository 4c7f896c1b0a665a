#pragma once

// A client of LiveKit's signalling websocket, for the room caller: the protobuf frames of
// proto/livekit/signal.proto over a WebSocketConnection to
// `<url>/rtc?access_token=<jwt>&auto_subscribe=1&sdk=cpp&version=...&protocol=N`.
//
// The signalling half only: join (the JoinResponse), the SDP offers and answers of the
// publisher and subscriber connections, trickled ICE candidates, AddTrackRequest, pings on the
// interval the server asked for, and leave. The WebRTC peer that produces the SDP and the
// candidates is the caller's.
//
// Single-threaded and poll-driven like WebSocketConnection: the room caller calls Poll() from its
// 20 ms clock; Poll() sends a ping when one is due, consumes pongs, and returns every other
// SignalResponse in arrival order. The outbound-URL rule applies through
// LiveKitSignalOptions::websocket.guard (the host as written and every address it resolves to).
//
//   ASSIGN_OR_RETURN(auto signal, LiveKitSignal::Join(room.url, room.token, options));
//   signal->AddTrack("caller-voice", "caller", livekit::MICROPHONE);
//   signal->SendOffer(publisher_sdp);
//   for (;;) { ASSIGN_OR_RETURN(auto responses, signal->Poll(absl::Milliseconds(20))); ... }

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "livekit/signal.pb.h"
#include "services/runs/websocket_client.h"

namespace calleval::runs {

// The protocol version the client speaks (the `protocol` query parameter). Version 16 is what
// LiveKit's current client SDKs send; the server adapts its messages to it.
inline constexpr int kLiveKitProtocolVersion = 16;

struct LiveKitSignalOptions {
  // The websocket's guard, connect timeout and message cap. `field` names the room URL in
  // errors; set it to the agent's field ("web_channel.room_server_url").
  WebSocketOptions websocket;
  // From the websocket upgrade to the JoinResponse.
  absl::Duration join_timeout = absl::Seconds(10);
  bool auto_subscribe = true;
  std::string sdk = "cpp";
  std::string sdk_version = "1.0.0";
  int protocol = kLiveKitProtocolVersion;
  // Used when the JoinResponse names no ping interval or timeout (older servers).
  absl::Duration default_ping_interval = absl::Seconds(5);
  absl::Duration default_ping_timeout = absl::Seconds(15);
};

// The signalling URL for a room URL (ws://, wss://, http:// or https://; http(s) becomes
// ws(s) as LiveKit's SDKs do) and an access token. The token is URL-encoded.
absl::StatusOr<std::string> LiveKitSignalUrl(absl::string_view room_url, absl::string_view token,
                                             const LiveKitSignalOptions& options);

class LiveKitSignal {
 public:
  // Connects and reads the JoinResponse. Errors: the URL guard's (kInvalidArgument), kUnavailable
  // when the server cannot be reached, refuses the upgrade (a bad token answers 401 there), does
  // not answer within join_timeout, or answers the join with a LeaveRequest. Messages never
  // quote the token.
  static absl::StatusOr<std::unique_ptr<LiveKitSignal>> Join(absl::string_view room_url,
                                                             absl::string_view token,
                                                             const LiveKitSignalOptions& options,
                                                             absl::Time now = absl::Now());
  // Over an open connection (tests; a connection made another way).
  static absl::StatusOr<std::unique_ptr<LiveKitSignal>> JoinOver(
      std::unique_ptr<WebSocketConnection> connection, const LiveKitSignalOptions& options,
      absl::Time now = absl::Now());

  const livekit::JoinResponse& join() const { return join_; }
  absl::Duration ping_interval() const { return ping_interval_; }
  absl::Duration ping_timeout() const { return ping_timeout_; }

  absl::Status SendOffer(absl::string_view sdp, uint32_t id = 0);
  absl::Status SendAnswer(absl::string_view sdp, uint32_t id = 0);
  // `candidate_init` is the JSON RTCIceCandidateInit LiveKit carries
  // (CandidateInitJson() below); `final` marks the end of the candidates.
  absl::Status SendTrickle(absl::string_view candidate_init, livekit::SignalTarget target,
                           bool final = false);
  // Announces a track before the offer that carries it; the server answers with
  // TrackPublishedResponse naming the same cid.
  absl::Status AddTrack(absl::string_view cid, absl::string_view name, livekit::TrackSource source,
                        livekit::TrackType type = livekit::AUDIO);
  // Leaves the room (CLIENT_INITIATED) and closes the websocket; further calls fail.
  absl::Status Leave();
  absl::Status Send(const livekit::SignalRequest& request);

  // Sends a ping when one is due (at join, then every ping_interval), waits up to `wait` for
  // frames, and returns the SignalResponses that arrived, pongs excepted. kUnavailable when the
  // connection closed or no pong came for ping_timeout since the last one (or since join);
  // kDataLoss for a frame that is not a SignalResponse.
  absl::StatusOr<std::vector<livekit::SignalResponse>> Poll(absl::Duration wait,
                                                            absl::Time now = absl::Now());

  // The round trip of the last answered ping; zero before one is answered.
  absl::Duration last_rtt() const { return last_rtt_; }
  int pongs() const { return pongs_; }

 private:
  LiveKitSignal(std::unique_ptr<WebSocketConnection> connection, LiveKitSignalOptions options)
      : connection_(std::move(connection)), options_(std::move(options)) {}
  absl::Status ReadJoin(absl::Time now);
  absl::Status SendPing(absl::Time now);

  std::unique_ptr<WebSocketConnection> connection_;
  LiveKitSignalOptions options_;
  livekit::JoinResponse join_;
  // Responses that arrived with the JoinResponse, returned by the first Poll().
  std::vector<livekit::SignalResponse> pending_;
  absl::Duration ping_interval_;
  absl::Duration ping_timeout_;
  absl::Time next_ping_ = absl::InfinitePast();
  absl::Time last_pong_;  // or the join, before the first pong
  absl::Duration last_rtt_ = absl::ZeroDuration();
  int pongs_ = 0;
  bool left_ = false;
};

// An RTCIceCandidateInit as the JSON LiveKit's TrickleRequest carries:
// {"candidate": "candidate:...", "sdpMid": "0", "sdpMLineIndex": 0}.
std::string CandidateInitJson(absl::string_view candidate, absl::string_view sdp_mid,
                              int sdp_mline_index);

}  // namespace calleval::runs

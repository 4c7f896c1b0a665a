#pragma once

// The simulated caller in a LiveKit room (the web channel's livekit transport, docs/api.md §5):
// a LiveKit client made of the signalling client (livekit_signal.h) and two WebRTC peers
// (webrtc_peer.h), as LiveKit's SDKs hold them. It joins, answers the server's subscriber offer
// (and every re-offer, as the agent's tracks come and go), announces the caller's microphone
// track (AddTrackRequest) and offers it on the publisher connection once the server has
// acknowledged it, trickles ICE candidates both ways, pings, and leaves. The agent's audio is
// decoded to PCM16 mono at 16 or 8 kHz; the caller's voice goes out as Opus.
//
// It is the VoiceMediaLink a voice session ticks over (voice_session.h). A signalling thread
// carries the SDP and candidates and keeps the pings going; the session's thread reads the
// agent's audio and sends the caller's. Errors the session sees, each saying what happened:
//   - the server ends the caller's session (its LeaveRequest), or the last other participant
//     publishing audio (the agent) disconnects while the room stays open (a ParticipantUpdate):
//     kAborted, which the session takes as the agent ending the call;
//   - no audio from the agent within `publish_timeout` of the join: kDeadlineExceeded
//     ("the agent never published its audio ...");
//   - a media connection that fails or drops, or signalling that breaks: kUnavailable with the
//     peer's or the websocket's reason.

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/runs/livekit_api.h"
#include "services/runs/livekit_signal.h"
#include "services/runs/voice_session.h"
#include "services/runs/webrtc_peer.h"

namespace calleval::runs {

struct LiveKitRoomOptions {
  LiveKitSignalOptions signal;
  // Both peers': the address guard, STUN/TURN, local addresses, timeouts. send_audio,
  // data_channels and the sample rates are set by the room.
  WebRtcPeerOptions peer;
  int sample_rate = 16000;  // or 8000
  // From the join to the agent's first audio.
  absl::Duration publish_timeout = absl::Seconds(10);
  // The agent's audio kept ahead of the session; the oldest is dropped beyond it.
  absl::Duration max_queued_audio = absl::Seconds(10);
};

class LiveKitRoomCaller : public VoiceMediaLink {
 public:
  // Joins the room (the signalling websocket's join; the media connects meanwhile). Errors are
  // LiveKitSignal::Join's and the peers' creation's.
  static absl::StatusOr<std::unique_ptr<LiveKitRoomCaller>> Join(const LiveKitRoomAccess& access,
                                                                 const LiveKitRoomOptions& options);
  ~LiveKitRoomCaller() override;

  int sample_rate() const override { return options_.sample_rate; }
  absl::Status Receive(absl::Duration wait, std::deque<int16_t>* agent) override;
  absl::Status Send(absl::Span<const int16_t> frame) override;
  void End(absl::string_view end_reason) override;

  // When the join was answered, and when the agent's first audio arrived (InfinitePast before).
  absl::Time joined_at() const { return joined_at_; }
  absl::Time first_audio_at() const;

  class State;

 private:
  LiveKitRoomCaller(LiveKitRoomOptions options, std::unique_ptr<LiveKitSignal> signal);
  void SignalLoop();

  const LiveKitRoomOptions options_;
  std::unique_ptr<LiveKitSignal> signal_;  // the signalling thread's until End()
  std::shared_ptr<State> state_;           // shared with the peers' callbacks
  std::unique_ptr<WebRtcPeer> subscriber_;
  std::unique_ptr<WebRtcPeer> publisher_;
  absl::Time joined_at_;
  std::unique_ptr<std::thread> signal_thread_;
};

}  // namespace calleval::runs

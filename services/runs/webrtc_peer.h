#pragma once

// One WebRTC PeerConnection on GStreamer's webrtcbin (Debian 12's gstreamer1.0-plugins-bad and
// gstreamer1.0-nice), for the room transports of the web channel (docs/api.md §5). A LiveKit
// client holds two: the publisher, where we offer and send the caller's voice, and the
// subscriber, where the server offers and we receive the agent's. This class is one of them;
// signalling (how SDP and candidates travel) is the caller's.
//
// Media: the caller's PCM16 mono frames go appsrc → audioconvert → audioresample → opusenc →
// rtpopuspay → webrtcbin (a sendonly transceiver); a remote Opus track is decoded rtpopusdepay →
// opusdec → audioconvert → audioresample → appsink to PCM16 mono at the rate the caller asks.
// Data channels: `_reliable` (ordered) and `_lossy` (unordered, no retransmissions), created as
// LiveKit clients do; channels the remote opens are accepted.
//
// The outbound-address rule of docs/api.md §8 applies to ICE: a remote candidate (trickled, or an
// a=candidate line of a remote description) whose address is not public is dropped unless the
// guard's allowed_hosts names it exactly, and a candidate whose address is a name (mDNS ".local")
// is dropped, since only an IP literal can be checked before packets are sent to it.
//
// Threads and bounds: webrtcbin runs its operations on its own thread and libnice its agent on
// another; GStreamer adds streaming threads per element chain. This class adds one watchdog
// thread that ends the connection `kFailed` when it does not connect within connect_timeout and
// `kDisconnected` when nothing arrives for idle_timeout once connected (ICE keepalives are
// handled inside libnice, so a peer that vanished is otherwise noticed only after libnice's
// consent timeout, if ever). Every operation waits at most operation_timeout; the received-audio
// queue and the send queue are capped. No global state beyond gst_init(), run once.
//
// Callbacks run on GStreamer's threads and the watchdog's, never under a lock of this class, and
// two may run at once; they must not destroy the peer.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/url_guard.h"

namespace calleval::runs {

// An RTCIceCandidateInit. An empty `candidate` marks the end of the candidates.
struct IceCandidate {
  std::string candidate;  // "candidate:1 1 UDP 2015363327 203.0.113.7 43877 typ host"
  std::string sdp_mid;
  int sdp_mline_index = 0;
};

enum class PeerState { kNew, kConnecting, kConnected, kDisconnected, kFailed, kClosed };
absl::string_view PeerStateName(PeerState state);

struct WebRtcPeerOptions {
  // Remote candidate addresses: allowed_hosts names the non-public ones allowed (tests:
  // "127.0.0.1"); allowed_schemes is not used.
  UrlGuardOptions guard;
  // "stun://host:port"; empty: no STUN (host and relay candidates only).
  std::string stun_server;
  // "turn://user:password@host:port" or "turns://...", the installation's relays.
  std::vector<std::string> turn_servers;
  // Gather host candidates on these local addresses only; empty: every interface libnice picks.
  std::vector<std::string> local_addresses;

  // An outbound audio track fed by SendAudio() at this rate (PCM16 mono).
  bool send_audio = false;
  int send_sample_rate = 48000;
  // Remote audio decoded to PCM16 mono at this rate.
  int receive_sample_rate = 16000;
  // Decoded audio kept for TakeAudio() when no on_audio callback is set; the oldest is dropped
  // beyond this.
  absl::Duration max_received_audio = absl::Seconds(10);
  // Audio SendAudio() may queue ahead of the encoder; more is refused.
  absl::Duration max_send_queue = absl::Seconds(1);
  // The receive jitter buffer: part of the one-way delay, and what absorbs network jitter.
  absl::Duration jitter_latency = absl::Milliseconds(60);

  // Create `_reliable` and `_lossy` before the offer (the offering side, LiveKit's publisher).
  bool data_channels = false;
  int64_t max_data_message_bytes = 64 * 1024;

  absl::Duration operation_timeout = absl::Seconds(5);
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(10);
};

struct WebRtcPeerCallbacks {
  std::function<void(const IceCandidate&)> on_ice_candidate;
  std::function<void(PeerState state, absl::string_view reason)> on_state;
  // A data channel message: the channel's label, the bytes, and whether it was sent as text.
  std::function<void(absl::string_view label, absl::string_view data, bool text)> on_data;
  // Decoded remote audio as it arrives; when unset it is queued for TakeAudio().
  std::function<void(absl::Span<const int16_t> pcm)> on_audio;
};

class WebRtcPeer {
 public:
  static absl::StatusOr<std::unique_ptr<WebRtcPeer>> Create(const WebRtcPeerOptions& options,
                                                            WebRtcPeerCallbacks callbacks);
  ~WebRtcPeer();
  WebRtcPeer(const WebRtcPeer&) = delete;
  WebRtcPeer& operator=(const WebRtcPeer&) = delete;

  // The offering side: makes the offer and sets it as the local description.
  absl::StatusOr<std::string> CreateOffer();
  // The answering side: sets the remote offer (its disallowed candidates removed), makes the
  // answer and sets it as the local description.
  absl::StatusOr<std::string> AcceptOffer(absl::string_view offer_sdp);
  // The offering side: sets the remote answer.
  absl::Status SetAnswer(absl::string_view answer_sdp);

  // A trickled remote candidate; held until the remote description is set. kInvalidArgument
  // (code url_not_public) when the guard drops it; the connection goes on without it.
  absl::Status AddRemoteCandidate(const IceCandidate& candidate);

  // Caller audio, PCM16 mono at send_sample_rate, in real time (20 ms frames). kUnavailable
  // when the send queue is full or the peer is closed.
  absl::Status SendAudio(absl::Span<const int16_t> pcm);
  // Decoded remote audio queued since the last call (when no on_audio callback is set).
  std::vector<int16_t> TakeAudio();

  // Sends on the named data channel; kFailedPrecondition until it is open.
  absl::Status SendData(absl::string_view label, absl::string_view data, bool text = false);
  bool DataChannelOpen(absl::string_view label) const;

  PeerState state() const;
  // Why the state is final (empty otherwise): "not connected within 10s (2 remote candidates
  // refused by the address guard)", "nothing received for 10.1s", a media error.
  std::string reason() const;
  // Waits until the state is `state` or final (failed, disconnected, closed) or `timeout`
  // passes; returns the state then.
  PeerState WaitForState(PeerState state, absl::Duration timeout) const;

  // Stops the media and the connection: the pipeline to NULL, the watchdog joined. Idempotent;
  // the destructor calls it.
  void Close();

  class Impl;

 private:
  explicit WebRtcPeer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks one remote candidate line (with or without "a=") against the guard: OK, or
// kInvalidArgument naming the address and why it is not allowed.
absl::Status CheckRemoteCandidate(absl::string_view candidate, const UrlGuardOptions& guard);

// The remote SDP with every a=candidate line CheckRemoteCandidate() refuses removed; `dropped`
// (optional) counts them.
absl::StatusOr<std::string> FilterRemoteCandidates(absl::string_view sdp,
                                                   const UrlGuardOptions& guard,
                                                   int* dropped = nullptr);

}  // namespace calleval::runs

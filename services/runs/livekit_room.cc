#include "services/runs/livekit_room.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace calleval::runs {

// Quieter than this (about -50 dBFS) is silence to drop from the agent's queue.
constexpr double kQuietRms = 100;

// The RMS of the first `n` samples.
double FrameRms(const std::deque<int16_t>& pcm, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(pcm[i]) * pcm[i];
  return n == 0 ? 0 : std::sqrt(sum / n);
}

// What the peers' callbacks (GStreamer's threads), the signalling thread and the session's
// thread share.
class LiveKitRoomCaller::State {
 public:
  absl::Mutex mu;
  std::deque<int16_t> audio ABSL_GUARDED_BY(mu);
  size_t max_audio = 0;
  absl::Time first_audio ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // Candidates gathered, waiting for the signalling thread: (target, RTCIceCandidateInit JSON).
  std::vector<std::pair<livekit::SignalTarget, std::string>> outbox ABSL_GUARDED_BY(mu);
  // Set once: the agent's side ended the call (`left`), or the room broke (`error`).
  bool left ABSL_GUARDED_BY(mu) = false;
  absl::Status error ABSL_GUARDED_BY(mu);
  bool idle ABSL_GUARDED_BY(mu) = false;  // the error is a connection gone quiet
  bool stopping ABSL_GUARDED_BY(mu) = false;

  void Fail(absl::Status status, bool quiet = false) {
    absl::MutexLock lock(&mu);
    if (!error.ok() || left) return;
    error = std::move(status);
    idle = quiet;
  }
};

namespace {

WebRtcPeerCallbacks PeerCallbacks(const std::shared_ptr<LiveKitRoomCaller::State>& state,
                                  livekit::SignalTarget target, const char* which) {
  WebRtcPeerCallbacks callbacks;
  callbacks.on_ice_candidate = [state, target](const IceCandidate& c) {
    absl::MutexLock lock(&state->mu);
    state->outbox.emplace_back(target,
                               CandidateInitJson(c.candidate, c.sdp_mid, c.sdp_mline_index));
  };
  callbacks.on_state = [state, which](PeerState s, absl::string_view reason) {
    if (s != PeerState::kFailed && s != PeerState::kDisconnected) return;
    state->Fail(absl::UnavailableError(absl::StrCat("the room's ", which, " media connection ",
                                                    PeerStateName(s), ": ", reason)),
                s == PeerState::kDisconnected);
  };
  if (target == livekit::SUBSCRIBER) {
    callbacks.on_audio = [state](absl::Span<const int16_t> pcm) {
      absl::MutexLock lock(&state->mu);
      if (state->first_audio == absl::InfinitePast()) state->first_audio = absl::Now();
      state->audio.insert(state->audio.end(), pcm.begin(), pcm.end());
      while (state->audio.size() > state->max_audio) state->audio.pop_front();
    };
  }
  return callbacks;
}

}  // namespace

LiveKitRoomCaller::LiveKitRoomCaller(LiveKitRoomOptions options,
                                     std::unique_ptr<LiveKitSignal> signal)
    : options_(std::move(options)), signal_(std::move(signal)), state_(std::make_shared<State>()) {}

absl::StatusOr<std::unique_ptr<LiveKitRoomCaller>> LiveKitRoomCaller::Join(
    const LiveKitRoomAccess& access, const LiveKitRoomOptions& options) {
  if (options.sample_rate != 8000 && options.sample_rate != 16000) {
    return absl::InvalidArgumentError("the room caller's audio runs at 8 or 16 kHz");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LiveKitSignal> signal,
                   LiveKitSignal::Join(access.url, access.token, options.signal));
  std::unique_ptr<LiveKitRoomCaller> room(new LiveKitRoomCaller(options, std::move(signal)));
  room->joined_at_ = absl::Now();
  room->state_->max_audio =
      static_cast<size_t>(absl::ToDoubleSeconds(options.max_queued_audio) * options.sample_rate);

  WebRtcPeerOptions subscriber = options.peer;
  subscriber.send_audio = false;
  subscriber.data_channels = false;
  subscriber.receive_sample_rate = options.sample_rate;
  ASSIGN_OR_RETURN(room->subscriber_,
                   WebRtcPeer::Create(
                       subscriber, PeerCallbacks(room->state_, livekit::SUBSCRIBER, "subscriber")));
  WebRtcPeerOptions publisher = options.peer;
  publisher.send_audio = true;
  publisher.send_sample_rate = options.sample_rate;
  publisher.data_channels = true;
  // The publisher only sends: what comes back is the server's RTCP reports, seconds apart, so
  // its quiet is no sign of a drop. The subscriber, which carries the agent's audio (LiveKit
  // agents publish silence between turns), watches the room's connection instead.
  publisher.idle_timeout = std::max(options.peer.idle_timeout, absl::Minutes(1));
  ASSIGN_OR_RETURN(
      room->publisher_,
      WebRtcPeer::Create(publisher, PeerCallbacks(room->state_, livekit::PUBLISHER, "publisher")));
  // The microphone is announced first; the publisher offer follows the server's
  // TrackPublishedResponse (the signalling thread), as LiveKit's SDKs do.
  RETURN_IF_ERROR(room->signal_->AddTrack("caller-microphone", "caller", livekit::MICROPHONE));
  LiveKitRoomCaller* self = room.get();
  room->signal_thread_ = std::make_unique<std::thread>([self] { self->SignalLoop(); });
  return room;
}

LiveKitRoomCaller::~LiveKitRoomCaller() { End("error"); }

void LiveKitRoomCaller::SignalLoop() {
  bool offered = false;
  // The room's other participants that publish audio (the agent), by sid. When the last of them
  // disconnects while the room stays open (an agent worker leaving, or hanging up), the call is
  // over for the caller as when the server sends it a LeaveRequest.
  const std::string own_sid = signal_->join().participant().sid();
  std::set<std::string> speakers;
  auto publishes_audio = [](const livekit::ParticipantInfo& p) {
    return std::any_of(p.tracks().begin(), p.tracks().end(),
                       [](const livekit::TrackInfo& t) { return t.type() == livekit::AUDIO; });
  };
  for (const livekit::ParticipantInfo& p : signal_->join().other_participants()) {
    if (p.state() != livekit::ParticipantInfo::DISCONNECTED && publishes_audio(p)) {
      speakers.insert(p.sid());
    }
  }
  while (true) {
    std::vector<std::pair<livekit::SignalTarget, std::string>> outbox;
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->stopping) return;
      outbox.swap(state_->outbox);
    }
    for (const auto& [target, init] : outbox) {
      if (absl::Status s = signal_->SendTrickle(init, target); !s.ok()) {
        state_->Fail(absl::UnavailableError(
            absl::StrCat("the room's signalling connection broke: ", s.message())));
        return;
      }
    }
    absl::StatusOr<std::vector<livekit::SignalResponse>> responses =
        signal_->Poll(absl::Milliseconds(10));
    if (!responses.ok()) {
      state_->Fail(absl::UnavailableError(
          absl::StrCat("the room's signalling connection broke: ", responses.status().message())));
      return;
    }
    for (const livekit::SignalResponse& r : *responses) {
      absl::Status s;
      switch (r.message_case()) {
        case livekit::SignalResponse::kOffer: {
          // The subscriber connection: first offered at the join, re-offered as tracks change.
          absl::StatusOr<std::string> answer = subscriber_->AcceptOffer(r.offer().sdp());
          s = answer.ok() ? signal_->SendAnswer(*answer, r.offer().id()) : answer.status();
          break;
        }
        case livekit::SignalResponse::kAnswer:
          s = publisher_->SetAnswer(r.answer().sdp());
          break;
        case livekit::SignalResponse::kTrackPublished:
          if (!offered) {
            offered = true;
            absl::StatusOr<std::string> offer = publisher_->CreateOffer();
            s = offer.ok() ? signal_->SendOffer(*offer) : offer.status();
          }
          break;
        case livekit::SignalResponse::kTrickle: {
          if (r.trickle().final()) break;
          nlohmann::json init = nlohmann::json::parse(r.trickle().candidateinit(), nullptr, false);
          if (!init.is_object() || !init.contains("candidate") || !init["candidate"].is_string()) {
            break;  // not a candidate this client can use
          }
          IceCandidate c;
          c.candidate = init["candidate"].get<std::string>();
          if (init.contains("sdpMid") && init["sdpMid"].is_string()) {
            c.sdp_mid = init["sdpMid"].get<std::string>();
          }
          if (init.contains("sdpMLineIndex") && init["sdpMLineIndex"].is_number_integer()) {
            c.sdp_mline_index = init["sdpMLineIndex"].get<int>();
          }
          // A candidate the address guard refuses is dropped; the connection goes on without
          // it (and says how many it refused if it never connects).
          (void)(r.trickle().target() == livekit::SUBSCRIBER ? subscriber_ : publisher_)
              ->AddRemoteCandidate(c);
          break;
        }
        case livekit::SignalResponse::kUpdate: {
          bool speaker_left = false;
          for (const livekit::ParticipantInfo& p : r.update().participants()) {
            if (p.sid() == own_sid) continue;
            if (p.state() == livekit::ParticipantInfo::DISCONNECTED) {
              speaker_left = speakers.erase(p.sid()) > 0 || speaker_left;
            } else if (publishes_audio(p)) {
              speakers.insert(p.sid());
            }
          }
          if (speaker_left && speakers.empty()) {
            absl::MutexLock lock(&state_->mu);
            state_->left = true;
            return;
          }
          break;
        }
        case livekit::SignalResponse::kLeave: {
          absl::MutexLock lock(&state_->mu);
          state_->left = true;
          return;
        }
        default:
          break;
      }
      if (!s.ok()) {
        state_->Fail(absl::UnavailableError(
            absl::StrCat("the room's connection could not be negotiated: ", s.message())));
        return;
      }
    }
  }
}

absl::Status LiveKitRoomCaller::Receive(absl::Duration wait, std::deque<int16_t>* agent) {
  const absl::Time deadline = absl::Now() + wait;
  absl::MutexLock lock(&state_->mu);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    return !state_->audio.empty() || state_->left || !state_->error.ok();
  };
  state_->mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
  agent->insert(agent->end(), state_->audio.begin(), state_->audio.end());
  state_->audio.clear();
  // The agent's track is continuous (silence between its turns) and the session plays one frame
  // a tick: a burst (the jitter buffer catching up, a late packet) would stay queued for the rest
  // of the call and delay every later turn by that much. Silence not yet played is dropped down
  // to a frame and a half, so the queue holds only a burst of speech.
  const size_t frame = static_cast<size_t>(options_.sample_rate / 50);
  while (agent->size() > frame * 3 / 2 &&
         FrameRms(*agent, std::min(frame, agent->size() - frame * 3 / 2 + frame / 2)) < kQuietRms) {
    agent->erase(agent->begin(),
                 agent->begin() + std::min(frame, agent->size() - frame * 3 / 2 + frame / 2));
  }
  if (state_->left) return absl::AbortedError("the agent left the room");
  const bool never_heard = state_->first_audio == absl::InfinitePast();
  // Connected, but quiet from the start: there is no track to hear.
  if (never_heard && !state_->error.ok() && state_->idle) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the agent never published its audio in the room (", state_->error.message(), ")"));
  }
  if (!state_->error.ok()) return state_->error;
  if (never_heard && absl::Now() - joined_at_ >= options_.publish_timeout) {
    return absl::DeadlineExceededError(
        absl::StrCat("the agent never published its audio in the room (none within ",
                     absl::FormatDuration(options_.publish_timeout), " of the join)"));
  }
  return absl::OkStatus();
}

absl::Status LiveKitRoomCaller::Send(absl::Span<const int16_t> frame) {
  // Frames before the publisher connects are dropped, as a microphone's are before a call
  // connects: queued, they would stay ahead of every later frame and delay the caller's voice
  // for the rest of the call. A connection that ended is Receive()'s to report.
  if (publisher_->state() != PeerState::kConnected) return absl::OkStatus();
  (void)publisher_->SendAudio(frame);
  return absl::OkStatus();
}

absl::Time LiveKitRoomCaller::first_audio_at() const {
  absl::MutexLock lock(&state_->mu);
  return state_->first_audio;
}

void LiveKitRoomCaller::End(absl::string_view) {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
  }
  if (signal_thread_ != nullptr) signal_thread_->join();
  if (signal_ != nullptr) (void)signal_->Leave();
  if (publisher_ != nullptr) publisher_->Close();
  if (subscriber_ != nullptr) subscriber_->Close();
}

}  // namespace calleval::runs

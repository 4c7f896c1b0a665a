#pragma once

// The far end of a fake carrier's media stream, shared by the local Twilio, Telnyx and Plivo
// (fake_twilio_server.h, fake_carriers.h): the carrier's side of the media websocket, paced in
// real time, bridged to a test agent. The agent greets, then answers each time the caller stops
// speaking, exactly `delay` after the end of the caller's last loud frame (by the time it
// arrived, as a bot's voice activity detector hears it). What the carrier says on the wire is
// the dialect's; the pacing, the agent and the playback clock (marks come back once the audio
// before them has played, a clear drops what is queued) are common.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "services/runs/websocket_client.h"

namespace calleval {

// One carrier's media stream messages, as the carrier sends and reads them.
class FakeStreamDialect {
 public:
  virtual ~FakeStreamDialect() = default;
  // What the carrier sends once the websocket is open (connected, start ...).
  virtual std::vector<std::string> Opening() = 0;
  // One 20 ms frame of the agent's voice, 8 kHz mu-law; `elapsed_ms` since the stream began.
  virtual std::string Media(const std::string& mulaw, int64_t elapsed_ms) = 0;
  // The answer to the application's mark (checkpoint) `name` once what preceded it has played.
  virtual std::string Played(const std::string& name) = 0;
  // The end of the stream, or empty when the carrier just closes the websocket.
  virtual std::string Stop() = 0;

  // A message from the application.
  struct Heard {
    enum Kind { kMedia, kMark, kClear, kOther };
    Kind kind = kOther;
    std::string mulaw;  // kMedia
    std::string name;   // kMark
  };
  virtual Heard Read(const std::string& message) = 0;
};

struct FakeAgentOptions {
  absl::Duration delay = absl::Seconds(1);
  // An answering machine: a longer greeting, never an answer; `machine_heard` is called once
  // the carrier's detection would have heard it (1.8 s in).
  bool machine = false;
  std::function<void()> machine_heard;
  // > 0: the agent hangs up after this many answers (once the last one has been said).
  int hang_up_after_answers = 0;
  // > 0: the agent interrupts on cue: once it has heard the caller's first line this long it
  // answers at once, talking over the caller, and says its whole answer whatever the caller
  // does meanwhile (the caller's voice meanwhile is not a new line to answer).
  absl::Duration interrupt_after = absl::ZeroDuration();
  // Set when the call is hung up from elsewhere (the service asked the carrier to).
  const std::atomic<bool>* hangup = nullptr;
  // Told when each frame of the caller's audio arrived from the service (the pacing benchmark
  // measures its jitter from these); may be unset.
  std::function<void(std::chrono::steady_clock::time_point)> media_arrived;
};

// Reads an application's message in the shape Twilio Media Streams and Telnyx media streaming
// share: {"event": "media", "media": {"payload": base64}}, {"event": "mark", "mark": {"name"}},
// {"event": "clear"}; anything else is kOther.
FakeStreamDialect::Heard ReadTwilioShapedMessage(const std::string& message);

// What happened on the stream, as it happens (called on the stream's thread).
// kTalkedOverAfterClear: a loud frame of the caller arrived after the application's clear while
// the agent was still saying the answer it interrupted with (a caller that yielded sends none).
enum class FakeAgentNote { kAnswered, kMarkPlayed, kCleared, kTalkedOverAfterClear, kStopSent };

// How the stream ended.
enum class FakeCallEnd { kAgentHungUp, kHungUpElsewhere, kStreamClosed };

// Plays the call on `ws` until it is hung up (by the agent, `hangup`, or the service closing the
// websocket); at most 2 minutes.
FakeCallEnd PlayFakeAgent(runs::WebSocketConnection& ws, FakeStreamDialect& dialect,
                   const FakeAgentOptions& options,
                   const std::function<void(FakeAgentNote)>& note);

// Opens the media websocket at `ws_url` again, as a replay would: the HTTP status of the
// upgrade's answer (101 when it was accepted, 0 when nothing answered).
int MediaUpgradeStatus(const std::string& ws_url);

}  // namespace calleval

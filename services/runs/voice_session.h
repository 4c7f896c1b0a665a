#pragma once

// The voice caller (docs/api.md §5): over an open websocket the service plays a phone caller in
// real time, 20 ms at a time. Over the web channel it dials the agent and plays the media
// server's side of Twilio Media Streams (JSON events, 8 kHz mu-law) or raw PCM16 (binary frames
// of 16 kHz mono little-endian samples); over the phone channel the carrier dials the agent and
// streams the call to the service, which is then the application's side of the carrier's media
// dialect (services/runs/carrier.h). Either way one turn-taking loop says each line of
// the caller's script through the speech synthesizer once the agent has finished speaking
// (voice activity on what the agent sent), and records both sides on one clock: the agent as
// its audio plays out (a burst is played at real speed, as a phone line would), the caller as
// it is sent.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "calleval/v1/calls.pb.h"
#include "services/runs/carrier.h"
#include "services/runs/speech_synthesizer.h"
#include "services/runs/websocket_client.h"

namespace calleval::runs {

// The caller's next line when it is not scripted: `last` ends the conversation after it (the
// caller's goal is reached); an empty `text` with `last` ends it at once.
struct NextCallerLine {
  std::string text;
  bool last = false;
};
// Given the conversation so far (the agent's turns as transcribed, the caller's lines).
using NextCallerLineFn =
    std::function<absl::StatusOr<NextCallerLine>(const std::vector<v1::Turn>& conversation)>;
// What the agent said in one turn of audio (mono PCM16 at `sample_rate`).
using TranscribeFn = std::function<absl::StatusOr<std::string>(const std::vector<int16_t>& audio,
                                                                int sample_rate)>;

struct VoiceSessionOptions {
  std::string protocol = "twilio_media_streams";  // or pcm16
  std::vector<std::string> caller_lines;          // said in order
  // Without caller_lines: each line comes from next_line once the agent's turn is transcribed
  // (both run beside the session's clock, which keeps playing the agent meanwhile).
  NextCallerLineFn next_line;
  TranscribeFn transcribe;
  bool agent_speaks_first = true;
  int max_turns = 20;  // caller lines
  absl::Duration max_duration = absl::Minutes(10);
  // The agent has finished its turn once it has been silent this long after speaking.
  absl::Duration end_of_agent_turn = absl::Milliseconds(800);
  // How long the caller waits for the agent to start answering before it goes on (or ends).
  absl::Duration answer_timeout = absl::Seconds(8);
  std::string auth_token;  // Twilio: start.customParameters.auth_token
  // Sent as a text frame just before the session closes the websocket, when the session ends the
  // call (not when it was cancelled or the agent's side closed first): a platform's own way of
  // ending the call (Vapi's {"type":"hangup"}), which a bare close might leave running and billed.
  std::string hangup_message;
  // The phone channel: the carrier's media dialect, the service being the application's side
  // (`protocol` is then unused). The session waits up to answer_timeout for the stream's start,
  // sends a mark after each caller line, and ends `agent_ended` on the carrier's stop.
  MediaDialect* dialect = nullptr;
  // The phone channel only: the caller yields as a person would when the agent talks over it.
  // Once the agent's voice has been heard this long without a break while the caller is in the
  // middle of a line, the caller drops the rest of the line, asks the carrier to clear what it
  // still holds of it, and is silent until the agent's turn is over. Zero never yields.
  absl::Duration barge_in_after = absl::Milliseconds(300);
  // Asked every tick: an end reason once the call ended outside the stream (the carrier's
  // webhooks), which ends the session with it; empty otherwise.
  std::function<std::string()> line_ended;
  const std::atomic<bool>* cancel = nullptr;
};

struct VoiceRecording {
  int sample_rate = 8000;
  std::vector<int16_t> agent;   // left channel
  std::vector<int16_t> caller;  // right channel
  // script_finished | goal_reached | max_turns | max_duration | agent_ended
  std::string end_reason;
  // The phone channel: the carrier's call id as the stream's start named it, and how many of
  // the marks sent after the caller's lines the carrier said had played.
  std::string call_id;
  int marks_played = 0;
  // The phone channel: how many lines the caller cut short because the agent talked over it.
  int barge_ins = 0;
  // The conversation as the caller knew it: its lines and the agent's turns as transcribed
  // (LLM-played callers only).
  std::vector<v1::Turn> conversation;
};

// Holds the conversation until it ends; kCancelled when `cancel` became true.
absl::StatusOr<VoiceRecording> RunVoiceSession(WebSocketConnection& connection,
                                               SpeechSynthesizer& synthesizer,
                                               const VoiceSessionOptions& options);

// The media a voice session ticks over when it is not a websocket (a LiveKit room,
// services/runs/livekit_room.h): PCM16 mono both ways at sample_rate(). The session calls it from
// its own thread only, once per 20 ms tick.
class VoiceMediaLink {
 public:
  virtual ~VoiceMediaLink() = default;
  virtual int sample_rate() const = 0;
  // Waits up to `wait` for the agent's audio and appends what arrived since the last call to
  // `agent`; returns at the first arrival (the session's clock keeps the arrival times). kAborted
  // once the agent's side ended the call (the agent left); any other error ends the session
  // with it.
  virtual absl::Status Receive(absl::Duration wait, std::deque<int16_t>* agent) = 0;
  // One 20 ms frame of the caller. kAborted once the agent's side ended the call.
  virtual absl::Status Send(absl::Span<const int16_t> frame) = 0;
  // The session is over (`end_reason`, or "cancelled"/"error"): leave the call.
  virtual void End(absl::string_view end_reason) = 0;
};

// The same conversation over a media link (options.protocol, auth_token, hangup_message,
// dialect and barge_in_after are unused: the web channel's caller says its lines out).
absl::StatusOr<VoiceRecording> RunVoiceSession(VoiceMediaLink& link, SpeechSynthesizer& synthesizer,
                                               const VoiceSessionOptions& options);

// A canonical stereo PCM16 WAV file: agent left, caller right.
std::string EncodeStereoWav(const VoiceRecording& recording);

}  // namespace calleval::runs

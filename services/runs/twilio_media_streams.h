#pragma once

// Twilio Media Streams, the JSON events a bidirectional <Stream> exchanges over a websocket
// (https://www.twilio.com/docs/voice/media-streams/websocket-messages). In a websocket run the
// service plays Twilio's side, the caller: it sends `connected`, `start`, `media` (base64
// 8 kHz mu-law, 20 ms frames, track "inbound"), `mark` and `stop`; the agent answers with
// `media` (its speech), `mark` (to learn when its audio has played) and `clear` (barge-in:
// drop the audio not yet played).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace calleval::runs {

inline constexpr int kTwilioSampleRate = 8000;
inline constexpr int kTwilioFrameSamples = 160;  // 20 ms

// Builds the caller side's messages. `sequence` counts every message sent on the stream from 1;
// `timestamp_ms` is the media's position in the stream.
class TwilioStreamWriter {
 public:
  TwilioStreamWriter(std::string stream_sid, std::string call_sid, std::string account_sid);

  std::string Connected();
  // `parameters`: customParameters (e.g. the agent's auth_token when one is set).
  std::string Start(const std::vector<std::pair<std::string, std::string>>& parameters);
  // One frame of mu-law bytes.
  std::string Media(absl::string_view mulaw, int64_t timestamp_ms);
  std::string Mark(absl::string_view name);
  std::string Stop();

  const std::string& stream_sid() const { return stream_sid_; }

 private:
  std::string Next();  // the next sequenceNumber, as Twilio sends it (a string)

  const std::string stream_sid_, call_sid_, account_sid_;
  int64_t sequence_ = 0;
  int64_t chunk_ = 0;
};

// An event the agent sent.
struct TwilioAgentEvent {
  enum Kind { kMedia, kMark, kClear, kOther };
  Kind kind = kOther;
  std::string mulaw;  // kMedia: the decoded payload
  std::string mark;   // kMark: its name
  std::string event;  // the event name as sent
};

// Reads one message from the agent; an error for what is not a Twilio Media Streams event
// (not JSON, no `event`, a media payload that is not base64).
absl::StatusOr<TwilioAgentEvent> ParseTwilioAgentEvent(absl::string_view message);

}  // namespace calleval::runs

#pragma once

// Text-to-speech for simulated callers (docs/api.md §7): the embedded synthesizer (eSpeak NG,
// Debian's libespeak-ng) by default. Audio comes out as mono PCM16 at the rate the channel needs (8
// kHz for Twilio Media Streams).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace calleval::runs {

class SpeechSynthesizer {
 public:
  virtual ~SpeechSynthesizer() = default;
  // `text` spoken at `sample_rate`; empty text gives no samples.
  virtual absl::StatusOr<std::vector<int16_t>> Synthesize(const std::string& text,
                                                          int sample_rate) = 0;
};

struct EspeakOptions {
  std::string voice = "en-us";  // an eSpeak NG voice name; the agent's `voice` when it is one
  int words_per_minute = 165;
};

// eSpeak NG keeps process-wide state, so every EspeakSynthesizer shares one engine behind a
// mutex; synthesis takes a few milliseconds per second of speech.
std::unique_ptr<SpeechSynthesizer> NewEspeakSynthesizer(EspeakOptions options = {});

// Any OpenAI-compatible POST {base_url}/audio/speech (docs/api.md §7): the text in, raw PCM out
// (response_format "pcm": 24 kHz mono 16-bit little-endian), resampled to the rate asked for.
// Requests are bounded (10 s to connect, `request_timeout` per attempt, 16 MiB answers) and
// retried on 429/5xx with backoff. Errors carry the code tts_error (kFailedPrecondition when
// the provider refused, kUnavailable when it could not be reached), tts_bad_response for an
// answer that is not audio, tts_cancelled.
struct OpenAiSpeechConfig {
  std::string base_url;  // "https://api.openai.com/v1"
  std::string api_key;
  std::string model = "tts-1";
  std::string voice = "alloy";
  absl::Duration request_timeout = absl::Seconds(60);
  int max_attempts = 3;
  absl::Duration initial_backoff = absl::Seconds(1);
  const std::atomic<bool>* cancel = nullptr;
};
std::unique_ptr<SpeechSynthesizer> NewOpenAiSpeechSynthesizer(OpenAiSpeechConfig config);

// Mono PCM16 from one rate to another (FFmpeg's resampler).
absl::StatusOr<std::vector<int16_t>> ResamplePcm16(absl::Span<const int16_t> samples, int from_rate,
                                                   int to_rate);

}  // namespace calleval::runs

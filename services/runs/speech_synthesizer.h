#pragma once

// Text-to-speech for simulated callers (SPEC §7): the embedded synthesizer (eSpeak NG, Debian's
// libespeak-ng) by default. Audio comes out as mono PCM16 at the rate the channel needs (8 kHz
// for Twilio Media Streams).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

// Mono PCM16 from one rate to another (FFmpeg's resampler).
absl::StatusOr<std::vector<int16_t>> ResamplePcm16(absl::Span<const int16_t> samples, int from_rate,
                                                   int to_rate);

}  // namespace calleval::runs

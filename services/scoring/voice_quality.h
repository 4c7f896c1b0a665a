#pragma once

// Quality of the agent's voice (docs/metrics.md ids 8 and 9), from the agent channel:
//  - voice_tone_clarity: speech level, signal-to-noise ratio and clipping, banded into a 1-5
//    score (bands in docs/metrics.md);
//  - voice_change_detection: whether the agent's voice changes during the call, from the pitch
//    and the timbre (mel-frequency cepstra of the voiced frames) of the agent's turns. Pitch
//    alone misses two speakers of the same pitch and mistakes one voice speaking higher for
//    another; the spectral envelope is the speaker's (rule and thresholds: docs/metrics.md §7).
// Streaming: only a few numbers per 10 ms frame are kept, and 12 bytes of cepstrum per voiced
// analysed frame (every fourth frame at most), never the audio.

#include <array>
#include <cstdint>
#include <vector>

#include "calleval/v1/calls.pb.h"
#include "services/scoring/timeline.h"

namespace calleval::scoring {

class VoiceQualityAnalyzer {
 public:
  explicit VoiceQualityAnalyzer(int sample_rate);

  // The next `frames` samples of the agent's channel.
  void Feed(const float* samples, size_t frames);

  // Results for the agent's turns (not_applicable when the agent never speaks).
  v1::StandardMetricResult Clarity(const std::vector<Span>& agent_turns) const;
  v1::StandardMetricResult VoiceChange(const std::vector<Span>& agent_turns) const;

 private:
  struct Frame {
    float level_db;  // RMS of the frame, dBFS
    float f0_hz;     // 0 when unvoiced or not analysed
  };
  // Mel-frequency cepstral coefficients 1..kCepstra of one voiced analysed frame.
  static constexpr int kCepstra = 12;
  struct Timbre {
    uint32_t frame;                  // index into frames_
    std::array<int8_t, kCepstra> c;  // in steps of kCepstrumStep
  };
  void AnalyzeFrame();
  // Median F0 of the voiced frames inside `span`, 0 when there are too few.
  double MedianF0(const Span& span) const;

  int sample_rate_;
  size_t frame_size_;
  std::vector<float> pending_;  // samples of the frame being filled
  std::vector<Frame> frames_;
  std::vector<Timbre> timbre_;  // voiced analysed frames only, in frame order
  int64_t clipped_samples_in_frames_ = 0;
  std::vector<int32_t> clipped_per_frame_;
  float loudest_db_ = -120;
};

}  // namespace calleval::scoring

#pragma once

// The shapes the audio pass hands from one stage to the next: speech segments per channel
// (voice activity), then turns per party (pauses under 700 ms merged), then metrics.

#include <array>
#include <vector>

namespace calleval::scoring {

// A stretch of time in seconds from the start of the recording, end > start.
struct Span {
  double start_s = 0;
  double end_s = 0;
  double duration_s() const { return end_s - start_s; }
};

// Speech found on one channel, in time order, not overlapping.
using SpeechSegments = std::vector<Span>;

// Both parties' turns over a recording of `duration_s` seconds.
struct CallTimeline {
  std::vector<Span> agent;
  std::vector<Span> user;
  double duration_s = 0;
};

// Which channel holds which party (docs/metrics.md: agent left (0), caller right (1) by default).
struct ChannelMap {
  int agent = 0;
  int user = 1;
};

inline constexpr int kWorkingSampleRate = 16000;

}  // namespace calleval::scoring

#pragma once

// Streaming, per-channel voice activity detection for the audio pass.
//
// The detector keeps only a few numbers per 5 ms hop (the energy of each channel and the
// cross-product of the two channels), never the audio itself, so a 60-minute stereo call costs
// about 8 MB. All decisions are taken in Finish() from that feature history:
//
//  * Crosstalk: the corpus (and real stereo recordings) leak each party into the other channel,
//    20-35 dB down and time-aligned. A channel has leakage when, in frames where the other
//    channel dominates, the two are coherent (independent noise and codec artefacts are not).
//    On such a channel, the part of every frame that is a scaled copy of a louder other channel
//    (least squares over the frame) is removed, and frames that are still only a quiet shadow
//    of the other channel are dropped by an energy-difference rule. Channels without leakage
//    keep their quiet speech under a loud other party.
//  * Noise: the noise floor of each channel is a low percentile of its own-energy history.
//  * Speech: frames well above the floor (and within 35 dB of the channel's speech peak) start a
//    segment; segments are then grown backwards and forwards (at most max_extension_ms) while
//    the frame level stays above a lower hysteresis threshold or a smoothed level curve stays
//    just above its own floor (backwards: the smoothing window ends at the candidate frame, so
//    the speech itself does not lift it), so weak word starts and trailing sounds that sink
//    into noise are not clipped; the edges are then trimmed to frames that are themselves above
//    the hysteresis threshold.
//  * Word-final stops: segments with a core under 30 ms are clicks and dropped, but a frame
//    clearly above the floor within release_search_ms after a segment is a stop's release after
//    its closure (the closure, and in noise the fricative before it, being near silence), and
//    extends the segment through it. docs/metrics.md (the audio pass) says why.
//  * Boundaries are interpolated between hops to a few milliseconds.
//
// Measured with tests/scoring/vad_eval.cc over 28 stereo calls (380 turns; 23 synthesised, 5
// of recorded human speech): turn boundary error median 1.7 ms, p95 11.4 ms; no missed or
// extra turns.

#include <array>
#include <cstddef>
#include <vector>

#include "services/scoring/timeline.h"

namespace calleval::scoring {

struct VoiceActivityOptions {
  // Hop between analysis frames and length of each frame (frame RMS every hop).
  double hop_ms = 5.0;
  double frame_ms = 10.0;
  // Second-order high-pass applied before analysis (removes DC offset and rumble); 0 disables.
  double highpass_hz = 100.0;
  // Percentile (0-100) of the frame own-energy history taken as the noise floor.
  double noise_floor_percentile = 10.0;
  // Percentile (0-100) of the frames above the onset threshold taken as the speech peak level.
  double speech_peak_percentile = 99.0;
  // Frames this far above the noise floor start speech...
  double onset_margin_db = 10.0;
  // ... and speech extends while frames stay this far above the floor.
  double hangover_margin_db = 3.0;
  // Hangover on a smoothed level curve: frames whose mean energy over +-smoothing_half_width
  // frames is this far above the (smoothed) floor also extend speech.
  int smoothing_half_width = 6;
  double smoothed_margin_db = 1.5;
  // Speech extends at most this far beyond frames above the onset threshold.
  double max_extension_ms = 300.0;
  // Speech is never taken more than this far below the channel's speech peak (the corpus's
  // definition: frame RMS within 35 dB of the loudest frame).
  double peak_range_db = 35.0;
  // Lower bound of any threshold, in dBFS (digital silence, dither).
  double absolute_floor_dbfs = -70.0;
  // A channel carries crosstalk when, in frames where the other channel is much louder, the
  // median coherence (squared normalised cross-correlation) of the two is at least this.
  double crosstalk_min_coherence = 0.05;
  // On such a channel, a frame is crosstalk when the other channel is at least this much
  // louder ...
  double crosstalk_min_difference_db = 15.0;
  // ... and this channel's own energy is not clearly above the expected leakage, i.e. the
  // other channel's level minus this many dB.
  double crosstalk_leak_db = 20.0;
  // Segments whose core (frames above the onset threshold) is shorter than this are dropped...
  double min_core_ms = 30.0;
  // ... unless they follow a segment within this long: a word-final stop's release after its
  // closure. The search takes frames at least release_margin_db above the noise floor.
  double release_search_ms = 300.0;
  double release_margin_db = 6.0;
  // Gaps between speech segments shorter than this are closed.
  double min_gap_ms = 60.0;
  // Filter with fused multiply-add where the CPU has it (off: the plain loop every CPU runs,
  // which tests compare with).
  bool fused_multiply_add = true;
};

class VoiceActivityDetector {
 public:
  // `channels` is 1 or 2; `sample_rate` is the rate of the fed samples (normally
  // kWorkingSampleRate).
  VoiceActivityDetector(int sample_rate, int channels, VoiceActivityOptions options = {});

  // Feeds the next block: block[c] has `frames` samples of channel c (c < channels).
  void Feed(const std::array<std::vector<float>, 2>& block, size_t frames);

  // After the last Feed: speech segments per channel (time order, in seconds, not
  // overlapping). Index = channel; an absent channel has no segments.
  std::array<SpeechSegments, 2> Finish();

 private:
  // Direct form I: the feedback from the last output is one multiply and one add, and the
  // output before it joins the sum one step earlier, so neither lengthens the chain each sample
  // waits on. (The transposed form II's chain is four operations long, and this filter runs on
  // every sample of both channels: its latency was the detector's whole cost.)
  struct Biquad {
    double b0 = 1, b1 = 0, b2 = 0, a1 = 0, a2 = 0;
    double x1 = 0, x2 = 0, y1 = 0, y2 = 0;
    double Process(double x) {
      const double feed = ((b0 * x + b1 * x1) + b2 * x2) - a2 * y2;
      const double y = feed - a1 * y1;
      x2 = x1;
      x1 = x;
      y2 = y1;
      y1 = y;
      return y;
    }
  };

  // n samples of both channels through their filters, adding to the hop's sums, with fused
  // multiply-add (call only where the CPU has it).
  static void FilterStereoFma(const float* in0, const float* in1, size_t n, Biquad* f0, Biquad* f1,
                              double* e0, double* e1, double* cross);
  // Closes the current hop and stores its features.
  void EndHop();
  // Speech segments of one channel from its per-frame own level (dB).
  SpeechSegments DetectChannel(const std::vector<float>& level_db) const;

  int sample_rate_;
  int channels_;
  VoiceActivityOptions options_;
  size_t hop_samples_;
  size_t hops_per_frame_;
  std::array<Biquad, 2> filters_;

  // Accumulators of the hop in progress.
  size_t hop_fill_ = 0;
  std::array<double, 2> hop_energy_{0, 0};
  double hop_cross_ = 0;

  // Feature history, one entry per completed hop.
  std::array<std::vector<float>, 2> energy_;
  std::vector<float> cross_;
};

}  // namespace calleval::scoring

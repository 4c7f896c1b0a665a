#pragma once

// The peaks a dashboard draws a recording's waveform from, computed while the audio pass
// streams the decoded audio: per channel (the file's order), a fixed number of buckets over the
// whole call, each the lowest and the highest sample in it as int8. Memory stays flat with the
// length of the call: at most 2 × max_buckets buckets per channel are held.
//
// The length is not known while decoding (a stream may not say it, and FFmpeg's estimate is not
// exact), so the buckets are first of a fine fixed width (sample_rate / buckets_per_second
// samples: 20 ms at the default 50 a second). When a channel holds 2 × max_buckets of them,
// neighbours are merged pairwise and the width doubles. At the end:
// - when the held buckets are as many as the answer has (always for a recording of at most
//   max_buckets fine buckets: 10 minutes at the defaults), they are answered as they are: bucket
//   i covers samples [i·w, (i+1)·w), the last one the rest of the recording;
// - otherwise they are resampled to exactly max_buckets: bucket j covers samples [j·F/N, (j+1)·F/N)
//   (F samples, N buckets) and takes the min and max of every held bucket that overlaps it, so
//   no peak is ever lost; a peak may also show in the bucket next to its own (a held bucket is
//   never wider than an answered one: the held are between max_buckets and 2 × max_buckets).
//
// Scaling: a sample s in [-1, 1] becomes round(s × 128), clipped to -128..127 (full scale
// negative is -128, full scale positive 127; the resampler's overshoot past ±1 clips).

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "calleval/v1/calls.pb.h"

namespace calleval::scoring {

inline constexpr int kWaveformBucketsPerSecond = 50;
inline constexpr int kMaxWaveformBuckets = 30000;

// One sample as a peak byte (above).
int8_t PeakByte(float sample);

class WaveformPeaks {
 public:
  // `channels`: 1 or 2, as AudioDecoder::channels().
  WaveformPeaks(int sample_rate, int channels,
                int buckets_per_second = kWaveformBucketsPerSecond,
                int max_buckets = kMaxWaveformBuckets);

  // The next `frames` frames of a decoded block: block[c][0..frames) for each channel c.
  void Feed(const std::array<std::vector<float>, 2>& block, size_t frames);

  // The peaks of everything fed: channels, buckets (ceil of the seconds × buckets_per_second,
  // at most max_buckets; 0 when nothing was fed), duration_seconds (the frames fed over the
  // sample rate) and peaks: for each channel in turn, `buckets` (min, max) pairs of int8.
  v1::CallWaveform Finish() const;

 private:
  struct Bucket {
    int8_t min;
    int8_t max;
  };
  // Ends the open bucket: held, then halved when the channel holds 2 × max_buckets.
  void CloseBucket();

  int sample_rate_;
  int channels_;
  int64_t fine_width_;  // samples in a bucket before any merge
  int max_buckets_;
  int64_t width_;  // samples in a held bucket now: fine_width_ doubled at each merge
  int64_t frames_ = 0;
  std::array<std::vector<Bucket>, 2> held_;
  // The bucket being filled: its extremes per channel and how many frames it has.
  std::array<float, 2> open_min_{};
  std::array<float, 2> open_max_{};
  int64_t open_frames_ = 0;
};

}  // namespace calleval::scoring

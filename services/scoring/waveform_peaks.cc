#include "services/scoring/waveform_peaks.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace calleval::scoring {

int8_t PeakByte(float sample) {
  if (std::isnan(sample)) return 0;
  const float scaled = std::clamp(sample * 128.0f, -128.0f, 127.0f);
  return static_cast<int8_t>(std::lround(scaled));
}

WaveformPeaks::WaveformPeaks(int sample_rate, int channels, int buckets_per_second,
                             int max_buckets)
    : sample_rate_(std::max(1, sample_rate)),
      channels_(std::clamp(channels, 1, 2)),
      fine_width_(std::max<int64_t>(1, sample_rate / std::max(1, buckets_per_second))),
      max_buckets_(std::max(1, max_buckets)),
      width_(fine_width_) {
  for (int c = 0; c < channels_; ++c) held_[c].reserve(2 * static_cast<size_t>(max_buckets_));
  open_min_.fill(std::numeric_limits<float>::infinity());
  open_max_.fill(-std::numeric_limits<float>::infinity());
}

void WaveformPeaks::Feed(const std::array<std::vector<float>, 2>& block, size_t frames) {
  size_t done = 0;
  while (done < frames) {
    const size_t n =
        static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(frames - done),
                                              width_ - open_frames_));
    for (int c = 0; c < channels_; ++c) {
      const float* samples = block[c].data() + done;
      float lo = open_min_[c];
      float hi = open_max_[c];
      for (size_t i = 0; i < n; ++i) {
        lo = std::min(lo, samples[i]);
        hi = std::max(hi, samples[i]);
      }
      open_min_[c] = lo;
      open_max_[c] = hi;
    }
    done += n;
    open_frames_ += static_cast<int64_t>(n);
    frames_ += static_cast<int64_t>(n);
    if (open_frames_ == width_) CloseBucket();
  }
}

void WaveformPeaks::CloseBucket() {
  for (int c = 0; c < channels_; ++c) {
    held_[c].push_back({PeakByte(open_min_[c]), PeakByte(open_max_[c])});
    open_min_[c] = std::numeric_limits<float>::infinity();
    open_max_[c] = -std::numeric_limits<float>::infinity();
  }
  open_frames_ = 0;
  if (held_[0].size() < 2 * static_cast<size_t>(max_buckets_)) return;
  // Halve: each pair of neighbours becomes one bucket twice as wide.
  for (int c = 0; c < channels_; ++c) {
    std::vector<Bucket>& held = held_[c];
    for (size_t i = 0; i < held.size() / 2; ++i) {
      held[i] = {std::min(held[2 * i].min, held[2 * i + 1].min),
                 std::max(held[2 * i].max, held[2 * i + 1].max)};
    }
    held.resize(held.size() / 2);
  }
  width_ *= 2;
}

v1::CallWaveform WaveformPeaks::Finish() const {
  v1::CallWaveform out;
  out.set_channels(channels_);
  out.set_duration_seconds(static_cast<double>(frames_) / sample_rate_);
  const int64_t wanted =
      std::min<int64_t>((frames_ + fine_width_ - 1) / fine_width_, max_buckets_);
  out.set_buckets(static_cast<int32_t>(wanted));
  std::string* peaks = out.mutable_peaks();
  peaks->reserve(static_cast<size_t>(channels_ * wanted * 2));
  for (int c = 0; c < channels_; ++c) {
    std::vector<Bucket> held = held_[c];
    if (open_frames_ > 0) held.push_back({PeakByte(open_min_[c]), PeakByte(open_max_[c])});
    const int64_t count = static_cast<int64_t>(held.size());
    for (int64_t j = 0; j < wanted; ++j) {
      Bucket b = held[j];
      if (count != wanted) {
        // Resampled: every held bucket overlapping samples [start, end) of output bucket j.
        const int64_t start = j * frames_ / wanted;
        const int64_t end = (j + 1) * frames_ / wanted;
        const int64_t first = std::min(start / width_, count - 1);
        const int64_t last = std::min((std::max(end, start + 1) - 1) / width_, count - 1);
        b = held[first];
        for (int64_t i = first + 1; i <= last; ++i) {
          b.min = std::min(b.min, held[i].min);
          b.max = std::max(b.max, held[i].max);
        }
      }
      peaks->push_back(static_cast<char>(b.min));
      peaks->push_back(static_cast<char>(b.max));
    }
  }
  return out;
}

}  // namespace calleval::scoring

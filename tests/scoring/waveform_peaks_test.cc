#include "services/scoring/waveform_peaks.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <vector>

#include "absl/strings/escaping.h"
#include "edge/json_codec.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace calleval::scoring {
namespace {

constexpr int kRate = 16000;
constexpr double kPi = 3.14159265358979323846;

// Feeds `seconds` of `signal(channel, sample index)` in blocks of `block` frames, as the decoder
// hands them out.
void FeedSignal(WaveformPeaks& peaks, int channels, int64_t frames,
                const std::function<float(int, int64_t)>& signal, size_t block = 4096) {
  std::array<std::vector<float>, 2> buffer;
  for (int64_t at = 0; at < frames; at += static_cast<int64_t>(block)) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(block, frames - at));
    for (int c = 0; c < channels; ++c) {
      buffer[c].resize(n);
      for (size_t i = 0; i < n; ++i) buffer[c][i] = signal(c, at + static_cast<int64_t>(i));
    }
    peaks.Feed(buffer, n);
  }
}

// Bucket `i` of channel `c`: (min, max).
std::pair<int, int> Bucket(const v1::CallWaveform& w, int c, int i) {
  const size_t at = (static_cast<size_t>(c) * w.buckets() + i) * 2;
  return {static_cast<int8_t>(w.peaks()[at]), static_cast<int8_t>(w.peaks()[at + 1])};
}

TEST(PeakByteTest, ScalesToInt8AndClips) {
  EXPECT_EQ(PeakByte(0.0f), 0);
  EXPECT_EQ(PeakByte(0.5f), 64);
  EXPECT_EQ(PeakByte(-0.5f), -64);
  EXPECT_EQ(PeakByte(-1.0f), -128);
  EXPECT_EQ(PeakByte(1.0f), 127);    // +128 does not fit: full scale clips to 127
  EXPECT_EQ(PeakByte(1.7f), 127);    // the resampler's overshoot
  EXPECT_EQ(PeakByte(-3.0f), -128);
  EXPECT_EQ(PeakByte(0.001f), 0);    // below half a step: silence stays 0
  EXPECT_EQ(PeakByte(std::nanf("")), 0);
}

TEST(WaveformPeaksTest, MinAndMaxOfAKnownSignalPerBucket) {
  // One second: a 100 Hz tone at half scale for 0.5 s, then silence. A 20 ms bucket holds two
  // periods, so every tone bucket reaches ±0.5 (sample 40 of each period is the crest).
  WaveformPeaks peaks(kRate, 1);
  FeedSignal(peaks, 1, kRate, [](int, int64_t i) {
    return i < kRate / 2 ? 0.5f * static_cast<float>(std::sin(2 * kPi * 100 * i / kRate)) : 0.0f;
  });
  v1::CallWaveform w = peaks.Finish();
  EXPECT_EQ(w.channels(), 1);
  ASSERT_EQ(w.buckets(), 50);
  EXPECT_DOUBLE_EQ(w.duration_seconds(), 1.0);
  ASSERT_EQ(w.peaks().size(), 100u);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(Bucket(w, 0, i), std::make_pair(-64, 64)) << i;
  for (int i = 25; i < 50; ++i) EXPECT_EQ(Bucket(w, 0, i), std::make_pair(0, 0)) << i;
}

TEST(WaveformPeaksTest, OneSpikeShowsInItsBucketOnly) {
  // A DC offset with a single negative spike at 1.234 s: bucket 61 (1.22-1.24 s).
  WaveformPeaks peaks(kRate, 1);
  const int64_t spike = static_cast<int64_t>(1.234 * kRate);
  FeedSignal(peaks, 1, 2 * kRate, [&](int, int64_t i) { return i == spike ? -0.75f : 0.25f; }, 1000);
  v1::CallWaveform w = peaks.Finish();
  ASSERT_EQ(w.buckets(), 100);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(Bucket(w, 0, i), i == 61 ? std::make_pair(-96, 32) : std::make_pair(32, 32)) << i;
  }
}

TEST(WaveformPeaksTest, FiftyBucketsASecondTheLastPartial) {
  for (const auto& [frames, buckets] : std::vector<std::pair<int64_t, int>>{
           {0, 0}, {1, 1}, {320, 1}, {321, 2}, {kRate * 5 / 2, 125}, {40160, 126},
           {int64_t{kRate} * 600, 30000}}) {
    WaveformPeaks peaks(kRate, 2);
    FeedSignal(peaks, 2, frames, [](int, int64_t) { return 0.1f; }, 3000);
    v1::CallWaveform w = peaks.Finish();
    EXPECT_EQ(w.buckets(), buckets) << frames;
    EXPECT_EQ(w.peaks().size(), static_cast<size_t>(buckets) * 2 * 2) << frames;
    EXPECT_DOUBLE_EQ(w.duration_seconds(), static_cast<double>(frames) / kRate);
  }
}

TEST(WaveformPeaksTest, StereoKeepsTheFilesChannelOrder) {
  // Left loud in the first second, right loud in the second.
  WaveformPeaks peaks(kRate, 2);
  FeedSignal(peaks, 2, 2 * kRate, [](int c, int64_t i) {
    const bool loud = (c == 0) == (i < kRate);
    return loud ? (i % 2 == 0 ? 0.9f : -0.9f) : 0.0f;
  });
  v1::CallWaveform w = peaks.Finish();
  EXPECT_EQ(w.channels(), 2);
  ASSERT_EQ(w.buckets(), 100);
  ASSERT_EQ(w.peaks().size(), 400u);
  for (int i = 0; i < 100; ++i) {
    const auto loud = std::make_pair(-115, 115);
    const auto silent = std::make_pair(0, 0);
    EXPECT_EQ(Bucket(w, 0, i), i < 50 ? loud : silent) << i;
    EXPECT_EQ(Bucket(w, 1, i), i < 50 ? silent : loud) << i;
  }
}

TEST(WaveformPeaksTest, CapResamplesAndKeepsEveryPeak) {
  // A small cap to see it work: 10 buckets at most, 50 a second, on 7.3 s (365 fine buckets,
  // merged pairwise four times while fed). Loud from 3.0 to 3.2 s only.
  constexpr int kSmallRate = 1000;  // 20 samples a fine bucket
  WaveformPeaks peaks(kSmallRate, 1, 50, 10);
  const int64_t frames = 7300;
  FeedSignal(peaks, 1, frames, [](int, int64_t i) {
    return i >= 3000 && i < 3200 ? (i % 2 ? 1.0f : -1.0f) : 0.01f;
  }, 77);
  v1::CallWaveform w = peaks.Finish();
  ASSERT_EQ(w.buckets(), 10);
  EXPECT_DOUBLE_EQ(w.duration_seconds(), 7.3);
  // Bucket j covers [0.73 j, 0.73 (j + 1)) s: the loud 0.2 s falls in bucket 4 ([2.92, 3.65)),
  // and may show one held bucket (at most 0.64 s here) around it, never further.
  int loud = 0;
  for (int j = 0; j < 10; ++j) {
    const auto [lo, hi] = Bucket(w, 0, j);
    if (hi == 127) {
      EXPECT_EQ(lo, -128);
      EXPECT_NEAR(j, 4, 1);
      ++loud;
    } else {
      EXPECT_EQ(std::make_pair(lo, hi), std::make_pair(1, 1)) << j;
    }
  }
  EXPECT_GE(loud, 1);
  EXPECT_EQ(Bucket(w, 0, 4), std::make_pair(-128, 127));
}

// A 60-minute stereo call at the real defaults: 30,000 buckets a channel, 120 KB of peaks, and
// the JSON answer of GET /calls/{id}/waveform (the edge's printer) under 200 KB.
TEST(WaveformPeaksTest, SixtyMinuteStereoCallAnswersUnder200KB) {
  WaveformPeaks peaks(kRate, 2);
  const int64_t frames = int64_t{kRate} * 3600;
  // A 1 kHz tone on the left whose level rises over the hour, silence on the right.
  std::array<std::vector<float>, 2> block;
  const size_t kBlock = 16000;
  for (int64_t at = 0; at < frames; at += kBlock) {
    const float level = static_cast<float>(at) / frames;
    block[0].resize(kBlock);
    block[1].assign(kBlock, 0.0f);
    for (size_t i = 0; i < kBlock; ++i) block[0][i] = (i % 16 < 8 ? level : -level);
    peaks.Feed(block, kBlock);
  }
  v1::CallWaveform w = peaks.Finish();
  EXPECT_EQ(w.channels(), 2);
  ASSERT_EQ(w.buckets(), kMaxWaveformBuckets);
  EXPECT_DOUBLE_EQ(w.duration_seconds(), 3600.0);
  EXPECT_EQ(w.peaks().size(), 120000u);
  EXPECT_EQ(Bucket(w, 0, 0).second, 0);
  EXPECT_NEAR(Bucket(w, 0, 15000).second, 64, 1);
  EXPECT_NEAR(Bucket(w, 0, 29999).second, 127, 1);
  EXPECT_EQ(Bucket(w, 1, 29999), std::make_pair(0, 0));

  const std::string body = edge::PrintJson(w);
  std::cout << "60-minute stereo waveform: " << body.size() << " bytes of JSON\n";
  EXPECT_LT(body.size(), 200u * 1000);
  const nlohmann::json json = nlohmann::json::parse(body);
  EXPECT_EQ(json["channels"], 2);
  EXPECT_EQ(json["buckets"], 30000);
  EXPECT_EQ(json["duration_seconds"], 3600.0);
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape(json["peaks"].get<std::string>(), &decoded));
  EXPECT_EQ(decoded, w.peaks());
}

}  // namespace
}  // namespace calleval::scoring

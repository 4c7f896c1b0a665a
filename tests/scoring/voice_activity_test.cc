#include "services/scoring/voice_activity.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/scoring/timeline.h"

namespace calleval::scoring {
namespace {

constexpr int kRate = kWorkingSampleRate;
constexpr double kPi = 3.14159265358979323846;
// Boundary tolerance of the accuracy budget this detector serves.
constexpr double kToleranceS = 0.020;

using Stereo = std::array<std::vector<float>, 2>;

// Adds a burst of a harmonic-rich tone (like a voiced vowel) over [start_s, end_s).
void AddBurst(std::vector<float>* channel, double start_s, double end_s, double rms) {
  const size_t a = static_cast<size_t>(start_s * kRate);
  const size_t b = std::min(channel->size(), static_cast<size_t>(end_s * kRate));
  // Three harmonics of 180 Hz with equal amplitude: rms = amp * sqrt(3 / 2).
  const double amp = rms / std::sqrt(1.5);
  for (size_t i = a; i < b; ++i) {
    const double t = static_cast<double>(i) / kRate;
    (*channel)[i] +=
        static_cast<float>(amp * (std::sin(2 * kPi * 180 * t) + std::sin(2 * kPi * 360 * t + 0.5) +
                                  std::sin(2 * kPi * 540 * t + 1.0)));
  }
}

void AddWhiteNoise(std::vector<float>* channel, double rms, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, rms);
  for (float& v : *channel) v += static_cast<float>(dist(gen));
}

std::array<SpeechSegments, 2> RunInBlocks(const Stereo& audio, int channels,
                                          const std::vector<size_t>& block_sizes,
                                          VoiceActivityOptions options = {}) {
  VoiceActivityDetector vad(kRate, channels, options);
  const size_t total = audio[0].size();
  size_t pos = 0;
  size_t k = 0;
  Stereo block;
  while (pos < total) {
    const size_t n = std::min(block_sizes[k++ % block_sizes.size()], total - pos);
    for (int c = 0; c < channels; ++c) {
      block[c].assign(audio[c].begin() + pos, audio[c].begin() + pos + n);
    }
    vad.Feed(block, n);
    pos += n;
  }
  return vad.Finish();
}

std::array<SpeechSegments, 2> RunOneBlock(const Stereo& audio, int channels = 2) {
  return RunInBlocks(audio, channels, {audio[0].size()});
}

void ExpectSegments(const SpeechSegments& got, const std::vector<Span>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i].start_s, want[i].start_s, kToleranceS) << "segment " << i;
    EXPECT_NEAR(got[i].end_s, want[i].end_s, kToleranceS) << "segment " << i;
  }
}

// Speech-like test signal: channel 0 talks twice, channel 1 once in between.
Stereo TwoPartyCall(double duration_s = 4.0) {
  Stereo audio;
  audio[0].assign(static_cast<size_t>(duration_s * kRate), 0.0f);
  audio[1].assign(static_cast<size_t>(duration_s * kRate), 0.0f);
  AddBurst(&audio[0], 0.50, 1.20, 0.08);
  AddBurst(&audio[0], 2.40, 3.10, 0.08);
  AddBurst(&audio[1], 1.50, 2.05, 0.06);
  return audio;
}

TEST(VoiceActivityTest, BurstsInSilence) {
  const auto segments = RunOneBlock(TwoPartyCall());
  ExpectSegments(segments[0], {{0.50, 1.20}, {2.40, 3.10}});
  ExpectSegments(segments[1], {{1.50, 2.05}});
}

TEST(VoiceActivityTest, BurstsInWhiteNoiseAt15DbSnr) {
  Stereo audio = TwoPartyCall(6.0);
  const double snr = std::pow(10.0, 15.0 / 20.0);
  AddWhiteNoise(&audio[0], 0.08 / snr, 1);
  AddWhiteNoise(&audio[1], 0.06 / snr, 2);
  const auto segments = RunOneBlock(audio);
  ExpectSegments(segments[0], {{0.50, 1.20}, {2.40, 3.10}});
  ExpectSegments(segments[1], {{1.50, 2.05}});
}

// A noise burst over [start_s, end_s): the release of a stop consonant, or a click.
void AddNoiseBurst(std::vector<float>* channel, double start_s, double end_s, double rms,
                   unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, rms);
  const size_t a = static_cast<size_t>(start_s * kRate);
  const size_t b = std::min(channel->size(), static_cast<size_t>(end_s * kRate));
  for (size_t i = a; i < b; ++i) (*channel)[i] += static_cast<float>(dist(gen));
}

// "Left": the vowel, a 120 ms closure, then a 15 ms release 20 dB under the vowel.
Stereo WordEndingInAStop() {
  Stereo audio;
  audio[0].assign(3 * kRate, 0.0f);
  audio[1].assign(3 * kRate, 0.0f);
  AddBurst(&audio[0], 0.50, 1.20, 0.08);
  AddNoiseBurst(&audio[0], 1.32, 1.335, 0.008, 7);
  return audio;
}

TEST(VoiceActivityTest, ReleaseAfterClosureBelongsToTheWord) {
  ExpectSegments(RunOneBlock(WordEndingInAStop())[0], {{0.50, 1.335}});
  // Without the release search the release is a blip too short to be speech.
  VoiceActivityOptions no_search;
  no_search.release_search_ms = 0;
  ExpectSegments(RunInBlocks(WordEndingInAStop(), 2, {3 * kRate}, no_search)[0], {{0.50, 1.20}});
}

TEST(VoiceActivityTest, ReleaseInNoiseBelongsToTheWord) {
  Stereo audio = WordEndingInAStop();
  // Noise 20 dB under the vowel: the release stands 3 dB above it, and a louder one (8 dB)
  // follows the second word.
  AddBurst(&audio[0], 2.00, 2.50, 0.08);
  AddNoiseBurst(&audio[0], 2.60, 2.615, 0.02, 8);
  AddWhiteNoise(&audio[0], 0.008, 9);
  const auto segments = RunOneBlock(audio);
  ExpectSegments(segments[0], {{0.50, 1.20}, {2.00, 2.615}});
}

TEST(VoiceActivityTest, ClickFarFromSpeechIsNotSpeech) {
  Stereo audio = WordEndingInAStop();
  AddNoiseBurst(&audio[0], 2.00, 2.015, 0.03, 10);
  ExpectSegments(RunOneBlock(audio)[0], {{0.50, 1.335}});
}

TEST(VoiceActivityTest, CrosstalkCopyIsNotSpeech) {
  Stereo audio = TwoPartyCall();
  // Each channel leaks into the other 25 dB down, time-aligned.
  const float leak = static_cast<float>(std::pow(10.0, -25.0 / 20.0));
  const Stereo clean = audio;
  for (size_t i = 0; i < audio[0].size(); ++i) {
    audio[0][i] += leak * clean[1][i];
    audio[1][i] += leak * clean[0][i];
  }
  const auto segments = RunOneBlock(audio);
  ExpectSegments(segments[0], {{0.50, 1.20}, {2.40, 3.10}});
  ExpectSegments(segments[1], {{1.50, 2.05}});
}

TEST(VoiceActivityTest, CrosstalkCopyInNoiseIsNotSpeech) {
  Stereo audio;
  audio[0].assign(5 * kRate, 0.0f);
  audio[1].assign(5 * kRate, 0.0f);
  AddBurst(&audio[0], 0.5, 2.0, 0.08);
  AddBurst(&audio[0], 3.0, 4.0, 0.08);
  const float leak = static_cast<float>(std::pow(10.0, -25.0 / 20.0));
  for (size_t i = 0; i < audio[0].size(); ++i) audio[1][i] = leak * audio[0][i];
  AddWhiteNoise(&audio[0], 0.0008, 3);
  AddWhiteNoise(&audio[1], 0.0008, 4);
  const auto segments = RunOneBlock(audio);
  ExpectSegments(segments[0], {{0.5, 2.0}, {3.0, 4.0}});
  EXPECT_TRUE(segments[1].empty());
}

TEST(VoiceActivityTest, OverlapOnBothChannelsIsKept) {
  Stereo audio;
  audio[0].assign(4 * kRate, 0.0f);
  audio[1].assign(4 * kRate, 0.0f);
  AddBurst(&audio[0], 0.5, 2.5, 0.08);
  // The other party barges in at a similar level (a different voice: other harmonics).
  const size_t a = static_cast<size_t>(1.8 * kRate);
  const size_t b = static_cast<size_t>(3.2 * kRate);
  for (size_t i = a; i < b; ++i) {
    audio[1][i] = static_cast<float>(0.07 * std::sin(2 * kPi * 230 * i / kRate));
  }
  const float leak = static_cast<float>(std::pow(10.0, -30.0 / 20.0));
  const Stereo clean = audio;
  for (size_t i = 0; i < audio[0].size(); ++i) {
    audio[0][i] += leak * clean[1][i];
    audio[1][i] += leak * clean[0][i];
  }
  const auto segments = RunOneBlock(audio);
  ExpectSegments(segments[0], {{0.5, 2.5}});
  ExpectSegments(segments[1], {{1.8, 3.2}});
}

TEST(VoiceActivityTest, QuietSpeechUnderLouderPartyWithoutLeakageIsKept) {
  // No crosstalk: a caller 28 dB below the agent is still the caller speaking.
  Stereo audio;
  audio[0].assign(4 * kRate, 0.0f);
  audio[1].assign(4 * kRate, 0.0f);
  AddBurst(&audio[0], 0.5, 3.0, 0.1);
  // A breathy, noise-like voice: unrelated to the agent's harmonics.
  std::mt19937 gen(7);
  std::normal_distribution<double> voice(0.0, 0.004);
  const size_t a = static_cast<size_t>(1.0 * kRate);
  const size_t b = static_cast<size_t>(2.0 * kRate);
  for (size_t i = a; i < b; ++i) audio[1][i] = static_cast<float>(voice(gen));
  const auto segments = RunOneBlock(audio);
  ExpectSegments(segments[0], {{0.5, 3.0}});
  ExpectSegments(segments[1], {{1.0, 2.0}});
}

TEST(VoiceActivityTest, StreamingInOddBlocksMatchesOneBlock) {
  Stereo audio = TwoPartyCall();
  AddWhiteNoise(&audio[0], 0.005, 5);
  AddWhiteNoise(&audio[1], 0.005, 6);
  const auto whole = RunOneBlock(audio);
  for (const std::vector<size_t>& sizes :
       std::vector<std::vector<size_t>>{{1}, {7}, {333}, {4097}, {1, 79, 81, 160, 1023}}) {
    const auto streamed = RunInBlocks(audio, 2, sizes);
    for (int c = 0; c < 2; ++c) {
      ASSERT_EQ(streamed[c].size(), whole[c].size());
      for (size_t i = 0; i < whole[c].size(); ++i) {
        EXPECT_EQ(streamed[c][i].start_s, whole[c][i].start_s);
        EXPECT_EQ(streamed[c][i].end_s, whole[c][i].end_s);
      }
    }
  }
}

// The fused multiply-add filter (where the CPU has it) and the plain one find the same speech:
// their outputs differ in the last bits only.
TEST(VoiceActivityTest, FusedAndPlainFiltersAgree) {
  Stereo audio = TwoPartyCall(6.0);
  AddWhiteNoise(&audio[0], 0.004, 7);
  AddWhiteNoise(&audio[1], 0.004, 8);
  VoiceActivityOptions plain;
  plain.fused_multiply_add = false;
  const auto fused = RunInBlocks(audio, 2, {4097});
  const auto reference = RunInBlocks(audio, 2, {4097}, plain);
  for (int c = 0; c < 2; ++c) {
    ASSERT_EQ(fused[c].size(), reference[c].size()) << "channel " << c;
    for (size_t i = 0; i < fused[c].size(); ++i) {
      EXPECT_NEAR(fused[c][i].start_s, reference[c][i].start_s, 1e-9);
      EXPECT_NEAR(fused[c][i].end_s, reference[c][i].end_s, 1e-9);
    }
  }
  ExpectSegments(reference[0], {{0.50, 1.20}, {2.40, 3.10}});
}

TEST(VoiceActivityTest, EmptyInput) {
  VoiceActivityDetector vad(kRate, 2);
  const auto none = vad.Finish();
  EXPECT_TRUE(none[0].empty());
  EXPECT_TRUE(none[1].empty());

  VoiceActivityDetector zero_blocks(kRate, 2);
  zero_blocks.Feed({}, 0);
  const auto still_none = zero_blocks.Finish();
  EXPECT_TRUE(still_none[0].empty());
  EXPECT_TRUE(still_none[1].empty());
}

TEST(VoiceActivityTest, DigitalSilenceHasNoSpeech) {
  Stereo audio;
  audio[0].assign(2 * kRate, 0.0f);
  audio[1].assign(2 * kRate, 0.0f);
  const auto segments = RunOneBlock(audio);
  EXPECT_TRUE(segments[0].empty());
  EXPECT_TRUE(segments[1].empty());
}

TEST(VoiceActivityTest, MonoUsesChannelZeroOnly) {
  Stereo audio = TwoPartyCall();
  audio[1].clear();
  const auto segments = RunOneBlock(audio, 1);
  ExpectSegments(segments[0], {{0.50, 1.20}, {2.40, 3.10}});
  EXPECT_TRUE(segments[1].empty());
}

TEST(VoiceActivityTest, OtherSampleRate) {
  constexpr int kRate8k = 8000;
  Stereo audio;
  audio[0].assign(3 * kRate8k, 0.0f);
  audio[1].assign(3 * kRate8k, 0.0f);
  for (size_t i = kRate8k / 2; i < 2 * kRate8k; ++i) {
    audio[0][i] = static_cast<float>(0.1 * std::sin(2 * kPi * 200 * i / kRate8k));
  }
  VoiceActivityDetector vad(kRate8k, 2);
  vad.Feed(audio, audio[0].size());
  const auto segments = vad.Finish();
  ExpectSegments(segments[0], {{0.5, 2.0}});
  EXPECT_TRUE(segments[1].empty());
}

}  // namespace
}  // namespace calleval::scoring

#include "services/scoring/voice_quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace calleval::scoring {
namespace {

constexpr int kRate = 16000;

// A voice-like signal: harmonics of f0 with a slow amplitude wobble, `level` linear peak.
void AppendVoice(std::vector<float>* out, double f0, double seconds, double level) {
  const size_t n = static_cast<size_t>(seconds * kRate);
  for (size_t i = 0; i < n; ++i) {
    double t = static_cast<double>(i) / kRate;
    double v = 0;
    for (int h = 1; h <= 5; ++h) v += std::sin(2 * M_PI * f0 * h * t) / h;
    out->push_back(static_cast<float>(level * 0.5 * v * (0.8 + 0.2 * std::sin(2 * M_PI * 3 * t))));
  }
}

void AppendSilence(std::vector<float>* out, double seconds) {
  out->insert(out->end(), static_cast<size_t>(seconds * kRate), 0.0f);
}

void AddNoise(std::vector<float>* x, double rms, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> noise(0, static_cast<float>(rms));
  for (float& v : *x) v += noise(gen);
}

struct Call {
  std::vector<float> samples;
  std::vector<Span> turns;
};

// Agent turns of 2 s separated by 1 s pauses, with the given f0 per turn.
Call Turns(const std::vector<double>& f0s, double level = 0.1) {
  Call call;
  AppendSilence(&call.samples, 1.0);
  for (double f0 : f0s) {
    double start = static_cast<double>(call.samples.size()) / kRate;
    AppendVoice(&call.samples, f0, 2.0, level);
    call.turns.push_back({start, start + 2.0});
    AppendSilence(&call.samples, 1.0);
  }
  return call;
}

VoiceQualityAnalyzer Analyze(const Call& call) {
  VoiceQualityAnalyzer analyzer(kRate);
  // Odd block sizes, as a decoder delivers them.
  for (size_t pos = 0; pos < call.samples.size(); pos += 1237) {
    analyzer.Feed(call.samples.data() + pos, std::min<size_t>(1237, call.samples.size() - pos));
  }
  return analyzer;
}

TEST(VoiceChangeTest, SameVoiceWithNaturalVariationDoesNotChange) {
  Call call = Turns({115, 122, 108, 118, 125, 112});
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_EQ(r.status(), "completed");
  EXPECT_FALSE(r.result().fields().at("changed").bool_value());
  EXPECT_EQ(r.result().fields().at("change_points_s").list_value().values_size(), 0);
  EXPECT_EQ(r.score(), 0);
}

TEST(VoiceChangeTest, MaleToFemaleHandOverFoundAtTheFirstNewTurn) {
  Call call = Turns({115, 120, 110, 215, 225, 210});
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_TRUE(r.result().fields().at("changed").bool_value());
  const auto& points = r.result().fields().at("change_points_s").list_value();
  ASSERT_EQ(points.values_size(), 1);
  EXPECT_NEAR(points.values(0).number_value(), call.turns[3].start_s, 1e-3);
  EXPECT_EQ(r.score(), 1);
}

TEST(VoiceChangeTest, OneOddTurnIsNotAChange) {
  Call call = Turns({115, 120, 230, 118, 112});
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_FALSE(r.result().fields().at("changed").bool_value());
}

TEST(VoiceChangeTest, NoAgentSpeechIsNotApplicable) {
  Call call;
  AppendSilence(&call.samples, 3.0);
  auto r = Analyze(call).VoiceChange({});
  EXPECT_EQ(r.status(), "not_applicable");
}

TEST(ClarityTest, CleanSpeechScoresFive) {
  Call call = Turns({120, 125, 118});
  AddNoise(&call.samples, 0.0001, 1);  // about 50 dB below the speech
  auto r = Analyze(call).Clarity(call.turns);
  EXPECT_EQ(r.status(), "completed");
  EXPECT_EQ(r.score(), 5);
  EXPECT_GT(r.result().fields().at("snr_db").number_value(), 30);
  EXPECT_EQ(r.result().fields().at("clipping_ratio").number_value(), 0);
}

TEST(ClarityTest, NoisySpeechScoresLow) {
  Call call = Turns({120, 125, 118});
  AddNoise(&call.samples, 0.02, 2);  // about 8 dB below the speech
  auto r = Analyze(call).Clarity(call.turns);
  EXPECT_LE(r.score(), 2);
  EXPECT_LT(r.result().fields().at("snr_db").number_value(), 15);
}

TEST(ClarityTest, ClippingLowersTheScore) {
  Call clean = Turns({120, 125, 118}, 0.1);
  Call clipped = Turns({120, 125, 118}, 3.0);
  for (float& v : clipped.samples) v = std::clamp(v, -1.0f, 1.0f);
  auto a = Analyze(clean).Clarity(clean.turns);
  auto b = Analyze(clipped).Clarity(clipped.turns);
  EXPECT_GT(b.result().fields().at("clipping_ratio").number_value(), 0.01);
  EXPECT_LT(b.score(), a.score());
}

}  // namespace
}  // namespace calleval::scoring

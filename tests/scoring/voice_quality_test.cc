#include "services/scoring/voice_quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

namespace calleval::scoring {
namespace {

constexpr int kRate = 16000;

// The vocal tract of a synthetic voice: three formants (Hz); a female tract is about 18 %
// shorter than a male one, which raises every formant by that much.
struct Tract {
  double f1, f2, f3;
};
constexpr Tract kMaleTract = {500, 1500, 2500};
constexpr Tract kFemaleTract = {590, 1770, 2950};

// A voice-like signal: the harmonics of f0 up to 3.8 kHz shaped by the tract's formants (a
// source-filter voice: the envelope stays when the pitch moves), with an intonation of +-8 %
// around f0 and a slow amplitude wobble; `level` linear peak.
void AppendVoice(std::vector<float>* out, double f0, double seconds, double level,
                 const Tract& tract = kMaleTract) {
  auto amplitude = [&](double f) {
    double a = 0.02;
    for (double formant : {tract.f1, tract.f2, tract.f3}) {
      a += 1 / (1 + std::pow((f - formant) / 80, 2));
    }
    return a * 300 / (f + 300);  // the glottal source's falling spectrum
  };
  const size_t n = static_cast<size_t>(seconds * kRate);
  double phase = 0;  // of the fundamental
  for (size_t i = 0; i < n; ++i) {
    double t = static_cast<double>(i) / kRate;
    const double f = f0 * (1 + 0.08 * std::sin(2 * M_PI * 1.3 * t));
    phase += 2 * M_PI * f / kRate;
    double v = 0;
    for (int h = 1; h * f < 3800; ++h) v += amplitude(h * f) * std::sin(h * phase);
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

// Agent turns of 2 s separated by 1 s pauses, with the given f0 per turn; a female tract from
// turn `female_from` on.
Call Turns(const std::vector<double>& f0s, double level = 0.1, size_t female_from = 1000) {
  Call call;
  AppendSilence(&call.samples, 1.0);
  for (double f0 : f0s) {
    double start = static_cast<double>(call.samples.size()) / kRate;
    AppendVoice(&call.samples, f0, 2.0, level,
                call.turns.size() >= female_from ? kFemaleTract : kMaleTract);
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
  Call call = Turns({115, 120, 110, 215, 225, 210}, 0.1, 3);
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

TEST(VoiceChangeTest, OneTractSpeakingHigherIsNotAChange) {
  // Half an octave up (110 -> 160 Hz) through the same formants: one voice, higher.
  Call call = Turns({110, 115, 108, 160, 165, 158});
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_FALSE(r.result().fields().at("changed").bool_value());
}

TEST(VoiceChangeTest, SamePitchOtherTractIsAChange) {
  // Two voices at the same 195 Hz whose formants differ by 18 %: timbre, not pitch, tells them
  // apart.
  Call call = Turns({195, 200, 190, 195, 200, 190}, 0.1, 3);
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_TRUE(r.result().fields().at("changed").bool_value());
  const auto& points = r.result().fields().at("change_points_s").list_value();
  ASSERT_EQ(points.values_size(), 1);
  EXPECT_NEAR(points.values(0).number_value(), call.turns[3].start_s, 1e-3);
}

TEST(VoiceChangeTest, NoAgentSpeechIsNotApplicable) {
  Call call;
  AppendSilence(&call.samples, 3.0);
  auto r = Analyze(call).VoiceChange({});
  EXPECT_EQ(r.status(), "not_applicable");
}

// Real voices: audio on the standard output of `source` (a shell pipeline), decoded by the
// ffmpeg CLI to 16 kHz mono float.
std::vector<float> Decode(const std::string& source) {
  const std::string cmd =
      source + " | ffmpeg -nostdin -v error -i - -ar 16000 -ac 1 -f f32le - 2>/dev/null";
  std::vector<float> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  float buffer[4096];
  size_t n;
  while ((n = fread(buffer, sizeof(float), 4096, p)) > 0) out.insert(out.end(), buffer, buffer + n);
  pclose(p);
  return out;
}

// Appends one agent turn (the whole recording, after a 1.2 s pause).
void AppendTurn(Call* call, const std::vector<float>& speech) {
  AppendSilence(&call->samples, 1.2);
  const double start = static_cast<double>(call->samples.size()) / kRate;
  call->samples.insert(call->samples.end(), speech.begin(), speech.end());
  call->turns.push_back({start, static_cast<double>(call->samples.size()) / kRate});
}

// eSpeak NG, one voice (en-us), `text` at `speed` words per minute and pitch `pitch` (0-99).
std::vector<float> Espeak(const std::string& text, int speed, int pitch) {
  return Decode("espeak-ng -v en-us -s " + std::to_string(speed) + " -p " + std::to_string(pitch) +
                " --stdout '" + text + "'");
}

// A recorded Asterisk prompt (Debian's asterisk-core-sounds-en-wav / -fr-wav, 8 kHz).
std::vector<float> Prompt(const std::string& voice, const std::string& name) {
  const std::string path = "/usr/share/asterisk/sounds/" + voice + "/" + name + ".wav";
  if (!std::filesystem::exists(path)) return {};
  return Decode("cat '" + path + "'");
}

TEST(VoiceChangeRealTest, OneVoiceAtOtherSpeedsAndPitchesDoesNotChange) {
  // The same synthetic voice slow and low, then fast and high: its pitch moves by about half
  // an octave (-p 30 is about 89 Hz, -p 70 about 127 Hz), which pitch alone took for a new voice.
  const char* sentences[] = {"Thank you for calling, how can I help you today?",
                             "Your balance is forty two dollars and ten cents.",
                             "I can certainly help you with that request.",
                             "Please hold while I look up your account.",
                             "Is there anything else I can do for you?",
                             "Your order will arrive on Tuesday afternoon.",
                             "I have updated your address in our system.",
                             "Let me transfer you to the billing department."};
  Call call;
  for (int i = 0; i < 8; ++i) {
    std::vector<float> speech =
        i < 4 ? Espeak(sentences[i], 130, 30) : Espeak(sentences[i], 200, 70);
    ASSERT_GT(speech.size(), static_cast<size_t>(kRate)) << "espeak-ng or ffmpeg failed";
    AppendTurn(&call, speech);
  }
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_EQ(r.status(), "completed");
  EXPECT_FALSE(r.result().fields().at("changed").bool_value());
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

// Two real women of the same median pitch (about 195 Hz): the English Asterisk voice (Allison)
// hands over to the French one (June). Pitch alone cannot see it.
TEST(VoiceChangeRealTest, SamePitchHandOverBetweenRealVoicesIsFound) {
  Call call;
  const char* prompts[] = {
      "vm-sorry",        "pls-hold-while-try",     "conf-onlyperson", "vm-intro",
      "queue-thereare",  "vm-passchanged",         "agent-loginok",   "vm-sorry",
      "conf-onlyperson", "queue-periodic-announce"};
  for (int i = 0; i < 10; ++i) {
    std::vector<float> speech = Prompt(i < 5 ? "en_US_f_Allison" : "fr_CA_f_June", prompts[i]);
    ASSERT_GT(speech.size(), static_cast<size_t>(kRate / 2))
        << prompts[i] << ": install asterisk-core-sounds-en-wav and -fr-wav (scripts/setup)";
    AppendTurn(&call, speech);
  }
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_TRUE(r.result().fields().at("changed").bool_value());
  const auto& points = r.result().fields().at("change_points_s").list_value();
  ASSERT_EQ(points.values_size(), 1);
  EXPECT_NEAR(points.values(0).number_value(), call.turns[5].start_s, 1e-3);
}

// One real voice (Allison) across many prompts recorded apart: no change.
TEST(VoiceChangeRealTest, OneRealVoiceAcrossPromptsDoesNotChange) {
  Call call;
  const char* prompts[] = {"vm-sorry",      "pls-hold-while-try", "conf-onlyperson",
                           "vm-intro",      "queue-thereare",     "vm-passchanged",
                           "agent-loginok", "please-try-again",   "queue-periodic-announce",
                           "vm-goodbye"};
  for (const char* prompt : prompts) {
    std::vector<float> speech = Prompt("en_US_f_Allison", prompt);
    ASSERT_GT(speech.size(), static_cast<size_t>(kRate / 2))
        << prompt << ": install asterisk-core-sounds-en-wav (scripts/setup)";
    AppendTurn(&call, speech);
  }
  auto r = Analyze(call).VoiceChange(call.turns);
  EXPECT_FALSE(r.result().fields().at("changed").bool_value());
}

}  // namespace
}  // namespace calleval::scoring

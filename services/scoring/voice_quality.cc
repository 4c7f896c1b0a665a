#include "services/scoring/voice_quality.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "common/standard_metrics.h"

namespace calleval::scoring {
namespace {

constexpr double kFrameSeconds = 0.010;
// Pitch is estimated every fourth frame on a 32 ms window decimated to 4 kHz: a 400 Hz voice
// still spans 10 samples per period, plenty for telling voices half an octave apart, at a
// sixteenth of the cost of full-rate autocorrelation.
constexpr int kPitchEveryFrames = 4;
constexpr size_t kPitchWindow16k = 512;
constexpr int kPitchRate = 4000;
constexpr int kDecimation = 16000 / kPitchRate;
constexpr double kMinF0 = 60, kMaxF0 = 400;
constexpr double kVoicedCorrelation = 0.6;
// A voice is taken to have changed when an agent turn's median F0 sits this many octaves from
// the voice so far, and the next turn agrees (one odd sentence is not a new voice). Different
// voices of a TTS engine or different speakers differ by far more than half an octave; one
// voice varies by well under it between sentences.
constexpr double kChangeOctaves = 0.4;
constexpr int kMinVoicedFramesPerTurn = 8;
constexpr float kClipLevel = 0.999f;

double Db(double power) { return 10.0 * std::log10(std::max(power, 1e-12)); }

void Set(google::protobuf::Struct* s, const char* key, double v) {
  (*s->mutable_fields())[key].set_number_value(v);
}

bool Inside(double t, const std::vector<Span>& turns) {
  auto it = std::upper_bound(turns.begin(), turns.end(), t,
                             [](double v, const Span& s) { return v < s.start_s; });
  return it != turns.begin() && t < std::prev(it)->end_s;
}

// Normalized autocorrelation pitch of `x` (kPitchRate); 0 when unvoiced.
float EstimateF0(const std::vector<float>& x) {
  const int min_lag = static_cast<int>(kPitchRate / kMaxF0);
  const int max_lag = static_cast<int>(kPitchRate / kMinF0);
  const int n = static_cast<int>(x.size());
  // Prefix sums of x^2 give both energy terms of every lag without another pass.
  std::vector<double> energy(n + 1, 0.0);
  for (int i = 0; i < n; ++i) energy[i + 1] = energy[i] + static_cast<double>(x[i]) * x[i];
  std::vector<double> r(max_lag + 1, 0.0);
  double best = 0;
  for (int lag = min_lag; lag <= max_lag && lag < n / 2; ++lag) {
    // Eight running sums instead of one: a single sum is a chain of dependent adds, which
    // made this loop the pitch tracker's cost; eight fit two vector registers.
    const int count = n - lag;
    std::array<float, 8> sums{};
    int i = 0;
    for (; i + 8 <= count; i += 8) {
      for (int j = 0; j < 8; ++j) sums[j] += x[i + j] * x[i + j + lag];
    }
    float xy =
        ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
    for (; i < count; ++i) xy += x[i] * x[i + lag];
    const double xx = energy[n - lag], yy = energy[n] - energy[lag];
    r[lag] = xx > 0 && yy > 0 ? xy / std::sqrt(xx * yy) : 0;
    best = std::max(best, r[lag]);
  }
  if (best < kVoicedCorrelation) return 0;
  // The shortest lag nearly as good as the best avoids reading a period as two.
  for (int lag = min_lag; lag <= max_lag && lag < n / 2; ++lag) {
    if (r[lag] >= 0.9 * best) return static_cast<float>(static_cast<double>(kPitchRate) / lag);
  }
  return 0;
}

}  // namespace

VoiceQualityAnalyzer::VoiceQualityAnalyzer(int sample_rate)
    : sample_rate_(sample_rate), frame_size_(static_cast<size_t>(sample_rate * kFrameSeconds)) {
  pending_.reserve(kPitchWindow16k);
}

void VoiceQualityAnalyzer::Feed(const float* samples, size_t frames) {
  const size_t window = std::max(frame_size_, kPitchWindow16k);
  while (frames > 0) {
    const size_t n = std::min(frames, window - pending_.size());
    pending_.insert(pending_.end(), samples, samples + n);
    samples += n;
    frames -= n;
    if (pending_.size() == window) {
      AnalyzeFrame();
      // Keep the tail as the start of the next window (windows overlap; frames do not).
      pending_.erase(pending_.begin(), pending_.begin() + frame_size_);
    }
  }
}

void VoiceQualityAnalyzer::AnalyzeFrame() {
  // The frame is the newest frame_size_ samples of the window.
  const float* frame = pending_.data() + pending_.size() - frame_size_;
  double power = 0;
  int32_t clipped = 0;
  for (size_t i = 0; i < frame_size_; ++i) {
    power += static_cast<double>(frame[i]) * frame[i];
    if (std::fabs(frame[i]) >= kClipLevel) ++clipped;
  }
  const float level = static_cast<float>(Db(power / frame_size_));
  loudest_db_ = std::max(loudest_db_, level);
  float f0 = 0;
  // Only frames loud enough to be speech, and only every other one, get a pitch estimate.
  if (frames_.size() % kPitchEveryFrames == 0 && level > -60 && level > loudest_db_ - 30 &&
      sample_rate_ == 16000) {
    // Averaging each run of kDecimation samples is the low-pass filter as well.
    std::vector<float> decimated(pending_.size() / kDecimation);
    for (size_t i = 0; i < decimated.size(); ++i) {
      float sum = 0;
      for (int k = 0; k < kDecimation; ++k) sum += pending_[kDecimation * i + k];
      decimated[i] = sum / kDecimation;
    }
    f0 = EstimateF0(decimated);
  }
  frames_.push_back(Frame{level, f0});
  clipped_per_frame_.push_back(clipped);
}

double VoiceQualityAnalyzer::MedianF0(const Span& span) const {
  std::vector<float> voiced;
  // Frame k covers the window ending at (k * frame + window) samples; its center is taken as
  // the end of the window minus half a frame.
  const double lead = static_cast<double>(kPitchWindow16k) / sample_rate_;
  auto time_of = [&](size_t k) { return k * kFrameSeconds + lead - kFrameSeconds / 2; };
  // Frame times increase with k: start a frame or two before the span's estimated first frame
  // and stop after its end, rather than visiting every frame of the call for every turn.
  const double estimate = std::floor((span.start_s - lead + kFrameSeconds / 2) / kFrameSeconds);
  size_t k = estimate > 2 ? static_cast<size_t>(estimate) - 2 : 0;
  for (; k < frames_.size() && time_of(k) < span.end_s; ++k) {
    if (time_of(k) >= span.start_s && frames_[k].f0_hz > 0) voiced.push_back(frames_[k].f0_hz);
  }
  if (static_cast<int>(voiced.size()) < kMinVoicedFramesPerTurn) return 0;
  std::nth_element(voiced.begin(), voiced.begin() + voiced.size() / 2, voiced.end());
  return voiced[voiced.size() / 2];
}

v1::StandardMetricResult VoiceQualityAnalyzer::Clarity(const std::vector<Span>& turns) const {
  v1::StandardMetricResult r = NewStandardMetricResult(8, "completed");
  const double lead = static_cast<double>(kPitchWindow16k) / sample_rate_;
  double speech_power = 0;
  int64_t speech_frames = 0, clipped = 0;
  std::vector<float> other_levels;
  for (size_t k = 0; k < frames_.size(); ++k) {
    double t = k * kFrameSeconds + lead - kFrameSeconds / 2;
    if (Inside(t, turns)) {
      speech_power += std::pow(10.0, frames_[k].level_db / 10.0);
      ++speech_frames;
      clipped += clipped_per_frame_[k];
    } else {
      other_levels.push_back(frames_[k].level_db);
    }
  }
  if (speech_frames == 0) {
    r.set_status("not_applicable");
    r.set_error("the agent does not speak");
    return r;
  }
  const double speech_db = Db(speech_power / speech_frames);
  // The noise floor: the median level where the agent is not speaking (robust to the other
  // party leaking in); without such frames, the quietest tenth of the speech frames.
  double noise_db = -120;
  if (!other_levels.empty()) {
    std::nth_element(other_levels.begin(), other_levels.begin() + other_levels.size() / 2,
                     other_levels.end());
    noise_db = other_levels[other_levels.size() / 2];
  }
  const double snr_db = std::min(60.0, speech_db - noise_db);
  const double clipping_ratio =
      static_cast<double>(clipped) / (static_cast<double>(speech_frames) * frame_size_);
  int score = snr_db >= 30 ? 5 : snr_db >= 20 ? 4 : snr_db >= 15 ? 3 : snr_db >= 10 ? 2 : 1;
  if (clipping_ratio > 0.01) {
    score -= 2;
  } else if (clipping_ratio > 0.001) {
    score -= 1;
  }
  if (speech_db < -50 || speech_db > -6) score -= 1;
  score = std::clamp(score, 1, 5);
  google::protobuf::Struct* result = r.mutable_result();
  Set(result, "score", score);
  Set(result, "snr_db", std::round(snr_db * 10) / 10);
  Set(result, "clipping_ratio", clipping_ratio);
  Set(result, "speech_level_dbfs", std::round(speech_db * 10) / 10);
  r.set_score(score);
  return r;
}

v1::StandardMetricResult VoiceQualityAnalyzer::VoiceChange(const std::vector<Span>& turns) const {
  v1::StandardMetricResult r = NewStandardMetricResult(9, "completed");
  struct Voiced {
    double start_s;
    double f0;
  };
  std::vector<Voiced> voiced;
  for (const Span& turn : turns) {
    double f0 = MedianF0(turn);
    if (f0 > 0) voiced.push_back({turn.start_s, f0});
  }
  if (voiced.empty()) {
    r.set_status("not_applicable");
    r.set_error("no voiced agent speech");
    return r;
  }
  auto octaves = [](double a, double b) { return std::fabs(std::log2(a / b)); };
  std::vector<double> change_points;
  std::vector<double> current = {voiced[0].f0};
  for (size_t i = 1; i < voiced.size(); ++i) {
    std::vector<double> sorted = current;
    std::sort(sorted.begin(), sorted.end());
    const double reference = sorted[sorted.size() / 2];
    const bool departs = octaves(voiced[i].f0, reference) > kChangeOctaves;
    const bool persists =
        i + 1 >= voiced.size() || octaves(voiced[i + 1].f0, reference) > kChangeOctaves;
    if (departs && persists) {
      change_points.push_back(voiced[i].start_s);
      current = {voiced[i].f0};
    } else {
      current.push_back(voiced[i].f0);
    }
  }
  google::protobuf::Struct* result = r.mutable_result();
  (*result->mutable_fields())["changed"].set_bool_value(!change_points.empty());
  auto* points = (*result->mutable_fields())["change_points_s"].mutable_list_value();
  for (double t : change_points) points->add_values()->set_number_value(std::round(t * 1e4) / 1e4);
  r.set_score(change_points.empty() ? 0.0 : 1.0);
  return r;
}

}  // namespace calleval::scoring

#include "services/scoring/voice_quality.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

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
// Voice changes (docs/metrics.md §7). Pitch alone misses two speakers of the same pitch and
// mistakes one voice speaking higher for another, so each turn is also described by its timbre:
// the mel-frequency cepstra of its voiced analysed frames (the spectral envelope: vocal tract and
// recording chain, not the pitch). A stretch of speech departs from the voice so far when
//  - its mean cepstrum lies more than kTimbreDistance frame spreads from the voice's mean
//    (Mahalanobis, under the voice's frame covariance: an effect size, which content averages
//    below) and is significant given both frame counts (sqrt of Hotelling's T^2 above
//    kTimbreSignificance: a short turn of one voice strays further by chance), once the voice
//    has kMinReferenceFrames frames to compare with; or
//  - its median F0 sits more than kChangeOctaves from the voice's, and its timbre is at least
//    kTimbreDistance away too (pitch alone only while too little of the voice is known).
// Thresholds from the public and test corpora and recordings of one voice at other speeds and
// pitches: one voice's turns reach Hotelling 10.8 and distance 1.5 on short turns; the
// hand-overs measured are at 11.7-15.7 (same-pitch women) and above.
constexpr double kChangeOctaves = 0.4;
constexpr double kTimbreDistance = 1.2;
constexpr double kTimbreSignificance = 11.5;
// About 2.4 s of voiced speech (an analysed frame every 40 ms) before a timbre is trusted.
constexpr int kMinReferenceFrames = 60;
// Turns are judged in stretches of at least 1.6 s of voiced speech: a short turn ("Hello.")
// alone says little about the voice, so it is pooled with the next ones.
constexpr int kSegmentFrames = 40;
constexpr int kMinTimbreFramesPerTurn = 8;
// The speech after a departing stretch confirms the change at this fraction of the thresholds.
constexpr double kConfirmBar = 0.7;
constexpr double kCovarianceShrink = 0.1;
constexpr double kVarianceFloor = 0.1;
// Cepstra are kept as 8-bit steps of 0.25: well under their spread within one voice (0.5-4)
// and 12 bytes per analysed frame.
constexpr float kCepstrumStep = 0.25f;
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

// Spectral envelope: mel-frequency cepstral coefficients of the newest 16 ms of a voiced
// analysed frame (a 256-point FFT at 16 kHz), telephone band only (8 kHz recordings have
// nothing above it, so one voice is described alike on any channel). 16 ms, not the usual
// 25-32, smooths the harmonics of voices above 120 Hz into the envelope: one voice speaking
// higher keeps its cepstrum. Only frames the pitch tracker already found voiced and loud are
// transformed, a few microseconds each.
constexpr size_t kSpectrumWindow = 256;
constexpr size_t kHalf = kSpectrumWindow / 2;
constexpr int kMelBands = 18;
constexpr double kMelLowHz = 150, kMelHighHz = 3900;

// Natural logarithm of a positive normal float to about 1e-5: std::log was a third of the
// cepstrum's cost, and the cepstra are kept to 0.25. x = m 2^e with m in [1, 2), and
// ln m = 2 atanh((m - 1) / (m + 1)) by its series.
inline float FastLog(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const int e = static_cast<int>((bits >> 23) & 0xff) - 127;
  bits = (bits & 0x007fffffu) | 0x3f800000u;
  float m;
  std::memcpy(&m, &bits, sizeof(m));
  const float t = (m - 1) / (m + 1), t2 = t * t;
  const float atanh = t * (1 + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 / 9))));
  return 2 * atanh + e * 0.69314718f;
}

class MelCepstrum {
 public:
  static constexpr int kCepstra = 12;

  MelCepstrum() {
    for (size_t i = 0; i < kSpectrumWindow; ++i) {
      window_[i] = static_cast<float>(0.5 - 0.5 * std::cos(2 * M_PI * i / kSpectrumWindow));
    }
    for (size_t i = 0; i < kHalf; ++i) {
      cos_[i] = static_cast<float>(std::cos(2 * M_PI * i / kHalf));
      sin_[i] = static_cast<float>(-std::sin(2 * M_PI * i / kHalf));
      size_t r = 0;
      for (size_t b = 1, v = i; b < kHalf; b <<= 1, v >>= 1) r = (r << 1) | (v & 1);
      bitrev_[i] = static_cast<uint8_t>(r);
    }
    auto mel = [](double hz) { return 2595 * std::log10(1 + hz / 700); };
    const double lo = mel(kMelLowHz), hi = mel(kMelHighHz);
    const double bin_hz = 16000.0 / kSpectrumWindow;
    first_bin_ = static_cast<int>(std::ceil(kMelLowHz / bin_hz));
    last_bin_ = static_cast<int>(std::floor(kMelHighHz / bin_hz));
    for (int k = first_bin_; k <= last_bin_; ++k) {
      // Centres of bands 0..kMelBands+1 are equally spaced in mel; band b (1..kMelBands) rises
      // from centre b-1 to b and falls to b+1.
      const double pos = (mel(k * bin_hz) - lo) / (hi - lo) * (kMelBands + 1);
      const int j = std::min(static_cast<int>(pos), kMelBands);
      bin_band_[k] = static_cast<uint8_t>(j);
      bin_rise_[k] = static_cast<float>(pos - j);
    }
    for (int c = 0; c < kCepstra; ++c) {
      for (int b = 0; b < kMelBands; ++b) {
        dct_[c][b] = static_cast<float>(std::sqrt(2.0 / kMelBands) *
                                        std::cos(M_PI * (c + 1) * (b + 0.5) / kMelBands));
      }
    }
  }

  // `x`: kSpectrumWindow samples; writes kCepstra coefficients (c1..c12: c0, the loudness, is
  // left out).
  void Compute(const float* x, float* out) const {
    // The real FFT as a half-size complex FFT of the even (real) and odd (imaginary) samples.
    std::array<float, kHalf> re, im;
    for (size_t n = 0; n < kHalf; ++n) {
      re[bitrev_[n]] = x[2 * n] * window_[2 * n];
      im[bitrev_[n]] = x[2 * n + 1] * window_[2 * n + 1];
    }
    for (size_t len = 2; len <= kHalf; len <<= 1) {
      const size_t half = len / 2, step = kHalf / len;
      for (size_t i = 0; i < kHalf; i += len) {
        for (size_t j = 0; j < half; ++j) {
          const float wr = cos_[j * step], wi = sin_[j * step];
          const size_t a = i + j, b = a + half;
          const float vr = re[b] * wr - im[b] * wi, vi = re[b] * wi + im[b] * wr;
          re[b] = re[a] - vr;
          im[b] = im[a] - vi;
          re[a] += vr;
          im[a] += vi;
        }
      }
    }
    std::array<float, kMelBands + 2> bands{};
    for (int k = first_bin_; k <= last_bin_; ++k) {
      // Untangle bin k of the real signal from Z[k] and conj(Z[N/2 - k]).
      const size_t m = (kHalf - k) % kHalf;
      const float er = 0.5f * (re[k] + re[m]), ei = 0.5f * (im[k] - im[m]);
      const float or_ = 0.5f * (im[k] + im[m]), oi = -0.5f * (re[k] - re[m]);
      // Times the twiddle e^{-2 pi i k / N} of the full-size transform (cos_/sin_ hold the
      // half-size one's).
      const float tr = tw_cos_[k], ti = tw_sin_[k];
      const float xr = er + or_ * tr - oi * ti, xi = ei + or_ * ti + oi * tr;
      const float power = xr * xr + xi * xi;
      const int j = bin_band_[k];
      bands[j] += power * (1 - bin_rise_[k]);
      bands[j + 1] += power * bin_rise_[k];
    }
    std::array<float, kMelBands> logs;
    for (int b = 0; b < kMelBands; ++b) logs[b] = FastLog(bands[b + 1] + 1e-12f);
    for (int c = 0; c < kCepstra; ++c) {
      float sum = 0;
      for (int b = 0; b < kMelBands; ++b) sum += dct_[c][b] * logs[b];
      out[c] = sum;
    }
  }

 private:
  std::array<float, kSpectrumWindow> window_;
  std::array<float, kHalf> cos_, sin_;
  std::array<uint8_t, kHalf> bitrev_;
  std::array<float, kHalf + 1> tw_cos_ = TwiddleTable(true), tw_sin_ = TwiddleTable(false);
  int first_bin_ = 0, last_bin_ = 0;
  std::array<uint8_t, kHalf + 1> bin_band_{};
  std::array<float, kHalf + 1> bin_rise_{};
  std::array<std::array<float, kMelBands>, kCepstra> dct_;

  static std::array<float, kHalf + 1> TwiddleTable(bool cosine) {
    std::array<float, kHalf + 1> t;
    for (size_t k = 0; k <= kHalf; ++k) {
      const double a = 2 * M_PI * k / kSpectrumWindow;
      t[k] = static_cast<float>(cosine ? std::cos(a) : -std::sin(a));
    }
    return t;
  }
};

const MelCepstrum& Cepstrum() {
  static const MelCepstrum* cepstrum = new MelCepstrum();
  return *cepstrum;
}

// Sufficient statistics (count, sums, sums of products) of the cepstra of some voiced frames.
class TimbreStats {
 public:
  static constexpr int kDims = MelCepstrum::kCepstra;

  void Add(const float* c) {
    ++n_;
    for (int a = 0; a < kDims; ++a) {
      sum_[a] += c[a];
      for (int b = 0; b <= a; ++b) products_[a][b] += static_cast<double>(c[a]) * c[b];
    }
  }
  void Merge(const TimbreStats& o) {
    n_ += o.n_;
    for (int a = 0; a < kDims; ++a) {
      sum_[a] += o.sum_[a];
      for (int b = 0; b <= a; ++b) products_[a][b] += o.products_[a][b];
    }
  }
  int count() const { return n_; }

  // Mahalanobis distance between the mean of `other` and this voice's mean, under this voice's
  // frame covariance: how far, in units of the voice's own frame-to-frame spread, the other
  // frames sit on average. Sets `*significance` to the distance times sqrt(n N / (n + N)) (the
  // square root of Hotelling's T^2): how sure that the means differ, given both frame counts.
  double Distance(const TimbreStats& other, double* significance) const;

 private:
  int n_ = 0;
  std::array<double, kDims> sum_{};
  std::array<std::array<double, kDims>, kDims> products_{};  // lower triangle
};

double TimbreStats::Distance(const TimbreStats& other, double* significance) const {
  *significance = 0;
  if (n_ < 2 || other.n_ < 1) return 0;
  std::array<std::array<double, kDims>, kDims> w;
  std::array<double, kDims> diff;
  for (int a = 0; a < kDims; ++a) {
    const double mean_a = sum_[a] / n_;
    diff[a] = other.sum_[a] / other.n_ - mean_a;
    for (int b = 0; b <= a; ++b) w[a][b] = products_[a][b] / n_ - mean_a * (sum_[b] / n_);
  }
  // Shrunk a little towards its diagonal (a voice heard for a few seconds gives a noisy
  // covariance), with a floor on each variance: a synthetic, steady voice would otherwise have
  // almost none, and any difference would look infinitely far.
  for (int a = 0; a < kDims; ++a) {
    for (int b = 0; b < a; ++b) w[a][b] *= 1 - kCovarianceShrink;
    w[a][a] += kVarianceFloor;
  }
  // Cholesky factor L (lower), then d^2 = |L^-1 diff|^2.
  for (int a = 0; a < kDims; ++a) {
    for (int b = 0; b <= a; ++b) {
      double v = w[a][b];
      for (int k = 0; k < b; ++k) v -= w[a][k] * w[b][k];
      if (a == b) {
        if (v <= 0) return 0;
        w[a][a] = std::sqrt(v);
      } else {
        w[a][b] = v / w[b][b];
      }
    }
  }
  double d2 = 0;
  std::array<double, kDims> y;
  for (int a = 0; a < kDims; ++a) {
    double v = diff[a];
    for (int k = 0; k < a; ++k) v -= w[a][k] * y[k];
    y[a] = v / w[a][a];
    d2 += y[a] * y[a];
  }
  const double d = std::sqrt(d2);
  *significance = d * std::sqrt(static_cast<double>(n_) * other.n_ / (n_ + other.n_));
  return d;
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
    // Timbre from voiced frames only: vowels carry the speaker's formants; fricatives and
    // pauses would add content, not voice, to the spread (and cost).
    if (f0 > 0) {
      static_assert(kCepstra == MelCepstrum::kCepstra);
      Timbre t;
      t.frame = static_cast<uint32_t>(frames_.size());
      std::array<float, kCepstra> c;
      Cepstrum().Compute(pending_.data() + pending_.size() - kSpectrumWindow, c.data());
      for (int k = 0; k < kCepstra; ++k) {
        t.c[k] =
            static_cast<int8_t>(std::lround(std::clamp(c[k] / kCepstrumStep, -127.0f, 127.0f)));
      }
      timbre_.push_back(t);
    }
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
  // Each agent turn with enough voiced speech: its start, median F0 and timbre statistics.
  struct Unit {
    double start_s;
    double f0;
    TimbreStats timbre;
  };
  std::vector<Unit> units;
  const double lead = static_cast<double>(kPitchWindow16k) / sample_rate_;
  auto time_of = [&](uint32_t k) { return k * kFrameSeconds + lead - kFrameSeconds / 2; };
  for (const Span& turn : turns) {
    Unit u{turn.start_s, MedianF0(turn), {}};
    auto it = std::lower_bound(timbre_.begin(), timbre_.end(), turn.start_s,
                               [&](const Timbre& t, double s) { return time_of(t.frame) < s; });
    for (; it != timbre_.end() && time_of(it->frame) < turn.end_s; ++it) {
      std::array<float, kCepstra> c;
      for (int k = 0; k < kCepstra; ++k) c[k] = it->c[k] * kCepstrumStep;
      u.timbre.Add(c.data());
    }
    if (u.f0 > 0 || u.timbre.count() >= kMinTimbreFramesPerTurn) units.push_back(std::move(u));
  }
  if (units.empty()) {
    r.set_status("not_applicable");
    r.set_error("no voiced agent speech");
    return r;
  }

  // The units from `i` on, pooled until they hold kSegmentFrames voiced frames (or the call
  // ends): short turns are judged together with the next ones, not alone. Returns one past the
  // last unit taken.
  struct Segment {
    TimbreStats timbre;
    std::vector<double> f0s;
  };
  auto pool = [&](size_t i, Segment* s) {
    for (; i < units.size(); ++i) {
      s->timbre.Merge(units[i].timbre);
      if (units[i].f0 > 0) s->f0s.push_back(units[i].f0);
      if (s->timbre.count() >= kSegmentFrames) return i + 1;
    }
    return i;
  };
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  // Whether `s` sounds like another voice than `voice`: a timbre clearly and significantly
  // apart, or a pitch far apart with a timbre at least somewhat apart (one voice speaking higher
  // or lower keeps its timbre).
  auto departs = [&](const Segment& voice, const Segment& s, double bar) {
    double significance = 0;
    const double distance = voice.timbre.Distance(s.timbre, &significance);
    if (voice.timbre.count() >= kMinReferenceFrames && significance > bar * kTimbreSignificance &&
        distance > bar * kTimbreDistance) {
      return true;
    }
    const double f0 = median(s.f0s), reference = median(voice.f0s);
    if (f0 <= 0 || reference <= 0 || std::fabs(std::log2(f0 / reference)) <= kChangeOctaves) {
      return false;
    }
    // Too little of the voice to know its timbre: pitch alone decides, as it must.
    return voice.timbre.count() < kMinTimbreFramesPerTurn || distance > bar * kTimbreDistance;
  };

  std::vector<double> change_points;
  Segment voice;
  voice.timbre = units[0].timbre;
  if (units[0].f0 > 0) voice.f0s.push_back(units[0].f0);
  for (size_t i = 1; i < units.size();) {
    Segment candidate;
    const size_t next = pool(i, &candidate);
    bool changed = false;
    if (departs(voice, candidate, 1.0)) {
      // The speech after the candidate must depart too (one odd sentence is not a new voice),
      // by a lower bar: two departures in a row are far less likely by chance than one;
      // at the end of the call the candidate stands alone if it is long enough.
      Segment after;
      pool(next, &after);
      changed = after.timbre.count() > 0 || !after.f0s.empty()
                    ? departs(voice, after, kConfirmBar)
                    : candidate.timbre.count() >= kSegmentFrames;
    }
    if (changed) {
      change_points.push_back(units[i].start_s);
      voice = std::move(candidate);
      i = next;
    } else {
      voice.timbre.Merge(units[i].timbre);
      if (units[i].f0 > 0) voice.f0s.push_back(units[i].f0);
      ++i;
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

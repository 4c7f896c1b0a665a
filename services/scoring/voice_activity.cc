#include "services/scoring/voice_activity.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace calleval::scoring {
namespace {

constexpr double kPi = 3.14159265358979323846;
// Energies are floored here before taking logarithms (about -120 dBFS).
constexpr double kTinyEnergy = 1e-12;

// Frames quieter than this (-100 dBFS) carry no usable crosstalk evidence.
constexpr double kAudibleEnergy = 1e-10;
// Crosstalk is judged on at least this many frames (0.25 s).
constexpr size_t kMinCoherenceFrames = 50;

// Level given to frames that are only crosstalk (below any real level).
constexpr float kShadowDb = -200.0f;

// Where a boundary lies relative to the interpolated threshold crossing, in hops: an onset
// shows first in the frame whose window just reaches it (near the window's end), an offset last
// in the frame whose window still covers it (near the window's start). Calibrated on
// synthetic speech with sharp edges.
constexpr double kStartLead = 0.4;
constexpr double kEndLag = 0.2;

double ToDb(double energy) { return 10.0 * std::log10(std::max(energy, kTinyEnergy)); }

// Linear-interpolated percentile (numpy's default) of `values`; `values` is reordered.
double Percentile(std::vector<float>& values, double percentile) {
  if (values.empty()) return -120.0;
  const double rank = std::clamp(percentile, 0.0, 100.0) / 100.0 * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - lo;
  // Two order statistics, not a full sort: the same values in linear time.
  std::nth_element(values.begin(), values.begin() + lo, values.end());
  const float low = values[lo];
  const float high = hi == lo ? low : *std::min_element(values.begin() + lo + 1, values.end());
  return low + (high - low) * frac;
}

}  // namespace

VoiceActivityDetector::VoiceActivityDetector(int sample_rate, int channels,
                                             VoiceActivityOptions options)
    : sample_rate_(std::max(sample_rate, 1)),
      channels_(std::clamp(channels, 1, 2)),
      options_(options) {
  hop_samples_ = std::max<size_t>(
      1, static_cast<size_t>(std::lround(options_.hop_ms * sample_rate_ / 1000.0)));
  hops_per_frame_ =
      std::max<size_t>(1, static_cast<size_t>(std::lround(options_.frame_ms / options_.hop_ms)));
  if (options_.highpass_hz > 0 && options_.highpass_hz < 0.45 * sample_rate_) {
    // RBJ cookbook high-pass, Q = 1/sqrt(2) (Butterworth).
    const double w0 = 2.0 * kPi * options_.highpass_hz / sample_rate_;
    const double alpha = std::sin(w0) / (2.0 * std::sqrt(0.5));
    const double cosw = std::cos(w0);
    const double a0 = 1.0 + alpha;
    Biquad hp;
    hp.b0 = (1.0 + cosw) / 2.0 / a0;
    hp.b1 = -(1.0 + cosw) / a0;
    hp.b2 = (1.0 + cosw) / 2.0 / a0;
    hp.a1 = -2.0 * cosw / a0;
    hp.a2 = (1.0 - alpha) / a0;
    filters_ = {hp, hp};
  }
}

namespace {

// Where the CPU has fused multiply-add, the filter's feedback is one instruction with one
// rounding instead of a multiply and an add: half the latency of the chain every sample waits
// on. (The outputs differ from the plain loop's in the last bits only.)
const bool kCpuHasFma = __builtin_cpu_supports("fma");

}  // namespace

__attribute__((target("fma"))) void VoiceActivityDetector::FilterStereoFma(
    const float* in0, const float* in1, size_t n, Biquad* f0, Biquad* f1, double* e0, double* e1,
    double* cross) {
  Biquad a = *f0, b = *f1;
  double s0 = *e0, s1 = *e1, sx = *cross;
  for (size_t k = 0; k < n; ++k) {
    const double x0 = in0[k], x1 = in1[k];
    // The input terms do not wait on any output; y[n-2] enters one step before y[n-1], so
    // each output waits on the previous one for a single fused multiply-add.
    const double in_terms0 = std::fma(a.b0, x0, std::fma(a.b1, a.x1, a.b2 * a.x2));
    const double in_terms1 = std::fma(b.b0, x1, std::fma(b.b1, b.x1, b.b2 * b.x2));
    const double y0 = std::fma(-a.a1, a.y1, std::fma(-a.a2, a.y2, in_terms0));
    const double y1 = std::fma(-b.a1, b.y1, std::fma(-b.a2, b.y2, in_terms1));
    a.x2 = a.x1;
    a.x1 = x0;
    a.y2 = a.y1;
    a.y1 = y0;
    b.x2 = b.x1;
    b.x1 = x1;
    b.y2 = b.y1;
    b.y1 = y1;
    s0 = std::fma(y0, y0, s0);
    s1 = std::fma(y1, y1, s1);
    sx = std::fma(y0, y1, sx);
  }
  *f0 = a;
  *f1 = b;
  *e0 = s0;
  *e1 = s1;
  *cross = sx;
}

void VoiceActivityDetector::Feed(const std::array<std::vector<float>, 2>& block, size_t frames) {
  for (int c = 0; c < channels_; ++c) {
    if (block[c].size() < frames) frames = block[c].size();
  }
  // Hop by hop with the filter state and sums in locals: written through `this` on every
  // sample they could not stay in registers, and this loop is the detector's whole cost.
  // The arithmetic is the same, in the same order.
  const float* in[2] = {block[0].data(), channels_ == 2 ? block[1].data() : block[0].data()};
  std::array<Biquad, 2> f = filters_;
  size_t i = 0;
  while (i < frames) {
    const size_t n = std::min(frames - i, hop_samples_ - hop_fill_);
    double e0 = hop_energy_[0], e1 = hop_energy_[1], cross = hop_cross_;
    if (channels_ == 2 && kCpuHasFma && options_.fused_multiply_add) {
      FilterStereoFma(in[0] + i, in[1] + i, n, &f[0], &f[1], &e0, &e1, &cross);
    } else if (channels_ == 2) {
      for (size_t k = i; k < i + n; ++k) {
        const double x0 = f[0].Process(in[0][k]);
        const double x1 = f[1].Process(in[1][k]);
        e0 += x0 * x0;
        e1 += x1 * x1;
        cross += x0 * x1;
      }
    } else {
      for (size_t k = i; k < i + n; ++k) {
        const double x0 = f[0].Process(in[0][k]);
        e0 += x0 * x0;
      }
    }
    hop_energy_[0] = e0;
    hop_energy_[1] = e1;
    hop_cross_ = cross;
    hop_fill_ += n;
    i += n;
    if (hop_fill_ == hop_samples_) EndHop();
  }
  filters_ = f;
}

void VoiceActivityDetector::EndHop() {
  for (int c = 0; c < channels_; ++c) {
    energy_[c].push_back(static_cast<float>(hop_energy_[c]));
    hop_energy_[c] = 0;
  }
  if (channels_ == 2) cross_.push_back(static_cast<float>(hop_cross_));
  hop_cross_ = 0;
  hop_fill_ = 0;
}

std::array<SpeechSegments, 2> VoiceActivityDetector::Finish() {
  if (hop_fill_ > 0) EndHop();
  std::array<SpeechSegments, 2> result;
  const size_t frames = energy_[0].size();
  if (frames == 0) return result;

  // Frame i covers hops [i, i + hops_per_frame_) (fewer at the very end).
  auto frame_mean = [&](const std::vector<float>& hop_values, size_t i) {
    const size_t end = std::min(frames, i + hops_per_frame_);
    double sum = 0;
    for (size_t h = i; h < end; ++h) sum += hop_values[h];
    return sum / static_cast<double>((end - i) * hop_samples_);
  };
  // Does channel c carry a copy of the other one? In frames where the other channel is much
  // louder, leakage makes the two channels coherent (a scaled copy); independent noise or
  // codec artefacts do not.
  // Every frame's level in dB, once per channel: the passes below read each several times.
  std::array<std::vector<double>, 2> level_db;
  for (int c = 0; c < channels_; ++c) {
    level_db[c].resize(frames);
    for (size_t i = 0; i < frames; ++i) level_db[c][i] = ToDb(frame_mean(energy_[c], i));
  }
  std::array<bool, 2> leaks{false, false};
  for (int c = 0; c < channels_ && channels_ == 2; ++c) {
    std::vector<float> coherence;
    for (size_t i = 0; i < frames; ++i) {
      const double e = frame_mean(energy_[c], i);
      const double eo = frame_mean(energy_[1 - c], i);
      if (e <= kAudibleEnergy ||
          level_db[1 - c][i] - level_db[c][i] < options_.crosstalk_min_difference_db) {
        continue;
      }
      const double x = frame_mean(cross_, i);
      coherence.push_back(static_cast<float>(x * x / (e * eo)));
    }
    leaks[c] = coherence.size() >= kMinCoherenceFrames &&
               Percentile(coherence, 50.0) >= options_.crosstalk_min_coherence;
  }
  for (int c = 0; c < channels_; ++c) {
    // Own level of every frame in dB. On a channel with leakage, the part of a frame that is a
    // scaled copy of a louder other channel (crosstalk) is removed by least squares, and frames
    // that are still only a quiet shadow of the other channel get kShadowDb.
    std::vector<float> level(frames);
    for (size_t i = 0; i < frames; ++i) {
      const double e = frame_mean(energy_[c], i);
      if (channels_ == 1) {
        level[i] = static_cast<float>(level_db[c][i]);
        continue;
      }
      const double eo = frame_mean(energy_[1 - c], i);
      double own = e;
      if (leaks[c] && eo > e && eo > kTinyEnergy) {
        const double x = frame_mean(cross_, i);
        own = std::max(e - x * x / eo, 0.0);
      }
      const double own_db = own == e ? level_db[c][i] : ToDb(own);
      const double other_db = level_db[1 - c][i];
      const bool shadow = leaks[c] &&
                          other_db - level_db[c][i] >= options_.crosstalk_min_difference_db &&
                          own_db <= other_db - options_.crosstalk_leak_db;
      level[i] = static_cast<float>(shadow ? kShadowDb : own_db);
    }
    result[c] = DetectChannel(level);
  }
  return result;
}

SpeechSegments VoiceActivityDetector::DetectChannel(const std::vector<float>& level) const {
  SpeechSegments segments;
  const size_t n = level.size();
  // Frames silenced as crosstalk say nothing about the noise floor.
  std::vector<float> scratch;
  scratch.reserve(n);
  for (float v : level) {
    if (v > kShadowDb) scratch.push_back(v);
  }
  if (scratch.empty()) return segments;
  const double floor_db = Percentile(scratch, options_.noise_floor_percentile);
  const double onset_floor =
      std::max(floor_db + options_.onset_margin_db, options_.absolute_floor_dbfs);
  scratch.clear();
  for (float v : level) {
    if (v >= onset_floor) scratch.push_back(v);
  }
  if (scratch.empty()) return segments;
  const double peak_db = Percentile(scratch, options_.speech_peak_percentile);
  const double on_db = std::max(onset_floor, peak_db - options_.peak_range_db);
  const double off_db =
      std::max({floor_db + options_.hangover_margin_db, options_.absolute_floor_dbfs,
                peak_db - options_.peak_range_db - 5.0});

  // Smoothed level (mean energy over 2k+1 frames): less noise variance, so quiet speech tails
  // a few dB above the floor stay connected to the speech they end.
  const size_t half = static_cast<size_t>(std::max(options_.smoothing_half_width, 0));
  // Each frame's energy once (the window adds it, then takes it away again).
  std::vector<double> energy(n);
  for (size_t k = 0; k < n; ++k) {
    energy[k] = level[k] > kShadowDb ? std::pow(10.0, level[k] / 10.0) : 0.0;
  }
  auto energy_of = [&](size_t k) { return energy[k]; };
  std::vector<float> smooth(n);
  scratch.clear();
  double window_sum = 0;  // energies of frames [k - half, k + half] clipped to [0, n)
  for (size_t k = 0; k < std::min(n, half); ++k) window_sum += energy_of(k);
  for (size_t k = 0; k < n; ++k) {
    if (k + half < n) window_sum += energy_of(k + half);
    if (k > half) window_sum -= energy_of(k - half - 1);
    const size_t a = k >= half ? k - half : 0;
    const size_t b = std::min(n, k + half + 1);
    smooth[k] = static_cast<float>(ToDb(window_sum / static_cast<double>(b - a)));
    if (level[k] > kShadowDb) scratch.push_back(smooth[k]);
  }
  const double smooth_floor_db = Percentile(scratch, options_.noise_floor_percentile);
  const double smooth_off_db =
      std::max({smooth_floor_db + options_.smoothed_margin_db, options_.absolute_floor_dbfs,
                peak_db - options_.peak_range_db - 5.0});

  // Cores: runs of frames at or above the onset threshold; each grows while above off_db.
  struct Run {
    size_t first;
    size_t last;  // inclusive
    size_t core;
  };
  std::vector<Run> runs;
  const size_t min_core =
      static_cast<size_t>(std::ceil(options_.min_core_ms / 1000.0 * sample_rate_ / hop_samples_));
  const size_t max_extension = static_cast<size_t>(
      std::ceil(options_.max_extension_ms / 1000.0 * sample_rate_ / hop_samples_));
  auto above_after = [&](size_t k) { return level[k] >= off_db || smooth[k] >= smooth_off_db; };
  size_t i = 0;
  while (i < n) {
    if (level[i] < on_db) {
      ++i;
      continue;
    }
    size_t first = i;
    size_t last = i;
    // Extending backwards looks at the smoothed level of the frames up to the candidate, so the
    // onset being extended does not lift the curve; forwards the centred curve keeps decaying
    // tails connected.
    auto above_before = [&](size_t k) {
      return level[k] >= off_db || smooth[k >= half ? k - half : 0] >= smooth_off_db;
    };
    size_t core_last = i;
    while (core_last + 1 < n && level[core_last + 1] >= on_db) ++core_last;
    while (first > 0 && i - first < max_extension && above_before(first - 1)) --first;
    while (last + 1 < n && (last < core_last || last - core_last < max_extension) &&
           above_after(last + 1)) {
      ++last;
      if (level[last] >= on_db) core_last = last;
    }
    // The smoothed curve bridges dips but smears crisp edges: end on a frame that is itself
    // above the hangover threshold.
    while (first < i && level[first] < off_db) ++first;
    while (last > i && level[last] < off_db) --last;
    size_t core = 0;
    for (size_t k = i; k <= last; ++k) core += level[k] >= on_db ? 1 : 0;
    if (!runs.empty() && first <= runs.back().last + 1) {
      runs.back().last = std::max(runs.back().last, last);
      runs.back().core += core;
    } else {
      runs.push_back({first, last, core});
    }
    i = last + 1;
  }

  // Word-final stops ("left", "right") end in a closure, 50-150 ms of near silence, then a
  // release of 10-30 ms, 20 dB or more under the word's peak: too short to count as speech on
  // its own (min_core_ms drops clicks) and, in noise, not always above the onset threshold. The
  // release and the closure before it belong to the word, so after each segment the next
  // release_search_ms are searched for a frame clearly above the noise floor (release_margin_db:
  // noise frames stay within a few dB of the floor) and within peak_range_db of the peak; the
  // segment is extended to it, and on through its decaying tail like any other speech.
  std::vector<Run> kept;
  const size_t release_search = static_cast<size_t>(
      std::ceil(options_.release_search_ms / 1000.0 * sample_rate_ / hop_samples_));
  const double release_db = std::max(
      {floor_db + options_.release_margin_db, options_.absolute_floor_dbfs,
       peak_db - options_.peak_range_db});
  for (const Run& candidate : runs) {
    if (candidate.core < min_core) continue;
    Run run = candidate;
    for (bool extended = true; extended && release_search > 0;) {
      extended = false;
      const size_t stop = std::min(n, run.last + 1 + release_search);
      for (size_t k = run.last + 1; k < stop; ++k) {
        if (level[k] < release_db) continue;
        size_t last = k;
        while (last + 1 < n && last - k < max_extension && above_after(last + 1)) ++last;
        while (last > k && level[last] < off_db) --last;
        run.last = last;
        extended = true;
        break;
      }
    }
    if (!kept.empty() && run.first <= kept.back().last + 1) {
      kept.back().last = std::max(kept.back().last, run.last);
      kept.back().core += run.core;
    } else {
      kept.push_back(run);
    }
  }

  const double hop_s = hop_samples_ / static_cast<double>(sample_rate_);
  const double frame_s = hops_per_frame_ * hop_samples_ / static_cast<double>(sample_rate_);
  const double total_s = n * hop_samples_ / static_cast<double>(sample_rate_);
  // Sub-hop position of the threshold crossing between frames a (below) and b (above).
  auto crossing = [&](size_t below, size_t above) {
    const double lo = level[below];
    const double hi = level[above];
    if (hi <= lo) return 0.0;
    return std::clamp((off_db - lo) / (hi - lo), 0.0, 1.0);
  };
  for (const Run& run : kept) {
    // A frame's window ends frame_s after its start: an onset inside the window shows up first
    // in the frame whose window just reaches it; an offset last in the frame that still
    // covers it.
    double start_frames = run.first;
    if (run.first > 0) start_frames = run.first - 1 + crossing(run.first - 1, run.first);
    double end_frames = run.last;
    if (run.last + 1 < n) end_frames = run.last + 1 - crossing(run.last + 1, run.last);
    Span span;
    span.start_s = std::clamp(start_frames * hop_s + frame_s - kStartLead * hop_s, 0.0, total_s);
    span.end_s = std::clamp(end_frames * hop_s + kEndLag * hop_s, 0.0, total_s);
    if (run.first == 0) span.start_s = 0;
    if (span.end_s <= span.start_s) continue;
    if (!segments.empty() && span.start_s - segments.back().end_s < options_.min_gap_ms / 1000) {
      segments.back().end_s = std::max(segments.back().end_s, span.end_s);
    } else {
      segments.push_back(span);
    }
  }
  return segments;
}

}  // namespace calleval::scoring

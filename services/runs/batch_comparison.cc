#include "services/runs/batch_comparison.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

namespace calleval::runs {
namespace {

// Two probabilities this close (relatively) are the same table likelihood: the sums of lgamma
// that produce them differ in the last bits for tables that are equally likely by symmetry.
constexpr double kRelativeTieTolerance = 1e-7;

double LogChoose(int n, int k) {
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0);
}

// The standard normal's quantile, by Acklam's rational approximation (relative error below
// 1.2e-9, far finer than an interval's printed digits).
double NormalQuantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  if (p <= 0) return -std::numeric_limits<double>::infinity();
  if (p >= 1) return std::numeric_limits<double>::infinity();
  if (p < kLow) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - kLow) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double q = p - 0.5;
  const double r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

double TwoSidedZ(double confidence) { return NormalQuantile(1 - (1 - confidence) / 2); }

double Mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// A uniform index below `bound` from the engine. mt19937_64's output is fixed by the standard,
// but the standard distributions and std::shuffle are not: writing the draw here keeps a seed's
// answer the same on every standard library. The modulo's bias (bound / 2^64) is negligible.
size_t Below(std::mt19937_64& engine, size_t bound) {
  return static_cast<size_t>(engine() % static_cast<uint64_t>(bound));
}

// Visits every way of choosing `k` of `values` (by index, ascending), calling `visit` with the
// chosen values' sum.
template <typename Visit>
void ForEachSubsetSum(const std::vector<double>& values, int k, size_t from, double sum,
                      Visit& visit) {
  if (k == 0) {
    visit(sum);
    return;
  }
  for (size_t i = from; i + k <= values.size(); ++i) {
    ForEachSubsetSum(values, k - 1, i + 1, sum + values[i], visit);
  }
}

// C(n, k), or a number above `cap` once it exceeds it.
double ChooseCapped(int n, int k, double cap) {
  k = std::min(k, n - k);
  double result = 1;
  for (int i = 1; i <= k; ++i) {
    result = result * (n - k + i) / i;
    if (result > cap) return result;
  }
  return result;
}

}  // namespace

double FisherExactTwoSided(int a_successes, int a_total, int b_successes, int b_total) {
  if (a_total <= 0 || b_total <= 0) return 1;
  const int n = a_total + b_total;
  const int successes = a_successes + b_successes;
  const int low = std::max(0, a_total - (n - successes));
  const int high = std::min(successes, a_total);
  const double log_all = LogChoose(n, a_total);
  auto probability = [&](int k) {
    return std::exp(LogChoose(successes, k) + LogChoose(n - successes, a_total - k) - log_all);
  };
  const double observed = probability(a_successes);
  double p = 0;
  for (int k = low; k <= high; ++k) {
    const double pk = probability(k);
    if (pk <= observed * (1 + kRelativeTieTolerance)) p += pk;
  }
  return std::min(1.0, p);
}

Interval WilsonInterval(int successes, int total, double confidence) {
  if (total <= 0) return {0, 1};
  const double z = TwoSidedZ(confidence);
  const double n = total;
  const double p = successes / n;
  const double z2 = z * z;
  const double denominator = 1 + z2 / n;
  const double center = (p + z2 / (2 * n)) / denominator;
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator;
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

Interval NewcombeDifferenceInterval(int baseline_successes, int baseline_total,
                                    int current_successes, int current_total, double confidence) {
  if (baseline_total <= 0 || current_total <= 0) return {-1, 1};
  const double p_current = static_cast<double>(current_successes) / current_total;
  const double p_baseline = static_cast<double>(baseline_successes) / baseline_total;
  const Interval current = WilsonInterval(current_successes, current_total, confidence);
  const Interval baseline = WilsonInterval(baseline_successes, baseline_total, confidence);
  const double difference = p_current - p_baseline;
  const double low = difference - std::hypot(p_current - current.low, baseline.high - p_baseline);
  const double high = difference + std::hypot(current.high - p_current, p_baseline - baseline.low);
  return {std::max(-1.0, low), std::min(1.0, high)};
}

double PermutationTestDifferenceOfMeans(const std::vector<double>& baseline,
                                        const std::vector<double>& current, int max_relabellings,
                                        uint64_t seed) {
  if (baseline.empty() || current.empty()) return 1;
  std::vector<double> pooled(baseline);
  pooled.insert(pooled.end(), current.begin(), current.end());
  const double total = std::accumulate(pooled.begin(), pooled.end(), 0.0);
  const double n_current = current.size();
  const double n_baseline = baseline.size();
  auto difference_for = [&](double current_sum) {
    return current_sum / n_current - (total - current_sum) / n_baseline;
  };
  const double observed =
      std::fabs(difference_for(std::accumulate(current.begin(), current.end(), 0.0)));
  // Relabellings whose difference equals the observed one up to rounding count as as extreme.
  const double at_least = observed - 1e-9 * std::max(1.0, observed);

  const int k = static_cast<int>(current.size());
  const int n = static_cast<int>(pooled.size());
  if (max_relabellings > 0 && ChooseCapped(n, k, max_relabellings) <= max_relabellings) {
    double hits = 0;
    double all = 0;
    auto visit = [&](double sum) {
      all += 1;
      if (std::fabs(difference_for(sum)) >= at_least) hits += 1;
    };
    ForEachSubsetSum(pooled, k, 0, 0.0, visit);
    return hits / all;
  }

  std::mt19937_64 engine(seed);
  const int draws = std::max(1, max_relabellings);
  int hits = 0;
  for (int draw = 0; draw < draws; ++draw) {
    // A partial Fisher–Yates shuffle: the first k of `pooled` become the current side.
    double sum = 0;
    for (int i = 0; i < k; ++i) {
      const size_t j = i + Below(engine, pooled.size() - i);
      std::swap(pooled[i], pooled[j]);
      sum += pooled[i];
    }
    if (std::fabs(difference_for(sum)) >= at_least) ++hits;
  }
  return (hits + 1.0) / (draws + 1.0);
}

Interval BootstrapDifferenceInterval(const std::vector<double>& baseline,
                                     const std::vector<double>& current, int resamples,
                                     double confidence, uint64_t seed) {
  if (baseline.empty() || current.empty()) return {0, 0};
  std::mt19937_64 engine(seed);
  auto resampled_mean = [&](const std::vector<double>& values) {
    double sum = 0;
    for (size_t i = 0; i < values.size(); ++i) sum += values[Below(engine, values.size())];
    return sum / values.size();
  };
  std::vector<double> differences;
  differences.reserve(std::max(1, resamples));
  for (int i = 0; i < std::max(1, resamples); ++i) {
    const double b = resampled_mean(baseline);
    differences.push_back(resampled_mean(current) - b);
  }
  std::sort(differences.begin(), differences.end());
  auto quantile = [&](double q) {
    const double position = q * (differences.size() - 1);
    const size_t below = static_cast<size_t>(std::floor(position));
    const size_t above = std::min(below + 1, differences.size() - 1);
    return differences[below] + (position - below) * (differences[above] - differences[below]);
  };
  const double tail = (1 - confidence) / 2;
  return {quantile(tail), quantile(1 - tail)};
}

std::vector<double> HolmAdjust(const std::vector<double>& p_values) {
  const size_t m = p_values.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p_values[a] < p_values[b]; });
  std::vector<double> adjusted(m);
  double running = 0;
  for (size_t rank = 0; rank < m; ++rank) {
    const double scaled = std::min(1.0, static_cast<double>(m - rank) * p_values[order[rank]]);
    running = std::max(running, scaled);
    adjusted[order[rank]] = running;
  }
  return adjusted;
}

std::vector<FigureComparison> CompareFigures(const std::vector<FigureSamples>& figures,
                                             const ComparisonOptions& options) {
  std::vector<FigureComparison> results(figures.size());
  std::vector<size_t> tested;
  std::vector<double> raw;
  for (size_t i = 0; i < figures.size(); ++i) {
    const FigureSamples& figure = figures[i];
    FigureComparison& result = results[i];
    result.baseline_samples = static_cast<int>(figure.baseline.size());
    result.current_samples = static_cast<int>(figure.current.size());
    if (!figure.baseline.empty()) result.baseline = Mean(figure.baseline);
    if (!figure.current.empty()) result.current = Mean(figure.current);
    if (!result.baseline || !result.current) continue;
    result.difference = *result.current - *result.baseline;

    Interval interval;
    double p = 1;
    if (figure.kind == FigureKind::kPassRate) {
      auto passes = [](const std::vector<double>& values) {
        return static_cast<int>(
            std::count_if(values.begin(), values.end(), [](double v) { return v >= 0.5; }));
      };
      const int baseline_passes = passes(figure.baseline);
      const int current_passes = passes(figure.current);
      interval =
          NewcombeDifferenceInterval(baseline_passes, result.baseline_samples, current_passes,
                                     result.current_samples, options.confidence);
      p = FisherExactTwoSided(current_passes, result.current_samples, baseline_passes,
                              result.baseline_samples);
    } else {
      // The interval and the test draw from separate streams of the figure's seed.
      interval =
          BootstrapDifferenceInterval(figure.baseline, figure.current, options.bootstrap_resamples,
                                      options.confidence, figure.seed ^ 0x9e3779b97f4a7c15ULL);
      p = PermutationTestDifferenceOfMeans(figure.baseline, figure.current,
                                           options.max_relabellings, figure.seed);
    }
    result.ci_low = interval.low;
    result.ci_high = interval.high;
    if (result.baseline_samples < options.min_samples ||
        result.current_samples < options.min_samples) {
      continue;  // too few to test: inconclusive below, and no p-value in the family
    }
    result.raw_p_value = p;
    tested.push_back(i);
    raw.push_back(p);
  }

  const std::vector<double> adjusted = HolmAdjust(raw);
  for (size_t t = 0; t < tested.size(); ++t) results[tested[t]].p_value = adjusted[t];

  for (size_t i = 0; i < figures.size(); ++i) {
    const FigureSamples& figure = figures[i];
    FigureComparison& result = results[i];
    if (!result.p_value) {
      result.verdict = kInconclusive;
      continue;
    }
    const double difference = *result.difference;
    if (*result.p_value < options.alpha && difference != 0) {
      result.verdict = ((difference > 0) == figure.higher_is_better) ? kImproved : kRegressed;
      continue;
    }
    double margin = options.pass_rate_margin;
    if (figure.kind == FigureKind::kMean) {
      const double scale = std::fabs(*result.baseline);
      margin = options.mean_relative_margin * (scale > 0 ? scale : 1.0);
    }
    // Rounding must not decide: 0.7 - 0.9 is -0.20000000000000007.
    result.verdict = std::fabs(difference) >= margin * (1 - 1e-9) ? kInconclusive : kUnchanged;
  }
  return results;
}

std::string OverallVerdict(const std::vector<std::string>& verdicts) {
  auto any = [&](const char* verdict) {
    return std::find(verdicts.begin(), verdicts.end(), verdict) != verdicts.end();
  };
  if (any(kRegressed)) return kRegressed;
  if (any(kImproved)) return kImproved;
  if (verdicts.empty() || any(kInconclusive)) return kInconclusive;
  return kUnchanged;
}

uint64_t ComparisonSeed(int64_t batch_run_id, int64_t baseline_batch_run_id, int64_t scenario_id,
                        const std::string& figure_key) {
  uint64_t hash = 14695981039346656037ULL;  // FNV-1a offset basis
  auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 1099511628211ULL;  // FNV prime
  };
  for (int64_t id : {batch_run_id, baseline_batch_run_id, scenario_id}) {
    const uint64_t bits = static_cast<uint64_t>(id);
    for (int shift = 0; shift < 64; shift += 8) mix(static_cast<unsigned char>(bits >> shift));
  }
  for (char c : figure_key) mix(static_cast<unsigned char>(c));
  return hash;
}

}  // namespace calleval::runs

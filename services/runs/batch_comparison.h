#pragma once

// The statistics of a batch run compared with its baseline (docs/api.md §5.6, "Comparison with
// a baseline"; docs/regressions.md): pure functions over the outcomes of the two batches' runs.
//
// Agents are not deterministic, so a scenario is run several times on each side and the question
// is whether the difference between the two samples is larger than chance would make it:
//   - pass rates (0/1 outcomes): Fisher's exact test, and Newcombe's hybrid score interval for the
//     difference of the two proportions;
//   - numeric figures (a latency, a numeric metric's value): a permutation test on the difference
//     of the means (exact when the relabellings are few, else Monte Carlo with a fixed seed), and
//     a percentile bootstrap interval for it;
//   - every p-value of one comparison is corrected for the number of comparisons made
//     (Holm–Bonferroni), so a batch of many scenarios and metrics does not raise false alarms.
// Random draws use a seed the caller derives from the batches, so the same comparison read twice
// gives the same answer.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace calleval::runs {

// A two-sided interval.
struct Interval {
  double low = 0;
  double high = 0;
};

// Fisher's exact test, two-sided, for the 2x2 table (a_successes, a_total - a_successes;
// b_successes, b_total - b_successes): the probability, with the margins fixed, of a table no
// more likely than the one observed (tables within a relative 1e-7 of it count as equally
// likely). 1 when either total is 0.
double FisherExactTwoSided(int a_successes, int a_total, int b_successes, int b_total);

// Wilson's score interval for a proportion. [0, 1] when total is 0.
Interval WilsonInterval(int successes, int total, double confidence);

// Newcombe's hybrid score interval (his method 10) for p_current - p_baseline. [-1, 1] when
// either total is 0.
Interval NewcombeDifferenceInterval(int baseline_successes, int baseline_total,
                                    int current_successes, int current_total, double confidence);

// Two-sided permutation test of mean(current) - mean(baseline): the share of relabellings of the
// pooled values whose difference is at least as far from 0 as the observed one. Exact (every
// relabelling) when there are at most `max_relabellings` of them, else `max_relabellings` random
// ones drawn with `seed`, counted with the observed one ((hits + 1) / (draws + 1)). 1 when either
// side is empty.
double PermutationTestDifferenceOfMeans(const std::vector<double>& baseline,
                                        const std::vector<double>& current, int max_relabellings,
                                        uint64_t seed);

// Percentile bootstrap interval of mean(current) - mean(baseline): `resamples` resamplings of
// each side with replacement, drawn with `seed`. A degenerate interval at the observed difference
// when both sides are constant; {0, 0} when either side is empty.
Interval BootstrapDifferenceInterval(const std::vector<double>& baseline,
                                     const std::vector<double>& current, int resamples,
                                     double confidence, uint64_t seed);

// Holm–Bonferroni adjusted p-values, in the order given: the k-th smallest of m becomes
// max over j <= k of min(1, (m - j + 1) * p_(j)).
std::vector<double> HolmAdjust(const std::vector<double>& p_values);

// How one figure of one scenario is compared.
enum class FigureKind {
  kPassRate,  // values are 0 or 1; compared by pass rate
  kMean,      // numeric values; compared by mean
};

struct FigureSamples {
  FigureKind kind = FigureKind::kPassRate;
  bool higher_is_better = true;
  std::vector<double> baseline;
  std::vector<double> current;
  // Mixed into the comparison's seed so every figure draws its own numbers.
  uint64_t seed = 0;
};

struct ComparisonOptions {
  // The family-wise error rate over one comparison's figures. 1 %, not the customary 5 %: a
  // comparison gates CI on every change, and at 5 % one change in twenty would be held up by
  // chance alone.
  double alpha = 0.01;
  double confidence = 0.95;  // of the intervals
  // Fewer values than this on either side: inconclusive (too few to tell).
  int min_samples = 2;
  // A difference this large or larger that is not significant is inconclusive, not unchanged:
  // the runs could not tell a real move from chance. Pass rates: absolute; means: relative to
  // the baseline's mean (absolute when the baseline's mean is 0).
  double pass_rate_margin = 0.2;
  double mean_relative_margin = 0.2;
  int max_relabellings = 20000;
  int bootstrap_resamples = 4000;
};

// improved | regressed | unchanged | inconclusive
inline constexpr char kImproved[] = "improved";
inline constexpr char kRegressed[] = "regressed";
inline constexpr char kUnchanged[] = "unchanged";
inline constexpr char kInconclusive[] = "inconclusive";

struct FigureComparison {
  // Pass rate or mean of each side; nullopt for a side without values.
  std::optional<double> baseline;
  std::optional<double> current;
  std::optional<double> difference;  // current - baseline
  std::optional<double> ci_low;
  std::optional<double> ci_high;
  // Corrected for the number of figures compared (Holm–Bonferroni); nullopt when not tested.
  std::optional<double> p_value;
  std::optional<double> raw_p_value;
  int baseline_samples = 0;
  int current_samples = 0;
  std::string verdict;
};

// Compares each figure, corrects the p-values over all of them together, and gives each a
// verdict: regressed or improved when the corrected p-value is below alpha (the direction from
// the difference and higher_is_better); inconclusive when either side has fewer than
// min_samples values, or when the difference is not significant but at least the margin;
// unchanged otherwise.
std::vector<FigureComparison> CompareFigures(const std::vector<FigureSamples>& figures,
                                             const ComparisonOptions& options);

// The verdict of a whole comparison: regressed when any figure regressed; else improved when any
// improved; else inconclusive when any is inconclusive or there is none (nothing was compared);
// else unchanged.
std::string OverallVerdict(const std::vector<std::string>& verdicts);

// A seed for one figure from the identifiers that name it (batch ids, scenario id, figure key):
// stable across processes and releases (FNV-1a over the parts), unlike std::hash.
uint64_t ComparisonSeed(int64_t batch_run_id, int64_t baseline_batch_run_id, int64_t scenario_id,
                        const std::string& figure_key);

}  // namespace calleval::runs

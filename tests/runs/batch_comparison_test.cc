// The statistics of a batch's comparison with its baseline, checked against values computed here
// another way (exact rational arithmetic, enumeration by hand) and against published examples.

#include "services/runs/batch_comparison.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace calleval::runs {
namespace {

// C(n, k) exactly, in integers (the tests' counts are small).
uint64_t Binomial(int n, int k) {
  if (k < 0 || k > n) return 0;
  uint64_t result = 1;
  for (int i = 1; i <= k; ++i) result = result * (n - k + i) / i;  // exact at every step
  return result;
}

// Fisher's two-sided p-value from the hypergeometric counts in integers: the tables whose count
// of arrangements is at most the observed table's.
double FisherByCounting(int a_successes, int a_total, int b_successes, int b_total) {
  const int successes = a_successes + b_successes;
  const int failures = a_total + b_total - successes;
  const uint64_t observed =
      Binomial(successes, a_successes) * Binomial(failures, a_total - a_successes);
  uint64_t as_extreme = 0;
  for (int k = 0; k <= a_total; ++k) {
    const uint64_t ways = Binomial(successes, k) * Binomial(failures, a_total - k);
    if (ways != 0 && ways <= observed) as_extreme += ways;
  }
  return static_cast<double>(as_extreme) /
         static_cast<double>(Binomial(a_total + b_total, a_total));
}

TEST(FisherExactTest, MatchesTheHypergeometricCountedInIntegers) {
  struct Table {
    int a, n_a, b, n_b;
  };
  for (const Table& t : std::vector<Table>{{3, 4, 1, 4},
                                           {10, 10, 3, 10},
                                           {1, 12, 9, 12},
                                           {0, 5, 5, 5},
                                           {7, 9, 2, 8},
                                           {4, 10, 5, 10},
                                           {0, 3, 0, 4},
                                           {12, 20, 19, 20},
                                           {1, 1, 0, 2}}) {
    SCOPED_TRACE(testing::Message() << t.a << "/" << t.n_a << " vs " << t.b << "/" << t.n_b);
    EXPECT_NEAR(FisherExactTwoSided(t.a, t.n_a, t.b, t.n_b),
                FisherByCounting(t.a, t.n_a, t.b, t.n_b), 1e-12);
  }
}

TEST(FisherExactTest, PublishedExamples) {
  // Fisher's lady tasting tea: 3 of 4 cups right against 1 of 4: 17/35.
  EXPECT_NEAR(FisherExactTwoSided(3, 4, 1, 4), 17.0 / 35.0, 1e-12);
  // 1 of 12 men dieting against 9 of 12 women: 0.002759 two-sided (the textbook example).
  EXPECT_NEAR(FisherExactTwoSided(1, 12, 9, 12), 0.002759, 5e-7);
  // 10/10 against 3/10: the two extreme tables, each 286 of C(20, 10) = 184756.
  EXPECT_NEAR(FisherExactTwoSided(10, 10, 3, 10), 572.0 / 184756.0, 1e-12);
  // Identical samples are as likely as anything: p = 1.
  EXPECT_DOUBLE_EQ(FisherExactTwoSided(5, 10, 5, 10), 1.0);
  EXPECT_DOUBLE_EQ(FisherExactTwoSided(0, 0, 3, 4), 1.0);
}

TEST(WilsonIntervalTest, PublishedExample) {
  // Newcombe (1998), single proportions: 81/263 → 0.2553 to 0.3662.
  const Interval i = WilsonInterval(81, 263, 0.95);
  EXPECT_NEAR(i.low, 0.2553, 5e-5);
  EXPECT_NEAR(i.high, 0.3662, 5e-5);
}

TEST(WilsonIntervalTest, MatchesTheFormulaWorkedHere) {
  // 3/10 at 95%: z = 1.959964, worked from (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n).
  const double z = 1.959963984540054;
  const double n = 10, p = 0.3;
  const double centre = (p + z * z / (2 * n)) / (1 + z * z / n);
  const double half = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n);
  const Interval i = WilsonInterval(3, 10, 0.95);
  EXPECT_NEAR(i.low, centre - half, 1e-8);
  EXPECT_NEAR(i.high, centre + half, 1e-8);
  EXPECT_NEAR(i.low, 0.1078, 5e-5);
  EXPECT_NEAR(i.high, 0.6032, 5e-5);
}

TEST(NewcombeIntervalTest, PublishedExamples) {
  // Newcombe (1998), differences of independent proportions, method 10 (hybrid score):
  // 56/70 - 48/80 = 0.2 → 0.0524 to 0.3339; 9/10 - 3/10 = 0.6 → 0.1705 to 0.8090.
  Interval i = NewcombeDifferenceInterval(48, 80, 56, 70, 0.95);
  EXPECT_NEAR(i.low, 0.0524, 5e-5);
  EXPECT_NEAR(i.high, 0.3339, 5e-5);
  i = NewcombeDifferenceInterval(3, 10, 9, 10, 0.95);
  EXPECT_NEAR(i.low, 0.1705, 5e-5);
  EXPECT_NEAR(i.high, 0.8090, 5e-5);
  // The direction is current - baseline: swapping the sides mirrors the interval.
  i = NewcombeDifferenceInterval(9, 10, 3, 10, 0.95);
  EXPECT_NEAR(i.low, -0.8090, 5e-5);
  EXPECT_NEAR(i.high, -0.1705, 5e-5);
}

TEST(NewcombeIntervalTest, ComposedFromTheWilsonIntervals) {
  const Interval current = WilsonInterval(7, 12, 0.9);
  const Interval baseline = WilsonInterval(2, 9, 0.9);
  const double pc = 7.0 / 12, pb = 2.0 / 9;
  const Interval i = NewcombeDifferenceInterval(2, 9, 7, 12, 0.9);
  EXPECT_NEAR(
      i.low, (pc - pb) - std::sqrt(std::pow(pc - current.low, 2) + std::pow(baseline.high - pb, 2)),
      1e-12);
  EXPECT_NEAR(
      i.high,
      (pc - pb) + std::sqrt(std::pow(current.high - pc, 2) + std::pow(pb - baseline.low, 2)),
      1e-12);
}

TEST(PermutationTest, ExactOnAHandCountedExample) {
  // {1,2,3} against {4,5,6}: of the C(6,3) = 20 relabellings only the observed one and its
  // mirror reach |difference| = 3.
  EXPECT_NEAR(PermutationTestDifferenceOfMeans({1, 2, 3}, {4, 5, 6}, 1000, 1), 2.0 / 20, 1e-12);
  // {1,2,4} against {3,5,6}: difference 7/3; the relabellings with a current-side sum of 14 or
  // more, or 7 or less: sums {3,5,6}=14, {4,5,6}=15, {1,2,4}=7, {1,2,3}=6 → 4 of 20.
  EXPECT_NEAR(PermutationTestDifferenceOfMeans({1, 2, 4}, {3, 5, 6}, 1000, 1), 4.0 / 20, 1e-12);
  // The same values on both sides: every relabelling is as extreme.
  EXPECT_DOUBLE_EQ(PermutationTestDifferenceOfMeans({2, 2, 2}, {2, 2}, 1000, 1), 1.0);
  EXPECT_DOUBLE_EQ(PermutationTestDifferenceOfMeans({}, {1}, 1000, 1), 1.0);
}

TEST(PermutationTest, MonteCarloApproachesTheExactValueAndRepeatsForASeed) {
  const std::vector<double> baseline = {810, 905, 760, 990, 870, 845, 930, 800};
  const std::vector<double> current = {950, 1010, 880, 1040, 990, 900, 1075, 960};
  const double exact = PermutationTestDifferenceOfMeans(baseline, current, 20000, 7);   // 12870
  const double sampled = PermutationTestDifferenceOfMeans(baseline, current, 5000, 7);  // drawn
  EXPECT_NEAR(sampled, exact, 0.01);
  EXPECT_DOUBLE_EQ(sampled, PermutationTestDifferenceOfMeans(baseline, current, 5000, 7));
  EXPECT_GT(exact, 0);
  EXPECT_LT(exact, 0.05);
}

TEST(BootstrapTest, AgreesWithTheNormalIntervalOnLargeSamples) {
  std::mt19937_64 engine(42);
  std::normal_distribution<double> baseline_draw(900, 100), current_draw(950, 100);
  std::vector<double> baseline, current;
  for (int i = 0; i < 400; ++i) baseline.push_back(baseline_draw(engine));
  for (int i = 0; i < 400; ++i) current.push_back(current_draw(engine));
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / v.size();
  };
  auto variance = [&](const std::vector<double>& v) {
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return s / (v.size() - 1);
  };
  const double difference = mean(current) - mean(baseline);
  const double se = std::sqrt(variance(baseline) / 400 + variance(current) / 400);
  const Interval i = BootstrapDifferenceInterval(baseline, current, 4000, 0.95, 3);
  EXPECT_NEAR(i.low, difference - 1.96 * se, 0.1 * se);
  EXPECT_NEAR(i.high, difference + 1.96 * se, 0.1 * se);
  const Interval again = BootstrapDifferenceInterval(baseline, current, 4000, 0.95, 3);
  EXPECT_DOUBLE_EQ(i.low, again.low);
  EXPECT_DOUBLE_EQ(i.high, again.high);
}

TEST(BootstrapTest, ConstantSidesGiveTheObservedDifference) {
  const Interval i = BootstrapDifferenceInterval({5, 5, 5}, {7, 7}, 100, 0.95, 1);
  EXPECT_DOUBLE_EQ(i.low, 2);
  EXPECT_DOUBLE_EQ(i.high, 2);
}

TEST(HolmAdjustTest, HandWorkedExample) {
  // Sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → kept monotone at 0.06.
  const std::vector<double> adjusted = HolmAdjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_EQ(adjusted.size(), 4u);
  EXPECT_NEAR(adjusted[0], 0.03, 1e-12);
  EXPECT_NEAR(adjusted[1], 0.06, 1e-12);
  EXPECT_NEAR(adjusted[2], 0.06, 1e-12);
  EXPECT_NEAR(adjusted[3], 0.02, 1e-12);
  EXPECT_DOUBLE_EQ(HolmAdjust({0.6, 0.7})[1], 1.0);
  EXPECT_TRUE(HolmAdjust({}).empty());
}

FigureSamples PassRate(int baseline_passes, int baseline_runs, int current_passes,
                       int current_runs) {
  FigureSamples f;
  f.kind = FigureKind::kPassRate;
  for (int i = 0; i < baseline_runs; ++i) f.baseline.push_back(i < baseline_passes ? 1 : 0);
  for (int i = 0; i < current_runs; ++i) f.current.push_back(i < current_passes ? 1 : 0);
  return f;
}

TEST(CompareFiguresTest, VerdictsOfPassRates) {
  const ComparisonOptions options;
  const auto results =
      CompareFigures({PassRate(10, 10, 2, 10), PassRate(2, 10, 10, 10), PassRate(9, 10, 9, 10),
                      PassRate(3, 3, 0, 3), PassRate(1, 1, 0, 1)},
                     options);
  ASSERT_EQ(results.size(), 5u);
  EXPECT_EQ(results[0].verdict, kRegressed);
  EXPECT_EQ(results[1].verdict, kImproved);
  EXPECT_EQ(results[2].verdict, kUnchanged);
  // 3/3 against 0/3 cannot reach significance (Fisher's p is 0.1 at best): a big move that the
  // runs cannot tell from chance.
  EXPECT_EQ(results[3].verdict, kInconclusive);
  EXPECT_EQ(results[4].verdict, kInconclusive);
  EXPECT_FALSE(results[4].p_value.has_value());

  // The family is the four tested figures: Holm multiplies the smallest p-values by 4. 10/10
  // against 2/10: the two extreme tables, each 66 of C(20, 10) = 184756.
  const double smallest = 132.0 / 184756.0;
  EXPECT_NEAR(*results[0].raw_p_value, smallest, 1e-12);
  EXPECT_NEAR(*results[0].p_value, 4 * smallest, 1e-12);
  EXPECT_NEAR(*results[0].baseline, 1.0, 1e-12);
  EXPECT_NEAR(*results[0].current, 0.2, 1e-12);
  EXPECT_NEAR(*results[0].difference, -0.8, 1e-12);
  const Interval newcombe = NewcombeDifferenceInterval(10, 10, 2, 10, 0.95);
  EXPECT_DOUBLE_EQ(*results[0].ci_low, newcombe.low);
  EXPECT_DOUBLE_EQ(*results[0].ci_high, newcombe.high);
  EXPECT_EQ(results[0].baseline_samples, 10);
  EXPECT_EQ(results[0].current_samples, 10);
}

TEST(CompareFiguresTest, LowerIsBetterForALatency) {
  FigureSamples latency;
  latency.kind = FigureKind::kMean;
  latency.higher_is_better = false;
  latency.baseline = {810, 905, 760, 990, 870, 845, 930, 800, 880, 860};
  latency.current = {1410, 1505, 1360, 1590, 1470, 1445, 1530, 1400, 1480, 1460};
  latency.seed = 11;
  FigureSamples faster = latency;
  std::swap(faster.baseline, faster.current);
  const auto results = CompareFigures({latency, faster}, ComparisonOptions());
  EXPECT_EQ(results[0].verdict, kRegressed);
  EXPECT_EQ(results[1].verdict, kImproved);
  EXPECT_NEAR(*results[0].difference, 600, 1e-9);
  EXPECT_LT(*results[0].ci_low, 600);
  EXPECT_GT(*results[0].ci_high, 600);
}

TEST(CompareFiguresTest, NoFalseAlarmOverTwentyComparisonsOfTheSameAgent) {
  // Twenty comparisons of an agent with itself: each side twenty runs of a scenario that passes
  // 80 % of the time and answers in about 900 ms, drawn with a fixed seed. None may be called a
  // regression (nor an improvement).
  std::mt19937_64 engine(20261128);
  std::bernoulli_distribution passes(0.8);
  std::normal_distribution<double> latency(900, 120);
  int alarms = 0;
  for (int comparison = 0; comparison < 20; ++comparison) {
    FigureSamples pass_rate, latency_ms;
    latency_ms.kind = FigureKind::kMean;
    latency_ms.higher_is_better = false;
    latency_ms.seed = ComparisonSeed(comparison, comparison + 100, 1, "latency.mean_ms");
    for (int run = 0; run < 20; ++run) {
      pass_rate.baseline.push_back(passes(engine) ? 1 : 0);
      pass_rate.current.push_back(passes(engine) ? 1 : 0);
      latency_ms.baseline.push_back(latency(engine));
      latency_ms.current.push_back(latency(engine));
    }
    std::vector<std::string> verdicts;
    for (const FigureComparison& c : CompareFigures({pass_rate, latency_ms}, ComparisonOptions())) {
      verdicts.push_back(c.verdict);
    }
    const std::string overall = OverallVerdict(verdicts);
    if (overall == kRegressed || overall == kImproved) ++alarms;
  }
  EXPECT_EQ(alarms, 0);
}

TEST(CompareFiguresTest, FalseAlarmsStayWithinAlpha) {
  // The same agent compared with itself 300 times (twelve runs a side): the share of comparisons
  // called regressed or improved must not exceed the 1 % the verdicts promise (2 % allows for
  // the draw). A test that is wrong about its error rate (say, a one-sided p-value, or no
  // correction for the two figures) lands well above that.
  std::mt19937_64 engine(7);
  std::bernoulli_distribution passes(0.7);
  std::normal_distribution<double> latency(900, 150);
  ComparisonOptions options;
  options.max_relabellings = 2000;
  options.bootstrap_resamples = 200;
  int alarms = 0;
  constexpr int kComparisons = 300;
  for (int comparison = 0; comparison < kComparisons; ++comparison) {
    FigureSamples pass_rate, latency_ms;
    latency_ms.kind = FigureKind::kMean;
    latency_ms.higher_is_better = false;
    latency_ms.seed = static_cast<uint64_t>(comparison);
    for (int run = 0; run < 12; ++run) {
      pass_rate.baseline.push_back(passes(engine) ? 1 : 0);
      pass_rate.current.push_back(passes(engine) ? 1 : 0);
      latency_ms.baseline.push_back(latency(engine));
      latency_ms.current.push_back(latency(engine));
    }
    std::vector<std::string> verdicts;
    for (const FigureComparison& c : CompareFigures({pass_rate, latency_ms}, options)) {
      verdicts.push_back(c.verdict);
    }
    const std::string overall = OverallVerdict(verdicts);
    if (overall == kRegressed || overall == kImproved) ++alarms;
  }
  EXPECT_LE(alarms, kComparisons * 2 / 100);
}

TEST(CompareFiguresTest, OverallVerdict) {
  EXPECT_EQ(OverallVerdict({kUnchanged, kRegressed, kImproved}), kRegressed);
  EXPECT_EQ(OverallVerdict({kUnchanged, kImproved, kInconclusive}), kImproved);
  EXPECT_EQ(OverallVerdict({kUnchanged, kInconclusive}), kInconclusive);
  EXPECT_EQ(OverallVerdict({kUnchanged, kUnchanged}), kUnchanged);
  EXPECT_EQ(OverallVerdict({}), kInconclusive);
}

TEST(ComparisonSeedTest, StableAndDistinct) {
  // Pinned: a comparison read after an upgrade must give the same p-values.
  EXPECT_EQ(ComparisonSeed(0, 0, 0, ""), 0x81d23fd7003c2305ULL);
  EXPECT_NE(ComparisonSeed(3, 2, 1, "passed"), ComparisonSeed(2, 3, 1, "passed"));
  EXPECT_NE(ComparisonSeed(3, 2, 1, "passed"), ComparisonSeed(3, 2, 1, "latency.mean_ms"));
}

}  // namespace
}  // namespace calleval::runs

// The cost of a batch's comparison with its baseline (services/runs/batch_comparison.h): the
// statistics of the largest batches the service accepts, pass rates and latencies, with the
// default options (a permutation test of up to 20,000 relabellings and a 4,000-resample bootstrap
// per numeric figure).
//   build/bench/batch_comparison_bench

#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/runs/batch_comparison.h"

namespace calleval::runs {
namespace {

// `scenarios` scenarios run `repeat` times on each side, each with a pass rate and a mean
// latency: the figures one comparison computes.
std::vector<FigureSamples> Figures(int scenarios, int repeat) {
  std::mt19937_64 engine(1);
  std::bernoulli_distribution passes(0.8);
  std::normal_distribution<double> latency(900, 150);
  std::vector<FigureSamples> figures;
  for (int s = 0; s < scenarios; ++s) {
    FigureSamples pass_rate, latency_ms;
    latency_ms.kind = FigureKind::kMean;
    latency_ms.higher_is_better = false;
    latency_ms.seed = ComparisonSeed(2, 1, s, "latency.mean_ms");
    for (int r = 0; r < repeat; ++r) {
      pass_rate.baseline.push_back(passes(engine));
      pass_rate.current.push_back(passes(engine));
      latency_ms.baseline.push_back(latency(engine));
      latency_ms.current.push_back(latency(engine));
    }
    figures.push_back(pass_rate);
    figures.push_back(latency_ms);
  }
  return figures;
}

void BM_CompareFigures(benchmark::State& state) {
  const std::vector<FigureSamples> figures =
      Figures(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(CompareFigures(figures, ComparisonOptions()));
  }
  state.counters["figures"] = static_cast<double>(figures.size());
  state.counters["per_figure_us"] = benchmark::Counter(
      static_cast<double>(figures.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
// (scenarios, repeat): a small CI batch, the default cap's shapes (at most 1,000 runs a batch).
BENCHMARK(BM_CompareFigures)
    ->Args({5, 10})
    ->Args({20, 50})
    ->Args({100, 10})
    ->Args({500, 2})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace calleval::runs

BENCHMARK_MAIN();

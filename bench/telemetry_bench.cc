// The cost of recording an operational metric (common/telemetry.h) on a hot path: a cached
// counter's increment and a histogram observation, alone and from several threads at once, and
// the label lookup a caller pays when it does not cache the child.
//
//   telemetry_bench [--benchmark_filter=...]

#include <benchmark/benchmark.h>

#include "common/telemetry.h"

namespace {

using calleval::telemetry::Registry;

Registry& BenchRegistry() {
  static auto* registry = new Registry();
  return *registry;
}

void BM_CounterIncrement(benchmark::State& state) {
  static calleval::telemetry::Counter& counter =
      BenchRegistry().Counter("bench_events_total", "Events.", {"kind"}).WithLabels({"a"});
  for (auto _ : state) counter.Increment();
  benchmark::DoNotOptimize(counter.Value());
}
BENCHMARK(BM_CounterIncrement)->Threads(1)->Threads(2);

void BM_HistogramObserve(benchmark::State& state) {
  static calleval::telemetry::Histogram& histogram =
      BenchRegistry().Histogram("bench_latency_seconds", "Latency.", {"kind"}).WithLabels({"a"});
  double value = 0.0001;
  for (auto _ : state) {
    histogram.Observe(value);
    value = value < 100 ? value * 1.7 : 0.0001;  // every bucket, +Inf included
  }
}
BENCHMARK(BM_HistogramObserve)->Threads(1)->Threads(2);

void BM_CounterLabelLookup(benchmark::State& state) {
  auto& family =
      BenchRegistry().Counter("bench_requests_total", "Requests.", {"route", "method", "status"});
  const calleval::telemetry::LabelValues labels = {"/api/public/v1/calls/{id}", "GET", "200"};
  for (auto _ : state) family.WithLabels(labels).Increment();
}
BENCHMARK(BM_CounterLabelLookup);

void BM_Scrape(benchmark::State& state) {
  Registry registry;
  auto& family = registry.Histogram("bench_scrape_seconds", "Latency.", {"route"});
  for (int i = 0; i < 50; ++i) family.WithLabels({"/route/" + std::to_string(i)}).Observe(0.01);
  for (auto _ : state) benchmark::DoNotOptimize(registry.Scrape());
}
BENCHMARK(BM_Scrape);

}  // namespace

BENCHMARK_MAIN();

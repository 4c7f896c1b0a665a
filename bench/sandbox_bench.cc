// Cold start of the code-as-judge sandbox (services/judges/sandbox): one fresh bwrap + python3
// per run, as the scoring workers pay it for every code metric. Target: a median under 100 ms.
//
//   sandbox_bench --benchmark_repetitions=10 [--benchmark_filter=...]

#include <cstdio>

#include "benchmark/benchmark.h"
#include "services/judges/sandbox.h"

namespace {

using calleval::judges::CodeRun;
using calleval::judges::CodeValidation;
using calleval::judges::PythonSandbox;

void BM_RunTrivial(benchmark::State& state) {
  const PythonSandbox sandbox;
  const nlohmann::json context = nlohmann::json::object();
  for (auto _ : state) {
    absl::StatusOr<CodeRun> run = sandbox.Run("metric['result'] = True", context);
    if (!run.ok() || run->error || !run->result.bool_value()) {
      state.SkipWithError(run.ok() ? "unexpected result"
                                   : std::string(run.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(run->elapsed);
  }
}

// A realistic context: a 200-turn transcript and the audio pass's results.
void BM_RunWithContext(benchmark::State& state) {
  const PythonSandbox sandbox;
  nlohmann::json turns = nlohmann::json::array();
  for (int i = 0; i < 200; ++i) {
    turns.push_back({{"role", i % 2 ? "user" : "AI Assistant"},
                     {"content", "I would like to check the status of my order, please."},
                     {"start_time", i * 3.0},
                     {"end_time", i * 3.0 + 2.5}});
  }
  const nlohmann::json context = {{"transcript", turns},
                                  {"silence", {{"count", 3}, {"total_ms", 4200}}},
                                  {"latency", {{"average_ms", 950.5}}}};
  for (auto _ : state) {
    absl::StatusOr<CodeRun> run = sandbox.Run(
        "metric['result'] = context['latency']['average_ms'] < 1200 and "
        "len(context['transcript']) > 10",
        context);
    if (!run.ok() || run->error) {
      state.SkipWithError("run failed");
      return;
    }
  }
}

void BM_Validate(benchmark::State& state) {
  const PythonSandbox sandbox;
  for (auto _ : state) {
    absl::StatusOr<CodeValidation> v = sandbox.Validate(
        "avg = context['latency']['average_ms']\n"
        "metric['result'] = 5 if avg < 800 else 4 if avg < 1200 else 3\n");
    if (!v.ok() || !v->valid) {
      state.SkipWithError("validate failed");
      return;
    }
  }
}

}  // namespace

BENCHMARK(BM_RunTrivial)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RunWithContext)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Validate)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();

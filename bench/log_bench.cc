// The cost of one log line (common/log.h): formatting alone, and formatted and written to
// /dev/null through the process's log (the lock and the write(2) included).
#include <fcntl.h>
#include <unistd.h>

#include "benchmark/benchmark.h"
#include "common/log.h"

namespace calleval {
namespace {

void BM_FormatAccessLine(benchmark::State& state) {
  const LogFormat format = state.range(0) == 0 ? LogFormat::kText : LogFormat::kJson;
  const absl::Time now = absl::Now();
  for (auto _ : state) {
    std::string line = log_internal::FormatLine(
        format, now, LogLevel::kInfo, "edge", "", "http request",
        {{"request_id", "0f8fad5bd9cb469fa165"},
         {"method", "GET"},
         {"path", "/api/public/v1/calls/12345"},
         {"route", "/api/public/v1/calls/{call_identifier_or_id}"},
         {"status", 200},
         {"latency_ms", 0.412}});
    benchmark::DoNotOptimize(line);
  }
  state.SetLabel(format == LogFormat::kText ? "text" : "json");
}
BENCHMARK(BM_FormatAccessLine)->Arg(0)->Arg(1);

void BM_LogToDevNull(benchmark::State& state) {
  // Set up by one thread before the loop, whose start all the threads wait for.
  static int fd = -1;
  if (state.thread_index() == 0) {
    fd = open("/dev/null", O_WRONLY);
    ConfigureLogging({state.range(0) == 0 ? LogFormat::kText : LogFormat::kJson,
                      LogLevel::kInfo, "edge", fd});
  }
  for (auto _ : state) {
    LogInfo("http request", {{"request_id", "0f8fad5bd9cb469fa165"},
                             {"method", "GET"},
                             {"path", "/api/public/v1/calls/12345"},
                             {"status", 200},
                             {"latency_ms", 0.412}});
  }
  if (state.thread_index() == 0) {
    ConfigureLogging({});
    close(fd);
  }
}
BENCHMARK(BM_LogToDevNull)->Arg(0)->Arg(1)->ThreadRange(1, 2);

// A line below the level: what a debug line costs at the default level.
void BM_FilteredDebugLine(benchmark::State& state) {
  for (auto _ : state) LogDebug("grpc call", {{"method", "/calleval.v1.Calls/GetCall"}});
}
BENCHMARK(BM_FilteredDebugLine);

}  // namespace
}  // namespace calleval

BENCHMARK_MAIN();

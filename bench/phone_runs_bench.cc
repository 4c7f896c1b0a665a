// Many phone runs at once (docs/architecture.md, "Performance budgets"): starts the server with
// every role and --run-workers N, a local Twilio (tests/support/fake_twilio_server.h: REST,
// signed status callbacks, Media Streams, a test agent answering a known delay after the caller
// stops), queues N phone runs in one burst, and waits until every run is over and its call
// scored. It reports:
//
// - runs completed and passed, and calls whose latency metric was measured (scored);
// - the frame jitter of the service's outgoing media as the local Twilio receives it: for each
//   pair of consecutive caller frames of a call, the arrival interval minus 20 ms (p50, p99,
//   max of its magnitude, over all calls), and how far each frame arrived behind the call's
//   own 20 ms clock (its lag over the earliest frame's, p99 and max);
// - each run's measured agent latency minus the test agent's delay;
// - the wall time from the first run queued to the last scored, the process's CPU time (server
//   and local Twilio: one process) and peak resident memory (getrusage), and the load average.
//
//   phone_runs_bench [--runs N] [--run-workers W] [--workers S] [--agent-delay-ms D]
//                    [--lines L] [--show-late-ms MS]
//
// --show-late-ms prints every frame that arrived at least MS from 20 ms after the one before it
// (to find where the pacing slipped).
// The local Twilio runs in this process, one thread per call, and stamps each frame when its
// Poll() returns (at the first message): its own scheduling is part of what is measured, as the
// real network's would be.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cmd/calleval/server.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_client.h"
#include "tests/support/fake_twilio_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

constexpr char kAccountSid[] = "AC0123456789abcdef0123456789abcdef";
constexpr char kAuthToken[] = "twilio-auth-token";

struct Flags {
  int runs = 20;
  int run_workers = 0;  // 0: as many as runs
  int workers = 0;      // scoring workers; 0: the server's default (cores)
  int agent_delay_ms = 1000;
  int lines = 3;
  int show_late_ms = 0;  // > 0: print each frame whose interval is this far from 20 ms
};

const std::vector<std::string>& Script() {
  static const auto* lines = new std::vector<std::string>{
      "Hi, I would like to book a cleaning.", "Friday morning, please.", "Is nine o'clock free?",
      "My name is Alex Morgan.", "Thank you, goodbye."};
  return *lines;
}

// The q-quantile of `v` (sorted in place), nearest rank.
double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

double Seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

int Run(const Flags& flags) {
  const std::string load_before = LoadAverage();
  FakeTwilioServer twilio(kAccountSid, kAuthToken, absl::Milliseconds(flags.agent_delay_ms));
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "phone_runs_bench_XXXXXX").string();
  const std::string dir = mkdtemp(dir_template.data());

  ServerConfig config;
  config.data_dir = dir;
  config.http_addr = "127.0.0.1:0";
  config.grpc_addr = "127.0.0.1:0";
  config.admin_addr = "";
  config.access_log = false;
  config.log_level = LogLevel::kWarn;
  config.allow_private_hosts = {"127.0.0.1"};
  config.workers = flags.workers;
  config.run_workers = flags.run_workers > 0 ? flags.run_workers : flags.runs;
  config.twilio_api_url = twilio.api_url();
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(config);
  if (!server.ok()) {
    std::cerr << "the server did not start: " << server.status() << "\n";
    return 1;
  }
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  HttpResponse put =
      client.Put("/api/v1/integrations/twilio", json{{"account_sid", kAccountSid},
                                                     {"auth_token", kAuthToken},
                                                     {"caller_numbers", {"+14155552671"}}}
                                                    .dump());
  if (put.status != 200) {
    std::cerr << "PUT /api/v1/integrations/twilio: " << put.status << " " << put.body << "\n";
    return 1;
  }

  // One agent per run, each at its own number, so each call is told apart at the local Twilio.
  const std::vector<std::string> script(
      Script().begin(), Script().begin() + std::clamp<size_t>(flags.lines, 1, Script().size()));
  std::vector<int64_t> scenarios;
  for (int i = 0; i < flags.runs; ++i) {
    HttpResponse agent =
        client.Post("/api/v1/agents", json{{"name", absl::StrCat("Phone bot ", i)},
                                           {"language_id", 1},
                                           {"phone_number", absl::StrCat("+1415555", 1000 + i)},
                                           {"instructions", "Book cleanings."}});
    if (agent.status != 201) {
      std::cerr << "POST /api/v1/agents: " << agent.status << " " << agent.body << "\n";
      return 1;
    }
    HttpResponse scenario = client.Post("/api/v1/scenarios", json{{"agent_id", agent.json()["id"]},
                                                                  {"name", "Book a cleaning"},
                                                                  {"caller_script", script},
                                                                  {"metric_ids", {1}}});
    if (scenario.status != 201) {
      std::cerr << "POST /api/v1/scenarios: " << scenario.status << " " << scenario.body << "\n";
      return 1;
    }
    scenarios.push_back(scenario.json()["id"].get<int64_t>());
  }

  rusage before;
  getrusage(RUSAGE_SELF, &before);
  const auto started = std::chrono::steady_clock::now();
  std::vector<int64_t> runs;
  for (int64_t scenario : scenarios) {
    HttpResponse queued =
        client.Post(absl::StrCat("/api/v1/scenarios/", scenario, "/run"), json::object());
    if (queued.status != 202) {
      std::cerr << "POST /api/v1/scenarios/" << scenario << "/run: " << queued.status << " "
                << queued.body << "\n";
      return 1;
    }
    runs.push_back(queued.json()["id"].get<int64_t>());
  }
  // A run is over once its call is scored (or it failed).
  std::vector<json> done(runs.size());
  size_t left = runs.size();
  const auto give_up = started + std::chrono::minutes(10);
  while (left > 0 && std::chrono::steady_clock::now() < give_up) {
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!done[i].is_null()) continue;
      json run = client.Get(absl::StrCat("/api/v1/runs/", runs[i])).json();
      if (run["status"] == "completed" || run["status"] == "failed") {
        done[i] = run;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  rusage after;
  getrusage(RUSAGE_SELF, &after);
  const std::string load_after = LoadAverage();

  int completed = 0, passed = 0, scored = 0;
  std::vector<double> latency_errors;
  for (size_t i = 0; i < runs.size(); ++i) {
    const json& run = done[i];
    if (run.is_null()) {
      std::printf("run %lld: not over after 10 minutes\n", static_cast<long long>(runs[i]));
      continue;
    }
    if (run["status"] != "completed") {
      std::printf("run %lld: %s (%s): %s\n", static_cast<long long>(runs[i]),
                  run["status"].get<std::string>().c_str(), run["end_reason"].dump().c_str(),
                  run["error"].dump().c_str());
      continue;
    }
    ++completed;
    if (run["passed"] == true) ++passed;
    const json call =
        client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
    std::string errors;
    for (const json& m : call["standard_metrics"]) {
      if (m["standard_metric_key"] != "latency" || m["status"] != "completed") continue;
      ++scored;
      for (const json& turn : m["result"]["turns"]) {
        const double error = turn["latency_ms"].get<double>() - flags.agent_delay_ms;
        latency_errors.push_back(error);
        absl::StrAppend(&errors, errors.empty() ? "" : " ", absl::StrFormat("%+.1f", error));
      }
    }
    std::printf("run %lld: %s, latency error per turn (ms): %s\n", static_cast<long long>(runs[i]),
                run["end_reason"].get<std::string>().c_str(), errors.c_str());
  }

  // The service's outgoing frames as the local Twilio received them.
  std::vector<double> jitter, lag;
  size_t frames = 0;
  for (const FakeTwilioServer::Call& call : twilio.calls()) {
    const auto& at = call.media_arrivals;
    frames += at.size();
    if (at.empty()) continue;
    // A frame's lag: how much later than frame 0 plus 20 ms per frame it arrived, over the
    // least of that across the call (the stream's own start is not the service's to pace).
    std::vector<double> offsets;
    for (size_t k = 0; k < at.size(); ++k) {
      offsets.push_back(std::chrono::duration<double, std::milli>(at[k] - at[0]).count() -
                        20.0 * k);
    }
    const double least = *std::min_element(offsets.begin(), offsets.end());
    for (double o : offsets) lag.push_back(o - least);
    for (size_t k = 1; k < at.size(); ++k) {
      jitter.push_back(
          std::abs(std::chrono::duration<double, std::milli>(at[k] - at[k - 1]).count() - 20.0));
      if (flags.show_late_ms > 0 && jitter.back() >= flags.show_late_ms) {
        std::printf("call to %s: frame %zu (%.3f s into the stream) %+.1f ms\n", call.to.c_str(), k,
                    std::chrono::duration<double>(at[k] - at[0]).count(),
                    std::chrono::duration<double, std::milli>(at[k] - at[k - 1]).count() - 20.0);
      }
    }
  }
  std::vector<double> abs_errors;
  for (double e : latency_errors) abs_errors.push_back(std::abs(e));

  std::printf("\nphone runs at once: %d (run workers %d), load average before %s, after %s\n",
              flags.runs, config.run_workers, load_before.c_str(), load_after.c_str());
  std::printf("runs completed %d/%zu, passed %d, scored (latency measured) %d\n", completed,
              runs.size(), passed, scored);
  std::printf("frames received %zu over %zu calls\n", frames, twilio.calls().size());
  // Each figure from its sorted list (Quantile sorts): the max is then the last element.
  const double jitter_p50 = Quantile(jitter, 0.5), jitter_p99 = Quantile(jitter, 0.99);
  const double jitter_max = jitter.empty() ? 0 : jitter.back();
  const double lag_p50 = Quantile(lag, 0.5), lag_p99 = Quantile(lag, 0.99);
  const double lag_max = lag.empty() ? 0 : lag.back();
  const double error_p50 = Quantile(abs_errors, 0.5);
  const double error_max = abs_errors.empty() ? 0 : abs_errors.back();
  std::printf("frame jitter |interval - 20 ms|: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
              jitter_p50, jitter_p99, jitter_max);
  std::printf("frame lag behind the call's 20 ms clock: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
              lag_p50, lag_p99, lag_max);
  std::printf("latency error over %zu turns: |error| p50 %.1f ms, max %.1f ms\n",
              latency_errors.size(), error_p50, error_max);
  const double user = Seconds(after.ru_utime) - Seconds(before.ru_utime);
  const double system = Seconds(after.ru_stime) - Seconds(before.ru_stime);
  std::printf("wall %.1f s, CPU %.1f s user + %.1f s system (%.2f cores), peak RSS %.0f MB\n", wall,
              user, system, (user + system) / wall, after.ru_maxrss / 1024.0);

  server->reset();
  std::filesystem::remove_all(dir);
  const bool ok = completed == flags.runs && scored == flags.runs;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace calleval

int main(int argc, char** argv) {
  calleval::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    int* target = nullptr;
    if (arg == "--runs") {
      target = &flags.runs;
    } else if (arg == "--run-workers") {
      target = &flags.run_workers;
    } else if (arg == "--workers") {
      target = &flags.workers;
    } else if (arg == "--agent-delay-ms") {
      target = &flags.agent_delay_ms;
    } else if (arg == "--lines") {
      target = &flags.lines;
    } else if (arg == "--show-late-ms") {
      target = &flags.show_late_ms;
    }
    if (target == nullptr || !absl::SimpleAtoi(value(), target) || *target < 0) {
      std::cerr << "usage: phone_runs_bench [--runs N] [--run-workers W] [--workers S] "
                   "[--agent-delay-ms D] [--lines L] [--show-late-ms MS]\n";
      return 2;
    }
  }
  if (flags.runs < 1) flags.runs = 1;
  return calleval::Run(flags);
}

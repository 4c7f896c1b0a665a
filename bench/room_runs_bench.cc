// Many LiveKit room runs at once (docs/channels.md, "LiveKit rooms"): starts the server with
// every role and as many run workers as runs, a local LiveKit (tests/support/fake_livekit.h: the
// signalling, the server API, and a test agent on webrtcbin peers answering a known delay after
// the caller stops), queues N web runs of one rubric-mode agent in one burst, and waits until
// every run is over and its call scored. It reports runs completed, each measured agent latency
// minus the delay, the time from each run's start to the agent's first audio (the run workers'
// calleval_room_first_audio_seconds histogram: its mean, and the bucket bounding the slowest),
// the wall time, the process's CPU time and resident memory (before, and the peak), and the
// load average. The stand-in's peers run in this process too: a run's figures
// include the agent's side, about as much media work again as the caller's.
//
//   room_runs_bench [--runs N] [--agent-delay-ms D]

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cmd/calleval/server.h"
#include "common/telemetry.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_client.h"
#include "tests/support/fake_livekit.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

// VmRSS of this process, kB.
long ResidentKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

int Run(int runs, int delay_ms) {
  const std::string load_before = LoadAverage();
  FakeLiveKit livekit;
  FakeRoomAgentOptions agent_options;
  agent_options.delay = absl::Milliseconds(delay_ms);
  livekit.EnableMedia(agent_options);
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "room_runs_bench_XXXXXX").string();
  const std::string dir = mkdtemp(dir_template.data());

  ServerConfig config;
  config.data_dir = dir;
  config.http_addr = "127.0.0.1:0";
  config.grpc_addr = "127.0.0.1:0";
  config.admin_addr = "";
  config.access_log = false;
  config.log_level = LogLevel::kWarn;
  config.allow_private_hosts = {"127.0.0.1"};
  config.run_workers = runs;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(config);
  if (!server.ok()) {
    std::cerr << "the server did not start: " << server.status() << "\n";
    return 1;
  }
  HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  HttpResponse agent =
      client.Post("/api/v1/agents", json{{"name", "Room bot"},
                                         {"language_id", 1},
                                         {"instructions", "Book cleanings."},
                                         {"web_channel",
                                          {{"transport", "livekit"},
                                           {"room_server_url", livekit.ws_url()},
                                           {"room_api_key", livekit.api_key()},
                                           {"room_api_secret", livekit.api_secret()}}}});
  if (agent.status != 201) {
    std::cerr << "POST /api/v1/agents: " << agent.status << " " << agent.body << "\n";
    return 1;
  }
  HttpResponse scenario = client.Post(
      "/api/v1/scenarios",
      json{{"agent_id", agent.json()["id"]},
           {"name", "Book a cleaning"},
           {"caller_script", {"Hi, I would like to book a cleaning.", "Friday morning, please."}},
           {"metric_ids", {1}}});
  if (scenario.status != 201) {
    std::cerr << "POST /api/v1/scenarios: " << scenario.status << " " << scenario.body << "\n";
    return 1;
  }
  const int64_t scenario_id = scenario.json()["id"].get<int64_t>();

  const long rss_before = ResidentKb();
  rusage before;
  getrusage(RUSAGE_SELF, &before);
  const auto started = std::chrono::steady_clock::now();
  std::vector<int64_t> ids;
  for (int i = 0; i < runs; ++i) {
    HttpResponse queued = client.Post(absl::StrCat("/api/v1/scenarios/", scenario_id, "/run"),
                                      json{{"channel", "web"}});
    if (queued.status != 202) {
      std::cerr << "POST .../run: " << queued.status << " " << queued.body << "\n";
      return 1;
    }
    ids.push_back(queued.json()["id"].get<int64_t>());
  }
  std::vector<json> done(ids.size());
  size_t left = ids.size();
  long rss_peak = rss_before;
  const auto give_up = started + std::chrono::minutes(10);
  while (left > 0 && std::chrono::steady_clock::now() < give_up) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!done[i].is_null()) continue;
      json run = client.Get(absl::StrCat("/api/v1/runs/", ids[i])).json();
      if (run["status"] == "completed" || run["status"] == "failed") {
        done[i] = run;
        --left;
      }
    }
    rss_peak = std::max(rss_peak, ResidentKb());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  rusage after;
  getrusage(RUSAGE_SELF, &after);
  const std::string load_after = LoadAverage();

  int completed = 0;
  std::vector<double> errors;
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& run = done[i];
    if (run.is_null() || run["status"] != "completed") {
      std::printf("run %lld: %s\n", static_cast<long long>(ids[i]), run.dump().c_str());
      continue;
    }
    ++completed;
    json call =
        client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
    for (const json& m : call["standard_metrics"]) {
      if (m["standard_metric_key"] != "latency" || m["status"] != "completed") continue;
      for (const json& turn : m["result"]["turns"]) {
        errors.push_back(turn["latency_ms"].get<double>() - delay_ms);
      }
    }
  }
  std::sort(errors.begin(), errors.end());
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  const double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) -
                     seconds(before.ru_stime);
  std::printf("runs: %d, completed and scored: %d\n", runs, completed);
  if (!errors.empty()) {
    std::printf("latency error: %zu answers, min %+.1f ms, max %+.1f ms\n", errors.size(),
                errors.front(), errors.back());
  }
  // The run worker's own figure (calleval_room_first_audio_seconds): from a run's start, its
  // lease taken, to the agent's first audio; its buckets bound the slowest run.
  const telemetry::Histogram::Snapshot first_audio =
      telemetry::DefaultRegistry()
          .Histogram("calleval_room_first_audio_seconds",
                     "Time from a room run's start to the agent's first audio, by room management.",
                     {"mode"})
          .WithLabels({"rubric"})
          .Collect();
  if (first_audio.count > 0) {
    double slowest_bound = 0;
    for (size_t i = 0; i < first_audio.bounds.size(); ++i) {
      if (first_audio.cumulative_counts[i] == first_audio.count) {
        slowest_bound = first_audio.bounds[i];
        break;
      }
    }
    std::printf("first agent audio after the run's start: %llu runs, mean %.0f ms, each under %s\n",
                static_cast<unsigned long long>(first_audio.count),
                1000 * first_audio.sum / first_audio.count,
                slowest_bound > 0 ? absl::StrCat(slowest_bound * 1000, " ms").c_str() : "60 s");
  }
  std::printf("wall: %.1f s; CPU: %.1f s (%.1f s a run, %.0f %% of one core a run over the wall)\n",
              wall, cpu, cpu / runs, 100 * cpu / runs / wall);
  std::printf(
      "resident: %.1f MB before, %.1f MB peak (%.1f MB a run), peak RSS (getrusage) %.1f MB\n",
      rss_before / 1024.0, rss_peak / 1024.0, (rss_peak - rss_before) / 1024.0 / runs,
      after.ru_maxrss / 1024.0);
  std::printf("load average: %s before, %s after\n", load_before.c_str(), load_after.c_str());
  server->reset();
  std::filesystem::remove_all(dir);
  return completed == runs ? 0 : 1;
}

}  // namespace
}  // namespace calleval

int main(int argc, char** argv) {
  int runs = 10, delay_ms = 700;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    int value = 0;
    if (!absl::SimpleAtoi(argv[i + 1], &value) || value <= 0) {
      std::cerr << "bad value for " << flag << "\n";
      return 2;
    }
    if (flag == "--runs") {
      runs = value;
    } else if (flag == "--agent-delay-ms") {
      delay_ms = value;
    } else {
      std::cerr << "usage: room_runs_bench [--runs N] [--agent-delay-ms D]\n";
      return 2;
    }
  }
  return calleval::Run(runs, delay_ms);
}

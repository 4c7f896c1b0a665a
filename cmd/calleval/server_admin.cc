// The admin listener of --admin-addr: GET /metrics in the Prometheus text format, on an address
// of its own so the public edge (and whoever reaches it) never sees the process's internals.

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server_state.h"
#include "common/status_macros.h"
#include "common/telemetry.h"

namespace calleval {

absl::Status StartAdmin(ServerState* s) {
  const ServerConfig& config = s->config;
  if (config.admin_addr.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto host_port, SplitHostPort(config.admin_addr));
  ASSIGN_OR_RETURN(auto table, edge::RouteTable::Build({}));
  s->admin_routes = std::make_unique<edge::RouteTable>(std::move(table));
  edge::HttpServerOptions options;
  options.host = host_port.first;
  options.port = host_port.second;
  options.threads = 1;
  options.access_log = false;  // a scrape every few seconds would drown the request log
  options.max_body_bytes = 1 << 10;
  options.max_connections = 64;
  // No route table: the invoker is never called.
  s->admin_server =
      std::make_unique<edge::HttpServer>(s->admin_routes.get(), &s->invoker_slot, options);
  s->admin_server->AddLocalRoute("GET", "/metrics", [](const edge::LocalRequest& request) {
    edge::LocalResponse response;
    if (request.path != "/metrics") {
      response.status = 404;
      response.body = R"({"error":{"code":"not_found","message":"only /metrics is served here"}})";
      return response;
    }
    response.content_type = telemetry::kContentType;
    response.body = telemetry::DefaultRegistry().Scrape();
    return response;
  });
  if (absl::Status started = s->admin_server->Start(); !started.ok()) {
    return absl::Status(started.code(),
                        absl::StrCat("--admin-addr ", config.admin_addr, ": ", started.message()));
  }
  std::string host = host_port.first;
  if (host == "0.0.0.0" || host == "::" || host.empty()) host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
  s->admin_url = absl::StrCat("http://", host, ":", s->admin_server->port(), "/metrics");
  return absl::OkStatus();
}

void AddScrapeGauges(ServerState* s) {
  if (s->admin_server == nullptr) return;
  telemetry::Registry& registry = telemetry::DefaultRegistry();
  // The queues are tables: the process that owns them reports their depth, so a split
  // installation does not count each queue once per process that can read it.
  if (HasRole(s->config, "calls") && s->calls_store != nullptr) {
    calls::CallsStore* store = s->calls_store.get();
    s->scrape_gauges.push_back(registry.CallbackGauge(
        "calleval_queue_depth",
        "Items waiting for a worker, under no lease (calls role: downloads, transcription, "
        "analysis; agents role: runs).",
        {"queue"}, [store, runs = HasRole(s->config, "agents") ? s->runs_store.get() : nullptr] {
          std::vector<telemetry::GaugeSample> samples;
          absl::StatusOr<calls::CallsStore::QueueDepths> depths = store->CountQueued();
          if (depths.ok()) {
            samples.push_back({{"analysis"}, static_cast<double>(depths->analysis)});
            samples.push_back({{"downloads"}, static_cast<double>(depths->downloads)});
            samples.push_back({{"transcription"}, static_cast<double>(depths->transcription)});
          } else {
            std::cerr << "calleval: queue depth: " << depths.status() << "\n";
          }
          if (runs != nullptr) {
            absl::StatusOr<int64_t> queued = runs->CountQueued();
            if (queued.ok()) samples.push_back({{"runs"}, static_cast<double>(*queued)});
          }
          return samples;
        }));
  } else if (HasRole(s->config, "agents") && s->runs_store != nullptr) {
    runs::RunsStore* runs = s->runs_store.get();
    s->scrape_gauges.push_back(registry.CallbackGauge(
        "calleval_queue_depth",
        "Items waiting for a worker, under no lease (calls role: downloads, transcription, "
        "analysis; agents role: runs).",
        {"queue"}, [runs] {
          std::vector<telemetry::GaugeSample> samples;
          absl::StatusOr<int64_t> queued = runs->CountQueued();
          if (queued.ok()) samples.push_back({{"runs"}, static_cast<double>(*queued)});
          return samples;
        }));
  }
}

}  // namespace calleval

#pragma once

// What `calleval serve` holds while it runs, and the functions that wire it, one per seam:
// the stores (server_stores.cc), the edge (server_edge.cc) and each role's service and workers
// (server_roles.cc). Server::Start (server.cc) calls them in order; each reads what the earlier
// ones set in the ServerState.

#include <grpcpp/server.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cmd/calleval/server_config.h"
#include "common/blob_store.h"
#include "common/database.h"
#include "common/llm_client.h"
#include "common/telemetry.h"
#include "common/thread_pool.h"
#include "edge/direct_invoker.h"
#include "edge/grpc_invoker.h"
#include "edge/http_server.h"
#include "edge/media_relay.h"
#include "edge/method_invoker.h"
#include "edge/route_table.h"
#include "services/accounts/accounts_service.h"
#include "services/accounts/accounts_store.h"
#include "services/accounts/authenticator.h"
#include "services/agents/agents_service.h"
#include "services/agents/agents_store.h"
#include "services/agents/grpc_agents_clients.h"
#include "services/agents/in_process_agent_directory.h"
#include "services/agents/in_process_run_agents.h"
#include "services/agents/in_process_scenario_directory.h"
#include "services/metrics/grpc_metrics_clients.h"
#include "services/metrics/in_process_metric_directory.h"
#include "services/calls/calls_service.h"
#include "services/calls/calls_store.h"
#include "services/calls/credits.h"
#include "services/calls/owner_directories.h"
#include "services/calls/grpc_calls_clients.h"
#include "services/calls/in_process_run_calls.h"
#include "services/calls/recording_downloader.h"
#include "services/calls/recording_locator.h"
#include "services/calls/recording_signer.h"
#include "services/calls/alert_workers.h"
#include "services/calls/alerts_store.h"
#include "services/calls/stats_store.h"
#include "services/judges/sandbox.h"
#include "services/metrics/metrics_service.h"
#include "services/metrics/metrics_store.h"
#include "services/runs/phone_lines.h"
#include "services/runs/run_worker.h"
#include "services/runs/runs_store.h"
#include "services/scoring/scoring_worker.h"
#include "services/scoring/transcription_worker.h"

namespace calleval {

inline bool HasRole(const ServerConfig& config, const std::string& role) {
  return config.roles.count(role) > 0;
}

// Whether the owner `role` is asked over gRPC at `address`: it does not run here and its address
// was given. Otherwise this process uses the role's store on the shared database (with SQLite
// every role of an installation shares the data dir; docs/architecture.md, "In one process or
// apart").
inline bool AskedOverGrpc(const ServerConfig& config, const std::string& role,
                          const std::string& address) {
  return !HasRole(config, role) && !address.empty();
}

// Whether this process opens the database: it hosts a role that owns tables (accounts, agents,
// calls, metrics), or one of those runs at no address it was given, so the shared database is
// read in process instead (docs/architecture.md, "In one process or apart").
bool ReadsTheDatabase(const ServerConfig& config);

// Whether any role besides the edge runs here (then the process serves gRPC).
inline bool RunsGrpcRoles(const ServerConfig& config) {
  for (const std::string& role : config.roles) {
    if (role != "edge") return true;
  }
  return false;
}

// The edge binds its port before the services exist (presigned links name that port), so it
// starts with this forwarder, which answers 503 until the invoker is in place.
struct InvokerSlot : edge::MethodInvoker {
  std::atomic<edge::MethodInvoker*> target{nullptr};
  void Invoke(const google::protobuf::MethodDescriptor* method,
              std::unique_ptr<google::protobuf::Message> request, const edge::CallContext& context,
              Done done) override {
    edge::MethodInvoker* invoker = target.load();
    if (invoker == nullptr) {
      done(absl::UnavailableError("the service is starting"), nullptr);
      return;
    }
    invoker->Invoke(method, std::move(request), context, std::move(done));
  }
};

struct ServerState {
  ServerConfig config;
  // Read or made by OpenStores, for the roles wired after it.
  std::string internal_credential;  // opens internal methods (common/internal_credential.h)
  std::string signing_key;          // signs presigned recording links
  std::string holder;               // this process's lease holder id (LeaseHolderOf)
  // Where recordings are kept (--recordings-url), for every role that reads or writes them.
  std::unique_ptr<BlobStore> recordings;
  // This process's own temporary files (downloads on their way into a remote store, recordings
  // read from it for one job, runs' audio before it is stored): <data-dir>/scratch/holder-<lease
  // holder>, emptied at start-up.
  std::string scratch_dir;
  std::unique_ptr<db::Database> database;
  std::unique_ptr<ThreadPool> pool;
  // Bounded pools of the slow work reached through the edge (ServerConfig::sandbox_pool_*).
  std::unique_ptr<ThreadPool> sandbox_pool;
  std::unique_ptr<ThreadPool> llm_pool;
  std::unique_ptr<accounts::AccountsStore> accounts_store;
  std::unique_ptr<accounts::Authenticator> authenticator;
  std::unique_ptr<agents::AgentsStore> agents_store;
  std::unique_ptr<agents::IntegrationsStore> integrations_store;
  std::unique_ptr<agents::ScenariosStore> scenarios_store;
  // What the metrics store asks the agents service, answered by the two stores above.
  // What each service asks of the tables another owns: in-process or gRPC clients
  // (docs/architecture.md, "Who owns which table").
  std::unique_ptr<metrics::AgentDirectory> agent_directory;
  std::unique_ptr<agents::MetricDirectory> metric_directory;
  std::unique_ptr<runs::ScenarioDirectory> scenario_directory;
  std::unique_ptr<agents::DeletionListener> remote_metrics_listener;  // metrics elsewhere
  std::unique_ptr<runs::RunsStore> runs_store;
  // What the runs workers ask the agents and calls services, the run queue included (declared
  // before the workers, which use them until they stop).
  std::unique_ptr<runs::RunQueue> run_queue;
  std::unique_ptr<runs::RunAgents> run_agents;
  std::unique_ptr<runs::RunCalls> run_calls;
  // The calls a replay reads (AgentsService::set_replay) when the calls role is elsewhere, and
  // the calls' figures a batch run's comparison reads (AgentsService::set_comparison), from the
  // calls store here or the calls role elsewhere.
  std::unique_ptr<runs::RunCalls> replay_calls;
  // The phone lines the runs workers wait on, served under /media/ by this process's edge, or
  // without one by the media listener (--media-addr), which the edges relay to; null when the
  // runs role does not run here (or its listener is off: phone runs then fail).
  std::unique_ptr<runs::PhoneLines> phone_lines;
  std::unique_ptr<runs::RunWorkers> run_workers;
  // The voice platforms' webhooks (services/agents/platform_events.h): the handler, where this
  // process reads the agents' tables, with the calls service it ingests through; else, for an
  // edge, the agents role's internal method. Declared before the service and the edge that use
  // it.
  std::unique_ptr<runs::RunCalls> event_calls;
  std::unique_ptr<agents::PlatformEvents> platform_events;
  std::unique_ptr<calls::RecordingSigner> signer;
  // Where the edge finds a call's recording when it serves a presigned link: the calls store
  // here, or the calls role's internal method.
  calls::RecordingLocator recording_locator;
  // The credit ledger as the calls store reaches it (services/calls/credits.h).
  std::unique_ptr<calls::Credits> credits;
  // What the calls and stats stores ask of a call's agent (services/calls/owner_directories.h).
  calls::AgentLookup call_agents;
  // The metrics' definitions, from the metrics store here or the metrics role's internal method.
  calls::MetricDefinitions metric_definitions;
  std::unique_ptr<calls::CallsStore> calls_store;
  std::unique_ptr<calls::StatsStore> stats_store;
  // Alert rules (docs/api.md §5.11), with the calls role. `alert_hook` is what a settled call
  // marks: set once the workers exist (calls may settle before, on the scoring workers).
  std::unique_ptr<calls::AlertsStore> alerts_store;
  std::unique_ptr<calls::AlertWorkers> alert_workers;
  std::atomic<calls::AlertWorkers*> alert_hook{nullptr};
  // The installation's key that seals secrets at rest (integrations, alert rules' signing
  // secrets).
  std::string credentials_key;
  std::unique_ptr<calls::RecordingDownloader> downloader;
  std::unique_ptr<scoring::AnalysisQueue> analysis_queue;
  std::unique_ptr<scoring::ScoringWorkers> scoring_workers;
  std::unique_ptr<scoring::TranscriptionQueue> transcription_queue;
  std::unique_ptr<scoring::TranscriptionWorkers> transcription_workers;
  std::unique_ptr<accounts::AccountsService> accounts_service;
  std::unique_ptr<agents::AgentsService> agents_service;
  std::unique_ptr<calls::CallsService> calls_service;
  std::unique_ptr<metrics::MetricsStore> metrics_store;
  std::unique_ptr<judges::PythonSandbox> sandbox;
  std::unique_ptr<LlmClient> llm;  // null without a provider
  std::unique_ptr<metrics::MetricsService> metrics_service;
  // The gRPC adapters of the services above; they outlive the server.
  std::vector<std::unique_ptr<grpc::Service>> grpc_services;
  std::unique_ptr<grpc::Server> grpc_server;
  int grpc_port = 0;
  // The names grpc.health.v1.Health answers for: each service served here and "".
  std::vector<std::string> health_names;
  std::unique_ptr<edge::RouteTable> routes;
  std::string openapi;
  std::unique_ptr<edge::GrpcInvoker> grpc_invoker;
  std::unique_ptr<edge::DirectInvoker> direct_invoker;
  InvokerSlot invoker_slot;
  std::unique_ptr<edge::HttpServer> http_server;
  // The edge's hop to phone lines held by other processes (edge/media_relay.h).
  std::unique_ptr<edge::MediaRelay> media_relay;
  // The phone lines' listener of --media-addr (its routes only) and the address the lines'
  // tokens advertise for it (empty without one).
  std::unique_ptr<edge::RouteTable> media_routes;
  std::unique_ptr<edge::HttpServer> media_server;
  std::string media_advertised;
  std::optional<accounts::Bootstrap> bootstrap;
  std::string base_url;
  bool shut_down = false;
  // Set when every role is up; until then /readyz and presigned links answer 503.
  std::atomic<bool> ready{false};
  // The admin listener (--admin-addr) and the gauges it computes at scrape time from the stores
  // above; declared last so they go first, before what their callbacks read.
  std::unique_ptr<edge::RouteTable> admin_routes;  // empty: /metrics is a local route
  std::unique_ptr<edge::HttpServer> admin_server;
  std::string admin_url;  // http://HOST:PORT/metrics
  std::vector<telemetry::CallbackGaugeHandle> scrape_gauges;
};

// "HOST:PORT" (IPv6 hosts in brackets) as host and port.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& addr);

// server_admin.cc
// Starts the admin listener of --admin-addr (GET /metrics) unless it is off.
absl::Status StartAdmin(ServerState* s);
// The gauges read at scrape time (queue depths), for the queues this process can see.
void AddScrapeGauges(ServerState* s);

// server_stores.cc
// The data dir, its secrets, the database, the pools, and the stores every role reads: accounts
// (with the bootstrap key of an empty installation), the authenticator, agents and scenarios.
absl::Status OpenStores(ServerState* s);
// The stores that need the public URL (presigned links name the edge's port) or the optional
// providers: metrics, the LLM client, the sandbox, the credit ledger, calls.
absl::Status OpenCallsAndMetricsStores(ServerState* s);
// Call ingest's view of agents (also the stats' view).

// server_edge.cc
// Binds the edge's HTTP port when the edge runs here (answering 503 until ConnectEdge), sets
// the public base URL either way, and opens the runs role's phone lines: on the edge here, or
// on the media listener (--media-addr), bound here too.
absl::Status BindEdge(ServerState* s);
// The routes the edge answers itself: probes, the OpenAPI document, presigned recordings.
void AddLocalRoutes(ServerState* s);
// Points the edge at the services: the method tables of the roles run here, called directly
// (DirectInvoker::RegisterTable), the rest over gRPC.
absl::Status ConnectEdge(ServerState* s);

// server_roles.cc: each role's service (listed in its method table) and background workers.
absl::Status WireAccounts(ServerState* s);
absl::Status WireRuns(ServerState* s);
absl::Status WireAgents(ServerState* s);
absl::Status WireScoring(ServerState* s);
absl::Status WireCalls(ServerState* s);
absl::Status WireMetrics(ServerState* s);
// The gRPC server of the services wired above, each from its method table; NOT_SERVING until
// Server::Start marks it ready.
absl::Status ServeGrpc(ServerState* s);
// server_events.cc
// The voice platforms' webhooks: the handler and what it ingests through, or the agents role's
// client for an edge without it; the agents service told of the handler. After WireCalls (its
// hooks wake the downloader), before ServeGrpc.
absl::Status WirePlatformEvents(ServerState* s);
// The runs role's workers, once the run leases of this holder's previous life are given back.
absl::Status StartRunWorkers(ServerState* s);

}  // namespace calleval

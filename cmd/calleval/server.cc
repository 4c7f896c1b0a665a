#include "cmd/calleval/server.h"

#include <memory>
#include <utility>

#include "cmd/calleval/server_state.h"
#include "common/status_macros.h"

namespace calleval {

Server::Server(std::unique_ptr<ServerState> state) : state_(std::move(state)) {}

Server::~Server() { Shutdown(); }

int Server::http_port() const { return state_->http_server ? state_->http_server->port() : 0; }
int Server::grpc_port() const { return state_->grpc_port; }
int Server::admin_port() const { return state_->admin_server ? state_->admin_server->port() : 0; }
int Server::media_port() const {
  return state_->media_server ? state_->media_server->port() : 0;
}
std::string Server::media_advertised() const { return state_->media_advertised; }
std::string Server::admin_url() const { return state_->admin_url; }
std::string Server::http_base_url() const { return state_->base_url; }
const std::optional<accounts::Bootstrap>& Server::bootstrap() const { return state_->bootstrap; }
edge::DirectInvoker* Server::direct_invoker() const { return state_->direct_invoker.get(); }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerConfig& config) {
  auto s = std::make_unique<ServerState>();
  s->config = config;
  RETURN_IF_ERROR(StartAdmin(s.get()));
  RETURN_IF_ERROR(OpenStores(s.get()));
  // The edge binds first: presigned links name its port, which is only known once bound when
  // --http-addr asks for port 0. Until ConnectEdge it answers 503.
  RETURN_IF_ERROR(BindEdge(s.get()));
  RETURN_IF_ERROR(OpenCallsAndMetricsStores(s.get()));
  // The roles run here; the order matters where one wakes another (agents the runs workers,
  // calls the scoring workers).
  RETURN_IF_ERROR(WireAccounts(s.get()));
  RETURN_IF_ERROR(WireRuns(s.get()));
  RETURN_IF_ERROR(WireAgents(s.get()));
  RETURN_IF_ERROR(WireScoring(s.get()));
  RETURN_IF_ERROR(WireCalls(s.get()));
  RETURN_IF_ERROR(WireMetrics(s.get()));
  RETURN_IF_ERROR(WirePlatformEvents(s.get()));
  RETURN_IF_ERROR(ServeGrpc(s.get()));
  RETURN_IF_ERROR(ConnectEdge(s.get()));
  RETURN_IF_ERROR(StartRunWorkers(s.get()));
  AddScrapeGauges(s.get());
  s->ready.store(true);
  if (s->grpc_server) {
    for (const std::string& name : s->health_names) {
      s->grpc_server->GetHealthCheckService()->SetServingStatus(name, true);
    }
  }
  return std::unique_ptr<Server>(new Server(std::move(s)));
}

void Server::Shutdown() {
  ServerState& s = *state_;
  if (s.shut_down) return;
  s.shut_down = true;
  // Probes and load balancers see NOT_SERVING while in-flight work drains.
  s.ready.store(false);
  if (s.grpc_server) s.grpc_server->GetHealthCheckService()->Shutdown();
  if (s.http_server) s.http_server->Shutdown();
  if (s.media_server) s.media_server->Shutdown();
  // Relayed phone streams end on their own or are cut after a short drain.
  if (s.media_relay) s.media_relay->Shutdown();
  if (s.grpc_server)
    s.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (s.downloader) s.downloader->Stop();
  // Provider requests and their backoff waits end at once; the workers give such calls back.
  if (s.llm) s.llm->Shutdown();
  // Runs in progress give their lease back and resume on the next start.
  if (s.run_workers) s.run_workers->Stop();
  // Transcriptions in progress are cancelled and their recordings given back.
  if (s.transcription_workers) s.transcription_workers->Stop();
  if (s.scoring_workers) s.scoring_workers->Stop();
  // Notifications being sent are given back to the outbox (their lease runs out).
  s.alert_hook.store(nullptr);
  if (s.alert_workers) s.alert_workers->Stop();
  // Each runs what was queued; the slow pools first, their tasks may still use the store pool.
  s.sandbox_pool.reset();
  s.llm_pool.reset();
  s.pool.reset();
  // Last, so what the shutdown did is still scraped while it drains.
  s.scrape_gauges.clear();
  if (s.admin_server) s.admin_server->Shutdown();
}

}  // namespace calleval

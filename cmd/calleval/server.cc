#include "cmd/calleval/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/internal_credential.h"
#include "common/llm_client.h"
#include "common/method_execution.h"
#include "common/schema.h"
#include "common/server_reflection_v1.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "edge/direct_invoker.h"
#include "edge/grpc_invoker.h"
#include "edge/http_server.h"
#include "edge/json_codec.h"
#include "edge/openapi.h"
#include "edge/route_table.h"
#include "grpc/health/v1/health.pb.h"
#include "services/accounts/accounts_methods.h"
#include "services/accounts/accounts_service.h"
#include "services/accounts/authenticator.h"
#include "services/agents/agents_methods.h"
#include "services/agents/agents_service.h"
#include "services/agents/agents_store.h"
#include "services/agents/grpc_agents_clients.h"
#include "services/agents/in_process_agent_directory.h"
#include "services/agents/in_process_scenario_directory.h"
#include "services/calls/calls_methods.h"
#include "services/calls/calls_service.h"
#include "services/calls/calls_store.h"
#include "services/calls/recording_downloader.h"
#include "services/calls/recording_signer.h"
#include "services/calls/stats_store.h"
#include "services/judges/sandbox.h"
#include "services/metrics/grpc_metrics_clients.h"
#include "services/metrics/in_process_metric_directory.h"
#include "services/metrics/metrics_methods.h"
#include "services/metrics/metrics_service.h"
#include "services/metrics/metrics_store.h"
#include "services/runs/run_worker.h"
#include "services/runs/runs_store.h"
#include "services/scoring/scoring_worker.h"
#include "services/scoring/transcription_worker.h"

namespace calleval {
namespace {

namespace fs = std::filesystem;

// Threads for store work. Ingests block on the group commit's fsync, so more threads than
// cores means more writes share each commit.
constexpr int kStoreThreads = 32;

bool HasRole(const ServerConfig& config, const std::string& role) {
  return config.roles.count(role) > 0;
}

// This process's lease holder id: --lease-holder, else <hostname>/<roles> (stable across a
// restart of the process, in a container too; distinct for the pods of a deployment).
std::string LeaseHolderOf(const ServerConfig& config) {
  if (!config.lease_holder.empty()) return config.lease_holder;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "localhost");
  }
  std::string holder = absl::StrCat(host, "/", absl::StrJoin(config.roles, ","));
  for (char& c : holder) {
    if (c == ':' || absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      c = '_';
    }
  }
  return holder;
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& addr) {
  size_t colon = addr.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad address (want host:port): ", addr));
  }
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

// Reads a secret file, creating it with `bytes` random bytes (mode 0600) when missing.
// Speech-to-text (docs/api.md §7): the configured OpenAI-compatible endpoint, else the embedded
// recognizer. Used by the transcription workers and by LLM-played callers on the websocket
// channel.
scoring::RecognizerFactory RecognizerFactoryFor(const ServerConfig& config) {
  if (!config.stt_base_url.empty()) {
    scoring::OpenAiTranscriberConfig stt;
    stt.base_url = config.stt_base_url;
    stt.api_key = config.stt_api_key;
    stt.model = config.stt_model;
    stt.language = config.stt_language;
    return [stt](const std::atomic<bool>* cancel)
               -> absl::StatusOr<std::unique_ptr<scoring::SpeechRecognizer>> {
      scoring::OpenAiTranscriberConfig with_cancel = stt;
      with_cancel.cancel = cancel;
      return std::make_unique<scoring::OpenAiTranscriber>(std::move(with_cancel));
    };
  }
  return [](const std::atomic<bool>* cancel)
             -> absl::StatusOr<std::unique_ptr<scoring::SpeechRecognizer>> {
    scoring::PocketsphinxOptions options;
    options.cancel = cancel;
    ASSIGN_OR_RETURN(std::unique_ptr<scoring::PocketsphinxRecognizer> recognizer,
                     scoring::PocketsphinxRecognizer::Create(std::move(options)));
    return std::unique_ptr<scoring::SpeechRecognizer>(std::move(recognizer));
  };
}

absl::StatusOr<std::string> LoadOrCreateSecret(const std::string& path, size_t bytes) {
  if (std::ifstream in(path, std::ios::binary); in) {
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.size() >= 16) return data;
  }
  std::string secret = RandomBytes(bytes);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(secret.data(), static_cast<std::streamsize>(secret.size()));
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  ::chmod(tmp.c_str(), 0600);
  // Two processes starting together: the first rename wins and both read it back.
  std::error_code ec;
  if (!fs::exists(path)) fs::rename(tmp, path, ec);
  fs::remove(tmp, ec);
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

absl::Status WriteBootstrapKey(const std::string& path, const std::string& key) {
  std::ofstream out(path, std::ios::trunc);
  out << key << "\n";
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  out.close();
  ::chmod(path.c_str(), 0600);
  return absl::OkStatus();
}

// The services whose HTTP annotations make up the public API.
std::vector<const google::protobuf::ServiceDescriptor*> PublicServices() {
  // Reached through a message of each file, which also makes sure the file is linked in.
  return {v1::Workspace::descriptor()->file()->FindServiceByName("Accounts"),
          v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
          v1::Call::descriptor()->file()->FindServiceByName("Calls"),
          v1::Metric::descriptor()->file()->FindServiceByName("Metrics")};
}

edge::LocalResponse JsonResponse(int status, std::string body) {
  edge::LocalResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

edge::LocalResponse ErrorResponse(const absl::Status& status) {
  return JsonResponse(HttpStatusFor(status), edge::PrintJson(ToErrorResponse(status)));
}

// Call ingest's view of agents: the agent must be in the workspace (else 422 agent_not_found);
// its disabled metrics decide which metric_ids are ignored.
// The run a runs worker's ingest is for (services/runs/run_worker.cc puts run_id and
// scenario_id in the metadata). Only the runs role's own ingests are read this way; a pushed
// call's metadata never sets the origin.
calls::RunOrigin RunOriginOf(const v1::IngestCallRequest& request) {
  calls::RunOrigin origin;
  const auto& fields = request.metadata().fields();
  if (auto it = fields.find("run_id"); it != fields.end() && it->second.has_number_value()) {
    origin.run_id = static_cast<int64_t>(it->second.number_value());
  }
  if (auto it = fields.find("scenario_id"); it != fields.end() && it->second.has_number_value()) {
    origin.scenario_id = static_cast<int64_t>(it->second.number_value());
  }
  return origin;
}

calls::AgentLookup AgentLookupFor(agents::AgentsStore* agents) {
  return [agents](int64_t workspace_id, int64_t agent_id) -> absl::StatusOr<calls::AgentInfo> {
    auto agent = agents->Get(workspace_id, agent_id);
    if (!agent.ok()) {
      if (agent.status().code() != absl::StatusCode::kNotFound) return agent.status();
      return ValidationError(
          "agent_not_found", absl::StrCat("agent ", agent_id, " not found"),
          {{"agent_id", absl::StrCat("no agent ", agent_id, " in workspace ", workspace_id)}});
    }
    calls::AgentInfo info;
    info.disabled_metric_ids.assign(agent->disabled_metric_ids().begin(),
                                    agent->disabled_metric_ids().end());
    if (agent->has_silence_threshold_ms())
      info.silence_threshold_ms = agent->silence_threshold_ms();
    info.name = agent->name();
    info.agent_source = agent->agent_source();
    return info;
  };
}

const google::protobuf::MethodDescriptor* Method(const google::protobuf::ServiceDescriptor* service,
                                                 const char* name) {
  return service->FindMethodByName(name);
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

// The connection cap, lowered so that the connections plus the descriptors the rest of the
// process needs (SQLite, gRPC, sandbox pipes, recordings) fit RLIMIT_NOFILE: a cap the kernel
// would enforce first only turns into failed accepts and failed file opens.
int MaxConnectionsWithinFileLimit(int requested) {
  constexpr int kReservedFiles = 256;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return requested;
  const int64_t usable = static_cast<int64_t>(limit.rlim_cur) - kReservedFiles;
  if (usable >= requested) return requested;
  const int lowered = static_cast<int>(std::max<int64_t>(usable, 16));
  std::cerr << "calleval: --max-connections " << requested << " lowered to " << lowered
            << " to fit the open-file limit (" << limit.rlim_cur << ")\n";
  return lowered;
}

}  // namespace

struct Server::State {
  ServerConfig config;
  std::unique_ptr<db::Database> database;
  std::unique_ptr<ThreadPool> pool;
  // Bounded pools of the slow work reached through the edge (ServerConfig::sandbox_pool_*).
  std::unique_ptr<ThreadPool> sandbox_pool;
  std::unique_ptr<ThreadPool> llm_pool;
  std::unique_ptr<accounts::AccountsStore> accounts_store;
  std::unique_ptr<accounts::Authenticator> authenticator;
  std::unique_ptr<agents::AgentsStore> agents_store;
  std::unique_ptr<agents::ScenariosStore> scenarios_store;
  // What each service asks of the tables another owns: in-process or gRPC clients
  // (docs/architecture.md, "Who owns which table").
  std::unique_ptr<metrics::AgentDirectory> agent_directory;
  std::unique_ptr<agents::MetricDirectory> metric_directory;
  std::unique_ptr<runs::ScenarioDirectory> scenario_directory;
  std::unique_ptr<agents::DeletionListener> remote_metrics_listener;  // metrics elsewhere
  std::unique_ptr<runs::RunsStore> runs_store;
  std::unique_ptr<runs::RunWorkers> run_workers;
  std::unique_ptr<calls::RecordingSigner> signer;
  // The credit ledger as the calls store reaches it (services/calls/credits.h).
  std::unique_ptr<calls::Credits> credits;
  std::unique_ptr<calls::CallsStore> calls_store;
  std::unique_ptr<calls::StatsStore> stats_store;
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
  std::optional<accounts::Bootstrap> bootstrap;
  std::string base_url;
  bool shut_down = false;
  // Set when every role is up; until then /readyz and presigned links answer 503.
  std::atomic<bool> ready{false};
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

void Server::AddLocalRoutes(State* state) {
  edge::HttpServer& http = *state->http_server;
  http.AddLocalRoute("GET", "/healthz", [](const edge::LocalRequest&) {
    return JsonResponse(200, R"({"status":"ok"})");
  });
  http.AddLocalRoute("GET", "/readyz", [state](const edge::LocalRequest&) {
    if (!state->ready.load()) return ErrorResponse(absl::UnavailableError("starting"));
    absl::Status ok = state->database->Read([](db::Connection& c) { return c.Exec("SELECT 1"); });
    if (!ok.ok()) return ErrorResponse(absl::UnavailableError("database not ready"));
    return JsonResponse(200, R"({"status":"ready"})");
  });
  http.AddLocalRoute("GET", "/openapi.json", [state](const edge::LocalRequest&) {
    return JsonResponse(200, state->openapi);
  });
  http.AddLocalRoute("GET", "/recordings/", [state](const edge::LocalRequest& r) {
    if (!state->ready.load()) return ErrorResponse(absl::UnavailableError("starting"));
    int64_t call_id = 0;
    absl::string_view id = absl::string_view(r.path).substr(std::string("/recordings/").size());
    auto expires = r.query.find("expires");
    auto signature = r.query.find("signature");
    if (!absl::SimpleAtoi(id, &call_id) || expires == r.query.end() || signature == r.query.end() ||
        !state->signer->Verify(call_id, expires->second, signature->second, absl::Now())) {
      return ErrorResponse(
          ForbiddenError("invalid_signature",
                         "the recording link is invalid or has expired; fetch the call again "
                         "for a fresh presigned_recording_url"));
    }
    auto file = state->calls_store->GetRecordingFile(call_id);
    if (!file.ok()) return ErrorResponse(file.status());
    edge::LocalResponse response;
    response.content_type = file->content_type;
    response.file_path = file->path;
    response.accept_ranges = true;  // a browser's player seeks by Range
    return response;
  });
}

namespace {

// Routes one method of a service running here to its transport-independent handler, run inline
// or on the pool as the service's table says (its gRPC adapter reads the same table).
template <typename Request, typename Response, typename Service>
void RegisterHandler(edge::DirectInvoker& direct, const google::protobuf::ServiceDescriptor* d,
                     const char* name, absl::Span<const MethodExecution> executions,
                     Service* service,
                     absl::Status (Service::*handler)(const std::string&, const Request&,
                                                      Response*),
                     ThreadPool* pool = nullptr) {
  const auto dispatch = ExecutionOf(executions, name) == Execution::kInline
                            ? edge::DirectInvoker::Dispatch::kInline
                            : edge::DirectInvoker::Dispatch::kPool;
  direct.Register<Request, Response>(
      Method(d, name), dispatch,
      [service, handler](const std::string& auth, const Request& request, Response* response) {
        return (service->*handler)(auth, request, response);
      },
      pool);
}

}  // namespace

void Server::RegisterDirectHandlers(State& s) {
  edge::DirectInvoker& direct = *s.direct_invoker;
  if (auto* svc = s.accounts_service.get()) {
    const auto* d = v1::Workspace::descriptor()->file()->FindServiceByName("Accounts");
    RegisterHandler(direct, d, "GetCurrentWorkspace", accounts::kAccountsMethods, svc,
                    &accounts::AccountsService::HandleGetCurrentWorkspace);
  }
  if (auto* svc = s.agents_service.get()) {
    using Svc = agents::AgentsService;
    const auto* d = v1::Agent::descriptor()->file()->FindServiceByName("Agents");
    RegisterHandler(direct, d, "CreateAgent", agents::kAgentsMethods, svc, &Svc::HandleCreateAgent);
    RegisterHandler(direct, d, "GetAgent", agents::kAgentsMethods, svc, &Svc::HandleGetAgent);
    RegisterHandler(direct, d, "UpdateAgent", agents::kAgentsMethods, svc, &Svc::HandleUpdateAgent);
    RegisterHandler(direct, d, "DeleteAgent", agents::kAgentsMethods, svc, &Svc::HandleDeleteAgent);
    RegisterHandler(direct, d, "ListAgents", agents::kAgentsMethods, svc, &Svc::HandleListAgents);
    RegisterHandler(direct, d, "ListLanguages", agents::kAgentsMethods, svc,
                    &Svc::HandleListLanguages);
    RegisterHandler(direct, d, "CreateScenario", agents::kAgentsMethods, svc,
                    &Svc::HandleCreateScenario);
    RegisterHandler(direct, d, "GetScenario", agents::kAgentsMethods, svc, &Svc::HandleGetScenario);
    RegisterHandler(direct, d, "UpdateScenario", agents::kAgentsMethods, svc,
                    &Svc::HandleUpdateScenario);
    RegisterHandler(direct, d, "DeleteScenario", agents::kAgentsMethods, svc,
                    &Svc::HandleDeleteScenario);
    RegisterHandler(direct, d, "ListScenarios", agents::kAgentsMethods, svc,
                    &Svc::HandleListScenarios);
    RegisterHandler(direct, d, "RunScenario", agents::kAgentsMethods, svc, &Svc::HandleRunScenario);
    RegisterHandler(direct, d, "GetRun", agents::kAgentsMethods, svc, &Svc::HandleGetRun);
    RegisterHandler(direct, d, "ListRuns", agents::kAgentsMethods, svc, &Svc::HandleListRuns);
    RegisterHandler(direct, d, "CreateBatchRun", agents::kAgentsMethods, svc,
                    &Svc::HandleCreateBatchRun);
    RegisterHandler(direct, d, "GetBatchRun", agents::kAgentsMethods, svc, &Svc::HandleGetBatchRun);
  }
  if (auto* svc = s.calls_service.get()) {
    using Svc = calls::CallsService;
    const auto* d = v1::Call::descriptor()->file()->FindServiceByName("Calls");
    RegisterHandler(direct, d, "IngestCall", calls::kCallsMethods, svc, &Svc::HandleIngestCall);
    RegisterHandler(direct, d, "GetCall", calls::kCallsMethods, svc, &Svc::HandleGetCall);
    RegisterHandler(direct, d, "UpdateCall", calls::kCallsMethods, svc, &Svc::HandleUpdateCall);
    RegisterHandler(direct, d, "ListCalls", calls::kCallsMethods, svc, &Svc::HandleListCalls);
    RegisterHandler(direct, d, "DeleteCall", calls::kCallsMethods, svc, &Svc::HandleDeleteCall);
    RegisterHandler(direct, d, "GetAgentStats", calls::kCallsMethods, svc,
                    &Svc::HandleGetAgentStats);
    RegisterHandler(direct, d, "GetScenarioStats", calls::kCallsMethods, svc,
                    &Svc::HandleGetScenarioStats);
  }
  if (auto* svc = s.metrics_service.get()) {
    using Svc = metrics::MetricsService;
    const auto* d = v1::Metric::descriptor()->file()->FindServiceByName("Metrics");
    RegisterHandler(direct, d, "ListMetrics", metrics::kMetricsMethods, svc,
                    &Svc::HandleListMetrics);
    RegisterHandler(direct, d, "CreateMetric", metrics::kMetricsMethods, svc,
                    &Svc::HandleCreateMetric);
    RegisterHandler(direct, d, "GetMetric", metrics::kMetricsMethods, svc, &Svc::HandleGetMetric);
    RegisterHandler(direct, d, "UpdateMetric", metrics::kMetricsMethods, svc,
                    &Svc::HandleUpdateMetric);
    RegisterHandler(direct, d, "DeleteMetric", metrics::kMetricsMethods, svc,
                    &Svc::HandleDeleteMetric);
    // The LLM and the sandbox take seconds: their own bounded pools, shed when full.
    RegisterHandler(direct, d, "GenerateMetrics", metrics::kMetricsMethods, svc,
                    &Svc::HandleGenerateMetrics, s.llm_pool.get());
    RegisterHandler(direct, d, "BulkCreateMetrics", metrics::kMetricsMethods, svc,
                    &Svc::HandleBulkCreateMetrics);
    RegisterHandler(direct, d, "ValidateCode", metrics::kMetricsMethods, svc,
                    &Svc::HandleValidateCode, s.sandbox_pool.get());
    RegisterHandler(direct, d, "TestCode", metrics::kMetricsMethods, svc, &Svc::HandleTestCode,
                    s.sandbox_pool.get());
    RegisterHandler(direct, d, "SetAgentStandardMetrics", metrics::kMetricsMethods, svc,
                    &Svc::HandleSetAgentStandardMetrics);
    RegisterHandler(direct, d, "SetAgentLlmMetrics", metrics::kMetricsMethods, svc,
                    &Svc::HandleSetAgentLlmMetrics);
    RegisterHandler(direct, d, "ListUsableMetrics", metrics::kMetricsMethods, svc,
                    &Svc::HandleListUsableMetrics);
  }
}

Server::~Server() { Shutdown(); }

int Server::http_port() const { return state_->http_server ? state_->http_server->port() : 0; }
int Server::grpc_port() const { return state_->grpc_port; }
std::string Server::http_base_url() const { return state_->base_url; }
const std::optional<accounts::Bootstrap>& Server::bootstrap() const { return state_->bootstrap; }
const edge::DirectInvoker* Server::direct_invoker() const { return state_->direct_invoker.get(); }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerConfig& config) {
  auto s = std::make_unique<State>();
  s->config = config;
  const bool edge_role = HasRole(config, "edge");
  const bool grpc_roles = std::any_of(config.roles.begin(), config.roles.end(),
                                      [](const std::string& r) { return r != "edge"; });
  const fs::path data_dir(config.data_dir);
  std::error_code ec;
  fs::create_directories(data_dir / "recordings", ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data dir ", config.data_dir, ": ", ec.message()));
  }
  ASSIGN_OR_RETURN(std::string signing_key,
                   LoadOrCreateSecret((data_dir / "signing-key").string(), 32));
  ASSIGN_OR_RETURN(auto http_host_port, SplitHostPort(config.http_addr));
  // Internal methods answer only the processes of this installation, which all hold this.
  ASSIGN_OR_RETURN(const std::string internal_credential,
                   config.internal_credential_file.empty()
                       ? LoadOrCreateInternalCredential((data_dir / "internal-credential").string())
                       : ReadInternalCredential(config.internal_credential_file));

  // Stores. With SQLite every role of an installation shares the data dir, the edge included
  // (it serves presigned recordings from it).
  const std::string database_url = config.database_url.empty()
                                       ? (data_dir / "calleval.db").string()
                                       : config.database_url;
  ASSIGN_OR_RETURN(s->database, db::Database::Open(database_url, SchemaMigrations()));
  s->pool = std::make_unique<ThreadPool>(kStoreThreads);
  s->sandbox_pool = std::make_unique<ThreadPool>(std::max(1, config.sandbox_pool_threads),
                                                 std::max(1, config.sandbox_pool_queue));
  s->llm_pool = std::make_unique<ThreadPool>(std::max(1, config.llm_pool_threads),
                                             std::max(1, config.llm_pool_queue));
  s->accounts_store = std::make_unique<accounts::AccountsStore>(s->database.get());
  if (HasRole(config, "accounts")) {
    ASSIGN_OR_RETURN(s->bootstrap, s->accounts_store->BootstrapIfEmpty());
    if (s->bootstrap) {
      RETURN_IF_ERROR(
          WriteBootstrapKey((data_dir / "bootstrap-key").string(), s->bootstrap->key.api_key));
    }
  }
  // Keys are checked against the shared store unless accounts is explicitly remote.
  if (!HasRole(config, "accounts") && !config.accounts_addr.empty()) {
    s->authenticator = accounts::NewGrpcAuthenticator(
        CreateInternalChannel(config.accounts_addr, internal_credential));
  } else {
    s->authenticator = accounts::NewStoreAuthenticator(s->accounts_store.get());
  }
  // Web channel credentials are sealed with a key kept outside the database, so a copy of
  // calleval.db alone does not give them away.
  const std::string credentials_key_path = config.credentials_key_file.empty()
                                               ? (data_dir / "credentials-key").string()
                                               : config.credentials_key_file;
  ASSIGN_OR_RETURN(std::string credentials_key, LoadOrCreateSecret(credentials_key_path, 32));
  if (credentials_key.size() != 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        credentials_key_path, " must hold exactly 32 bytes (it holds ", credentials_key.size(),
        ")"));
  }
  agents::AgentsStore::Options agents_options;
  agents_options.url_guard.allowed_hosts = config.allow_private_hosts;
  agents_options.credentials_key = std::move(credentials_key);
  s->agents_store =
      std::make_unique<agents::AgentsStore>(s->database.get(), std::move(agents_options));
  // A service asks the owner of a table: in this process when the owning role runs here or no
  // address is given (with SQLite every role shares the data dir), else over the owner's
  // internal methods, as with accounts above.
  const bool agents_remote = !HasRole(config, "agents") && !config.agents_addr.empty();
  const bool metrics_remote = !HasRole(config, "metrics") && !config.metrics_addr.empty();
  if (metrics_remote) {
    auto channel = CreateInternalChannel(config.metrics_addr, internal_credential);
    s->metric_directory = metrics::NewGrpcMetricDirectory(channel);
    s->remote_metrics_listener = metrics::NewGrpcDeletionListener(channel);
  } else {
    s->metric_directory = std::make_unique<metrics::InProcessMetricDirectory>(s->database.get());
  }
  s->scenarios_store =
      std::make_unique<agents::ScenariosStore>(s->database.get(), s->metric_directory.get());
  if (agents_remote) {
    auto channel = CreateInternalChannel(config.agents_addr, internal_credential);
    s->agent_directory = agents::NewGrpcAgentDirectory(channel);
    s->scenario_directory = agents::NewGrpcScenarioDirectory(channel);
  } else {
    s->agent_directory = std::make_unique<agents::InProcessAgentDirectory>(
        s->agents_store.get(), s->scenarios_store.get());
    s->scenario_directory = std::make_unique<agents::InProcessScenarioDirectory>(
        s->agents_store.get(), s->scenarios_store.get());
  }

  // The edge binds first: presigned links name its port, which is only known once bound when
  // --http-addr asks for port 0. Until the invoker is in place it answers 503.
  State* state = s.get();
  if (edge_role) {
    ASSIGN_OR_RETURN(auto table, edge::RouteTable::Build(PublicServices()));
    s->routes = std::make_unique<edge::RouteTable>(std::move(table));
    s->openapi = edge::BuildOpenApi(*s->routes, "calleval", "1.0.0", config.public_base_url);
    edge::HttpServerOptions options;
    options.host = http_host_port.first;
    options.port = http_host_port.second;
    options.threads = config.http_threads;
    options.max_body_bytes = static_cast<size_t>(config.max_body_bytes);
    options.max_connections = MaxConnectionsWithinFileLimit(config.max_connections);
    options.header_timeout = config.header_timeout;
    options.idle_timeout = config.idle_timeout;
    options.access_log = config.access_log;
    options.rate_limit_per_second = config.rate_limit_per_second;
    options.rate_limit_burst = config.rate_limit_burst;
    // Limited per authenticated key: a guessed key must not get a bucket of its own.
    accounts::Authenticator* authenticator = s->authenticator.get();
    options.rate_limit_identity =
        [authenticator](std::string_view authorization) -> std::optional<std::string> {
      absl::StatusOr<accounts::Principal> principal =
          authenticator->Authenticate(absl::string_view(authorization.data(), authorization.size()));
      if (!principal.ok()) return std::nullopt;
      return absl::StrCat(principal->key_id);
    };
    s->http_server = std::make_unique<edge::HttpServer>(s->routes.get(), &s->invoker_slot, options);
    AddLocalRoutes(state);
    RETURN_IF_ERROR(s->http_server->Start());
  }
  s->base_url = config.public_base_url;
  if (s->base_url.empty()) {
    std::string host = http_host_port.first;
    if (host == "0.0.0.0" || host == "::" || host.empty()) host = "127.0.0.1";
    if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
    const int port = s->http_server ? s->http_server->port() : http_host_port.second;
    s->base_url = absl::StrCat("http://", host, ":", port);
  }
  s->signer =
      std::make_unique<calls::RecordingSigner>(signing_key, s->base_url, config.presign_validity);
  calls::CallsStore::Options calls_options;
  calls_options.recordings_dir = (data_dir / "recordings").string();
  calls_options.url_guard.allowed_hosts = config.allow_private_hosts;
  calls_options.signer = s->signer.get();
  s->metrics_store =
      std::make_unique<metrics::MetricsStore>(s->database.get(), s->agent_directory.get());
  metrics::MetricsStore* metrics_store = s->metrics_store.get();
  calls_options.catalog =
      [metrics_store](int64_t workspace_id,
                      int64_t agent_id) -> absl::StatusOr<std::vector<calls::CustomMetricInfo>> {
    ASSIGN_OR_RETURN(auto entries, metrics_store->Catalog(workspace_id, agent_id));
    std::vector<calls::CustomMetricInfo> out;
    out.reserve(entries.size());
    for (const auto& e : entries) {
      out.push_back({e.id, e.credit_cost, e.requires_audio, e.applies_to_agent});
    }
    return out;
  };
  calls_options.definitions = [metrics_store](int64_t workspace_id,
                                              const std::vector<int64_t>& ids) {
    return metrics_store->Definitions(workspace_id, ids);
  };
  if (!config.llm_base_url.empty() &&
      (HasRole(config, "scoring") || HasRole(config, "metrics") || HasRole(config, "runs"))) {
    LlmConfig llm;
    llm.base_url = config.llm_base_url;
    llm.api_key = config.llm_api_key;
    llm.model = config.llm_model;
    llm.max_in_flight = config.llm_max_in_flight;
    s->llm = NewOpenAiCompatibleClient(std::move(llm));
  }
  if (HasRole(config, "scoring") || HasRole(config, "metrics")) {
    // Code never runs unsandboxed: when the sandbox cannot start, code metrics fail closed
    // and validate_code / test_code answer 503. Say so once, at start-up.
    judges::PythonSandbox::Options sandbox;
    sandbox.bwrap = config.sandbox_bwrap;
    sandbox.python = config.sandbox_python;
    s->sandbox = std::make_unique<judges::PythonSandbox>(sandbox);
    absl::StatusOr<judges::CodeRun> probe =
        s->sandbox->Run("metric['result'] = True", nlohmann::json::object());
    if (!probe.ok()) {
      std::cerr << "calleval: " << probe.status().message()
                << "; code metrics will fail until it is fixed\n";
    } else if (probe->error) {
      std::cerr << "calleval: the code sandbox does not run code: " << probe->error->type << ": "
                << probe->error->message << "\n";
    }
  }
  // The ledger is accounts': like keys, through its store unless accounts is explicitly remote.
  if (!HasRole(config, "accounts") && !config.accounts_addr.empty()) {
    s->credits =
        calls::NewGrpcCredits(CreateInternalChannel(config.accounts_addr, internal_credential));
  } else {
    s->credits = calls::NewStoreCredits(s->accounts_store.get());
  }
  calls_options.credits = s->credits.get();
  s->calls_store = std::make_unique<calls::CallsStore>(
      s->database.get(), AgentLookupFor(s->agents_store.get()), calls_options);
  // Carried by the lease tokens this process takes (analysis, transcription, runs).
  const std::string holder = LeaseHolderOf(config);

  // Services of the roles run here, on gRPC and (for the edge) as direct handlers.
  if (HasRole(config, "accounts")) {
    s->accounts_service = std::make_unique<accounts::AccountsService>(
        s->accounts_store.get(), s->authenticator.get(), s->pool.get(), internal_credential);
  }
  s->runs_store =
      std::make_unique<runs::RunsStore>(s->database.get(), s->scenario_directory.get());
  State* const state_for_hooks = s.get();
  if (HasRole(config, "runs")) {
    // Runs talk to the other roles through their stores: with SQLite every role of an
    // installation shares the data dir.
    runs::RunWorkers::Options run_options;
    run_options.workers = config.run_workers;
    run_options.holder = holder;
    agents::ScenariosStore* scenarios = s->scenarios_store.get();
    agents::AgentsStore* agents_store = s->agents_store.get();
    calls::CallsStore* calls_store = s->calls_store.get();
    run_options.deps.scenario = [scenarios](int64_t ws, int64_t id) {
      return scenarios->Get(ws, id);
    };
    run_options.deps.agent = [agents_store](int64_t ws, int64_t id) {
      return agents_store->Get(ws, id);
    };
    run_options.deps.ingest = [calls_store, state_for_hooks](int64_t ws,
                                                             const v1::IngestCallRequest& request) {
      absl::StatusOr<v1::Call> call =
          calls_store->Ingest(ws, request, nullptr, RunOriginOf(request));
      // A text call is ready for scoring at once.
      if (call.ok() && state_for_hooks->scoring_workers) {
        state_for_hooks->scoring_workers->Notify();
      }
      return call;
    };
    run_options.deps.call = [calls_store](int64_t ws, const std::string& key) {
      return calls_store->Get(ws, key);
    };
    run_options.deps.metric_definitions = [metrics_store](int64_t ws,
                                                          const std::vector<int64_t>& ids) {
      return metrics_store->Definitions(ws, ids);
    };
    run_options.deps.llm = s->llm.get();
    run_options.deps.web_channel = [agents_store](int64_t ws, int64_t id) {
      return agents_store->GetWebChannel(ws, id);
    };
    run_options.deps.ingest_recorded = [calls_store, state_for_hooks](
                                           int64_t ws, const v1::IngestCallRequest& request,
                                           const std::string& wav) {
      absl::StatusOr<v1::Call> call = calls_store->Ingest(ws, request, &wav, RunOriginOf(request));
      // The recording is stored already: the call is ready for scoring at once.
      if (call.ok() && state_for_hooks->scoring_workers) {
        state_for_hooks->scoring_workers->Notify();
      }
      return call;
    };
    run_options.deps.scratch_dir = calls_options.recordings_dir;
    if (!config.tts_base_url.empty()) {
      runs::OpenAiSpeechConfig tts;
      tts.base_url = config.tts_base_url;
      tts.api_key = config.tts_api_key;
      tts.model = config.tts_model;
      tts.voice = config.tts_voice;
      run_options.deps.make_synthesizer = [tts](const std::atomic<bool>* cancel) {
        runs::OpenAiSpeechConfig with_cancel = tts;
        with_cancel.cancel = cancel;
        return runs::NewOpenAiSpeechSynthesizer(std::move(with_cancel));
      };
    }
    run_options.deps.url_guard.allowed_hosts = config.allow_private_hosts;
    run_options.deps.agent_ca_file = config.agent_ca_file;
    // An LLM-played caller on the websocket channel hears the agent the way transcription
    // does.
    run_options.deps.make_recognizer = RecognizerFactoryFor(config);
    s->run_workers = std::make_unique<runs::RunWorkers>(s->runs_store.get(), run_options);
  }
  if (HasRole(config, "agents")) {
    s->agents_service = std::make_unique<agents::AgentsService>(
        s->agents_store.get(), s->authenticator.get(), s->pool.get(), s->scenarios_store.get(),
        s->runs_store.get(), [state_for_hooks] {
          if (state_for_hooks->run_workers) state_for_hooks->run_workers->Notify();
        });
    // Metric links to a deleted agent or scenario go once the delete has committed.
    s->agents_service->set_deletion_listener(metrics_remote ? s->remote_metrics_listener.get()
                                                            : s->metrics_store.get());
    s->agents_service->set_internal_credential(internal_credential);
  }
  if (HasRole(config, "scoring")) {
    // Leases are short and renewed by each worker pool's heartbeat while the work runs, so a
    // dead worker's call is taken over within a lease; attempts bound a call that keeps killing
    // its worker. The tokens carry this process's holder id: what its previous life held
    // (SIGKILL, OOM) is given back before the workers lease anything.
    // Leased from the calls role: directly when it runs here or when no address is given
    // (with SQLite all roles share the data dir), over gRPC otherwise.
    absl::StatusOr<int> released;
    if (HasRole(config, "calls") || config.calls_addr.empty()) {
      s->analysis_queue = std::make_unique<scoring::StoreAnalysisQueue>(
          s->calls_store.get(), config.analysis_lease, /*max_attempts=*/3, holder);
      s->transcription_queue = std::make_unique<scoring::StoreTranscriptionQueue>(
          s->calls_store.get(), config.transcription_lease, /*max_attempts=*/3, holder);
      released = s->calls_store->ReleaseLeasesOf(holder);
    } else {
      std::shared_ptr<grpc::Channel> calls =
          CreateInternalChannel(config.calls_addr, internal_credential);
      s->analysis_queue = std::make_unique<scoring::GrpcAnalysisQueue>(
          calls, config.analysis_lease, /*max_attempts=*/3, holder);
      s->transcription_queue = std::make_unique<scoring::GrpcTranscriptionQueue>(
          calls, config.transcription_lease, /*max_attempts=*/3, holder);
      released = scoring::ReleaseHolderLeasesOverGrpc(calls, holder);
    }
    if (!released.ok()) {
      // Not fatal: those leases expire on their own within a lease.
      std::cerr << "calleval: could not give back the leases of " << holder << ": "
                << released.status() << "\n";
    } else if (*released > 0) {
      std::cerr << "calleval: gave back " << *released << " leases held by " << holder
                << " before the restart\n";
    }
    // Speech-to-text runs on its own workers: a recording takes about a tenth of its length
    // to transcribe, and the audio metrics of other calls must not wait behind it.
    scoring::TranscriptionWorkers::Options transcribers;
    transcribers.workers = config.stt_workers;
    transcribers.make_recognizer = RecognizerFactoryFor(config);
    s->transcription_workers = std::make_unique<scoring::TranscriptionWorkers>(
        s->transcription_queue.get(), std::move(transcribers));
    scoring::ScoringWorkers::Options workers;
    workers.judges.sandbox = s->sandbox.get();
    workers.judges.llm = s->llm.get();
    workers.judges.llm_batch = config.llm_batch_size;
    workers.workers = config.workers > 0
                          ? config.workers
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    // A leased voice call may have a recording to transcribe (transcription starts once the
    // analysis has, so a call skipped for credits is never transcribed).
    scoring::TranscriptionWorkers* transcription = s->transcription_workers.get();
    workers.on_leased = [transcription] { transcription->Notify(); };
    s->scoring_workers =
        std::make_unique<scoring::ScoringWorkers>(s->analysis_queue.get(), workers);
    scoring::ScoringWorkers* scoring = s->scoring_workers.get();
    // A transcription that ended may complete a `computed` call.
    transcription->set_on_reported([scoring] { scoring->Notify(); });
    s->scoring_workers->Start();
    s->transcription_workers->Start();
  }
  scoring::ScoringWorkers* scoring_workers = s->scoring_workers.get();
  if (HasRole(config, "calls")) {
    calls::RecordingDownloader::Options download;
    if (scoring_workers != nullptr) {
      download.on_stored = [scoring_workers](int64_t) { scoring_workers->Notify(); };
    }
    download.fetch.guard.allowed_hosts = config.allow_private_hosts;
    download.fetch.max_bytes = config.max_recording_bytes;
    download.fetch.total_timeout = config.download_timeout;
    download.holder = holder;
    if (!HasRole(config, "scoring")) {
      // Downloads this holder's previous life held resume at once (with the scoring role here,
      // its release above gave them back already, before any worker started).
      absl::StatusOr<int> released = s->calls_store->ReleaseLeasesOf(holder);
      if (!released.ok()) {
        std::cerr << "calleval: could not give back the leases of " << holder << ": "
                  << released.status() << "\n";
      } else if (*released > 0) {
        std::cerr << "calleval: gave back " << *released << " leases held by " << holder
                  << " before the restart\n";
      }
    }
    // Calls stored before the queryable rows (schema version 10) get them now.
    absl::StatusOr<int> backfilled = s->calls_store->BackfillQueryRows();
    if (!backfilled.ok()) {
      return absl::Status(backfilled.status().code(),
                          absl::StrCat("filling in the queryable rows of older calls: ",
                                       backfilled.status().message()));
    }
    if (*backfilled > 0) {
      std::cerr << "calleval: wrote the queryable rows of " << *backfilled << " older calls\n";
    }
    // Refunds a previous life settled and did not apply; not fatal: they stay owed and the
    // analysis queue's sweep applies them.
    absl::StatusOr<int> refunded = s->calls_store->ApplyOwedRefunds();
    if (!refunded.ok()) {
      std::cerr << "calleval: could not apply owed refunds yet: " << refunded.status() << "\n";
    } else if (*refunded > 0) {
      std::cerr << "calleval: applied the owed refunds of " << *refunded << " calls\n";
    }
    s->downloader = std::make_unique<calls::RecordingDownloader>(s->calls_store.get(), download);
    s->downloader->Start();
    calls::RecordingDownloader* downloader = s->downloader.get();
    agents::ScenariosStore* scenarios = s->scenarios_store.get();
    runs::RunsStore* runs_store = s->runs_store.get();
    s->stats_store = std::make_unique<calls::StatsStore>(
        s->database.get(), AgentLookupFor(s->agents_store.get()),
        [scenarios](int64_t workspace_id, int64_t scenario_id) -> absl::StatusOr<int64_t> {
          ASSIGN_OR_RETURN(v1::Scenario scenario, scenarios->Get(workspace_id, scenario_id));
          return scenario.agent_id();
        },
        [runs_store](const runs::RunCountQuery& query) { return runs_store->CountRuns(query); });
    s->calls_service = std::make_unique<calls::CallsService>(
        s->calls_store.get(), s->authenticator.get(), s->pool.get(),
        [downloader, scoring_workers](const v1::Call& call) {
          if (call.has_recording_url()) {
            downloader->Notify();
          } else if (scoring_workers != nullptr) {
            scoring_workers->Notify();  // a text call is ready at once
          }
        },
        internal_credential, s->stats_store.get());
  }
  if (HasRole(config, "metrics")) {
    agents::AgentsStore* agents_store = s->agents_store.get();
    calls::CallsStore* calls_store = s->calls_store.get();
    metrics::MetricsService::Dependencies deps;
    deps.store = s->metrics_store.get();
    deps.authenticator = s->authenticator.get();
    deps.pool = s->pool.get();
    deps.sandbox_pool = s->sandbox_pool.get();
    deps.llm_pool = s->llm_pool.get();
    deps.sandbox = s->sandbox.get();
    deps.calls = [calls_store](int64_t workspace_id, int64_t call_id) {
      return calls_store->Get(workspace_id, absl::StrCat(call_id));
    };
    deps.agents = [agents_store](int64_t workspace_id,
                                 int64_t agent_id) -> absl::StatusOr<v1::JobAgent> {
      ASSIGN_OR_RETURN(v1::Agent agent, agents_store->Get(workspace_id, agent_id));
      v1::JobAgent out;
      out.set_id(agent.id());
      out.set_name(agent.name());
      out.set_agent_source(agent.agent_source());
      return out;
    };
    deps.llm = s->llm.get();
    deps.internal_credential = internal_credential;
    deps.agent_briefs = [agents_store](int64_t workspace_id,
                                       int64_t agent_id) -> absl::StatusOr<metrics::AgentBrief> {
      ASSIGN_OR_RETURN(v1::Agent agent, agents_store->Get(workspace_id, agent_id));
      return metrics::AgentBrief{agent.name(), agent.instructions(),
                                 agent.opening_message().text()};
    };
    s->metrics_service = std::make_unique<metrics::MetricsService>(std::move(deps));
  }
  if (grpc_roles) {
    grpc::EnableDefaultHealthCheckService(true);
    // Reflection describes grpc.health.v1.Health from the generated pool: this links its file in.
    grpc::health::v1::HealthCheckRequest::descriptor();
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // v1alpha
    grpc::ServerBuilder builder;
    builder.SetOption(ServerReflectionV1());
    builder.AddListeningPort(config.grpc_addr, grpc::InsecureServerCredentials(), &s->grpc_port);
    builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_body_bytes * 2));
    auto add = [&](grpc::Service* service, const char* name) {
      if (service == nullptr) return;
      builder.RegisterService(service);
      s->health_names.push_back(name);
    };
    add(s->accounts_service.get(), v1::Accounts::service_full_name());
    add(s->agents_service.get(), v1::Agents::service_full_name());
    add(s->calls_service.get(), v1::Calls::service_full_name());
    add(s->metrics_service.get(), v1::Metrics::service_full_name());
    s->health_names.push_back("");  // the whole server
    s->grpc_server = builder.BuildAndStart();
    if (!s->grpc_server) {
      return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", config.grpc_addr));
    }
    // NOT_SERVING until every role here is up; unknown names answer NOT_FOUND.
    for (const std::string& name : s->health_names) {
      s->grpc_server->GetHealthCheckService()->SetServingStatus(name, false);
    }
  }

  if (edge_role) {
    // Roles elsewhere are reached over gRPC; roles here are called directly.
    auto remote = [&](const std::string& addr) {
      return CreateInternalChannel(addr.empty() ? config.grpc_addr : addr, internal_credential);
    };
    std::map<std::string, std::shared_ptr<grpc::Channel>> channels;
    if (!s->accounts_service) {
      channels[v1::Accounts::service_full_name()] = remote(config.accounts_addr);
    }
    if (!s->agents_service) channels[v1::Agents::service_full_name()] = remote(config.agents_addr);
    if (!s->calls_service) channels[v1::Calls::service_full_name()] = remote(config.calls_addr);
    if (!s->metrics_service) {
      channels[v1::Metrics::service_full_name()] = remote(config.metrics_addr);
    }
    s->grpc_invoker = std::make_unique<edge::GrpcInvoker>(std::move(channels), absl::Seconds(30));
    s->direct_invoker = std::make_unique<edge::DirectInvoker>(s->pool.get(), s->grpc_invoker.get());
    RegisterDirectHandlers(*s);
    s->invoker_slot.target.store(s->direct_invoker.get());
  }
  if (s->run_workers) {
    // What this holder's previous life held resumes at once rather than after its lease.
    absl::StatusOr<int> released = s->runs_store->ReleaseLeasesOf(holder);
    if (!released.ok()) {
      std::cerr << "calleval: could not give back the run leases of " << holder << ": "
                << released.status() << "\n";
    } else if (*released > 0) {
      std::cerr << "calleval: gave back " << *released << " run leases held by " << holder
                << " before the restart\n";
    }
    s->run_workers->Start();
  }
  s->ready.store(true);
  if (s->grpc_server) {
    for (const std::string& name : s->health_names) {
      s->grpc_server->GetHealthCheckService()->SetServingStatus(name, true);
    }
  }
  return std::unique_ptr<Server>(new Server(std::move(s)));
}

void Server::Shutdown() {
  State& s = *state_;
  if (s.shut_down) return;
  s.shut_down = true;
  // Probes and load balancers see NOT_SERVING while in-flight work drains.
  s.ready.store(false);
  if (s.grpc_server) s.grpc_server->GetHealthCheckService()->Shutdown();
  if (s.http_server) s.http_server->Shutdown();
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
  // Each runs what was queued; the slow pools first, their tasks may still use the store pool.
  s.sandbox_pool.reset();
  s.llm_pool.reset();
  s.pool.reset();
}

}  // namespace calleval

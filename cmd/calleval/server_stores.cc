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
#include <map>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cmd/calleval/server_state.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/internal_credential.h"
#include "common/log.h"
#include "common/method_table.h"
#include "common/schema.h"
#include "common/server_reflection_v1.h"
#include "common/status_macros.h"
#include "grpc/health/v1/health.pb.h"

namespace calleval {
namespace {

namespace fs = std::filesystem;

// Threads for store work. Ingests block on the group commit's fsync, so more threads than
// cores means more writes share each commit.
constexpr int kStoreThreads = 32;

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

// Reads a secret file, creating it with `bytes` random bytes (mode 0600) when missing.
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

// Reads a secret file that must be there (a mounted Secret shared by several processes: one
// created here would differ from the others').
absl::StatusOr<std::string> ReadSecret(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat(path, " must hold at least 16 bytes"));
  }
  return data;
}

absl::Status WriteBootstrapKey(const std::string& path, const std::string& key) {
  std::ofstream out(path, std::ios::trunc);
  out << key << "\n";
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  out.close();
  ::chmod(path.c_str(), 0600);
  return absl::OkStatus();
}

}  // namespace

bool ReadsTheDatabase(const ServerConfig& config) {
  const std::pair<const char*, const std::string*> owners[] = {
      {"accounts", &config.accounts_addr},
      {"agents", &config.agents_addr},
      {"calls", &config.calls_addr},
      {"metrics", &config.metrics_addr}};
  for (const auto& [role, address] : owners) {
    if (!AskedOverGrpc(config, role, *address)) return true;
  }
  return false;
}

// Call ingest's view of agents: the agent must be in the workspace (else 422 agent_not_found);
// its disabled metrics decide which metric_ids are ignored.
absl::Status OpenStores(ServerState* s) {
  const ServerConfig& config = s->config;
  const fs::path data_dir(config.data_dir);
  // Carried by the lease tokens this process takes (analysis, transcription, runs).
  s->holder = LeaseHolderOf(config);
  std::error_code ec;
  // One scratch dir per lease holder: processes sharing a data dir (several --roles on one
  // host) each empty only their own at start-up, where what a previous life of the same
  // process left belongs to no job any more.
  std::string scratch_name = absl::StrCat("holder-", s->holder);
  for (char& c : scratch_name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != ',') {
      c = '_';
    }
  }
  s->scratch_dir = (data_dir / "scratch" / scratch_name).string();
  fs::remove_all(s->scratch_dir, ec);
  ec.clear();
  fs::create_directories(s->scratch_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data dir ", config.data_dir, ": ", ec.message()));
  }
  const std::string recordings_url = config.recordings_url.empty()
                                         ? fs::absolute(data_dir / "recordings").string()
                                         : config.recordings_url;
  ASSIGN_OR_RETURN(s->recordings, OpenBlobStore(recordings_url));
  ASSIGN_OR_RETURN(s->signing_key,
                   config.signing_key_file.empty()
                       ? LoadOrCreateSecret((data_dir / "signing-key").string(), 32)
                       : ReadSecret(config.signing_key_file));
  // Internal methods answer only the processes of this installation, which all hold this.
  ASSIGN_OR_RETURN(s->internal_credential,
                   config.internal_credential_file.empty()
                       ? LoadOrCreateInternalCredential((data_dir / "internal-credential").string())
                       : ReadInternalCredential(config.internal_credential_file));

  // Stores. With SQLite every role of an installation shares the data dir. A process whose
  // roles own no table and that knows where every owner runs (an edge, scoring or runs pod
  // given the four addresses) asks them everything and opens no database at all, so it needs
  // no database URL and holds no database credentials.
  if (ReadsTheDatabase(config)) {
    const std::string database_url =
        config.database_url.empty() ? (data_dir / "calleval.db").string() : config.database_url;
    ASSIGN_OR_RETURN(s->database, db::Database::Open(database_url, SchemaMigrations()));
  }
  // Short reads stay on the calling thread where the database is in this process; set before
  // any method table is registered (common/method_execution.h).
  SetPointReadsInline(s->database != nullptr &&
                      s->database->backend() == db::Backend::kSqlite);
  s->pool = std::make_unique<ThreadPool>(kStoreThreads);
  s->sandbox_pool = std::make_unique<ThreadPool>(std::max(1, config.sandbox_pool_threads),
                                                 std::max(1, config.sandbox_pool_queue));
  s->llm_pool = std::make_unique<ThreadPool>(std::max(1, config.llm_pool_threads),
                                             std::max(1, config.llm_pool_queue));
  if (s->database) s->accounts_store = std::make_unique<accounts::AccountsStore>(s->database.get());
  if (HasRole(config, "accounts")) {
    ASSIGN_OR_RETURN(s->bootstrap, s->accounts_store->BootstrapIfEmpty());
    if (s->bootstrap) {
      RETURN_IF_ERROR(
          WriteBootstrapKey((data_dir / "bootstrap-key").string(), s->bootstrap->key.api_key));
    }
  }
  // Keys are checked against the shared store unless accounts is explicitly remote.
  if (AskedOverGrpc(config, "accounts", config.accounts_addr)) {
    s->authenticator = accounts::NewGrpcAuthenticator(
        CreateInternalChannel(config.accounts_addr, s->internal_credential));
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
    return absl::InvalidArgumentError(absl::StrCat(credentials_key_path,
                                                   " must hold exactly 32 bytes (it holds ",
                                                   credentials_key.size(), ")"));
  }
  agents::AgentsStore::Options agents_options;
  agents_options.url_guard.allowed_hosts = config.allow_private_hosts;
  agents_options.credentials_key = credentials_key;
  s->credentials_key = credentials_key;
  if (s->database) {
    s->agents_store =
        std::make_unique<agents::AgentsStore>(s->database.get(), std::move(agents_options));
    s->integrations_store =
        std::make_unique<agents::IntegrationsStore>(s->database.get(), std::move(credentials_key));
  }
  // A service asks the owner of a table: in this process when the owning role runs here or no
  // address is given (with SQLite every role shares the data dir), else over the owner's
  // internal methods, as with accounts above.
  const bool agents_remote = AskedOverGrpc(config, "agents", config.agents_addr);
  const bool metrics_remote = AskedOverGrpc(config, "metrics", config.metrics_addr);
  if (metrics_remote) {
    auto channel = CreateInternalChannel(config.metrics_addr, s->internal_credential);
    s->metric_directory = metrics::NewGrpcMetricDirectory(channel);
    s->remote_metrics_listener = metrics::NewGrpcDeletionListener(channel);
  } else {
    s->metric_directory = std::make_unique<metrics::InProcessMetricDirectory>(s->database.get());
  }
  if (s->database) {
    s->scenarios_store =
        std::make_unique<agents::ScenariosStore>(s->database.get(), s->metric_directory.get());
  }
  if (agents_remote) {
    auto channel = CreateInternalChannel(config.agents_addr, s->internal_credential);
    s->agent_directory = agents::NewGrpcAgentDirectory(channel);
    s->scenario_directory = agents::NewGrpcScenarioDirectory(channel);
  } else {
    s->agent_directory = std::make_unique<agents::InProcessAgentDirectory>(
        s->agents_store.get(), s->scenarios_store.get());
    s->scenario_directory = std::make_unique<agents::InProcessScenarioDirectory>(
        s->agents_store.get(), s->scenarios_store.get());
  }
  return absl::OkStatus();
}

absl::Status OpenCallsAndMetricsStores(ServerState* s) {
  const ServerConfig& config = s->config;
  s->signer = std::make_unique<calls::RecordingSigner>(s->signing_key, s->base_url,
                                                       config.presign_validity);
  calls::CallsStore::Options calls_options;
  calls_options.recordings = s->recordings.get();
  calls_options.url_guard.allowed_hosts = config.allow_private_hosts;
  calls_options.signer = s->signer.get();
  if (s->database) {
    s->metrics_store =
        std::make_unique<metrics::MetricsStore>(s->database.get(), s->agent_directory.get());
  }
  metrics::MetricsStore* metrics_store = s->metrics_store.get();
  // What ingest asks of agents and metrics: in this process, or over their internal methods
  // (the same rule as the directories above).
  const bool agents_remote = AskedOverGrpc(config, "agents", config.agents_addr);
  const bool metrics_remote = AskedOverGrpc(config, "metrics", config.metrics_addr);
  if (agents_remote) {
    s->call_agents = calls::AgentLookupFrom(calls::NewGrpcCallAgentSource(
        CreateInternalChannel(config.agents_addr, s->internal_credential)));
  } else {
    s->call_agents = calls::AgentLookupFrom(
        [agents = s->agents_store.get()](int64_t workspace_id, int64_t agent_id) {
          return agents->GetCallAgent(workspace_id, agent_id);
        });
  }
  if (metrics_remote) {
    calls_options.catalog = calls::MetricCatalogFrom(calls::NewGrpcIngestCatalogSource(
        CreateInternalChannel(config.metrics_addr, s->internal_credential)));
  } else {
    calls_options.catalog = calls::MetricCatalogFrom(
        [metrics_store](int64_t workspace_id, int64_t agent_id) {
          return metrics_store->Catalog(workspace_id, agent_id);
        });
  }
  // The metrics' definitions calls are judged by: put into scoring jobs, read by run workers.
  if (metrics_remote) {
    s->metric_definitions = metrics::NewGrpcMetricDefinitions(
        CreateInternalChannel(config.metrics_addr, s->internal_credential));
  } else {
    s->metric_definitions = [metrics_store](int64_t workspace_id,
                                            const std::vector<int64_t>& ids) {
      return metrics_store->Definitions(workspace_id, ids);
    };
  }
  calls_options.definitions = s->metric_definitions;
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
      LogWarn(absl::StrCat(probe.status().message(), "; code metrics will fail until it is fixed"));
    } else if (probe->error) {
      LogWarn("the code sandbox does not run code",
              {{"error_type", probe->error->type}, {"error", probe->error->message}});
    } else if (!s->sandbox->mounts_proc()) {
      LogInfo(
          "the code sandbox runs without /proc (the kernel refused a new proc mount, as in a "
          "container whose runtime masks /proc)");
    }
  }
  // The ledger is accounts': like keys, through its store unless accounts is explicitly remote.
  if (AskedOverGrpc(config, "accounts", config.accounts_addr)) {
    s->credits =
        calls::NewGrpcCredits(CreateInternalChannel(config.accounts_addr, s->internal_credential));
  } else {
    s->credits = calls::NewStoreCredits(s->accounts_store.get());
  }
  calls_options.credits = s->credits.get();
  calls_options.on_settled = [s](int64_t workspace_id) {
    if (calls::AlertWorkers* alerts = s->alert_hook.load()) alerts->MarkWorkspace(workspace_id);
  };
  if (s->database) {
    s->calls_store =
        std::make_unique<calls::CallsStore>(s->database.get(), s->call_agents, calls_options);
  }
  return absl::OkStatus();
}

}  // namespace calleval

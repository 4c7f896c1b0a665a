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
#include "absl/strings/str_split.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "cmd/calleval/server_state.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/grpc_log.h"
#include "common/grpc_metrics.h"
#include "common/internal_credential.h"
#include "common/log.h"
#include "common/method_table.h"
#include "common/schema.h"
#include "common/server_reflection_v1.h"
#include "common/status_macros.h"
#include "grpc/health/v1/health.pb.h"

namespace calleval {
namespace {

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

runs::ProviderApiUrls ProviderUrlsOf(const ServerConfig& config) {
  runs::ProviderApiUrls urls;
  urls.twilio = config.twilio_api_url;
  urls.telnyx = config.telnyx_api_url;
  urls.plivo = config.plivo_api_url;
  urls.vapi = config.vapi_api_url;
  urls.retell = config.retell_api_url;
  urls.retell_room = config.retell_room_url;
  return urls;
}

}  // namespace

absl::Status WireAccounts(ServerState* s) {
  const ServerConfig& config = s->config;
  const std::string& internal_credential = s->internal_credential;
  if (HasRole(config, "accounts")) {
    s->accounts_service = std::make_unique<accounts::AccountsService>(
        s->accounts_store.get(), s->authenticator.get(), s->pool.get(), internal_credential);
  }
  return absl::OkStatus();
}

absl::Status WireRuns(ServerState* s) {
  const ServerConfig& config = s->config;
  const std::string& holder = s->holder;
  ServerState* const state_for_hooks = s;
  if (s->database) {
    s->runs_store =
        std::make_unique<runs::RunsStore>(s->database.get(), s->scenario_directory.get());
  }
  if (HasRole(config, "runs")) {
    // The run queue and what a run needs of the agents, calls and metrics services: in this
    // process when the owning role runs here or no address is given (with SQLite every role
    // shares the data dir), else over the owner's internal methods, so a runs process never
    // reads another service's tables.
    runs::RunWorkers::Options run_options;
    run_options.workers = config.run_workers;
    run_options.holder = holder;
    // The run queue is the agents service's too: it queues the runs.
    if (AskedOverGrpc(config, "agents", config.agents_addr)) {
      std::shared_ptr<grpc::Channel> agents =
          CreateInternalChannel(config.agents_addr, s->internal_credential);
      s->run_queue = agents::NewGrpcRunQueue(agents);
      s->run_agents = agents::NewGrpcRunAgents(agents);
    } else {
      s->run_queue = std::make_unique<runs::StoreRunQueue>(s->runs_store.get());
      s->run_agents = std::make_unique<agents::InProcessRunAgents>(
          s->agents_store.get(), s->scenarios_store.get(), s->integrations_store.get());
    }
    // A run that ended re-evaluates its workspace's alert rules when the calls role runs here
    // (else the calls role's periodic evaluation sees it).
    s->run_queue = std::make_unique<runs::NotifyingRunQueue>(
        std::move(s->run_queue), [s](int64_t workspace_id) {
          if (calls::AlertWorkers* alerts = s->alert_hook.load()) {
            alerts->MarkWorkspace(workspace_id);
          }
        });
    if (AskedOverGrpc(config, "calls", config.calls_addr)) {
      s->run_calls =
          calls::NewGrpcRunCalls(CreateInternalChannel(config.calls_addr, s->internal_credential));
    } else {
      // A run's call is ready for scoring at once (a recording is stored already).
      s->run_calls = std::make_unique<calls::InProcessRunCalls>(
          s->calls_store.get(), [state_for_hooks](const v1::Call&) {
            if (state_for_hooks->scoring_workers) state_for_hooks->scoring_workers->Notify();
          });
    }
    run_options.deps.metric_definitions = s->metric_definitions;
    run_options.deps.agents = s->run_agents.get();
    run_options.deps.calls = s->run_calls.get();
    run_options.deps.llm = s->llm.get();
    run_options.deps.recordings = s->recordings.get();
    run_options.deps.phone_lines = s->phone_lines.get();
    run_options.deps.call_in_timeout = config.phone_call_in_timeout;
    run_options.deps.takes_incoming_calls = HasRole(config, "edge");
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
    run_options.deps.stun_server = config.stun_server;
    for (absl::string_view turn :
         absl::StrSplit(config.turn_servers, ',', absl::SkipWhitespace())) {
      run_options.deps.turn_servers.emplace_back(absl::StripAsciiWhitespace(turn));
    }
    run_options.deps.provider_urls = ProviderUrlsOf(config);
    run_options.deps.ring_timeout = config.ring_timeout;
    run_options.deps.public_base_url = s->base_url;
    // An LLM-played caller on the websocket channel hears the agent the way transcription
    // does.
    run_options.deps.make_recognizer = RecognizerFactoryFor(config);
    s->run_workers = std::make_unique<runs::RunWorkers>(s->run_queue.get(), run_options);
  }
  return absl::OkStatus();
}

absl::Status WireAgents(ServerState* s) {
  const ServerConfig& config = s->config;
  ServerState* const state_for_hooks = s;
  if (HasRole(config, "agents")) {
    s->agents_service = std::make_unique<agents::AgentsService>(
        s->agents_store.get(), s->authenticator.get(), s->pool.get(), s->scenarios_store.get(),
        s->runs_store.get(), [state_for_hooks] {
          if (state_for_hooks->run_workers) state_for_hooks->run_workers->Notify();
        });
    // Metric links to a deleted agent or scenario go once the delete has committed.
    const bool metrics_remote = AskedOverGrpc(config, "metrics", config.metrics_addr);
    s->agents_service->set_deletion_listener(metrics_remote ? s->remote_metrics_listener.get()
                                                            : s->metrics_store.get());
    s->agents_service->set_integrations(s->integrations_store.get());
    // External agents are pulled from their platforms on create and PATCH.
    s->agents_service->set_platform_api_urls({config.vapi_api_url, config.retell_api_url});
    // Replays read the call from the calls role: its store here, its internal method there.
    agents::CallSource replay_calls;
    if (AskedOverGrpc(config, "calls", config.calls_addr)) {
      s->replay_calls =
          calls::NewGrpcRunCalls(CreateInternalChannel(config.calls_addr, s->internal_credential));
      replay_calls = [calls = s->replay_calls.get()](int64_t workspace_id, int64_t call_id) {
        return calls->Get(workspace_id, absl::StrCat(call_id));
      };
    } else {
      if (s->calls_store) {
        s->replay_calls = std::make_unique<calls::InProcessRunCalls>(s->calls_store.get(), nullptr);
      }
      replay_calls = [calls_store = s->calls_store.get()](int64_t workspace_id, int64_t call_id) {
        return calls_store->Get(workspace_id, absl::StrCat(call_id));
      };
    }
    s->agents_service->set_replay(std::move(replay_calls), s->llm.get());
    // A batch run's comparison reads its calls' figures from the calls role the same way.
    s->agents_service->set_comparison(s->replay_calls.get(), s->metric_definitions);
    s->agents_service->set_internal_credential(s->internal_credential);
  }
  return absl::OkStatus();
}

absl::Status WireScoring(ServerState* s) {
  const ServerConfig& config = s->config;
  const std::string& internal_credential = s->internal_credential;
  const std::string& holder = s->holder;
  if (HasRole(config, "scoring")) {
    // Leases are short and renewed by each worker pool's heartbeat while the work runs, so a
    // dead worker's call is taken over within a lease; attempts bound a call that keeps killing
    // its worker. The tokens carry this process's holder id: what its previous life held
    // (SIGKILL, OOM) is given back before the workers lease anything.
    // Leased from the calls role: directly when it runs here or when no address is given
    // (with SQLite all roles share the data dir), over gRPC otherwise.
    absl::StatusOr<int> released;
    if (!AskedOverGrpc(config, "calls", config.calls_addr)) {
      s->analysis_queue = std::make_unique<scoring::StoreAnalysisQueue>(
          s->calls_store.get(), config.analysis_lease, /*max_attempts=*/3, holder);
      s->transcription_queue = std::make_unique<scoring::StoreTranscriptionQueue>(
          s->calls_store.get(), config.transcription_lease, /*max_attempts=*/3, holder);
      released = s->calls_store->ReleaseLeasesOf(holder);
    } else {
      std::shared_ptr<grpc::Channel> calls =
          CreateInternalChannel(config.calls_addr, internal_credential);
      s->analysis_queue = std::make_unique<scoring::GrpcAnalysisQueue>(calls, config.analysis_lease,
                                                                       /*max_attempts=*/3, holder);
      s->transcription_queue = std::make_unique<scoring::GrpcTranscriptionQueue>(
          calls, config.transcription_lease, /*max_attempts=*/3, holder);
      released = scoring::ReleaseHolderLeasesOverGrpc(calls, holder);
    }
    if (!released.ok()) {
      // Not fatal: those leases expire on their own within a lease.
      LogWarn("could not give back the leases of this holder's previous life",
              {{"holder", holder}, {"error", released.status()}});
    } else if (*released > 0) {
      LogInfo("gave back the leases held before the restart",
              {{"holder", holder}, {"leases", *released}});
    }
    // Speech-to-text runs on its own workers: a recording takes about a tenth of its length
    // to transcribe, and the audio metrics of other calls must not wait behind it.
    scoring::TranscriptionWorkers::Options transcribers;
    transcribers.workers = config.stt_workers;
    transcribers.make_recognizer = RecognizerFactoryFor(config);
    transcribers.recordings = s->recordings.get();
    transcribers.scratch_dir = s->scratch_dir;
    transcribers.max_recording_bytes = config.max_recording_bytes;
    s->transcription_workers = std::make_unique<scoring::TranscriptionWorkers>(
        s->transcription_queue.get(), std::move(transcribers));
    scoring::ScoringWorkers::Options workers;
    workers.judges.sandbox = s->sandbox.get();
    workers.judges.llm = s->llm.get();
    workers.judges.llm_batch = config.llm_batch_size;
    workers.recordings = s->recordings.get();
    workers.scratch_dir = s->scratch_dir;
    workers.max_recording_bytes = config.max_recording_bytes;
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
  return absl::OkStatus();
}

absl::Status WireCalls(ServerState* s) {
  const ServerConfig& config = s->config;
  const std::string& internal_credential = s->internal_credential;
  const std::string& holder = s->holder;
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
    download.scratch_dir = s->scratch_dir;
    if (!HasRole(config, "scoring")) {
      // Downloads this holder's previous life held resume at once (with the scoring role here,
      // its release above gave them back already, before any worker started).
      absl::StatusOr<int> released = s->calls_store->ReleaseLeasesOf(holder);
      if (!released.ok()) {
        LogWarn("could not give back the leases of this holder's previous life",
                {{"holder", holder}, {"error", released.status()}});
      } else if (*released > 0) {
        LogInfo("gave back the leases held before the restart",
                {{"holder", holder}, {"leases", *released}});
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
      LogInfo("wrote the queryable rows of older calls", {{"calls", *backfilled}});
    }
    // Refunds a previous life settled and did not apply; not fatal: they stay owed and the
    // analysis queue's sweep applies them.
    absl::StatusOr<int> refunded = s->calls_store->ApplyOwedRefunds();
    if (!refunded.ok()) {
      LogWarn("could not apply owed refunds yet", {{"error", refunded.status()}});
    } else if (*refunded > 0) {
      LogInfo("applied owed refunds", {{"calls", *refunded}});
    }
    s->downloader = std::make_unique<calls::RecordingDownloader>(s->calls_store.get(), download);
    s->downloader->Start();
    calls::RecordingDownloader* downloader = s->downloader.get();
    runs::ScenarioDirectory* scenarios = s->scenario_directory.get();
    // The runs are served by the agents role: counted here when it runs here or no address is
    // given, else asked of it.
    calls::RunCounter runs_counter;
    if (AskedOverGrpc(config, "agents", config.agents_addr)) {
      runs_counter = calls::NewGrpcRunCounter(
          CreateInternalChannel(config.agents_addr, s->internal_credential));
    } else {
      runs_counter = [runs_store = s->runs_store.get()](const runs::RunCountQuery& query) {
        return runs_store->CountRuns(query);
      };
    }
    s->stats_store = std::make_unique<calls::StatsStore>(
        s->database.get(), s->call_agents,
        [scenarios](int64_t workspace_id, int64_t scenario_id) -> absl::StatusOr<int64_t> {
          const int64_t ids[] = {scenario_id};
          ASSIGN_OR_RETURN(auto agents, scenarios->ScenarioAgents(workspace_id, ids));
          auto it = agents.find(scenario_id);
          if (it == agents.end()) return NotFoundError(absl::StrCat("scenario ", scenario_id));
          return it->second.agent_id;
        },
        runs_counter);
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
    // Alert rules: evaluated here as this role's calls settle, sent from the outbox.
    calls::AlertsStore::Options alerts;
    alerts.credentials_key = s->credentials_key;
    alerts.url_guard.allowed_hosts = config.allow_private_hosts;
    alerts.agents = s->call_agents;
    alerts.scenarios = [scenarios](int64_t workspace_id,
                                   int64_t scenario_id) -> absl::StatusOr<int64_t> {
      const int64_t ids[] = {scenario_id};
      ASSIGN_OR_RETURN(auto agents, scenarios->ScenarioAgents(workspace_id, ids));
      auto it = agents.find(scenario_id);
      if (it == agents.end()) return NotFoundError(absl::StrCat("scenario ", scenario_id));
      return it->second.agent_id;
    };
    alerts.metrics = s->metric_definitions;
    alerts.runs = runs_counter;
    alerts.evaluation_interval = config.alert_evaluation_interval;
    alerts.retry_base = config.alert_retry_base;
    alerts.damping.min_spacing = config.alert_evaluation_interval;
    alerts.damping.quiet_period = config.alert_quiet_period;
    s->alerts_store = std::make_unique<calls::AlertsStore>(s->database.get(), std::move(alerts));
    calls::AlertWorkers::Options alert_workers;
    alert_workers.url_guard.allowed_hosts = config.allow_private_hosts;
    s->alert_workers =
        std::make_unique<calls::AlertWorkers>(s->alerts_store.get(), std::move(alert_workers));
    s->alert_workers->Start();
    s->alert_hook.store(s->alert_workers.get());
    s->calls_service->set_alerts(s->alerts_store.get());
  }
  return absl::OkStatus();
}

absl::Status WireMetrics(ServerState* s) {
  const ServerConfig& config = s->config;
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
    deps.internal_credential = s->internal_credential;
    deps.agent_briefs = [agents_store](int64_t workspace_id,
                                       int64_t agent_id) -> absl::StatusOr<metrics::AgentBrief> {
      ASSIGN_OR_RETURN(v1::Agent agent, agents_store->Get(workspace_id, agent_id));
      return metrics::AgentBrief{agent.name(), agent.instructions(),
                                 agent.opening_message().text()};
    };
    s->metrics_service = std::make_unique<metrics::MetricsService>(std::move(deps));
  }
  return absl::OkStatus();
}

absl::Status ServeGrpc(ServerState* s) {
  const ServerConfig& config = s->config;
  if (!RunsGrpcRoles(config)) return absl::OkStatus();
  {
    grpc::EnableDefaultHealthCheckService(true);
    // Reflection describes grpc.health.v1.Health from the generated pool: this links its file in.
    grpc::health::v1::HealthCheckRequest::descriptor();
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // v1alpha
    grpc::ServerBuilder builder;
    builder.SetOption(ServerReflectionV1());
    builder.AddListeningPort(config.grpc_addr, grpc::InsecureServerCredentials(), &s->grpc_port);
    builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_body_bytes * 2));
    // One list: the builder keeps only the last one it is given. Each call's request id and
    // outcome in the log (common/grpc_log.h), and counted by method and code
    // (common/grpc_metrics.h).
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(NewCallLogInterceptorFactory());
    interceptors.push_back(NewGrpcMetricsInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    // Each service from its method table (common/method_table.h).
    auto serve = [&](auto* service) -> absl::Status {
      if (service == nullptr) return absl::OkStatus();
      using Service = std::remove_pointer_t<decltype(service)>;
      RETURN_IF_ERROR(CheckMethodTable<Service>());
      auto adapter = std::make_unique<GrpcTableService<Service>>(service);
      builder.RegisterService(adapter.get());
      s->grpc_services.push_back(std::move(adapter));
      s->health_names.push_back(Service::Api::service_full_name());
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(serve(s->accounts_service.get()));
    RETURN_IF_ERROR(serve(s->agents_service.get()));
    RETURN_IF_ERROR(serve(s->calls_service.get()));
    RETURN_IF_ERROR(serve(s->metrics_service.get()));
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
  return absl::OkStatus();
}

absl::Status StartRunWorkers(ServerState* s) {
  const std::string& holder = s->holder;
  if (s->run_workers) {
    // What this holder's previous life held resumes at once rather than after its lease.
    absl::StatusOr<int> released = s->run_queue->ReleaseLeasesOf(holder);
    if (!released.ok()) {
      LogWarn("could not give back the run leases of this holder's previous life",
              {{"holder", holder}, {"error", released.status()}});
    } else if (*released > 0) {
      LogInfo("gave back the run leases held before the restart",
              {{"holder", holder}, {"leases", *released}});
    }
    s->run_workers->Start();
  }
  return absl::OkStatus();
}

}  // namespace calleval

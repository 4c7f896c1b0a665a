#pragma once

// The Agents service (agents, scenarios, runs): its handlers, one per RPC, listed in its method
// table (agents_methods.h), which serves them on gRPC and at the edge (common/method_table.h).

#include <functional>
#include <memory>
#include <string>

#include "absl/types/span.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.pb.h"
#include "common/llm_client.h"
#include "common/method_table.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/accounts/request_guard.h"
#include "services/agents/agents_store.h"
#include "services/agents/deletion_listener.h"
#include "services/agents/integrations_store.h"
#include "services/agents/platform_events.h"
#include "services/agents/platform_pull.h"
#include "services/agents/scenarios_store.h"
#include "services/runs/batch_report.h"
#include "services/runs/run_calls.h"
#include "services/runs/runs_store.h"

namespace calleval::agents {

// A call of the workspace as the calls service answers it (GetWorkspaceCall), for replays;
// NOT_FOUND when the workspace has no such call.
using CallSource =
    std::function<absl::StatusOr<v1::Call>(int64_t workspace_id, int64_t call_id)>;

class AgentsService {
 public:
  using Api = v1::Agents;
  static absl::Span<const MethodEntry<AgentsService>> Methods();

  // `scenarios` and `runs` may be null (their methods then answer 503). `on_run_queued` wakes
  // the runs role when it runs in this process.
  AgentsService(AgentsStore* store, accounts::Authenticator* authenticator, ThreadPool* pool,
                ScenariosStore* scenarios = nullptr, runs::RunsStore* runs = nullptr,
                std::function<void()> on_run_queued = nullptr)
      : store_(store),
        scenarios_(scenarios),
        runs_(runs),
        on_run_queued_(std::move(on_run_queued)),
        pool_(pool),
        authenticator_(authenticator),
        guard_(std::make_unique<accounts::ApiKeyGuard>(authenticator, /*internal_credential=*/"")) {}

  ThreadPool* pool() const { return pool_; }
  const RequestGuard& guard() const { return *guard_; }

  // Told after each agent or scenario this service deletes (the metrics store, which keeps
  // links to them). Set before the service is registered; may stay unset.
  void set_deletion_listener(DeletionListener* listener) { deletion_listener_ = listener; }
  // The workspace's integration settings (docs/api.md §5.8); while unset their methods answer
  // 503. Set before the service is registered.
  void set_integrations(IntegrationsStore* integrations) { integrations_ = integrations; }
  // Handles the voice platforms' webhooks (services/agents/platform_events.h); while unset
  // HandlePlatformEvent answers 503. Set before the service is registered.
  void set_platform_events(PlatformEvents* events) { platform_events_ = events; }
  // Where the voice platforms' APIs are (--vapi-api-url, --retell-api-url): an external agent's
  // instructions, opening message and language are pulled from there on create and PATCH
  // (platform_pull.h). While unset nothing is pulled. Set after set_integrations, before the
  // service is registered.
  void set_platform_api_urls(PlatformApiUrls urls) {
    platform_pull_ = std::make_unique<PlatformPull>(std::move(urls), store_, integrations_);
  }
  // What ReplayCall needs: the calls, from the calls service (its store in this process or its
  // internal GetWorkspaceCall), and the LLM provider for persona replays (null: 503
  // llm_unavailable). While `calls` is unset ReplayCall answers 503. Set before the service is
  // registered.
  void set_replay(CallSource calls, LlmClient* llm) {
    replay_calls_ = std::move(calls);
    llm_ = llm;
  }
  // What a batch run's comparison reads besides the runs: its runs' calls' figures from the
  // calls service (its store in this process or its internal GetCallFigures) and the metrics'
  // definitions. While `calls` is unset GetBatchRunComparison answers 503. Set before the
  // service is registered.
  void set_comparison(runs::RunCalls* calls, runs::ComparisonMetricDefinitions definitions) {
    comparison_calls_ = calls;
    comparison_definitions_ = std::move(definitions);
  }
  // Admits the internal methods below for calls carrying this credential
  // (common/internal_credential.h); while unset they refuse every call. Set before the service
  // is registered.
  void set_internal_credential(std::string credential) {
    guard_ = std::make_unique<accounts::ApiKeyGuard>(authenticator_, std::move(credential));
  }

  // The handlers: the caller's workspace is context.workspace_id.
  absl::Status CreateAgent(const RequestContext& context, const v1::AgentFields& request,
                           v1::Agent* response);
  absl::Status GetAgent(const RequestContext& context, const v1::GetAgentRequest& request,
                        v1::Agent* response);
  absl::Status UpdateAgent(const RequestContext& context, const v1::UpdateAgentRequest& request,
                           v1::Agent* response);
  absl::Status DeleteAgent(const RequestContext& context, const v1::DeleteAgentRequest& request,
                           google::protobuf::Empty* response);
  absl::Status ListAgents(const RequestContext& context, const v1::ListAgentsRequest& request,
                          v1::ListAgentsResponse* response);
  absl::Status ListLanguages(const RequestContext& context, const v1::ListLanguagesRequest& request,
                             v1::ListLanguagesResponse* response);
  absl::Status CreateScenario(const RequestContext& context, const v1::ScenarioFields& request,
                              v1::Scenario* response);
  absl::Status GetScenario(const RequestContext& context, const v1::GetScenarioRequest& request,
                           v1::Scenario* response);
  absl::Status UpdateScenario(const RequestContext& context,
                              const v1::UpdateScenarioRequest& request, v1::Scenario* response);
  absl::Status DeleteScenario(const RequestContext& context,
                              const v1::DeleteScenarioRequest& request,
                              google::protobuf::Empty* response);
  absl::Status ListScenarios(const RequestContext& context, const v1::ListScenariosRequest& request,
                             v1::ListScenariosResponse* response);
  // POST /api/v1/calls/{id}/scenario (services/agents/replay.h).
  absl::Status ReplayCall(const RequestContext& context, const v1::ReplayCallRequest& request,
                          v1::Scenario* response);
  absl::Status RunScenario(const RequestContext& context, const v1::RunScenarioRequest& request,
                           v1::Run* response);
  absl::Status GetRun(const RequestContext& context, const v1::GetRunRequest& request,
                      v1::Run* response);
  absl::Status ListRuns(const RequestContext& context, const v1::ListRunsRequest& request,
                        v1::ListRunsResponse* response);
  absl::Status CreateBatchRun(const RequestContext& context,
                              const v1::CreateBatchRunRequest& request, v1::BatchRun* response);
  absl::Status GetBatchRun(const RequestContext& context, const v1::GetBatchRunRequest& request,
                           v1::BatchRun* response);
  absl::Status GetBatchRunComparison(const RequestContext& context,
                                     const v1::GetBatchRunComparisonRequest& request,
                                     v1::BatchRunComparison* response);
  absl::Status ListIntegrations(const RequestContext& context,
                                const v1::ListIntegrationsRequest& request,
                                v1::ListIntegrationsResponse* response);
  absl::Status GetIntegration(const RequestContext& context, const v1::IntegrationRequest& request,
                              v1::Integration* response);
  absl::Status ReplaceIntegration(const RequestContext& context,
                                  const v1::WriteIntegrationRequest& request,
                                  v1::Integration* response);
  absl::Status UpdateIntegration(const RequestContext& context,
                                 const v1::WriteIntegrationRequest& request,
                                 v1::Integration* response);
  absl::Status DeleteIntegration(const RequestContext& context,
                                 const v1::IntegrationRequest& request,
                                 google::protobuf::Empty* response);

  // Internal: what the other services ask of the agents and scenarios tables when this role runs
  // in another process (agents_service_internal.cc). Each answers through the same in-process
  // directory a process with both roles uses.
  absl::Status ExistingAgents(const RequestContext& context, const v1::ExistingIdsRequest& request,
                              v1::ExistingIds* response);
  absl::Status ExistingScenarios(const RequestContext& context,
                                 const v1::ExistingIdsRequest& request, v1::ExistingIds* response);
  absl::Status GetDisabledMetrics(const RequestContext& context,
                                  const v1::GetDisabledMetricsRequest& request,
                                  v1::DisabledMetrics* response);
  absl::Status ReplaceDisabledMetrics(const RequestContext& context,
                                      const v1::ReplaceDisabledMetricsRequest& request,
                                      v1::DisabledMetrics* response);
  absl::Status GetScenarioAgents(const RequestContext& context,
                                 const v1::ExistingIdsRequest& request,
                                 v1::ScenarioAgents* response);
  absl::Status GetAgentPhone(const RequestContext& context, const v1::GetAgentPhoneRequest& request,
                             v1::AgentPhone* response);
  absl::Status GetCallAgent(const RequestContext& context, const v1::GetCallAgentRequest& request,
                            v1::CallAgent* response);
  absl::Status CountRuns(const RequestContext& context, const v1::CountRunsRequest& request,
                         v1::RunCountBuckets* response);
  // For runs workers in other processes: a run's scenario and agent, and the agent's web
  // channel with its credentials (services/runs/run_agents.h).
  absl::Status GetRunScenario(const RequestContext& context,
                              const v1::WorkspaceItemRequest& request, v1::Scenario* response);
  absl::Status GetRunAgent(const RequestContext& context, const v1::WorkspaceItemRequest& request,
                           v1::Agent* response);
  absl::Status GetAgentWebChannel(const RequestContext& context,
                                  const v1::WorkspaceItemRequest& request,
                                  v1::AgentWebChannel* response);
  // The workspace's settings for a carrier or platform with their secrets, for the runs workers.
  absl::Status GetRunIntegration(const RequestContext& context,
                                 const v1::RunIntegrationRequest& request,
                                 v1::RunIntegration* response);
  // The run queue for runs workers in other processes (services/runs/run_queue.h).
  absl::Status LeaseRun(const RequestContext& context, const v1::LeaseRunRequest& request,
                        v1::LeaseRunResponse* response);
  absl::Status RenewRunLease(const RequestContext& context, const v1::RenewRunLeaseRequest& request,
                             google::protobuf::Empty* response);
  absl::Status SetRunCall(const RequestContext& context, const v1::SetRunCallRequest& request,
                          google::protobuf::Empty* response);
  absl::Status FinishRun(const RequestContext& context, const v1::FinishRunRequest& request,
                         google::protobuf::Empty* response);
  absl::Status ReleaseRun(const RequestContext& context, const v1::ReleaseRunRequest& request,
                          google::protobuf::Empty* response);
  absl::Status ReleaseRunLeasesOf(const RequestContext& context,
                                  const v1::ReleaseRunLeasesOfRequest& request,
                                  v1::ReleaseRunLeasesOfResponse* response);
  // For an edge in another process: a voice platform's webhook, verified and stored.
  absl::Status HandlePlatformEvent(const RequestContext& context,
                                   const v1::PlatformEventRequest& request,
                                   v1::PlatformEventResponse* response);

 private:
  absl::StatusOr<ScenariosStore*> Scenarios();
  absl::StatusOr<runs::RunsStore*> Runs();
  absl::StatusOr<IntegrationsStore*> Integrations();

  AgentsStore* store_;
  ScenariosStore* scenarios_;
  runs::RunsStore* runs_;
  std::function<void()> on_run_queued_;
  ThreadPool* pool_;
  accounts::Authenticator* authenticator_;
  std::unique_ptr<accounts::ApiKeyGuard> guard_;
  DeletionListener* deletion_listener_ = nullptr;
  IntegrationsStore* integrations_ = nullptr;
  PlatformEvents* platform_events_ = nullptr;
  std::unique_ptr<PlatformPull> platform_pull_;
  CallSource replay_calls_;
  runs::RunCalls* comparison_calls_ = nullptr;
  runs::ComparisonMetricDefinitions comparison_definitions_;
  LlmClient* llm_ = nullptr;
};

}  // namespace calleval::agents

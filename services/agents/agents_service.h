#pragma once

// gRPC adapter of the Agents service: authenticates, resolves the workspace, calls the store.

#include <functional>

#include "calleval/v1/agents.grpc.pb.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/agents/agents_store.h"
#include "services/agents/deletion_listener.h"
#include "services/agents/scenarios_store.h"
#include "services/runs/runs_store.h"

namespace calleval::agents {

class AgentsService final : public v1::Agents::CallbackService {
 public:
  // `scenarios` and `runs` may be null (their methods then answer 503). `on_run_queued` wakes
  // the runs role when it runs in this process.
  AgentsService(AgentsStore* store, accounts::Authenticator* authenticator, ThreadPool* pool,
                ScenariosStore* scenarios = nullptr, runs::RunsStore* runs = nullptr,
                std::function<void()> on_run_queued = nullptr)
      : store_(store),
        scenarios_(scenarios),
        runs_(runs),
        on_run_queued_(std::move(on_run_queued)),
        authenticator_(authenticator),
        pool_(pool) {}

  // Told after each agent or scenario this service deletes (the metrics store, which keeps
  // links to them). Set before the service is registered; may stay unset.
  void set_deletion_listener(DeletionListener* listener) { deletion_listener_ = listener; }
  // Opens the internal methods below to calls carrying this credential
  // (common/internal_credential.h); while unset they refuse every call. Set before the service
  // is registered.
  void set_internal_credential(std::string credential) {
    internal_credential_ = std::move(credential);
  }

  grpc::ServerUnaryReactor* CreateAgent(grpc::CallbackServerContext* context,
                                        const v1::AgentFields* request,
                                        v1::Agent* response) override;
  grpc::ServerUnaryReactor* GetAgent(grpc::CallbackServerContext* context,
                                     const v1::GetAgentRequest* request,
                                     v1::Agent* response) override;
  grpc::ServerUnaryReactor* UpdateAgent(grpc::CallbackServerContext* context,
                                        const v1::UpdateAgentRequest* request,
                                        v1::Agent* response) override;
  grpc::ServerUnaryReactor* DeleteAgent(grpc::CallbackServerContext* context,
                                        const v1::DeleteAgentRequest* request,
                                        google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* ListAgents(grpc::CallbackServerContext* context,
                                       const v1::ListAgentsRequest* request,
                                       v1::ListAgentsResponse* response) override;
  grpc::ServerUnaryReactor* ListLanguages(grpc::CallbackServerContext* context,
                                          const v1::ListLanguagesRequest* request,
                                          v1::ListLanguagesResponse* response) override;
  grpc::ServerUnaryReactor* CreateScenario(grpc::CallbackServerContext* context,
                                   const v1::ScenarioFields* request, v1::Scenario* response) override;
  grpc::ServerUnaryReactor* GetScenario(grpc::CallbackServerContext* context,
                                   const v1::GetScenarioRequest* request, v1::Scenario* response) override;
  grpc::ServerUnaryReactor* UpdateScenario(grpc::CallbackServerContext* context,
                                   const v1::UpdateScenarioRequest* request, v1::Scenario* response) override;
  grpc::ServerUnaryReactor* DeleteScenario(grpc::CallbackServerContext* context,
                                   const v1::DeleteScenarioRequest* request, google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* ListScenarios(grpc::CallbackServerContext* context,
                                   const v1::ListScenariosRequest* request, v1::ListScenariosResponse* response) override;

  grpc::ServerUnaryReactor* RunScenario(grpc::CallbackServerContext* context,
                                   const v1::RunScenarioRequest* request, v1::Run* response) override;
  grpc::ServerUnaryReactor* GetRun(grpc::CallbackServerContext* context,
                                   const v1::GetRunRequest* request, v1::Run* response) override;
  grpc::ServerUnaryReactor* ListRuns(grpc::CallbackServerContext* context,
                                   const v1::ListRunsRequest* request, v1::ListRunsResponse* response) override;
  grpc::ServerUnaryReactor* CreateBatchRun(grpc::CallbackServerContext* context,
                                   const v1::CreateBatchRunRequest* request, v1::BatchRun* response) override;
  grpc::ServerUnaryReactor* GetBatchRun(grpc::CallbackServerContext* context,
                                   const v1::GetBatchRunRequest* request, v1::BatchRun* response) override;

  // Internal: what the metrics service and the runs store ask of the agents and scenarios
  // tables when the agents role runs in another process (services/agents/grpc_agents_clients.h).
  // Answered by the in-process directories over this service's stores
  // (agents_service_internal.cc).
  grpc::ServerUnaryReactor* ExistingAgents(grpc::CallbackServerContext* context,
                                           const v1::ExistingIdsRequest* request,
                                           v1::ExistingIds* response) override;
  grpc::ServerUnaryReactor* ExistingScenarios(grpc::CallbackServerContext* context,
                                              const v1::ExistingIdsRequest* request,
                                              v1::ExistingIds* response) override;
  grpc::ServerUnaryReactor* GetDisabledMetrics(grpc::CallbackServerContext* context,
                                               const v1::GetDisabledMetricsRequest* request,
                                               v1::DisabledMetrics* response) override;
  grpc::ServerUnaryReactor* ReplaceDisabledMetrics(
      grpc::CallbackServerContext* context, const v1::ReplaceDisabledMetricsRequest* request,
      v1::DisabledMetrics* response) override;
  grpc::ServerUnaryReactor* GetScenarioAgents(grpc::CallbackServerContext* context,
                                              const v1::ExistingIdsRequest* request,
                                              v1::ScenarioAgents* response) override;
  grpc::ServerUnaryReactor* GetAgentPhone(grpc::CallbackServerContext* context,
                                          const v1::GetAgentPhoneRequest* request,
                                          v1::AgentPhone* response) override;

  // The handlers, independent of the transport: `authorization` is the caller's
  // Authorization header. The gRPC methods above run them on the pool; the edge calls them
  // directly when the role runs in its process.
  absl::Status HandleCreateAgent(const std::string& authorization, const v1::AgentFields& request,
                                 v1::Agent* response);
  absl::Status HandleGetAgent(const std::string& authorization, const v1::GetAgentRequest& request,
                              v1::Agent* response);
  absl::Status HandleUpdateAgent(const std::string& authorization,
                                 const v1::UpdateAgentRequest& request, v1::Agent* response);
  absl::Status HandleDeleteAgent(const std::string& authorization,
                                 const v1::DeleteAgentRequest& request,
                                 google::protobuf::Empty* response);
  absl::Status HandleListAgents(const std::string& authorization,
                                const v1::ListAgentsRequest& request,
                                v1::ListAgentsResponse* response);
  absl::Status HandleListLanguages(const std::string& authorization,
                                   const v1::ListLanguagesRequest& request,
                                   v1::ListLanguagesResponse* response);
  absl::Status HandleCreateScenario(const std::string& authorization, const v1::ScenarioFields& request,
                            v1::Scenario* response);
  absl::Status HandleGetScenario(const std::string& authorization, const v1::GetScenarioRequest& request,
                            v1::Scenario* response);
  absl::Status HandleUpdateScenario(const std::string& authorization, const v1::UpdateScenarioRequest& request,
                            v1::Scenario* response);
  absl::Status HandleDeleteScenario(const std::string& authorization, const v1::DeleteScenarioRequest& request,
                            google::protobuf::Empty* response);
  absl::Status HandleListScenarios(const std::string& authorization, const v1::ListScenariosRequest& request,
                            v1::ListScenariosResponse* response);

  absl::Status HandleRunScenario(const std::string& authorization, const v1::RunScenarioRequest& request,
                            v1::Run* response);
  absl::Status HandleGetRun(const std::string& authorization, const v1::GetRunRequest& request,
                            v1::Run* response);
  absl::Status HandleListRuns(const std::string& authorization, const v1::ListRunsRequest& request,
                            v1::ListRunsResponse* response);
  absl::Status HandleCreateBatchRun(const std::string& authorization, const v1::CreateBatchRunRequest& request,
                            v1::BatchRun* response);
  absl::Status HandleGetBatchRun(const std::string& authorization, const v1::GetBatchRunRequest& request,
                            v1::BatchRun* response);

 private:
  absl::StatusOr<ScenariosStore*> Scenarios();
  absl::StatusOr<runs::RunsStore*> Runs();

  AgentsStore* store_;
  ScenariosStore* scenarios_;
  runs::RunsStore* runs_;
  std::function<void()> on_run_queued_;
  accounts::Authenticator* authenticator_;
  ThreadPool* pool_;
  DeletionListener* deletion_listener_ = nullptr;
  std::string internal_credential_;
};

}  // namespace calleval::agents

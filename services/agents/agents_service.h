#pragma once

// gRPC adapter of the Agents service: authenticates, resolves the workspace, calls the store.

#include "calleval/v1/agents.grpc.pb.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/agents/agents_store.h"
#include "services/agents/scenarios_store.h"

namespace calleval::agents {

class AgentsService final : public v1::Agents::CallbackService {
 public:
  // `scenarios` may be null (the scenario methods then answer 503).
  AgentsService(AgentsStore* store, accounts::Authenticator* authenticator, ThreadPool* pool,
                ScenariosStore* scenarios = nullptr)
      : store_(store), scenarios_(scenarios), authenticator_(authenticator), pool_(pool) {}

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

 private:
  absl::StatusOr<ScenariosStore*> Scenarios();

  AgentsStore* store_;
  ScenariosStore* scenarios_;
  accounts::Authenticator* authenticator_;
  ThreadPool* pool_;
};

}  // namespace calleval::agents

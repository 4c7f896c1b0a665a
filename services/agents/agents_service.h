#pragma once

// gRPC adapter of the Agents service: authenticates, resolves the workspace, calls the store.

#include "calleval/v1/agents.grpc.pb.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/agents/agents_store.h"

namespace calleval::agents {

class AgentsService final : public v1::Agents::CallbackService {
 public:
  AgentsService(AgentsStore* store, accounts::Authenticator* authenticator, ThreadPool* pool)
      : store_(store), authenticator_(authenticator), pool_(pool) {}

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

 private:
  AgentsStore* store_;
  accounts::Authenticator* authenticator_;
  ThreadPool* pool_;
};

}  // namespace calleval::agents

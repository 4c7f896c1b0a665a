#include "services/agents/agents_service.h"

#include <iostream>
#include <optional>

#include "common/status_macros.h"
#include "common/unary.h"
#include "services/agents/agents_methods.h"

namespace calleval::agents {
namespace {

using accounts::ClientIdOf;
constexpr auto Workspace = accounts::RequestWorkspace;

// The delete has committed and is the client's answer whatever the listener says: a notice
// that fails leaves links that readers ignore (services/agents/deletion_listener.h).
void ReportFailedNotice(const absl::Status& status, absl::string_view what, int64_t id) {
  if (status.ok()) return;
  std::cerr << "calleval: " << what << " " << id
            << " is deleted, but telling the metrics service failed: " << status << "\n";
}

}  // namespace

absl::Status AgentsService::HandleCreateAgent(const std::string& auth,
                                              const v1::AgentFields& request, v1::Agent* response) {
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, store_->Create(workspace_id, request));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleGetAgent(const std::string& auth,
                                           const v1::GetAgentRequest& request,
                                           v1::Agent* response) {
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, store_->Get(workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleUpdateAgent(const std::string& auth,
                                              const v1::UpdateAgentRequest& request,
                                              v1::Agent* response) {
  // The query's client_id targets the workspace; one in the body is taken when the query has
  // none.
  std::optional<int64_t> client_id = ClientIdOf(request);
  if (!client_id) client_id = ClientIdOf(request.agent());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, client_id));
  ASSIGN_OR_RETURN(*response, store_->Update(workspace_id, request.id(), request.agent()));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleDeleteAgent(const std::string& auth,
                                              const v1::DeleteAgentRequest& request,
                                              google::protobuf::Empty* response) {
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  RETURN_IF_ERROR(store_->Delete(workspace_id, request.id()));
  if (deletion_listener_ != nullptr) {
    ReportFailedNotice(deletion_listener_->AgentDeleted(workspace_id, request.id()), "agent",
                       request.id());
  }
  return absl::OkStatus();
}

absl::Status AgentsService::HandleListAgents(const std::string& auth,
                                             const v1::ListAgentsRequest& request,
                                             v1::ListAgentsResponse* response) {
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  const int page = request.has_page() ? request.page() : 1;
  const int per_page = request.has_per_page() ? request.per_page() : kDefaultPerPage;
  ASSIGN_OR_RETURN(*response, store_->List(workspace_id, page, per_page));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleListLanguages(const std::string& auth,
                                                const v1::ListLanguagesRequest& request,
                                                v1::ListLanguagesResponse* response) {
  RETURN_IF_ERROR(authenticator_->Authenticate(auth).status());
  ASSIGN_OR_RETURN(*response, store_->ListLanguages());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AgentsService::CreateAgent(grpc::CallbackServerContext* context,
                                                     const v1::AgentFields* request,
                                                     v1::Agent* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "CreateAgent"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleCreateAgent(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::GetAgent(grpc::CallbackServerContext* context,
                                                  const v1::GetAgentRequest* request,
                                                  v1::Agent* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "GetAgent"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleGetAgent(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::UpdateAgent(grpc::CallbackServerContext* context,
                                                     const v1::UpdateAgentRequest* request,
                                                     v1::Agent* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "UpdateAgent"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleUpdateAgent(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::DeleteAgent(grpc::CallbackServerContext* context,
                                                     const v1::DeleteAgentRequest* request,
                                                     google::protobuf::Empty* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "DeleteAgent"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleDeleteAgent(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::ListAgents(grpc::CallbackServerContext* context,
                                                    const v1::ListAgentsRequest* request,
                                                    v1::ListAgentsResponse* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "ListAgents"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleListAgents(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::ListLanguages(grpc::CallbackServerContext* context,
                                                       const v1::ListLanguagesRequest* request,
                                                       v1::ListLanguagesResponse* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "ListLanguages"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleListLanguages(auth, *request, response);
                    });
}

absl::StatusOr<ScenariosStore*> AgentsService::Scenarios() {
  if (scenarios_ == nullptr) return absl::UnavailableError("scenarios are not served here");
  return scenarios_;
}

absl::Status AgentsService::HandleCreateScenario(const std::string& auth,
                                                 const v1::ScenarioFields& request,
                                                 v1::Scenario* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, scenarios->Create(workspace_id, request));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleGetScenario(const std::string& auth,
                                              const v1::GetScenarioRequest& request,
                                              v1::Scenario* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, scenarios->Get(workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleUpdateScenario(const std::string& auth,
                                                 const v1::UpdateScenarioRequest& request,
                                                 v1::Scenario* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  std::optional<int64_t> client_id = ClientIdOf(request);
  if (!client_id) client_id = ClientIdOf(request.scenario());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, client_id));
  ASSIGN_OR_RETURN(*response, scenarios->Update(workspace_id, request.id(), request.scenario()));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleDeleteScenario(const std::string& auth,
                                                 const v1::DeleteScenarioRequest& request,
                                                 google::protobuf::Empty* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  RETURN_IF_ERROR(scenarios->Delete(workspace_id, request.id()));
  if (deletion_listener_ != nullptr) {
    ReportFailedNotice(deletion_listener_->ScenarioDeleted(workspace_id, request.id()), "scenario",
                       request.id());
  }
  return absl::OkStatus();
}

absl::Status AgentsService::HandleListScenarios(const std::string& auth,
                                                const v1::ListScenariosRequest& request,
                                                v1::ListScenariosResponse* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, scenarios->List(workspace_id, request));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AgentsService::CreateScenario(grpc::CallbackServerContext* context,
                                                const v1::ScenarioFields* request, v1::Scenario* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "CreateScenario"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleCreateScenario(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::GetScenario(grpc::CallbackServerContext* context,
                                                const v1::GetScenarioRequest* request, v1::Scenario* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "GetScenario"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleGetScenario(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::UpdateScenario(grpc::CallbackServerContext* context,
                                                const v1::UpdateScenarioRequest* request, v1::Scenario* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "UpdateScenario"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleUpdateScenario(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::DeleteScenario(grpc::CallbackServerContext* context,
                                                const v1::DeleteScenarioRequest* request, google::protobuf::Empty* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "DeleteScenario"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleDeleteScenario(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::ListScenarios(grpc::CallbackServerContext* context,
                                                const v1::ListScenariosRequest* request, v1::ListScenariosResponse* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "ListScenarios"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleListScenarios(auth, *request, response);
                    });
}

absl::StatusOr<runs::RunsStore*> AgentsService::Runs() {
  if (runs_ == nullptr) return absl::UnavailableError("runs are not served here");
  return runs_;
}

absl::Status AgentsService::HandleRunScenario(const std::string& auth,
                                              const v1::RunScenarioRequest& request,
                                              v1::Run* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  std::optional<std::string> channel;
  if (request.has_channel()) channel = request.channel();
  ASSIGN_OR_RETURN(*response, runs->CreateRun(workspace_id, request.id(), channel));
  if (on_run_queued_) on_run_queued_();
  return absl::OkStatus();
}

absl::Status AgentsService::HandleGetRun(const std::string& auth, const v1::GetRunRequest& request,
                                         v1::Run* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, runs->GetRun(workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleListRuns(const std::string& auth,
                                           const v1::ListRunsRequest& request,
                                           v1::ListRunsResponse* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, runs->ListRuns(workspace_id, request));
  return absl::OkStatus();
}

absl::Status AgentsService::HandleCreateBatchRun(const std::string& auth,
                                                 const v1::CreateBatchRunRequest& request,
                                                 v1::BatchRun* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, runs->CreateBatch(workspace_id, request));
  if (on_run_queued_) on_run_queued_();
  return absl::OkStatus();
}

absl::Status AgentsService::HandleGetBatchRun(const std::string& auth,
                                              const v1::GetBatchRunRequest& request,
                                              v1::BatchRun* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  ASSIGN_OR_RETURN(int64_t workspace_id, Workspace(authenticator_, auth, ClientIdOf(request)));
  ASSIGN_OR_RETURN(*response, runs->GetBatch(workspace_id, request.id()));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AgentsService::RunScenario(grpc::CallbackServerContext* context,
                                                const v1::RunScenarioRequest* request, v1::Run* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "RunScenario"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleRunScenario(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::GetRun(grpc::CallbackServerContext* context,
                                                const v1::GetRunRequest* request, v1::Run* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "GetRun"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleGetRun(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::ListRuns(grpc::CallbackServerContext* context,
                                                const v1::ListRunsRequest* request, v1::ListRunsResponse* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "ListRuns"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleListRuns(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::CreateBatchRun(grpc::CallbackServerContext* context,
                                                const v1::CreateBatchRunRequest* request, v1::BatchRun* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "CreateBatchRun"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleCreateBatchRun(auth, *request, response);
                    });
}

grpc::ServerUnaryReactor* AgentsService::GetBatchRun(grpc::CallbackServerContext* context,
                                                const v1::GetBatchRunRequest* request, v1::BatchRun* response) {
  return RunUnaryAs(context, ExecutionOf(kAgentsMethods, "GetBatchRun"), pool_,
                    [this, auth = AuthorizationOf(context), request, response] {
                      return HandleGetBatchRun(auth, *request, response);
                    });
}

}  // namespace calleval::agents

#include "services/accounts/accounts_service.h"

#include "common/status_macros.h"
#include "common/unary.h"

namespace calleval::accounts {

absl::Status AccountsService::HandleGetCurrentWorkspace(
    const std::string& authorization, const v1::GetCurrentWorkspaceRequest& request,
    v1::Workspace* response) {
  ASSIGN_OR_RETURN(Principal principal, authenticator_->Authenticate(authorization));
  std::optional<int64_t> client_id;
  if (request.has_client_id()) client_id = request.client_id();
  ASSIGN_OR_RETURN(int64_t workspace_id, ResolveWorkspace(principal, client_id));
  ASSIGN_OR_RETURN(Workspace ws, store_->GetWorkspace(workspace_id));
  response->set_id(ws.id);
  response->set_name(ws.name);
  response->set_credit_balance(ws.credit_balance);
  return absl::OkStatus();
}

absl::Status AccountsService::HandleAuthenticate(const std::string& authorization,
                                                 const v1::AuthenticateRequest& request,
                                                 v1::Principal* response) {
  ASSIGN_OR_RETURN(Principal principal, store_->Authenticate(request.api_key()));
  response->set_key_id(principal.key_id);
  response->set_workspace_id(principal.workspace_id);
  for (int64_t id : principal.granted_workspace_ids) response->add_granted_workspace_ids(id);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountsService::GetCurrentWorkspace(
    grpc::CallbackServerContext* context, const v1::GetCurrentWorkspaceRequest* request,
    v1::Workspace* response) {
  return RunUnaryInline(context, [this, auth = AuthorizationOf(context), request, response] {
    return HandleGetCurrentWorkspace(auth, *request, response);
  });
}

grpc::ServerUnaryReactor* AccountsService::Authenticate(grpc::CallbackServerContext* context,
                                                        const v1::AuthenticateRequest* request,
                                                        v1::Principal* response) {
  return RunInternalUnaryInline(context, internal_credential_,
                                [this, auth = AuthorizationOf(context), request, response] {
                                  return HandleAuthenticate(auth, *request, response);
                                });
}

}  // namespace calleval::accounts

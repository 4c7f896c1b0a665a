#include "services/accounts/accounts_service.h"

#include "common/status_macros.h"
#include "services/accounts/accounts_methods.h"

namespace calleval::accounts {

absl::Span<const MethodEntry<AccountsService>> AccountsService::Methods() {
  return kAccountsMethods;
}

absl::Status AccountsService::GetCurrentWorkspace(const RequestContext& context,
                                                  const v1::GetCurrentWorkspaceRequest& request,
                                                  v1::Workspace* response) {
  ASSIGN_OR_RETURN(Workspace ws, store_->GetWorkspace(context.workspace_id));
  response->set_id(ws.id);
  response->set_name(ws.name);
  response->set_credit_balance(ws.credit_balance);
  return absl::OkStatus();
}

absl::Status AccountsService::ListWorkspaces(const RequestContext& context,
                                             const v1::ListWorkspacesRequest& request,
                                             v1::ListWorkspacesResponse* response) {
  ASSIGN_OR_RETURN(std::vector<Workspace> workspaces,
                   store_->GetWorkspaces(
                       WorkspacesOfKey(context.key_workspace_id, context.granted_workspace_ids)));
  for (const Workspace& ws : workspaces) {
    v1::Workspace* out = response->add_data();
    out->set_id(ws.id);
    out->set_name(ws.name);
    out->set_credit_balance(ws.credit_balance);
  }
  return absl::OkStatus();
}

absl::Status AccountsService::Authenticate(const RequestContext& context,
                                           const v1::AuthenticateRequest& request,
                                           v1::Principal* response) {
  ASSIGN_OR_RETURN(Principal principal, store_->Authenticate(request.api_key()));
  response->set_key_id(principal.key_id);
  response->set_workspace_id(principal.workspace_id);
  for (int64_t id : principal.granted_workspace_ids) response->add_granted_workspace_ids(id);
  return absl::OkStatus();
}

absl::Status AccountsService::ReserveCredits(const RequestContext& context,
                                             const v1::ReserveCreditsRequest& request,
                                             v1::ReserveCreditsResponse* response) {
  std::vector<CreditCharge> charges;
  charges.reserve(request.charges_size());
  for (const auto& c : request.charges()) charges.push_back({c.metric_id(), c.cost()});
  ASSIGN_OR_RETURN(Reservation r,
                   store_->Reserve(request.workspace_id(), request.call_id(), charges));
  response->set_reserved(r.reserved);
  response->set_cost(r.cost);
  response->set_balance(r.balance);
  return absl::OkStatus();
}

absl::Status AccountsService::RefundCredits(const RequestContext& context,
                                            const v1::RefundCreditsRequest& request,
                                            v1::RefundCreditsResponse* response) {
  ASSIGN_OR_RETURN(int64_t refunded,
                   store_->Refund(request.workspace_id(), request.call_id(),
                                  {request.metric_ids().begin(), request.metric_ids().end()}));
  response->set_refunded(refunded);
  return absl::OkStatus();
}

}  // namespace calleval::accounts

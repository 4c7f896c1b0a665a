#pragma once

// The Accounts service: its handlers, one per RPC, listed in its method table
// (accounts_methods.h), which serves them on gRPC and at the edge (common/method_table.h).

#include <string>

#include "absl/types/span.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "common/method_table.h"
#include "common/thread_pool.h"
#include "services/accounts/accounts_store.h"
#include "services/accounts/authenticator.h"
#include "services/accounts/request_guard.h"

namespace calleval::accounts {

class AccountsService {
 public:
  using Api = v1::Accounts;
  static absl::Span<const MethodEntry<AccountsService>> Methods();

  // `internal_credential` admits Authenticate, ReserveCredits and RefundCredits
  // (common/internal_credential.h).
  AccountsService(AccountsStore* store, Authenticator* authenticator, ThreadPool* pool,
                  std::string internal_credential)
      : store_(store), pool_(pool), guard_(authenticator, std::move(internal_credential)) {}

  ThreadPool* pool() const { return pool_; }
  const RequestGuard& guard() const { return guard_; }

  absl::Status GetCurrentWorkspace(const RequestContext& context,
                                   const v1::GetCurrentWorkspaceRequest& request,
                                   v1::Workspace* response);
  absl::Status ListWorkspaces(const RequestContext& context,
                              const v1::ListWorkspacesRequest& request,
                              v1::ListWorkspacesResponse* response);
  // Internal: the remote authenticator of roles in other processes (authenticator.h).
  absl::Status Authenticate(const RequestContext& context, const v1::AuthenticateRequest& request,
                            v1::Principal* response);
  // Internal: the credit ledger for the calls role in another process (services/calls/credits.h).
  absl::Status ReserveCredits(const RequestContext& context,
                              const v1::ReserveCreditsRequest& request,
                              v1::ReserveCreditsResponse* response);
  absl::Status RefundCredits(const RequestContext& context, const v1::RefundCreditsRequest& request,
                             v1::RefundCreditsResponse* response);

 private:
  AccountsStore* store_;
  ThreadPool* pool_;
  const ApiKeyGuard guard_;
};

}  // namespace calleval::accounts

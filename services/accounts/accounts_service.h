#pragma once

// gRPC adapter of the Accounts service: converts messages and statuses, nothing more.

#include <string>

#include "calleval/v1/accounts.grpc.pb.h"
#include "common/thread_pool.h"
#include "services/accounts/accounts_store.h"
#include "services/accounts/authenticator.h"

namespace calleval::accounts {

class AccountsService final : public v1::Accounts::CallbackService {
 public:
  // `internal_credential` opens Authenticate, ReserveCredits and RefundCredits
  // (common/internal_credential.h).
  AccountsService(AccountsStore* store, Authenticator* authenticator, ThreadPool* pool,
                  std::string internal_credential)
      : store_(store),
        authenticator_(authenticator),
        pool_(pool),
        internal_credential_(std::move(internal_credential)) {}

  grpc::ServerUnaryReactor* GetCurrentWorkspace(grpc::CallbackServerContext* context,
                                                const v1::GetCurrentWorkspaceRequest* request,
                                                v1::Workspace* response) override;
  grpc::ServerUnaryReactor* Authenticate(grpc::CallbackServerContext* context,
                                         const v1::AuthenticateRequest* request,
                                         v1::Principal* response) override;
  // The credit ledger for the calls role in another process (services/calls/credits.h).
  grpc::ServerUnaryReactor* ReserveCredits(grpc::CallbackServerContext* context,
                                           const v1::ReserveCreditsRequest* request,
                                           v1::ReserveCreditsResponse* response) override;
  grpc::ServerUnaryReactor* RefundCredits(grpc::CallbackServerContext* context,
                                          const v1::RefundCreditsRequest* request,
                                          v1::RefundCreditsResponse* response) override;

  // The handlers, independent of the transport (see calls_service.h).
  absl::Status HandleGetCurrentWorkspace(const std::string& authorization,
                                         const v1::GetCurrentWorkspaceRequest& request,
                                         v1::Workspace* response);
  absl::Status HandleAuthenticate(const std::string& authorization,
                                  const v1::AuthenticateRequest& request, v1::Principal* response);
  absl::Status HandleReserveCredits(const std::string& authorization,
                                    const v1::ReserveCreditsRequest& request,
                                    v1::ReserveCreditsResponse* response);
  absl::Status HandleRefundCredits(const std::string& authorization,
                                   const v1::RefundCreditsRequest& request,
                                   v1::RefundCreditsResponse* response);

 private:
  AccountsStore* store_;
  Authenticator* authenticator_;
  ThreadPool* pool_;
  const std::string internal_credential_;
};

}  // namespace calleval::accounts

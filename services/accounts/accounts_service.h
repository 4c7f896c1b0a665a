#pragma once

// gRPC adapter of the Accounts service: converts messages and statuses, nothing more.

#include "calleval/v1/accounts.grpc.pb.h"
#include "common/thread_pool.h"
#include "services/accounts/accounts_store.h"
#include "services/accounts/authenticator.h"

namespace calleval::accounts {

class AccountsService final : public v1::Accounts::CallbackService {
 public:
  AccountsService(AccountsStore* store, Authenticator* authenticator, ThreadPool* pool)
      : store_(store), authenticator_(authenticator), pool_(pool) {}

  grpc::ServerUnaryReactor* GetCurrentWorkspace(grpc::CallbackServerContext* context,
                                                const v1::GetCurrentWorkspaceRequest* request,
                                                v1::Workspace* response) override;
  grpc::ServerUnaryReactor* Authenticate(grpc::CallbackServerContext* context,
                                         const v1::AuthenticateRequest* request,
                                         v1::Principal* response) override;

  // The handlers, independent of the transport (see calls_service.h).
  absl::Status HandleGetCurrentWorkspace(const std::string& authorization,
                                         const v1::GetCurrentWorkspaceRequest& request,
                                         v1::Workspace* response);
  absl::Status HandleAuthenticate(const std::string& authorization,
                                  const v1::AuthenticateRequest& request, v1::Principal* response);

 private:
  AccountsStore* store_;
  Authenticator* authenticator_;
  ThreadPool* pool_;
};

}  // namespace calleval::accounts

#pragma once

// The RequestGuard of every service (common/method_table.h): an API key, resolved to the
// workspace the request acts on, or the installation's internal credential. The one place keys
// and credentials are checked, for gRPC and for the edge alike.

#include <string>

#include "common/method_table.h"
#include "services/accounts/authenticator.h"

namespace calleval::accounts {

class ApiKeyGuard final : public RequestGuard {
 public:
  // `internal_credential` admits Access::kInternal; a service without internal methods passes
  // none, and then admits no internal caller.
  ApiKeyGuard(Authenticator* authenticator, std::string internal_credential)
      : authenticator_(authenticator), internal_credential_(std::move(internal_credential)) {}

  absl::StatusOr<RequestContext> Admit(Access access, const Caller& caller,
                                       std::optional<int64_t> client_id) const override;

 private:
  Authenticator* authenticator_;
  const std::string internal_credential_;
};

}  // namespace calleval::accounts

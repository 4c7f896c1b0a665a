#include "services/accounts/request_guard.h"

#include "common/errors.h"
#include "common/internal_credential.h"
#include "common/status_macros.h"

namespace calleval::accounts {

absl::StatusOr<RequestContext> ApiKeyGuard::Admit(Access access, const Caller& caller,
                                                  std::optional<int64_t> client_id) const {
  RequestContext context;
  switch (access) {
    case Access::kWorkspace: {
      ASSIGN_OR_RETURN(Principal principal, authenticator_->Authenticate(caller.authorization));
      ASSIGN_OR_RETURN(context.workspace_id, ResolveWorkspace(principal, client_id));
      context.key_workspace_id = principal.workspace_id;
      context.granted_workspace_ids = std::move(principal.granted_workspace_ids);
      return context;
    }
    case Access::kInternal:
      if (internal_credential_.empty()) {
        return UnauthenticatedError("internal method: this service admits no internal caller");
      }
      RETURN_IF_ERROR(CheckInternalCredential(caller.internal_credential, internal_credential_));
      return context;
  }
  return UnauthenticatedError("unknown access rule");
}

}  // namespace calleval::accounts

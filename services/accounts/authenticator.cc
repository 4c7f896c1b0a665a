#include "services/accounts/authenticator.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace calleval::accounts {
namespace {

// Bounds the cache: past this many keys it is simply cleared (keys are few in practice; this
// only stops a flood of distinct valid keys from growing memory).
constexpr size_t kMaxCachedKeys = 10000;

}  // namespace

absl::StatusOr<absl::string_view> BearerToken(absl::string_view authorization) {
  if (authorization.empty()) {
    return UnauthenticatedError("missing Authorization header (expected: Bearer <API key>)");
  }
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return UnauthenticatedError("Authorization header must be: Bearer <API key>");
  }
  return absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
}

absl::StatusOr<Principal> CachingAuthenticator::Authenticate(absl::string_view authorization) {
  ASSIGN_OR_RETURN(absl::string_view key, BearerToken(authorization));
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.expires > now) return it->second.principal;
  }
  ASSIGN_OR_RETURN(Principal principal, resolver_(key));
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= kMaxCachedKeys) cache_.clear();
  cache_[std::string(key)] = Entry{principal, now + ttl_};
  return principal;
}

std::unique_ptr<Authenticator> NewStoreAuthenticator(AccountsStore* store, absl::Duration ttl) {
  return std::make_unique<CachingAuthenticator>(
      [store](absl::string_view key) { return store->Authenticate(key); }, ttl);
}

std::unique_ptr<Authenticator> NewGrpcAuthenticator(std::shared_ptr<grpc::Channel> accounts,
                                                    absl::Duration ttl) {
  std::shared_ptr<v1::Accounts::Stub> stub = v1::Accounts::NewStub(accounts);
  return std::make_unique<CachingAuthenticator>(
      [stub](absl::string_view key) -> absl::StatusOr<Principal> {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        v1::AuthenticateRequest request;
        request.set_api_key(std::string(key));
        v1::Principal reply;
        RETURN_IF_ERROR(FromGrpcStatus(stub->Authenticate(&context, request, &reply)));
        Principal principal{
            reply.key_id(),
            reply.workspace_id(),
            {reply.granted_workspace_ids().begin(), reply.granted_workspace_ids().end()}};
        return principal;
      },
      ttl);
}

}  // namespace calleval::accounts

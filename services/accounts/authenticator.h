#pragma once

// Resolves the Authorization header of a request to a Principal. Every service authenticates
// the calls it receives (so grpcurl with a bearer key works against any role), through its
// ApiKeyGuard (request_guard.h); the edge only forwards the header.

#include <grpcpp/channel.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/accounts/accounts_store.h"

namespace calleval::accounts {

class Authenticator {
 public:
  virtual ~Authenticator() = default;
  // `authorization` is the raw header value ("Bearer cev_..."). Missing or unknown: 401.
  virtual absl::StatusOr<Principal> Authenticate(absl::string_view authorization) = 0;
};

// The key from "Bearer <key>" (scheme case-insensitive), or 401.
absl::StatusOr<absl::string_view> BearerToken(absl::string_view authorization);

// Authenticates against a resolver (the store in-process, or the Accounts service remotely),
// remembering successful answers for `ttl` so the hot path does not touch the database. A
// revoked key or a new grant is noticed within `ttl`.
class CachingAuthenticator : public Authenticator {
 public:
  using Resolver = std::function<absl::StatusOr<Principal>(absl::string_view api_key)>;
  CachingAuthenticator(Resolver resolver, absl::Duration ttl)
      : resolver_(std::move(resolver)), ttl_(ttl) {}

  absl::StatusOr<Principal> Authenticate(absl::string_view authorization) override;

 private:
  struct Entry {
    Principal principal;
    absl::Time expires;
  };
  Resolver resolver_;
  absl::Duration ttl_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> cache_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<Authenticator> NewStoreAuthenticator(AccountsStore* store,
                                                     absl::Duration ttl = absl::Seconds(5));
std::unique_ptr<Authenticator> NewGrpcAuthenticator(std::shared_ptr<grpc::Channel> accounts,
                                                    absl::Duration ttl = absl::Seconds(5));

}  // namespace calleval::accounts

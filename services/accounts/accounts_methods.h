#pragma once

// The Accounts service's methods: each RPC once, with where it runs and who may call it
// (common/method_table.h). gRPC and the edge both serve this table.

#include "common/method_table.h"
#include "services/accounts/accounts_service.h"

namespace calleval::accounts {

inline constexpr MethodEntry<AccountsService> kAccountsMethods[] = {
    Unary<&AccountsService::GetCurrentWorkspace>("GetCurrentWorkspace", Execution::kPointRead,
                                                 Access::kWorkspace),
    // A point read per workspace of the key: one, or a few with grants.
    Unary<&AccountsService::ListWorkspaces>("ListWorkspaces", Execution::kPointRead,
                                            Access::kWorkspace),
    // Keys are cached by the caller's authenticator: a point read when it asks.
    Unary<&AccountsService::Authenticate>("Authenticate", Execution::kPointRead, Access::kInternal),
    // Ledger writes wait for a commit: on the pool, never on gRPC's threads.
    Unary<&AccountsService::ReserveCredits>("ReserveCredits", Execution::kPool, Access::kInternal),
    Unary<&AccountsService::RefundCredits>("RefundCredits", Execution::kPool, Access::kInternal),
};

}  // namespace calleval::accounts

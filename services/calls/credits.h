#pragma once

// What the calls store needs of the credit ledger, which belongs to accounts: a reservation of a
// call's planned metrics when it is first leased, and refunds of what it was charged for
// metrics that did not complete. The ledger lives in accounts' tables; calls reaches it only
// through this interface: over the accounts store when accounts runs in the same process
// (NewStoreCredits), over the Accounts service's internal methods otherwise (NewGrpcCredits).
//
// Both operations are idempotent per (call, metric): a retry after a lost answer or a crash
// charges and refunds nothing twice, which is what lets the calls store call them outside its
// own transactions (docs/architecture.md, "Credits across services").

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "services/accounts/accounts_store.h"

namespace calleval::calls {

class Credits {
 public:
  struct Charge {
    int64_t metric_id = 0;
    int64_t cost = 0;
  };
  struct Reservation {
    bool reserved = false;  // false: the balance is short and nothing was charged
    int64_t cost = 0;       // charged by this request (0 when a retry found it charged)
    int64_t balance = 0;    // the workspace's balance afterwards
  };

  virtual ~Credits() = default;
  // Charges every metric of the call, all or nothing.
  virtual absl::StatusOr<Reservation> Reserve(int64_t workspace_id, int64_t call_id,
                                              const std::vector<Charge>& charges) = 0;
  // Gives back what `metric_ids` of the call were charged, each at most once.
  virtual absl::Status Refund(int64_t workspace_id, int64_t call_id,
                              const std::vector<int64_t>& metric_ids) = 0;
};

// The ledger through the accounts store of this process.
std::unique_ptr<Credits> NewStoreCredits(accounts::AccountsStore* accounts);
// The ledger through the Accounts service's internal ReserveCredits and RefundCredits, on a
// channel that carries the installation's internal credential (CreateInternalChannel).
std::unique_ptr<Credits> NewGrpcCredits(std::shared_ptr<grpc::Channel> accounts);

}  // namespace calleval::calls

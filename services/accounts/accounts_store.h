#pragma once

// Workspaces, API keys, grants and credit balances (docs/api.md §1, §9, §10).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/database.h"

namespace calleval::accounts {

struct Workspace {
  int64_t id = 0;
  std::string name;
  int64_t credit_balance = 0;
};

// Who is calling: the key, its workspace, and the other workspaces granted to it.
struct Principal {
  int64_t key_id = 0;
  int64_t workspace_id = 0;
  std::vector<int64_t> granted_workspace_ids;
};

struct CreatedKey {
  std::string api_key;  // shown once; only its digest is stored
  int64_t key_id = 0;
  int64_t workspace_id = 0;
  std::vector<int64_t> granted_workspace_ids;
};

struct Bootstrap {
  Workspace workspace;
  CreatedKey key;
};

// One metric of a call to be charged, at its credit cost.
struct CreditCharge {
  int64_t metric_id = 0;
  int64_t cost = 0;
};

// The answer to a reservation: either every charge is on the ledger (now, or from an earlier
// reservation of the same call), or none is and `balance` is short of `cost`.
struct Reservation {
  bool reserved = false;
  int64_t cost = 0;     // of the charges not yet on the ledger when asked
  int64_t balance = 0;  // after the reservation
};

inline constexpr absl::string_view kApiKeyPrefix = "cev_";
inline constexpr int64_t kBootstrapCredits = 10000;

// "cev_" followed by 32 URL-safe characters: 192 random bits.
std::string GenerateApiKey();

// The workspace a request acts on: the key's own when client_id is absent, client_id when it
// is the key's own or granted to it; any other: 403 workspace_not_accessible.
absl::StatusOr<int64_t> ResolveWorkspace(const Principal& principal,
                                         std::optional<int64_t> client_id);

// The workspaces a key may act on, in the order a listing shows them: its own first, then those
// granted to it, each once.
std::vector<int64_t> WorkspacesOfKey(int64_t own_workspace_id,
                                     const std::vector<int64_t>& granted_workspace_ids);

class AccountsStore {
 public:
  explicit AccountsStore(db::Database* db) : db_(db) {}

  absl::StatusOr<Workspace> CreateWorkspace(absl::string_view name, int64_t credits);
  absl::StatusOr<Workspace> GetWorkspace(int64_t id);
  // The workspaces `ids` names, in that order, read in one snapshot (404 for one that does not
  // exist).
  absl::StatusOr<std::vector<Workspace>> GetWorkspaces(const std::vector<int64_t>& ids);
  // Creates a key for `workspace_id` that may also act on `grants`.
  absl::StatusOr<CreatedKey> CreateKey(int64_t workspace_id, const std::vector<int64_t>& grants);
  // Resolves a raw API key; unknown or revoked keys: 401.
  absl::StatusOr<Principal> Authenticate(absl::string_view api_key);
  // Adds (or with a negative amount removes) credits; returns the new balance.
  absl::StatusOr<int64_t> AddCredits(int64_t workspace_id, int64_t amount);
  // Charges the metrics of `call_id`, all or nothing: when the balance is short of the charges
  // not yet on the ledger, nothing is written and the answer says so (not an error). Each
  // charge is a ledger entry unique per (call, metric, kind), so a retried reservation charges
  // nothing twice; balances never go negative, however many reservations run at once.
  absl::StatusOr<Reservation> Reserve(int64_t workspace_id, int64_t call_id,
                                      const std::vector<CreditCharge>& charges);
  // Gives back what each of `metric_ids` of `call_id` was charged (nothing for a metric never
  // charged), each at most once however often it is asked. Answers the credits given back by
  // this request.
  absl::StatusOr<int64_t> Refund(int64_t workspace_id, int64_t call_id,
                                 const std::vector<int64_t>& metric_ids);
  // On an empty database creates workspace 1 "default" with 10,000 credits and one key, and
  // returns them; returns nullopt when a workspace already exists.
  absl::StatusOr<std::optional<Bootstrap>> BootstrapIfEmpty();

 private:
  // Refund's transaction; Refund counts what it gave back once committed.
  absl::StatusOr<int64_t> RefundOnce(int64_t workspace_id, int64_t call_id,
                                     const std::vector<int64_t>& metric_ids);

  db::Database* db_;
};

}  // namespace calleval::accounts

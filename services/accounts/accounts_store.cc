#include "services/accounts/accounts_store.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/status_macros.h"

namespace calleval::accounts {
namespace {

// Keys are long random secrets, so one SHA-256 (no salt, no stretching) is the right digest:
// it cannot be brute-forced and keeps authentication cheap on every request.
std::string KeyDigest(absl::string_view api_key) { return Sha256(api_key); }

absl::StatusOr<Workspace> ReadWorkspace(db::Connection& c, int64_t id) {
  ASSIGN_OR_RETURN(auto stmt,
                   c.Prepare("SELECT id, name, credit_balance FROM workspaces WHERE id = ?"));
  stmt.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFoundError(absl::StrCat("workspace ", id));
  return Workspace{stmt.Int64(0), stmt.Text(1), stmt.Int64(2)};
}

absl::StatusOr<Workspace> InsertWorkspace(db::Connection& c, absl::string_view name,
                                          int64_t credits) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("INSERT INTO workspaces (name, credit_balance, "
                                        "created_at) VALUES (?, ?, ?) RETURNING id"));
  stmt.Bind(1, name).Bind(2, credits).Bind(3, NowTimestamp());
  ASSIGN_OR_RETURN(const int64_t id, stmt.RunReturningId());
  return Workspace{id, std::string(name), credits};
}

absl::StatusOr<CreatedKey> InsertKey(db::Connection& c, int64_t workspace_id,
                                     const std::vector<int64_t>& grants) {
  RETURN_IF_ERROR(ReadWorkspace(c, workspace_id).status());
  CreatedKey key;
  key.api_key = GenerateApiKey();
  key.workspace_id = workspace_id;
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("INSERT INTO api_keys (workspace_id, display_prefix, "
                                        "digest, created_at) VALUES (?, ?, ?, ?) RETURNING id"));
  stmt.Bind(1, workspace_id)
      .Bind(2, key.api_key.substr(0, kApiKeyPrefix.size() + 6))
      .BindBlob(3, KeyDigest(key.api_key))
      .Bind(4, NowTimestamp());
  ASSIGN_OR_RETURN(key.key_id, stmt.RunReturningId());
  for (int64_t granted : grants) {
    if (granted == workspace_id) continue;
    RETURN_IF_ERROR(ReadWorkspace(c, granted).status());
    ASSIGN_OR_RETURN(auto grant, c.Prepare("INSERT INTO api_key_grants (key_id, workspace_id) "
                                           "VALUES (?, ?) ON CONFLICT DO NOTHING"));
    grant.Bind(1, key.key_id).Bind(2, granted);
    RETURN_IF_ERROR(grant.Run());
    key.granted_workspace_ids.push_back(granted);
  }
  return key;
}

// Reservations and refunds lock the workspace's row and then read the ledger: under READ
// COMMITTED on PostgreSQL, reservations of one workspace take turns on that lock (each sees the
// balance and charges the last one committed) instead of conflicting under SERIALIZABLE and
// running again, which eight workers leasing at once did often enough to exhaust the retries.
// SQLite's single writer is serial anyway.
constexpr db::WriteOptions kLedgerWrite{db::Isolation::kReadCommitted};

// The workspace's balance, its row locked until the transaction ends.
absl::StatusOr<int64_t> LockBalance(db::Connection& c, int64_t workspace_id) {
  ASSIGN_OR_RETURN(
      auto stmt,
      c.Prepare(absl::StrCat("SELECT credit_balance FROM workspaces WHERE id = ?", c.ForUpdate())));
  stmt.Bind(1, workspace_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFoundError(absl::StrCat("workspace ", workspace_id));
  return stmt.Int64(0);
}

// The amount charged for `metric_id` of `call_id` (negative), if it was charged.
absl::StatusOr<std::optional<int64_t>> ChargedAmount(db::Connection& c, int64_t call_id,
                                                     int64_t metric_id) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT amount FROM credit_ledger WHERE call_id = ? AND "
                                        "metric_id = ? AND kind = 'charge'"));
  stmt.Bind(1, call_id).Bind(2, metric_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::nullopt;
  return stmt.Int64(0);
}

// One ledger entry for a call's metric, moving the balance only when the entry is new.
absl::StatusOr<bool> AddLedgerEntry(db::Connection& c, int64_t workspace_id, int64_t call_id,
                                    int64_t metric_id, absl::string_view kind, int64_t amount) {
  ASSIGN_OR_RETURN(auto insert,
                   c.Prepare("INSERT INTO credit_ledger (workspace_id, call_id, metric_id, "
                             "kind, amount, created_at) VALUES (?, ?, ?, ?, ?, ?) "
                             "ON CONFLICT DO NOTHING"));
  insert.Bind(1, workspace_id).Bind(2, call_id).Bind(3, metric_id).Bind(4, kind).Bind(5, amount);
  insert.Bind(6, NowTimestamp());
  RETURN_IF_ERROR(insert.Run());
  if (c.Changes() == 0) return false;
  ASSIGN_OR_RETURN(auto balance, c.Prepare("UPDATE workspaces SET credit_balance = "
                                           "credit_balance + ? WHERE id = ?"));
  balance.Bind(1, amount).Bind(2, workspace_id);
  RETURN_IF_ERROR(balance.Run());
  return true;
}

}  // namespace

std::string GenerateApiKey() { return absl::StrCat(kApiKeyPrefix, Base64Url(RandomBytes(24))); }

absl::StatusOr<int64_t> ResolveWorkspace(const Principal& principal,
                                         std::optional<int64_t> client_id) {
  if (!client_id || *client_id == principal.workspace_id) return principal.workspace_id;
  const auto& granted = principal.granted_workspace_ids;
  if (std::find(granted.begin(), granted.end(), *client_id) != granted.end()) return *client_id;
  return MakeError(absl::StatusCode::kPermissionDenied, "workspace_not_accessible",
                   absl::StrCat("this API key cannot access workspace ", *client_id),
                   {{"client_id", "not accessible with this API key"}});
}

absl::StatusOr<Workspace> AccountsStore::CreateWorkspace(absl::string_view name, int64_t credits) {
  if (name.empty()) return FieldError("name", "must not be empty");
  if (credits < 0) return FieldError("credits", "must not be negative");
  return db::WriteResult<Workspace>(
      *db_, [&](db::Connection& c) { return InsertWorkspace(c, name, credits); });
}

absl::StatusOr<Workspace> AccountsStore::GetWorkspace(int64_t id) {
  return db::ReadResult<Workspace>(*db_, [&](db::Connection& c) { return ReadWorkspace(c, id); });
}

absl::StatusOr<CreatedKey> AccountsStore::CreateKey(int64_t workspace_id,
                                                    const std::vector<int64_t>& grants) {
  return db::WriteResult<CreatedKey>(
      *db_, [&](db::Connection& c) { return InsertKey(c, workspace_id, grants); });
}

absl::StatusOr<Principal> AccountsStore::Authenticate(absl::string_view api_key) {
  if (!absl::StartsWith(api_key, kApiKeyPrefix)) return UnauthenticatedError("invalid API key");
  const std::string digest = KeyDigest(api_key);
  return db::ReadResult<Principal>(*db_, [&](db::Connection& c) -> absl::StatusOr<Principal> {
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT id, workspace_id, digest FROM api_keys "
                                          "WHERE digest = ? AND revoked_at IS NULL"));
    stmt.BindBlob(1, digest);
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    // The index lookup finds the row; the comparison itself is constant-time so the check
    // does not depend on how much of a guessed digest matched.
    if (!row || !ConstantTimeEquals(stmt.Text(2), digest)) {
      return UnauthenticatedError("invalid API key");
    }
    Principal principal{stmt.Int64(0), stmt.Int64(1), {}};
    ASSIGN_OR_RETURN(auto grants, c.Prepare("SELECT workspace_id FROM api_key_grants WHERE "
                                            "key_id = ? ORDER BY workspace_id"));
    grants.Bind(1, principal.key_id);
    while (true) {
      ASSIGN_OR_RETURN(bool more, grants.Step());
      if (!more) break;
      principal.granted_workspace_ids.push_back(grants.Int64(0));
    }
    return principal;
  });
}

absl::StatusOr<int64_t> AccountsStore::AddCredits(int64_t workspace_id, int64_t amount) {
  return db::WriteResult<int64_t>(*db_, [&](db::Connection& c) -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(Workspace ws, ReadWorkspace(c, workspace_id));
    if (ws.credit_balance + amount < 0) {
      return FieldError("amount", "would make the balance negative");
    }
    ASSIGN_OR_RETURN(auto update, c.Prepare("UPDATE workspaces SET credit_balance = "
                                            "credit_balance + ? WHERE id = ?"));
    update.Bind(1, amount).Bind(2, workspace_id);
    RETURN_IF_ERROR(update.Run());
    ASSIGN_OR_RETURN(auto ledger, c.Prepare("INSERT INTO credit_ledger (workspace_id, kind, "
                                            "amount, created_at) VALUES (?, 'top_up', ?, ?)"));
    ledger.Bind(1, workspace_id).Bind(2, amount).Bind(3, NowTimestamp());
    RETURN_IF_ERROR(ledger.Run());
    return ws.credit_balance + amount;
  });
}

absl::StatusOr<Reservation> AccountsStore::Reserve(int64_t workspace_id, int64_t call_id,
                                                   const std::vector<CreditCharge>& charges) {
  for (const CreditCharge& charge : charges) {
    if (charge.cost < 0) return FieldError("cost", "must not be negative");
  }
  return db::WriteResult<Reservation>(
      *db_, kLedgerWrite, [&](db::Connection& c) -> absl::StatusOr<Reservation> {
        Reservation out;
        ASSIGN_OR_RETURN(out.balance, LockBalance(c, workspace_id));
        std::vector<const CreditCharge*> missing;
        for (const CreditCharge& charge : charges) {
          ASSIGN_OR_RETURN(std::optional<int64_t> charged,
                           ChargedAmount(c, call_id, charge.metric_id));
          if (charged) continue;
          missing.push_back(&charge);
          out.cost += charge.cost;
        }
        if (out.balance < out.cost) return out;
        for (const CreditCharge* charge : missing) {
          RETURN_IF_ERROR(
              AddLedgerEntry(c, workspace_id, call_id, charge->metric_id, "charge", -charge->cost)
                  .status());
        }
        out.balance -= out.cost;
        out.reserved = true;
        return out;
      });
}

absl::StatusOr<int64_t> AccountsStore::Refund(int64_t workspace_id, int64_t call_id,
                                              const std::vector<int64_t>& metric_ids) {
  return db::WriteResult<int64_t>(
      *db_, kLedgerWrite, [&](db::Connection& c) -> absl::StatusOr<int64_t> {
        RETURN_IF_ERROR(LockBalance(c, workspace_id).status());
        int64_t refunded = 0;
        for (int64_t metric_id : metric_ids) {
          // Only what was charged is given back.
          ASSIGN_OR_RETURN(std::optional<int64_t> charged, ChargedAmount(c, call_id, metric_id));
          if (!charged) continue;
          ASSIGN_OR_RETURN(
              bool added, AddLedgerEntry(c, workspace_id, call_id, metric_id, "refund", -*charged));
          if (added) refunded -= *charged;
        }
        return refunded;
      });
}

absl::StatusOr<std::optional<Bootstrap>> AccountsStore::BootstrapIfEmpty() {
  return db::WriteResult<std::optional<Bootstrap>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::optional<Bootstrap>> {
        ASSIGN_OR_RETURN(auto count, c.Prepare("SELECT COUNT(*) FROM workspaces"));
        ASSIGN_OR_RETURN(bool row, count.Step());
        if (row && count.Int64(0) > 0) return std::nullopt;
        Bootstrap out;
        // The first row of an empty table: id 1 on both backends.
        ASSIGN_OR_RETURN(out.workspace, InsertWorkspace(c, "default", kBootstrapCredits));
        ASSIGN_OR_RETURN(out.key, InsertKey(c, out.workspace.id, {}));
        return out;
      });
}

}  // namespace calleval::accounts

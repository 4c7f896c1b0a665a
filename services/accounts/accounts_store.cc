#include "services/accounts/accounts_store.h"

#include <algorithm>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "common/telemetry.h"

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

// Reservations and refunds run READ COMMITTED: each writes its ledger rows first (unique per
// call, metric and kind, so a second reservation of a call charges nothing again and waits for
// the first on the index if they meet), then moves the balance by one relative UPDATE, whose
// check that the balance covers the cost PostgreSQL makes again on the row it locked. The
// workspace's row is locked from that UPDATE to the commit only: every reservation of a
// workspace takes turns on it, so the less it holds it the more calls a second it reserves (when
// it locked first and then read and wrote a ledger row per metric, analysis workers on
// PostgreSQL spent most of their time waiting for it). SQLite's single writer is serial anyway.
constexpr db::WriteOptions kLedgerWrite{db::Isolation::kReadCommitted};

// The workspace's balance (kNotFound for a workspace that does not exist).
absl::StatusOr<int64_t> ReadBalance(db::Connection& c, int64_t workspace_id) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT credit_balance FROM workspaces WHERE id = ?"));
  stmt.Bind(1, workspace_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFoundError(absl::StrCat("workspace ", workspace_id));
  return stmt.Int64(0);
}

// Ledger entries of `kind` for a call's metrics, in one statement: a charge costs `cost`
// (entered negative), a refund gives back minus a charge's amount (`cost` holds that amount).
// Entries already there are left as they are (unique per call, metric and kind). Answers the
// credits the new entries move: a charge's cost, positive; a refund's, positive too.
absl::StatusOr<int64_t> AddLedgerEntries(db::Connection& c, int64_t workspace_id, int64_t call_id,
                                         absl::string_view kind,
                                         const std::vector<CreditCharge>& entries) {
  if (entries.empty()) return int64_t{0};
  std::string sql = "INSERT INTO credit_ledger (workspace_id, call_id, metric_id, kind, amount, "
                    "created_at) VALUES ";
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::StrAppend(&sql, i == 0 ? "" : ", ", "(?, ?, ?, ?, ?, ?)");
  }
  sql += " ON CONFLICT DO NOTHING RETURNING amount";
  ASSIGN_OR_RETURN(auto insert, c.Prepare(sql));
  const std::string now = NowTimestamp();
  for (size_t i = 0; i < entries.size(); ++i) {
    const int base = static_cast<int>(6 * i);
    insert.Bind(base + 1, workspace_id).Bind(base + 2, call_id).Bind(base + 3, entries[i].metric_id);
    insert.Bind(base + 4, kind).Bind(base + 5, -entries[i].cost).Bind(base + 6, now);
  }
  int64_t moved = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool row, insert.Step());
    if (!row) break;
    moved += insert.Int64(0);
  }
  // Charges enter negative: the cost is what they took.
  return kind == "charge" ? -moved : moved;
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

std::vector<int64_t> WorkspacesOfKey(int64_t own_workspace_id,
                                     const std::vector<int64_t>& granted_workspace_ids) {
  std::vector<int64_t> ids = {own_workspace_id};
  for (int64_t id : granted_workspace_ids) {
    // A grant of the key's own workspace, or one given twice, is listed once.
    if (!absl::c_linear_search(ids, id)) ids.push_back(id);
  }
  return ids;
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

absl::StatusOr<std::vector<Workspace>> AccountsStore::GetWorkspaces(
    const std::vector<int64_t>& ids) {
  return db::ReadResult<std::vector<Workspace>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::vector<Workspace>> {
        std::vector<Workspace> workspaces;
        workspaces.reserve(ids.size());
        for (int64_t id : ids) {
          ASSIGN_OR_RETURN(Workspace ws, ReadWorkspace(c, id));
          workspaces.push_back(std::move(ws));
        }
        return workspaces;
      });
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

namespace {

// Credits moved by the ledger, once committed: "charged" or "refunded".
telemetry::Counter& CreditsCounter(absl::string_view kind) {
  static telemetry::CounterFamily& credits = telemetry::DefaultRegistry().Counter(
      "calleval_credits_total", "Credits charged for metrics and refunded, once committed.",
      {"kind"});
  return credits.WithLabels({std::string(kind)});
}

}  // namespace

absl::StatusOr<Reservation> AccountsStore::Reserve(int64_t workspace_id, int64_t call_id,
                                                   const std::vector<CreditCharge>& charges) {
  for (const CreditCharge& charge : charges) {
    if (charge.cost < 0) return FieldError("cost", "must not be negative");
  }
  // A balance short of the cost: the transaction rolls back (its ledger rows with it) and the
  // answer says so.
  std::optional<Reservation> short_of;
  absl::StatusOr<Reservation> reserved = db::WriteResult<Reservation>(
      *db_, kLedgerWrite, [&](db::Connection& c) -> absl::StatusOr<Reservation> {
        Reservation out;
        ASSIGN_OR_RETURN(out.balance, ReadBalance(c, workspace_id));
        // The charges go on the ledger first: the unique (call, metric, kind) keeps what an
        // earlier reservation of the call charged, and what comes back is what is new.
        ASSIGN_OR_RETURN(out.cost, AddLedgerEntries(c, workspace_id, call_id, "charge", charges));
        if (out.cost == 0) {
          out.reserved = true;
          return out;
        }
        // Then the balance, in one statement that checks and takes: the workspace's row is
        // locked from here to the commit only, not while the ledger is read and written.
        ASSIGN_OR_RETURN(auto take,
                         c.Prepare("UPDATE workspaces SET credit_balance = credit_balance - ? "
                                   "WHERE id = ? AND credit_balance >= ? RETURNING credit_balance"));
        take.Bind(1, out.cost).Bind(2, workspace_id).Bind(3, out.cost);
        ASSIGN_OR_RETURN(bool taken, take.Step());
        if (!taken) {
          short_of = out;
          return absl::AbortedError("the balance is short of the reservation");
        }
        out.balance = take.Int64(0);
        out.reserved = true;
        RETURN_IF_ERROR(take.Run());
        return out;
      });
  if (reserved.ok() && reserved->reserved) CreditsCounter("charged").Increment(reserved->cost);
  if (reserved.ok() || !short_of) return reserved;
  // Nothing was charged; the balance as it is now.
  ASSIGN_OR_RETURN(short_of->balance,
                   db::ReadResult<int64_t>(*db_, db::kSingleStatementRead, [&](db::Connection& c) {
                     return ReadBalance(c, workspace_id);
                   }));
  return *short_of;
}

absl::StatusOr<int64_t> AccountsStore::Refund(int64_t workspace_id, int64_t call_id,
                                              const std::vector<int64_t>& metric_ids) {
  absl::StatusOr<int64_t> refunded = RefundOnce(workspace_id, call_id, metric_ids);
  if (refunded.ok()) CreditsCounter("refunded").Increment(static_cast<double>(*refunded));
  return refunded;
}

absl::StatusOr<int64_t> AccountsStore::RefundOnce(int64_t workspace_id, int64_t call_id,
                                                  const std::vector<int64_t>& metric_ids) {
  return db::WriteResult<int64_t>(
      *db_, kLedgerWrite, [&](db::Connection& c) -> absl::StatusOr<int64_t> {
        // Only what was charged is given back, once: refund rows are unique like charges.
        ASSIGN_OR_RETURN(auto charged, c.Prepare("SELECT metric_id, amount FROM credit_ledger "
                                                 "WHERE call_id = ? AND kind = 'charge'"));
        charged.Bind(1, call_id);
        std::vector<CreditCharge> refunds;
        while (true) {
          ASSIGN_OR_RETURN(bool row, charged.Step());
          if (!row) break;
          const int64_t metric_id = charged.Int64(0);
          if (absl::c_find(metric_ids, metric_id) == metric_ids.end()) continue;
          refunds.push_back({metric_id, charged.Int64(1)});  // the charge's (negative) amount
        }
        if (refunds.empty()) return int64_t{0};
        ASSIGN_OR_RETURN(int64_t refunded,
                         AddLedgerEntries(c, workspace_id, call_id, "refund", refunds));
        if (refunded == 0) return int64_t{0};
        ASSIGN_OR_RETURN(auto give, c.Prepare("UPDATE workspaces SET credit_balance = "
                                              "credit_balance + ? WHERE id = ?"));
        give.Bind(1, refunded).Bind(2, workspace_id);
        RETURN_IF_ERROR(give.Run());
        if (c.Changes() == 0) return NotFoundError(absl::StrCat("workspace ", workspace_id));
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

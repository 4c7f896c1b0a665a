#include "services/accounts/accounts_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/errors.h"
#include "common/schema.h"
#include "common/status_macros.h"
#include "services/accounts/authenticator.h"
#include "tests/support/test_database.h"

namespace calleval::accounts {
namespace {

using ::testing::ElementsAre;

// Every case on a SQLite file and on PostgreSQL.
class AccountsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    store_ = std::make_unique<AccountsStore>(database_->db());
  }
  void TearDown() override {
    store_.reset();
    database_.reset();
  }

  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<AccountsStore> store_;
};

TEST(ApiKeyTest, KeysAreLongRandomAndPrefixed) {
  std::string a = GenerateApiKey(), b = GenerateApiKey();
  EXPECT_TRUE(absl::StartsWith(a, "cev_"));
  EXPECT_EQ(a.size(), 4u + 32u);  // 24 random bytes = 192 bits
  EXPECT_NE(a, b);
}

TEST_P(AccountsStoreTest, OnlyTheDigestIsStored) {
  auto ws = store_->CreateWorkspace("acme", 5);
  ASSERT_TRUE(ws.ok());
  auto key = store_->CreateKey(ws->id, {});
  ASSERT_TRUE(key.ok());
  // Every column of every key row, as text.
  auto rows = db::ReadResult<std::string>(
      *database_->db(), [](db::Connection& c) -> absl::StatusOr<std::string> {
        ASSIGN_OR_RETURN(auto st, c.Prepare("SELECT id, workspace_id, display_prefix, digest, "
                                            "created_at, revoked_at FROM api_keys"));
        std::string all;
        while (true) {
          ASSIGN_OR_RETURN(bool row, st.Step());
          if (!row) return all;
          for (int col = 0; col < 6; ++col) all += st.Text(col) + "|";
        }
      });
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_FALSE(absl::StrContains(*rows, key->api_key));
  EXPECT_FALSE(absl::StrContains(*rows, key->api_key.substr(10)));
  if (GetParam() != db::Backend::kSqlite) return;
  // On SQLite, nowhere in the file or its log either.
  const std::string path = database_->sqlite_path();
  database_->Release().reset();  // flush and close
  std::string bytes;
  for (const char* suffix : {"", "-wal"}) {
    std::ifstream in(path + suffix, std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_FALSE(absl::StrContains(bytes, key->api_key));
  EXPECT_FALSE(absl::StrContains(bytes, key->api_key.substr(10)));
}

TEST_P(AccountsStoreTest, AuthenticateKnownUnknownAndTampered) {
  auto ws = store_->CreateWorkspace("acme", 5);
  auto key = store_->CreateKey(ws->id, {});
  auto principal = store_->Authenticate(key->api_key);
  ASSERT_TRUE(principal.ok());
  EXPECT_EQ(principal->workspace_id, ws->id);
  std::string tampered = key->api_key;
  tampered.back() = tampered.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(HttpStatusFor(store_->Authenticate(tampered).status()), 401);
  EXPECT_EQ(HttpStatusFor(store_->Authenticate("").status()), 401);
  EXPECT_EQ(HttpStatusFor(store_->Authenticate("cev_").status()), 401);
  EXPECT_EQ(HttpStatusFor(store_->Authenticate("Bearer x").status()), 401);
}

TEST_P(AccountsStoreTest, GrantsAndWorkspaceResolution) {
  auto a = store_->CreateWorkspace("a", 0);
  auto b = store_->CreateWorkspace("b", 0);
  auto c = store_->CreateWorkspace("c", 0);
  auto key = store_->CreateKey(a->id, {b->id});
  ASSERT_TRUE(key.ok());
  EXPECT_THAT(key->granted_workspace_ids, ElementsAre(b->id));
  auto principal = store_->Authenticate(key->api_key);
  ASSERT_TRUE(principal.ok());
  EXPECT_EQ(*ResolveWorkspace(*principal, std::nullopt), a->id);
  EXPECT_EQ(*ResolveWorkspace(*principal, a->id), a->id);
  EXPECT_EQ(*ResolveWorkspace(*principal, b->id), b->id);
  absl::Status denied = ResolveWorkspace(*principal, c->id).status();
  EXPECT_EQ(HttpStatusFor(denied), 403);
  EXPECT_EQ(ErrorInfoOf(denied).code(), "workspace_not_accessible");
  EXPECT_EQ(HttpStatusFor(ResolveWorkspace(*principal, 999).status()), 403);
}

TEST_P(AccountsStoreTest, GrantOfMissingWorkspaceFails) {
  auto a = store_->CreateWorkspace("a", 0);
  EXPECT_EQ(HttpStatusFor(store_->CreateKey(a->id, {42}).status()), 404);
  EXPECT_EQ(HttpStatusFor(store_->CreateKey(42, {}).status()), 404);
}

TEST_P(AccountsStoreTest, Credits) {
  auto a = store_->CreateWorkspace("a", 10);
  EXPECT_EQ(*store_->AddCredits(a->id, 5), 15);
  EXPECT_EQ(*store_->AddCredits(a->id, -15), 0);
  EXPECT_EQ(HttpStatusFor(store_->AddCredits(a->id, -1).status()), 422);
  EXPECT_EQ(store_->GetWorkspace(a->id)->credit_balance, 0);
}

// The ledger rows of one call, as "kind metric amount".
std::vector<std::string> LedgerOf(db::Database& db, int64_t call_id) {
  auto rows = db::ReadResult<std::vector<std::string>>(
      db, [&](db::Connection& c) -> absl::StatusOr<std::vector<std::string>> {
        ASSIGN_OR_RETURN(auto st, c.Prepare("SELECT kind, metric_id, amount FROM credit_ledger "
                                            "WHERE call_id = ? ORDER BY kind, metric_id"));
        st.Bind(1, call_id);
        std::vector<std::string> out;
        while (true) {
          ASSIGN_OR_RETURN(bool row, st.Step());
          if (!row) return out;
          out.push_back(absl::StrCat(st.Text(0), " ", st.Int64(1), " ", st.Int64(2)));
        }
      });
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *rows : std::vector<std::string>{};
}

TEST_P(AccountsStoreTest, ReserveChargesEveryMetricOnceAndARetryNothing) {
  auto ws = store_->CreateWorkspace("a", 10);
  auto first = store_->Reserve(ws->id, 41, {{1, 1}, {101, 3}});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->reserved);
  EXPECT_EQ(first->cost, 4);
  EXPECT_EQ(first->balance, 6);
  // A retry (a re-lease after a crash) finds every charge on the ledger: reserved, free.
  auto retry = store_->Reserve(ws->id, 41, {{1, 1}, {101, 3}});
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->reserved);
  EXPECT_EQ(retry->cost, 0);
  EXPECT_EQ(store_->GetWorkspace(ws->id)->credit_balance, 6);
  EXPECT_THAT(LedgerOf(*database_->db(), 41), ElementsAre("charge 1 -1", "charge 101 -3"));
}

TEST_P(AccountsStoreTest, ShortBalanceReservesNothing) {
  auto ws = store_->CreateWorkspace("a", 3);
  auto short_of = store_->Reserve(ws->id, 42, {{1, 1}, {2, 1}, {101, 2}});
  ASSERT_TRUE(short_of.ok()) << short_of.status();
  EXPECT_FALSE(short_of->reserved);
  EXPECT_EQ(short_of->cost, 4);
  EXPECT_EQ(short_of->balance, 3);
  EXPECT_EQ(store_->GetWorkspace(ws->id)->credit_balance, 3);
  EXPECT_THAT(LedgerOf(*database_->db(), 42), ::testing::IsEmpty());
  // A plan that costs nothing is reserved on any balance.
  auto free = store_->Reserve(ws->id, 43, {{1, 0}});
  ASSERT_TRUE(free.ok());
  EXPECT_TRUE(free->reserved);
  EXPECT_EQ(HttpStatusFor(store_->Reserve(999, 44, {{1, 1}}).status()), 404);
  EXPECT_EQ(HttpStatusFor(store_->Reserve(ws->id, 45, {{1, -1}}).status()), 422);
}

TEST_P(AccountsStoreTest, RefundGivesBackWhatWasChargedOnce) {
  auto ws = store_->CreateWorkspace("a", 10);
  ASSERT_TRUE(store_->Reserve(ws->id, 51, {{1, 1}, {101, 3}})->reserved);
  // Metric 7 was never charged: nothing to give back.
  EXPECT_EQ(*store_->Refund(ws->id, 51, {101, 7}), 3);
  EXPECT_EQ(store_->GetWorkspace(ws->id)->credit_balance, 9);
  // Asked again (the refund's answer was lost, or a restart applies it again): nothing moves.
  EXPECT_EQ(*store_->Refund(ws->id, 51, {101, 7}), 0);
  EXPECT_EQ(*store_->Refund(ws->id, 51, {1, 101}), 1);
  EXPECT_EQ(store_->GetWorkspace(ws->id)->credit_balance, 10);
  EXPECT_THAT(LedgerOf(*database_->db(), 51),
              ElementsAre("charge 1 -1", "charge 101 -3", "refund 1 1", "refund 101 3"));
  // A refund of a call never charged (skipped) gives nothing.
  EXPECT_EQ(*store_->Refund(ws->id, 52, {1, 2}), 0);
  EXPECT_EQ(store_->GetWorkspace(ws->id)->credit_balance, 10);
}

// Eight threads reserve 40 calls of one workspace that can pay for 25, and then refund and
// reserve again the same calls at once: on PostgreSQL this is where a missing lock would let
// two reservations read one balance and overdraw it, or a refund be given twice.
TEST_P(AccountsStoreTest, ConcurrentReservationsNeverOverdrawAndRetriesChargeNothing) {
  auto ws = store_->CreateWorkspace("a", 25);
  constexpr int kThreads = 8, kCalls = 40;
  std::atomic<int> next{0}, reserved{0}, errors{0};
  absl::Notification go;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      go.WaitForNotification();
      for (int call = next++; call < kCalls; call = next++) {
        // Each call reserved twice, as a worker's retry would.
        for (int attempt = 0; attempt < 2; ++attempt) {
          auto r = store_->Reserve(ws->id, 1000 + call, {{1, 1}});
          if (!r.ok()) {
            ++errors;
          } else if (r->reserved && r->cost > 0) {
            ++reserved;
          }
        }
      }
    });
  }
  go.Notify();
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(reserved.load(), 25);
  EXPECT_EQ(store_->GetWorkspace(ws->id)->credit_balance, 0);

  // Every call refunded by two threads at once: each charge comes back exactly once.
  threads.clear();
  std::atomic<int64_t> refunded{0};
  absl::Notification again;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      again.WaitForNotification();
      for (int call = t / 2; call < kCalls; call += kThreads / 2) {
        auto r = store_->Refund(ws->id, 1000 + call, {1});
        if (r.ok()) {
          refunded += *r;
        } else {
          ++errors;
        }
      }
    });
  }
  again.Notify();
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(refunded.load(), 25);
  EXPECT_EQ(store_->GetWorkspace(ws->id)->credit_balance, 25);
}

TEST_P(AccountsStoreTest, BootstrapOnlyOnEmptyDatabase) {
  auto first = store_->BootstrapIfEmpty();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->workspace.id, 1);
  EXPECT_EQ((*first)->workspace.name, "default");
  EXPECT_EQ((*first)->workspace.credit_balance, 10000);
  EXPECT_TRUE(store_->Authenticate((*first)->key.api_key).ok());
  auto second = store_->BootstrapIfEmpty();
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->has_value());
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(AccountsStoreTest);

TEST(BearerTokenTest, Parsing) {
  EXPECT_EQ(*BearerToken("Bearer cev_abc"), "cev_abc");
  EXPECT_EQ(*BearerToken("bearer   cev_abc "), "cev_abc");
  EXPECT_EQ(HttpStatusFor(BearerToken("").status()), 401);
  EXPECT_EQ(HttpStatusFor(BearerToken("Basic abc").status()), 401);
  EXPECT_EQ(HttpStatusFor(BearerToken("Bearer ").status()), 401);
}

TEST(CachingAuthenticatorTest, CachesSuccessNotFailure) {
  int calls = 0;
  CachingAuthenticator auth(
      [&](absl::string_view key) -> absl::StatusOr<Principal> {
        ++calls;
        if (key == "cev_good") return Principal{1, 7, {}};
        return UnauthenticatedError("invalid API key");
      },
      absl::Seconds(60));
  EXPECT_EQ(auth.Authenticate("Bearer cev_good")->workspace_id, 7);
  EXPECT_EQ(auth.Authenticate("Bearer cev_good")->workspace_id, 7);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(auth.Authenticate("Bearer cev_bad").ok());
  EXPECT_FALSE(auth.Authenticate("Bearer cev_bad").ok());
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace calleval::accounts

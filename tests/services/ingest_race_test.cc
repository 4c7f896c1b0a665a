// Ingests of one call_identifier at once, from many threads: each identifier is stored once,
// every other attempt answers 409 duplicate_call_identifier, and none fails otherwise (ingest
// runs at READ COMMITTED and lets the unique key decide, services/calls/calls_store.cc).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "services/calls/calls_store.h"
#include "tests/support/test_database.h"

namespace calleval::calls {
namespace {

class IngestRaceTest : public ::testing::TestWithParam<db::Backend> {};

TEST_P(IngestRaceTest, EachIdentifierIsStoredOnceAndTheRestAreDuplicates) {
  std::string tmpl = ::testing::TempDir() + "/ingest_race_XXXXXX";
  const std::string dir = mkdtemp(tmpl.data());
  auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
  ASSERT_TRUE(database.ok()) << database.status();
  std::unique_ptr<db::Database> db = (*database)->Release();
  const int64_t workspace = accounts::AccountsStore(db.get()).CreateWorkspace("w", 0)->id;
  CallsStore::Options options;
  CallsStore store(
      db.get(), [](int64_t, int64_t) -> absl::StatusOr<AgentInfo> { return AgentInfo{}; },
      options);

  constexpr int kThreads = 8;
  constexpr int kIdentifiers = 40;
  std::atomic<int> stored{0}, duplicates{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIdentifiers; ++i) {
        v1::IngestCallRequest request;
        request.set_call_identifier(absl::StrCat("race-", i));
        request.set_agent_id(1);
        auto* turn = request.add_transcript();
        turn->set_role("User");
        turn->set_content("hi");
        turn->set_start_time(0);
        turn->set_end_time(1);
        absl::Status status = store.Ingest(workspace, request).status();
        if (status.ok()) {
          ++stored;
        } else if (ErrorInfoOf(status).code() == "duplicate_call_identifier" &&
                   HttpStatusFor(status) == 409) {
          ++duplicates;
        } else {
          ++other;
          ADD_FAILURE() << status;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(stored, kIdentifiers);
  EXPECT_EQ(duplicates, kIdentifiers * (kThreads - 1));
  EXPECT_EQ(other, 0);
  auto listed = store.List(workspace, v1::ListCallsRequest());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->pagination().total_count(), kIdentifiers);
  db.reset();
  std::filesystem::remove_all(dir);
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(IngestRaceTest);

}  // namespace
}  // namespace calleval::calls

// Workers claiming from one queue at the same moment, on both backends: every call (or run) is
// claimed once and only once, and the credits reserved by first leases never overdraw a
// workspace. On PostgreSQL the claims run READ COMMITTED with FOR UPDATE SKIP LOCKED, so this is
// where a missing row lock would show.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/errors.h"
#include "common/schema.h"
#include "common/status_macros.h"
#include "services/accounts/accounts_store.h"
#include "services/agents/agents_store.h"
#include "services/agents/scenarios_store.h"
#include "services/calls/calls_store.h"
#include "services/calls/queue_claims.h"
#include "services/runs/runs_store.h"
#include "tests/services/in_process_directories.h"
#include "tests/support/test_database.h"

namespace calleval {
namespace {

using ::testing::IsEmpty;

constexpr int kWorkers = 8;

// What the workers of one queue claimed, and the errors they met.
struct Claims {
  std::vector<int64_t> ids;
  std::vector<std::string> errors;
};

// Runs `claim` on kWorkers threads released together, each until the queue answers empty.
Claims ClaimConcurrently(const std::function<absl::StatusOr<std::optional<int64_t>>()>& claim) {
  Claims claims;
  absl::Mutex mu;
  absl::Notification go;
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.emplace_back([&] {
      go.WaitForNotification();
      while (true) {
        absl::StatusOr<std::optional<int64_t>> id = claim();
        absl::MutexLock lock(&mu);
        if (!id.ok()) {
          claims.errors.push_back(id.status().ToString());
          return;
        }
        if (!id->has_value()) return;
        claims.ids.push_back(**id);
      }
    });
  }
  go.Notify();
  for (std::thread& t : workers) t.join();
  return claims;
}

// The ids claimed more than once.
std::vector<int64_t> Repeated(const std::vector<int64_t>& ids) {
  std::set<int64_t> seen;
  std::vector<int64_t> repeated;
  for (int64_t id : ids) {
    if (!seen.insert(id).second) repeated.push_back(id);
  }
  return repeated;
}

class QueueClaimsTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/claims_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts::AccountsStore accounts(db_.get());
    workspace_ = accounts.CreateWorkspace("w", 0)->id;
    calls::CallsStore::Options options;
    calls_ = std::make_unique<calls::CallsStore>(
        db_.get(),
        [](int64_t, int64_t) -> absl::StatusOr<calls::AgentInfo> {
          calls::AgentInfo agent;
          agent.disabled_metric_ids = {12};
          return agent;
        },
        options);
    directories_ = std::make_unique<testing::InProcessDirectories>(db_.get());
    runs_ = std::make_unique<runs::RunsStore>(db_.get(), &directories_->scenario_directory);
  }
  void TearDown() override {
    calls_.reset();
    runs_.reset();
    directories_.reset();
    db_.reset();
    database_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Ingests `n` calls: with a recording to download, or with a transcript (one credit each).
  std::vector<int64_t> Ingest(int n, bool recording) {
    std::vector<int64_t> ids;
    for (int i = 0; i < n; ++i) {
      v1::IngestCallRequest r;
      r.set_call_identifier(absl::StrCat(recording ? "r" : "t", i));
      r.set_agent_id(7);
      if (recording) {
        r.set_recording_url(absl::StrCat("https://recordings.example.com/", i, ".wav"));
      } else {
        v1::Turn* turn = r.add_transcript();
        turn->set_role("User");
        turn->set_content("hi");
        turn->set_start_time(0);
        turn->set_end_time(1.6);
      }
      auto call = calls_->Ingest(workspace_, r);
      EXPECT_TRUE(call.ok()) << call.status();
      if (call.ok()) ids.push_back(call->id());
    }
    return ids;
  }
  int64_t Balance() {
    accounts::AccountsStore accounts(db_.get());
    return accounts.GetWorkspace(workspace_)->credit_balance;
  }

  std::string dir_;
  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<calls::CallsStore> calls_;
  std::unique_ptr<testing::InProcessDirectories> directories_;
  std::unique_ptr<runs::RunsStore> runs_;
  int64_t workspace_ = 0;
};

TEST_P(QueueClaimsTest, RecordingDownloadsAreEachClaimedOnce) {
  const std::vector<int64_t> calls = Ingest(40, /*recording=*/true);
  Claims claims = ClaimConcurrently([&]() -> absl::StatusOr<std::optional<int64_t>> {
    auto job = calls_->ClaimRecordingJob(absl::Minutes(10));
    if (!job.ok()) return job.status();
    if (!job->has_value()) return std::nullopt;
    return (*job)->call_id;
  });
  EXPECT_THAT(claims.errors, IsEmpty());
  EXPECT_THAT(Repeated(claims.ids), IsEmpty());
  EXPECT_THAT(claims.ids, ::testing::UnorderedElementsAreArray(calls));
  EXPECT_FALSE(calls_->ClaimRecordingJob(absl::Minutes(10))->has_value());
}

// More calls than credits: the workers reserve exactly what the workspace has, each call is
// leased at most once, and the rest are skipped, never charged.
TEST_P(QueueClaimsTest, AnalysisLeasesAreEachTakenOnceAndCreditsNeverOverdrawn) {
  const std::vector<int64_t> calls = Ingest(40, /*recording=*/false);
  accounts::AccountsStore accounts(db_.get());
  ASSERT_TRUE(accounts.AddCredits(workspace_, 25).ok());
  Claims claims = ClaimConcurrently([&]() -> absl::StatusOr<std::optional<int64_t>> {
    auto job = calls_->LeaseAnalysis(absl::Minutes(10), 3);
    if (!job.ok()) return job.status();
    if (!job->has_value()) return std::nullopt;
    return (*job)->call_id;
  });
  EXPECT_THAT(claims.errors, IsEmpty());
  EXPECT_THAT(Repeated(claims.ids), IsEmpty());
  EXPECT_EQ(claims.ids.size(), 25u);
  EXPECT_EQ(Balance(), 0);
  int skipped = 0;
  for (int64_t id : calls) {
    auto call = calls_->Get(workspace_, std::to_string(id));
    ASSERT_TRUE(call.ok()) << call.status();
    const bool leased = absl::c_linear_search(claims.ids, id);
    EXPECT_EQ(call->analysis_status(), leased ? "processing" : "skipped") << id;
    if (!leased) ++skipped;
  }
  EXPECT_EQ(skipped, 15);
}

TEST_P(QueueClaimsTest, TranscriptionLeasesAreEachTakenOnce) {
  accounts::AccountsStore accounts(db_.get());
  ASSERT_TRUE(accounts.AddCredits(workspace_, 1000).ok());
  const std::vector<int64_t> calls = Ingest(24, /*recording=*/true);
  // Recordings stored and analyses started, one at a time: then every call waits for its
  // transcript.
  for (size_t i = 0; i < calls.size(); ++i) {
    auto download = calls_->ClaimRecordingJob(absl::Minutes(10));
    ASSERT_TRUE(download.ok() && download->has_value());
    ASSERT_TRUE(calls_->CompleteRecording((*download)->call_id, "audio/wav", 10).ok());
    auto analysis = calls_->LeaseAnalysis(absl::Minutes(10), 3);
    ASSERT_TRUE(analysis.ok() && analysis->has_value()) << analysis.status();
  }
  Claims claims = ClaimConcurrently([&]() -> absl::StatusOr<std::optional<int64_t>> {
    auto job = calls_->LeaseTranscription(absl::Minutes(10), 3);
    if (!job.ok()) return job.status();
    if (!job->has_value()) return std::nullopt;
    return (*job)->call_id;
  });
  EXPECT_THAT(claims.errors, IsEmpty());
  EXPECT_THAT(Repeated(claims.ids), IsEmpty());
  EXPECT_THAT(claims.ids, ::testing::UnorderedElementsAreArray(calls));
}

// A lease that expired is taken again before any call that was never leased: a dead worker's
// call does not wait behind the whole queue.
TEST_P(QueueClaimsTest, AnExpiredLeaseIsClaimedBeforeTheReadyCalls) {
  accounts::AccountsStore accounts(db_.get());
  ASSERT_TRUE(accounts.AddCredits(workspace_, 1000).ok());
  const std::vector<int64_t> calls = Ingest(3, /*recording=*/false);
  auto first = calls_->LeaseAnalysis(absl::ZeroDuration(), 3);  // expires at once
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ((*first)->call_id, calls[0]);
  auto again = calls_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(again.ok() && again->has_value()) << again.status();
  EXPECT_EQ((*again)->call_id, calls[0]);
  EXPECT_EQ((*again)->attempts, 2);
  auto next = calls_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(next.ok() && next->has_value()) << next.status();
  EXPECT_EQ((*next)->call_id, calls[1]);
}

// How the backend's planner runs `sql` (SQLite's EXPLAIN QUERY PLAN, PostgreSQL's EXPLAIN), one
// line per plan row; `now` is bound to the lookups that take it.
absl::StatusOr<std::string> Plan(db::Database& db, absl::string_view sql, bool binds_now) {
  return db::ReadResult<std::string>(db, [&](db::Connection& c) -> absl::StatusOr<std::string> {
    const bool sqlite = c.backend() == db::Backend::kSqlite;
    ASSIGN_OR_RETURN(auto explain, c.Prepare(absl::StrCat(
                                       sqlite ? "EXPLAIN QUERY PLAN " : "EXPLAIN ", sql)));
    if (binds_now) explain.Bind(1, int64_t{1700000000});
    std::string plan;
    while (true) {
      ASSIGN_OR_RETURN(bool row, explain.Step());
      if (!row) return plan;
      absl::StrAppend(&plan, explain.Text(sqlite ? 3 : 0), "\n");
    }
  });
}

// Each lookup of a claim reads its queue's own index in the order it claims, so it stops at the
// first call it may take: no sort of the waiting calls, no walk of the table. Asked of a table
// with thousands of calls and no statistics yet, as after a burst of ingests into a new
// installation, when a planner guessing from statistics would go wrong.
TEST_P(QueueClaimsTest, EachClaimReadsItsQueueIndexInOrder) {
  Ingest(GetParam() == db::Backend::kSqlite ? 2000 : 600, /*recording=*/false);
  Ingest(50, /*recording=*/true);
  namespace q = calls::queue_claims;
  const std::string lock = GetParam() == db::Backend::kSqlite ? "" : " FOR UPDATE SKIP LOCKED";
  struct Lookup {
    std::string sql;
    bool binds_now;
    std::string index;
  };
  const std::vector<Lookup> lookups = {
      {absl::StrCat(q::kRecordingLeased, lock), true, "calls_recording_leased"},
      {absl::StrCat(q::kRecordingReady, lock), false, "calls_recording_ready"},
      {absl::StrCat(q::kTranscriptionColumns, q::kTranscriptionLeased, lock), true,
       "calls_transcription_leased"},
      {absl::StrCat(q::kTranscriptionColumns, q::kTranscriptionReady, lock), false,
       "calls_transcription_ready"},
      {absl::StrCat(q::kAnalysisColumns, q::kAnalysisLeased, lock), true, "calls_analysis_leased"},
      {absl::StrCat(q::kAnalysisColumns, q::kAnalysisReady, lock), false, "calls_analysis_ready"},
  };
  for (const Lookup& lookup : lookups) {
    auto plan = Plan(*db_, lookup.sql, lookup.binds_now);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(absl::StrContains(*plan, lookup.index)) << lookup.index << ":\n" << *plan;
    EXPECT_FALSE(absl::StrContains(*plan, "TEMP B-TREE")) << lookup.index << ":\n" << *plan;
    EXPECT_FALSE(absl::StrContains(*plan, "Sort")) << lookup.index << ":\n" << *plan;
    EXPECT_FALSE(absl::StrContains(*plan, "Bitmap")) << lookup.index << ":\n" << *plan;
  }
}

// Single runs are each claimed once; of a batch of concurrency 2, two runs start and no more,
// however many workers ask at once.
TEST_P(QueueClaimsTest, RunsAreEachClaimedOnceAndABatchKeepsItsConcurrency) {
  agents::AgentsStore& agents = directories_->agents;
  v1::AgentFields agent;
  agent.set_name("a");
  agent.set_phone_number("+16502530000");
  agent.set_language_id(1);
  agent.set_instructions("i");
  auto created_agent = agents.Create(workspace_, agent);
  ASSERT_TRUE(created_agent.ok()) << created_agent.status();
  agents::ScenariosStore& scenarios = directories_->scenarios;
  std::vector<int64_t> scenario_ids;
  for (int i = 0; i < 6; ++i) {
    v1::ScenarioFields s;
    s.set_agent_id(created_agent->id());
    s.set_name(absl::StrCat("s", i));
    s.set_goal("g");
    auto created = scenarios.Create(workspace_, s);
    ASSERT_TRUE(created.ok()) << created.status();
    scenario_ids.push_back(created->id());
  }
  std::vector<int64_t> singles;
  for (int i = 0; i < 24; ++i) {
    auto run =
        runs_->CreateRun(workspace_, scenario_ids[i % scenario_ids.size()], std::string("text"));
    ASSERT_TRUE(run.ok()) << run.status();
    singles.push_back(run->id());
  }
  v1::CreateBatchRunRequest request;
  request.set_agent_id(created_agent->id());
  for (int64_t s : scenario_ids) request.add_scenario_ids(s);
  request.set_channel("text");
  request.set_concurrency(2);
  auto batch = runs_->CreateBatch(workspace_, request);
  ASSERT_TRUE(batch.ok()) << batch.status();

  Claims claims = ClaimConcurrently([&]() -> absl::StatusOr<std::optional<int64_t>> {
    auto job = runs_->Lease(absl::Minutes(10), 3);
    if (!job.ok()) return job.status();
    if (!job->has_value()) return std::nullopt;
    return (*job)->run_id;
  });
  EXPECT_THAT(claims.errors, IsEmpty());
  EXPECT_THAT(Repeated(claims.ids), IsEmpty());
  int from_batch = 0;
  for (int64_t id : claims.ids) {
    if (absl::c_linear_search(batch->run_ids(), id)) ++from_batch;
  }
  EXPECT_EQ(from_batch, 2);
  std::vector<int64_t> singles_claimed;
  for (int64_t id : claims.ids) {
    if (!absl::c_linear_search(batch->run_ids(), id)) singles_claimed.push_back(id);
  }
  EXPECT_THAT(singles_claimed, ::testing::UnorderedElementsAreArray(singles));
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(QueueClaimsTest);

}  // namespace
}  // namespace calleval

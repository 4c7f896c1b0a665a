#include "common/sqlite.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/status_macros.h"

namespace calleval::db {
namespace {

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/sqlite_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Database> Open(const std::vector<Migration>& migrations) {
    auto db = Database::Open(dir_ + "/t.db", migrations);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? std::move(*db) : nullptr;
  }

  int64_t Count(Database& db) {
    auto n = ReadResult<int64_t>(db, [](Connection& c) -> absl::StatusOr<int64_t> {
      ASSIGN_OR_RETURN(auto s, c.Prepare("SELECT COUNT(*) FROM t"));
      ASSIGN_OR_RETURN(bool row, s.Step());
      return row ? s.Int64(0) : -1;
    });
    return n.ok() ? *n : -1;
  }

  std::string dir_;
};

const std::vector<Migration> kSchema = {
    {1, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)"},
    {2, "ALTER TABLE t ADD COLUMN w INTEGER"},
};

TEST_F(SqliteTest, MigrationsApplyOnceAndInOrder) {
  {
    auto db = Open({kSchema[0]});
    ASSERT_TRUE(db);
  }
  auto db = Open(kSchema);
  ASSERT_TRUE(db);
  absl::Status s = db->Write([](Connection& c) {
    ASSIGN_OR_RETURN(auto st, c.Prepare("INSERT INTO t (v, w) VALUES ('a', 1)"));
    return st.Run();
  });
  EXPECT_TRUE(s.ok()) << s;
  auto again = Open(kSchema);  // reopening applies nothing twice
  ASSERT_TRUE(again);
  EXPECT_EQ(Count(*again), 1);
}

TEST_F(SqliteTest, FailedWriteRollsBackOnlyItself) {
  auto db = Open(kSchema);
  ASSERT_TRUE(db);
  auto insert = [&](const std::string& v) {
    return db->Write([&](Connection& c) {
      ASSIGN_OR_RETURN(auto st, c.Prepare("INSERT INTO t (v) VALUES (?)"));
      st.Bind(1, v);
      RETURN_IF_ERROR(st.Run());
      // A second insert of the same value violates UNIQUE: the whole write must vanish.
      ASSIGN_OR_RETURN(auto again, c.Prepare("INSERT INTO t (v) VALUES (?)"));
      again.Bind(1, v == "dup" ? v : v + "2");
      return again.Run();
    });
  };
  EXPECT_TRUE(insert("ok").ok());
  absl::Status failed = insert("dup");
  EXPECT_EQ(failed.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Count(*db), 2);  // "ok" and "ok2", nothing of "dup"
}

TEST_F(SqliteTest, ConcurrentWritersAllCommitted) {
  auto db = Open(kSchema);
  ASSERT_TRUE(db);
  constexpr int kThreads = 16, kPerThread = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::Status s = db->Write([&](Connection& c) {
          ASSIGN_OR_RETURN(auto st, c.Prepare("INSERT INTO t (v) VALUES (?)"));
          st.Bind(1, std::to_string(t) + ":" + std::to_string(i));
          return st.Run();
        });
        if (!s.ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Count(*db), kThreads * kPerThread);
}

TEST_F(SqliteTest, ErrorInsideBatchDoesNotLoseNeighbours) {
  auto db = Open(kSchema);
  ASSERT_TRUE(db);
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        // Every odd thread writes the same value each time: only its first insert can succeed.
        std::string v =
            t % 2 ? "same" + std::to_string(t) : std::to_string(t) + "/" + std::to_string(i);
        absl::Status s = db->Write([&](Connection& c) {
          ASSIGN_OR_RETURN(auto st, c.Prepare("INSERT INTO t (v) VALUES (?)"));
          st.Bind(1, v);
          return st.Run();
        });
        (s.ok() ? ok : failed)++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 4 * 40 + 4);
  EXPECT_EQ(failed.load(), 4 * 39);
  EXPECT_EQ(Count(*db), 4 * 40 + 4);
}

}  // namespace
}  // namespace calleval::db

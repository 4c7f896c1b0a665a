#pragma once

// A fresh database for one test, on either backend: a SQLite file in a temporary directory, or a
// new database on the test PostgreSQL server (test_postgres.h). Store suites are parameterized
// over db::Backend with it, so every store rule is checked on both.

#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/database.h"

namespace calleval::db {

// Test names say the backend (found by argument-dependent lookup).
inline void PrintTo(Backend backend, std::ostream* os) {
  *os << (backend == Backend::kSqlite ? "sqlite" : "postgres");
}

}  // namespace calleval::db

namespace calleval::testing {

class TestDatabase {
 public:
  // Creates the database and applies `migrations`.
  static absl::StatusOr<std::unique_ptr<TestDatabase>> Create(
      db::Backend backend, const std::vector<db::Migration>& migrations,
      db::Database::Options options = {});
  ~TestDatabase();

  db::Database* db() const { return db_.get(); }
  // Gives the database away (the test keeps the directory until it ends).
  std::unique_ptr<db::Database> Release() { return std::move(db_); }
  // What Database::Open was given: the SQLite file's path, or the PostgreSQL URL.
  const std::string& url() const { return url_; }
  // The SQLite file; empty on PostgreSQL.
  const std::string& sqlite_path() const { return sqlite_path_; }

 private:
  TestDatabase() = default;
  std::string dir_;
  std::string url_;
  std::string sqlite_path_;
  std::unique_ptr<db::Database> db_;
};

// Instantiates a TEST_P suite on both backends, named by backend.
#define CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(suite)                                          \
  INSTANTIATE_TEST_SUITE_P(                                                                   \
      Backends, suite,                                                                        \
      ::testing::Values(::calleval::db::Backend::kSqlite, ::calleval::db::Backend::kPostgres), \
      [](const ::testing::TestParamInfo<::calleval::db::Backend>& info) {                    \
        return std::string(info.param == ::calleval::db::Backend::kSqlite ? "Sqlite"         \
                                                                          : "Postgres");     \
      })

}  // namespace calleval::testing

#include "tests/support/test_database.h"

#include <stdlib.h>

#include <system_error>

#include "absl/strings/str_cat.h"
#include "tests/support/test_postgres.h"

namespace calleval::testing {

absl::StatusOr<std::unique_ptr<TestDatabase>> TestDatabase::Create(
    db::Backend backend, const std::vector<db::Migration>& migrations,
    db::Database::Options options) {
  auto t = std::unique_ptr<TestDatabase>(new TestDatabase());
  if (backend == db::Backend::kSqlite) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "calleval-db-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
    t->dir_ = tmpl;
    t->sqlite_path_ = t->dir_ + "/calleval.db";
    t->url_ = t->sqlite_path_;
  } else {
    auto server = TestPostgres::Shared();
    if (!server.ok()) return server.status();
    auto url = (*server)->NewDatabase();
    if (!url.ok()) return url.status();
    t->url_ = *url;
  }
  auto db = db::Database::Open(t->url_, migrations, options);
  if (!db.ok()) return db.status();
  t->db_ = std::move(*db);
  return t;
}

TestDatabase::~TestDatabase() {
  db_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

}  // namespace calleval::testing

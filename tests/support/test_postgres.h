#pragma once

// A real PostgreSQL server for the tests, from Debian's `postgresql` package: initdb into a
// directory, the server listening on a unix socket only (no TCP port to collide on), fsync off
// (or, for benchmarks, PostgreSQL's durable defaults). Run as root, the server runs as the
// unprivileged user "nobody" (PostgreSQL refuses root).
//
// Under ctest one server serves the whole run: the fixture tests `postgres_start` and
// `postgres_stop` (tests/support/CMakeLists.txt) start and stop it in a directory of the build
// tree that the tests find in CALLEVAL_TEST_POSTGRES_DIR. A test binary run by hand starts a
// server of its own instead, stopped when the process exits. Every test takes a database of
// its own from NewDatabase().

#include <string>

#include "absl/status/statusor.h"

namespace calleval::testing {

class TestPostgres {
 public:
  enum class Durability {
    // fsync, synchronous_commit and full_page_writes off: nothing a test keeps outlives it.
    kNone,
    // PostgreSQL's defaults (all three on), so a benchmark measures commits that reach the disk.
    kDurable,
  };

  // Starts a server in `dir` (created if missing), or adopts the one already running there
  // (whatever its durability).
  static absl::StatusOr<TestPostgres> Start(const std::string& dir,
                                            Durability durability = Durability::kNone);
  // Stops the server running in `dir` and removes `dir`.
  static absl::Status Stop(const std::string& dir);

  // The server of this test process (see above); the status says why there is none.
  static absl::StatusOr<TestPostgres*> Shared();

  // Creates an empty database and returns its URL (postgresql://...).
  absl::StatusOr<std::string> NewDatabase() const;
  // The URL of the server's maintenance database.
  std::string AdminUrl() const;

 private:
  explicit TestPostgres(std::string dir) : dir_(std::move(dir)) {}
  std::string UrlFor(const std::string& database) const;

  std::string dir_;
};

}  // namespace calleval::testing

// The ctest fixture around the test PostgreSQL server (tests/support/test_postgres.h):
//   test_postgres start DIR [--durable]   starts a server in DIR (or finds it running);
//                                         --durable keeps fsync and synchronous_commit on,
//                                         for benchmarks (bench/edge_load.sh)
//   test_postgres stop DIR                stops it and removes DIR
//   test_postgres newdb DIR               creates a database on the server running in DIR,
//                                         prints its URL

#include <cstdio>
#include <string>

#include "tests/support/test_postgres.h"

int main(int argc, char** argv) {
  using calleval::testing::TestPostgres;
  const std::string command = argc >= 3 ? argv[1] : "";
  const bool durable = argc == 4 && command == "start" && std::string(argv[3]) == "--durable";
  if ((command != "start" && command != "stop" && command != "newdb") || (argc == 4 && !durable) ||
      argc > 4) {
    std::fprintf(stderr, "usage: test_postgres start DIR [--durable] | stop DIR | newdb DIR\n");
    return 2;
  }
  if (command == "newdb") {
    auto server = TestPostgres::Start(argv[2]);  // adopts the running one
    auto url = server.ok() ? server->NewDatabase() : absl::StatusOr<std::string>(server.status());
    if (!url.ok()) {
      std::fprintf(stderr, "%s\n", url.status().ToString().c_str());
      return 1;
    }
    std::printf("%s\n", url->c_str());
    return 0;
  }
  if (command == "start") {
    auto server = TestPostgres::Start(
        argv[2], durable ? TestPostgres::Durability::kDurable : TestPostgres::Durability::kNone);
    if (!server.ok()) {
      std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
      return 1;
    }
    std::printf("PostgreSQL for the tests: %s\n", server->AdminUrl().c_str());
    return 0;
  }
  auto stopped = TestPostgres::Stop(argv[2]);
  if (!stopped.ok()) {
    std::fprintf(stderr, "%s\n", stopped.ToString().c_str());
    return 1;
  }
  return 0;
}

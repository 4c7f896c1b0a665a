// The sandbox's pool is bounded and separate: while slow code fills it, ingest and reads answer
// at once, and the test_code requests beyond its threads and queue get 503 "overloaded" with
// Retry-After instead of waiting in an unbounded queue.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"

namespace calleval {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

TEST(WorkPoolsTest, SaturatedSandboxShedsAndLeavesIngestAndReadsFast) {
  const std::string dir = testing::MakeTempDir("workpools");
  ServerConfig config = testing::TestServerConfig(dir);
  config.sandbox_pool_threads = 1;
  config.sandbox_pool_queue = 1;
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string base = (*server)->http_base_url();
  const std::string key = (*server)->bootstrap()->key.api_key;

  testing::HttpClient client(base);
  client.set_api_key(key);
  testing::HttpResponse agent = client.Post("/api/v1/agents", json{{"name", "pools"},
                                                                   {"phone_number", "+14155550123"},
                                                                   {"language_id", 1},
                                                                   {"instructions", "Help."}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  const int64_t agent_id = agent.json()["id"];
  auto ingest = [&](const std::string& identifier) {
    return client.Post("/api/public/v1/calls",
                       json{{"call_identifier", identifier},
                            {"agent_id", agent_id},
                            {"transcript", {{{"role", "User"}, {"content", "Hello"}}}}});
  };
  testing::HttpResponse first = ingest("pools-0");
  ASSERT_EQ(first.status, 201) << first.body;
  const int64_t call_id = first.json()["id"];

  // One thread and one queue slot: two slow runs are accepted, the rest are shed.
  constexpr int kSlow = 5;
  std::vector<testing::HttpResponse> slow(kSlow);
  std::vector<std::thread> senders;
  for (int i = 0; i < kSlow; ++i) {
    senders.emplace_back([&, i] {
      testing::HttpClient sender(base);
      sender.set_api_key(key);
      slow[i] = sender.Post("/api/v1/metrics/test_code",
                            json{{"code", "import time\ntime.sleep(4)\nmetric['result'] = True"},
                                 {"call_observation_id", call_id}});
    });
  }
  // Let the slow requests reach the pool.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  const Clock::time_point start = Clock::now();
  testing::HttpResponse ingested = ingest("pools-1");
  testing::HttpResponse read = client.Get(absl::StrCat("/api/public/v1/calls/", call_id));
  testing::HttpResponse listed = client.Get("/api/public/v1/calls");
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(ingested.status, 201) << ingested.body;
  EXPECT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(listed.status, 200) << listed.body;
  EXPECT_LT(elapsed, std::chrono::seconds(2)) << "ingest and reads waited behind the sandbox";

  for (std::thread& sender : senders) sender.join();
  int ran = 0;
  int shed = 0;
  for (const testing::HttpResponse& r : slow) {
    if (r.status == 200) {
      ++ran;
      EXPECT_EQ(r.json()["result"], true) << r.body;
    } else {
      ++shed;
      EXPECT_EQ(r.status, 503) << r.body;
      EXPECT_EQ(r.json()["error"]["status"], 503);
      EXPECT_EQ(r.json()["error"]["code"], "overloaded");
      EXPECT_TRUE(r.json()["error"]["details"].is_array());
      EXPECT_EQ(r.headers.count("retry-after"), 1u);
    }
  }
  // At most the pool's thread and its one queue slot ran; every other request was shed. (Two
  // when the first was taken off the queue before the second arrived, one when the second
  // found the slot still taken: on a loaded machine the thread may start late.)
  EXPECT_GE(ran, 1);
  EXPECT_LE(ran, 2);
  EXPECT_EQ(ran + shed, kSlow);
  EXPECT_GE(shed, kSlow - 2);

  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calleval

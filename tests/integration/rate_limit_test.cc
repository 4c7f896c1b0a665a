// --rate-limit on the real server: a key over its rate gets 429 with Retry-After, another key
// is unaffected, and the probes are never limited. Requests without a known key are limited by
// client address, so guessing keys from one address is throttled like one key. The voice
// platforms' event routes, which no API key opens, are limited by client address too.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "cmd/calleval/server.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"

namespace calleval {
namespace {

TEST(RateLimitTest, KeyOverItsRateGets429) {
  const std::string dir = testing::MakeTempDir("ratelimit");
  ServerConfig config = testing::TestServerConfig(dir);
  config.rate_limit_per_second = 1;
  config.rate_limit_burst = 3;
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();

  testing::HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  int ok = 0;
  testing::HttpResponse limited;
  for (int i = 0; i < 10; ++i) {
    testing::HttpResponse r = client.Get("/api/v1/languages");
    if (r.status == 200) {
      ++ok;
    } else {
      limited = r;
    }
  }
  EXPECT_GE(ok, 3);
  EXPECT_LE(ok, 5);  // the burst, plus what one second refills at most
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.json()["error"]["code"], "rate_limited");
  EXPECT_FALSE(limited.headers["retry-after"].empty());

  testing::HttpClient other((*server)->http_base_url());
  other.set_api_key("cev_another_key_with_its_own_bucket");
  // Limited per authenticated key, not globally: an unknown key is charged to the address.
  EXPECT_EQ(other.Get("/api/v1/languages").status, 401);
  EXPECT_EQ(client.Get("/healthz").status, 200);

  server->reset();
  std::filesystem::remove_all(dir);
}

TEST(RateLimitTest, GuessedKeysShareTheAddressBucket) {
  const std::string dir = testing::MakeTempDir("ratelimit");
  ServerConfig config = testing::TestServerConfig(dir);
  config.rate_limit_per_second = 1;
  config.rate_limit_burst = 3;
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();

  // Each guess is a fresh key: it must not get a fresh bucket.
  testing::HttpClient guesser((*server)->http_base_url());
  int unauthorized = 0;
  testing::HttpResponse limited;
  for (int i = 0; i < 10; ++i) {
    guesser.set_api_key("cev_guess_" + std::to_string(i));
    testing::HttpResponse r = guesser.Get("/api/v1/languages");
    if (r.status == 401) {
      ++unauthorized;
    } else {
      limited = r;
    }
  }
  EXPECT_GE(unauthorized, 3);
  EXPECT_LE(unauthorized, 5);
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.json()["error"]["code"], "rate_limited");
  EXPECT_FALSE(limited.headers["retry-after"].empty());

  // No key at all is the same address bucket.
  testing::HttpClient anonymous((*server)->http_base_url());
  EXPECT_EQ(anonymous.Get("/api/v1/languages").status, 429);

  // The real key from the same address has its own bucket, untouched by the guesses.
  testing::HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  EXPECT_EQ(client.Get("/api/v1/languages").status, 200);

  server->reset();
  std::filesystem::remove_all(dir);
}

// Each event costs the database a look-up before it is answered, so a flood of events from one
// address is throttled like guessed keys, whatever secret each one carries.
TEST(RateLimitTest, PlatformEventsAreLimitedByAddress) {
  const std::string dir = testing::MakeTempDir("ratelimit");
  ServerConfig config = testing::TestServerConfig(dir);
  config.rate_limit_per_second = 1;
  config.rate_limit_burst = 3;
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();

  testing::HttpClient platform((*server)->http_base_url());
  const std::string event =
      R"({"message": {"type": "end-of-call-report", "call": {"id": "c1", "assistantId": "a"}}})";
  int answered = 0;
  testing::HttpResponse limited;
  for (int i = 0; i < 10; ++i) {
    // A fresh secret each time: it must not get a fresh bucket.
    testing::HttpResponse r = platform.Send(
        "POST", "/api/public/v1/integrations/vapi/events", &event,
        {{"Content-Type", "application/json"}, {"X-Vapi-Secret", "forged-" + std::to_string(i)}});
    if (r.status == 429) {
      limited = r;
    } else {
      ++answered;
      // No workspace has the assistant: acknowledged, nothing stored.
      EXPECT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.json()["outcome"], "ignored") << r.body;
    }
  }
  EXPECT_GE(answered, 3);
  EXPECT_LE(answered, 5);  // the burst, plus what one second refills at most
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.json()["error"]["code"], "rate_limited");
  EXPECT_FALSE(limited.headers["retry-after"].empty());
  // Retell's route is the same address's bucket.
  const std::string empty = "{}";
  EXPECT_EQ(platform
                .Send("POST", "/api/public/v1/integrations/retell/events", &empty,
                      {{"Content-Type", "application/json"}})
                .status,
            429);

  // A client with an API key on the same address has its own bucket.
  testing::HttpClient client((*server)->http_base_url());
  client.set_api_key((*server)->bootstrap()->key.api_key);
  EXPECT_EQ(client.Get("/api/v1/languages").status, 200);

  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calleval

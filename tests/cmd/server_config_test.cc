// `calleval serve` flags (cmd/calleval/server_config.h) that have no server behind them to test
// through: the providers' REST API bases, the phone runs' ring timeout.

#include "cmd/calleval/server_config.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace calleval {
namespace {

TEST(ServerConfigTest, ProviderApiUrlsDefaultToThePublicHosts) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->twilio_api_url, "https://api.twilio.com");
  EXPECT_EQ(config->telnyx_api_url, "https://api.telnyx.com");
  EXPECT_EQ(config->plivo_api_url, "https://api.plivo.com");
  EXPECT_EQ(config->vapi_api_url, "https://api.vapi.ai");
  EXPECT_EQ(config->retell_api_url, "https://api.retellai.com");
}

TEST(ServerConfigTest, ProviderApiUrlsComeFromFlagsAndTheEnvironment) {
  ::setenv("CALLEVAL_RETELL_API_URL", "http://127.0.0.1:9/retell/", 1);
  absl::StatusOr<ServerConfig> config = ParseServerConfig(
      {"--twilio-api-url", "http://127.0.0.1:8081/", "--vapi-api-url=https://vapi.test"});
  ::unsetenv("CALLEVAL_RETELL_API_URL");
  ASSERT_TRUE(config.ok()) << config.status();
  // The trailing '/' goes, so paths join cleanly.
  EXPECT_EQ(config->twilio_api_url, "http://127.0.0.1:8081");
  EXPECT_EQ(config->vapi_api_url, "https://vapi.test");
  EXPECT_EQ(config->retell_api_url, "http://127.0.0.1:9/retell");
  EXPECT_EQ(config->plivo_api_url, "https://api.plivo.com");
}

TEST(ServerConfigTest, ProviderApiUrlsMustBeHttpBasesWithAHost) {
  for (const char* bad : {"ftp://api.twilio.com", "api.twilio.com", "https://", "https:///x",
                          "https://api.twilio.com/?x=1", "https://api.twilio.com#f"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<ServerConfig> config = ParseServerConfig({"--twilio-api-url", bad});
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find("http(s) base URL"), std::string::npos)
        << config.status();
  }
}

TEST(ServerConfigTest, RingTimeoutIsSecondsFrom5To120) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ring_timeout, absl::Seconds(30));

  config = ParseServerConfig({"--ring-timeout", "45"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ring_timeout, absl::Seconds(45));

  ::setenv("CALLEVAL_RING_TIMEOUT", "5", 1);
  config = ParseServerConfig({});
  absl::StatusOr<ServerConfig> flag_wins = ParseServerConfig({"--ring-timeout=120"});
  ::unsetenv("CALLEVAL_RING_TIMEOUT");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ring_timeout, absl::Seconds(5));
  ASSERT_TRUE(flag_wins.ok()) << flag_wins.status();
  EXPECT_EQ(flag_wins->ring_timeout, absl::Seconds(120));

  for (const char* bad : {"4", "121", "0", "-30", "thirty", "30s"}) {
    SCOPED_TRACE(bad);
    config = ParseServerConfig({"--ring-timeout", bad});
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find("ring-timeout"), std::string::npos) << config.status();
  }
  EXPECT_NE(ParseServerConfig({"--ring-timeout", "121"}).status().message().find("5..120"),
            std::string::npos);
}

}  // namespace
}  // namespace calleval

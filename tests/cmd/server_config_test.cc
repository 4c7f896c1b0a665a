// `calleval serve` flags (cmd/calleval/server_config.h) that have no server behind them to test
// through: the providers' REST API bases.

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

}  // namespace
}  // namespace calleval

// `calleval serve` flags (cmd/calleval/server_config.h) that have no server behind them to test
// through: the providers' REST API bases, the phone runs' ring timeout, the phone lines' listener
// and its advertised address.

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
  EXPECT_EQ(config->retell_room_url, "wss://retell-ai-4ihahnq7.livekit.cloud");
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

// A runs process without an edge serves its phone lines on a listener of its own, loopback and
// a free port unless told otherwise; with the edge here (or no runs role) it has none.
TEST(ServerConfigTest, TheMediaListenerDefaultsByRoles) {
  absl::StatusOr<ServerConfig> runs = ParseServerConfig({"--roles", "runs"});
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(MediaListenAddr(*runs), "127.0.0.1:0");
  absl::StatusOr<ServerConfig> all = ParseServerConfig({});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(MediaListenAddr(*all), "");
  absl::StatusOr<ServerConfig> edge = ParseServerConfig({"--roles=edge,calls"});
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ(MediaListenAddr(*edge), "");
  absl::StatusOr<ServerConfig> off = ParseServerConfig({"--roles=runs", "--media-addr=off"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(MediaListenAddr(*off), "");
  // An all-roles process may open one too, so other edges reach its lines.
  absl::StatusOr<ServerConfig> both = ParseServerConfig({"--media-addr", "127.0.0.1:8081"});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(MediaListenAddr(*both), "127.0.0.1:8081");
}

// As pods set them: the listener on every interface from the environment, advertised at the
// pod's IP.
TEST(ServerConfigTest, TheMediaFlagsComeFromTheEnvironment) {
  ::setenv("CALLEVAL_MEDIA_ADDR", "0.0.0.0:8081", 1);
  ::setenv("CALLEVAL_MEDIA_ADVERTISE_ADDR", "10.244.1.7:8081", 1);
  absl::StatusOr<ServerConfig> config = ParseServerConfig({"--roles=runs"});
  ::unsetenv("CALLEVAL_MEDIA_ADDR");
  ::unsetenv("CALLEVAL_MEDIA_ADVERTISE_ADDR");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(MediaListenAddr(*config), "0.0.0.0:8081");
  EXPECT_EQ(config->media_advertise_addr, "10.244.1.7:8081");
}

TEST(ServerConfigTest, TheMediaFlagsAreRefusedWhenTheyCannotWork) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      // Nothing to advertise: the edges could not connect to "every interface".
      {{"--roles=runs", "--media-addr=0.0.0.0:8081"}, "--media-advertise-addr"},
      {{"--roles=runs", "--media-addr=[::]:8081"}, "--media-advertise-addr"},
      {{"--roles=runs", "--media-addr=0.0.0.0:8081", "--media-advertise-addr=0.0.0.0:8081"},
       "other processes can connect to"},
      {{"--roles=runs", "--media-advertise-addr=10.0.0.1:0"}, "other processes can connect to"},
      {{"--roles=runs", "--media-advertise-addr=10.0.0.1"}, "other processes can connect to"},
      {{"--roles=runs", "--media-addr=8081"}, "HOST:PORT or off"},
      {{"--roles=runs", "--media-addr=host:99999"}, "HOST:PORT or off"},
      {{"--roles=runs", "--media-addr=fd00::1:8081"}, "HOST:PORT or off"},
      // No runs role, no lines to serve.
      {{"--roles=edge", "--media-addr=127.0.0.1:8081"}, "does not run"},
      {{"--roles=runs", "--media-addr=off", "--media-advertise-addr=10.0.0.1:8081"},
       "does not open"},
      {{"--media-advertise-addr=10.0.0.1:8081"}, "does not open"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args.back());
    absl::StatusOr<ServerConfig> config = ParseServerConfig(c.args);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find(c.says), std::string::npos) << config.status();
  }
  absl::StatusOr<ServerConfig> ipv6 = ParseServerConfig(
      {"--roles=runs", "--media-addr=[::1]:0", "--media-advertise-addr=[fd00::7]:8081"});
  EXPECT_TRUE(ipv6.ok()) << ipv6.status();
}

}  // namespace
}  // namespace calleval

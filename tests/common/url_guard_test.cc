#include "common/url_guard.h"

#include <arpa/inet.h>
#include <sys/un.h>

#include <string>

#include "common/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval {
namespace {

using ::testing::HasSubstr;

struct BadUrl {
  const char* url;
  absl::string_view code;
  const char* message_part;  // expected in the status message
};

void PrintTo(const BadUrl& bad, std::ostream* os) { *os << '"' << bad.url << '"'; }

constexpr absl::string_view kNotPublic = kUrlNotPublicCode;
constexpr absl::string_view kInvalid = kInvalidUrlCode;

const BadUrl kBadUrls[] = {
    // Loopback in every IPv4 spelling.
    {"http://127.0.0.1/", kNotPublic, "host 127.0.0.1 is a loopback address"},
    {"https://127.0.0.1:8443/rec.wav", kNotPublic, "loopback"},
    {"http://127.1/", kNotPublic, "host 127.1 is 127.0.0.1, a loopback address"},
    {"http://127.0.1/", kNotPublic, "loopback"},
    {"http://0x7f.1/", kNotPublic, "host 0x7f.1 is 127.0.0.1, a loopback address"},
    {"http://0x7f000001/", kNotPublic, "loopback"},
    {"http://0X7F000001/", kNotPublic, "loopback"},
    {"http://2130706433/", kNotPublic, "host 2130706433 is 127.0.0.1"},
    {"http://0177.0.0.1/", kNotPublic, "loopback"},
    {"http://0177.1/", kNotPublic, "loopback"},
    {"http://017700000001/", kNotPublic, "loopback"},
    {"http://0x7f.0.0.0x1/", kNotPublic, "loopback"},
    {"http://0x7f.0.1/", kNotPublic, "loopback"},
    {"http://127.000.000.001/", kNotPublic, "loopback"},
    {"http://127.0.0.1./", kNotPublic, "loopback"},
    {"http://127.255.255.254/", kNotPublic, "loopback"},
    {"http://user:pw@127.0.0.1/", kNotPublic, "loopback"},
    {"http://example.com@127.0.0.1/", kNotPublic, "loopback"},
    // Private, link-local, metadata, CGNAT.
    {"http://10.0.0.1/", kNotPublic, "a private address"},
    {"http://10.255.255.255/", kNotPublic, "private"},
    {"http://172.16.0.1/", kNotPublic, "private"},
    {"http://172.31.255.254/", kNotPublic, "private"},
    {"http://192.168.1.1/", kNotPublic, "private"},
    {"http://0xc0a80101/", kNotPublic, "host 0xc0a80101 is 192.168.1.1, a private address"},
    {"http://3232235777/", kNotPublic, "private"},
    {"http://169.254.169.254/latest/meta-data/", kNotPublic, "cloud metadata"},
    {"http://0xa9fea9fe/", kNotPublic, "cloud metadata"},
    {"http://169.254.1.1/", kNotPublic, "link-local"},
    {"http://100.64.0.1/", kNotPublic, "carrier-grade NAT"},
    {"http://100.127.255.254/", kNotPublic, "carrier-grade NAT"},
    // Multicast, reserved, broadcast, unspecified, special-purpose.
    {"http://224.0.0.1/", kNotPublic, "multicast"},
    {"http://239.255.255.250:1900/", kNotPublic, "multicast"},
    {"http://240.0.0.1/", kNotPublic, "reserved"},
    {"http://255.255.255.255/", kNotPublic, "broadcast"},
    {"http://0.0.0.0/", kNotPublic, "unspecified"},
    {"http://0/", kNotPublic, "unspecified"},
    {"http://0.1.2.3/", kNotPublic, "this-network"},
    {"http://192.0.0.8/", kNotPublic, "IETF protocol"},
    {"http://192.0.2.1/", kNotPublic, "documentation"},
    {"http://198.18.0.1/", kNotPublic, "benchmarking"},
    {"http://198.19.255.1/", kNotPublic, "benchmarking"},
    {"http://198.51.100.7/", kNotPublic, "documentation"},
    {"http://203.0.113.9/", kNotPublic, "documentation"},
    // IPv6 literals.
    {"http://[::1]/", kNotPublic, "host [::1] is a loopback address"},
    {"http://[0:0:0:0:0:0:0:1]:8080/", kNotPublic, "loopback"},
    {"http://[::]/", kNotPublic, "unspecified"},
    {"http://[::ffff:127.0.0.1]/", kNotPublic, "IPv4-mapped form of 127.0.0.1, a loopback"},
    {"http://[::ffff:7f00:1]/", kNotPublic, "IPv4-mapped form of 127.0.0.1"},
    {"http://[::FFFF:10.0.0.1]/", kNotPublic, "IPv4-mapped form of 10.0.0.1, a private"},
    {"http://[::ffff:a9fe:a9fe]/", kNotPublic, "cloud metadata"},
    {"http://[::ffff:0:7f00:1]/", kNotPublic, "IPv4-translated form of 127.0.0.1"},
    {"http://[::127.0.0.1]/", kNotPublic, "IPv4-compatible form of 127.0.0.1"},
    {"http://[::7f00:1]/", kNotPublic, "IPv4-compatible"},
    {"http://[::a00:1]/", kNotPublic, "IPv4-compatible form of 10.0.0.1"},
    {"http://[64:ff9b::127.0.0.1]/", kNotPublic, "NAT64 form of 127.0.0.1"},
    {"http://[64:ff9b::a00:1]/", kNotPublic, "NAT64 form of 10.0.0.1"},
    {"http://[64:ff9b::a9fe:a9fe]/", kNotPublic, "NAT64 form of 169.254.169.254"},
    {"http://[64:ff9b:1::8.8.8.8]/", kNotPublic, "local-use NAT64"},
    {"http://[2002:7f00:1::]/", kNotPublic, "6to4 form of 127.0.0.1"},
    {"http://[2002:c0a8:101::1]/", kNotPublic, "6to4 form of 192.168.1.1"},
    {"http://[2002:a9fe:a9fe::1]/", kNotPublic, "6to4 form of 169.254.169.254"},
    // Teredo: client address inverted in the last 32 bits (~127.0.0.1, ~10.0.0.1).
    {"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", kNotPublic, "Teredo form of 127.0.0.1"},
    {"http://[2001:0:4136:e378::f5ff:fffe]/", kNotPublic, "Teredo form of 10.0.0.1"},
    {"http://[2001:0:a00:1::f7f7:f7f7]/", kNotPublic, "Teredo (server) form of 10.0.0.1"},
    {"http://[fe80::1]/", kNotPublic, "link-local"},
    {"http://[fe80::1%25eth0]/", kNotPublic, "zone id"},
    {"http://[fe80::1%eth0]/", kNotPublic, "zone id"},
    {"http://[fc00::1]/", kNotPublic, "unique local"},
    {"http://[fd00:ec2::254]/", kNotPublic, "unique local"},
    {"http://[fec0::1]/", kNotPublic, "site-local"},
    {"http://[ff02::1]/", kNotPublic, "multicast"},
    {"http://[ff0e::1]/", kNotPublic, "multicast"},
    {"http://[2001:db8::1]/", kNotPublic, "documentation"},
    {"http://[3fff::1]/", kNotPublic, "documentation"},
    {"http://[2001:2::1]/", kNotPublic, "benchmarking"},
    {"http://[100::1]/", kNotPublic, "discard-only"},
    {"http://[4000::1]/", kNotPublic, "reserved"},
    // Names of the local machine.
    {"http://localhost/", kNotPublic, "host localhost names the local machine"},
    {"http://LOCALHOST/a.wav", kNotPublic, "local machine"},
    {"http://localhost./", kNotPublic, "local machine"},
    {"http://localhost:8080/rec.wav", kNotPublic, "local machine"},
    {"http://foo.localhost/", kNotPublic, "local machine"},
    {"http://a.b.LocalHost./", kNotPublic, "local machine"},
    {"http://ip6-localhost/", kNotPublic, "local machine"},
    {"http://localhost.localdomain/", kNotPublic, "local machine"},
    // Schemes other than http(s) (docs/api.md §2: "must be http(s) and public" -> url_not_public).
    {"ftp://example.com/a.wav", kNotPublic, "scheme \"ftp\" is not allowed"},
    {"file:///etc/passwd", kNotPublic, "scheme \"file\""},
    {"FILE://localhost/etc/passwd", kNotPublic, "scheme \"file\""},
    {"gopher://example.com:70/_GET", kNotPublic, "scheme \"gopher\""},
    {"data:audio/wav;base64,UklGRg==", kNotPublic, "scheme \"data\""},
    {"javascript:alert(1)", kNotPublic, "scheme \"javascript\""},
    {"ws://example.com/socket", kNotPublic, "scheme \"ws\""},
    {"wss://example.com/socket", kNotPublic, "scheme \"wss\""},
    {"dict://example.com:11211/stat", kNotPublic, "scheme \"dict\""},
    {"ldap://example.com/", kNotPublic, "scheme \"ldap\""},
    {"tftp://example.com/a", kNotPublic, "scheme \"tftp\""},
    // Not usable URLs.
    {"", kInvalid, "is empty"},
    {"not a url", kInvalid, "spaces"},
    {"example.com/a.wav", kInvalid, "absolute URL"},
    {"//example.com/a.wav", kInvalid, "absolute URL"},
    {"/recordings/a.wav", kInvalid, "absolute URL"},
    {"http:example.com", kInvalid, "must start with http://"},
    {"http:/example.com/a.wav", kInvalid, "must start with http://"},
    {"http:///a.wav", kInvalid, "has no host"},
    {"http://", kInvalid, "has no host"},
    {"http://:80/", kInvalid, "has no host"},
    {"http://user@/", kInvalid, "has no host"},
    {"http://exa mple.com/", kInvalid, "spaces"},
    {"http://example.com/a\tb", kInvalid, "control"},
    {"http://1.2.3.999/", kInvalid, "not a valid IPv4 address"},
    {"http://256.0.0.1/", kInvalid, "not a valid IPv4 address"},
    {"http://4294967296/", kInvalid, "not a valid IPv4 address"},
    {"http://0x100000000/", kInvalid, "not a valid IPv4 address"},
    {"http://1.2.3.4.5/", kInvalid, "not a valid IPv4 address"},
    {"http://08.0.0.1/", kInvalid, "not a valid IPv4 address"},
    {"http://example.0x7f/", kInvalid, "not a valid IPv4 address"},
    {"http://[::1/", kInvalid, "unterminated"},
    {"http://[zz::1]/", kInvalid, "not a valid IPv6 address"},
    {"http://[::1]x/", kInvalid, "after the ]"},
    {"http://[v1.fe80::a+en1]/", kInvalid, "not a valid IPv6 address"},
    {"http://example.com:99999/", kInvalid, "port"},
    {"http://example.com:0/", kInvalid, "port"},
    {"http://example.com:8o/", kInvalid, "port"},
    {"http://a@b@example.com/", kInvalid, "more than one '@'"},
    {"http://%31%32%37.0.0.1/", kInvalid, "may contain only"},
    {"http://loc%61lhost/", kInvalid, "may contain only"},
    {"http://\xc3\xa4.example/", kInvalid, "punycode"},
    {"http://evil.com\\@127.0.0.1/", kInvalid, "backslash"},
    {"http://example..com/", kInvalid, "empty label"},
    {"http://.example.com/", kInvalid, "empty label"},
    {"http://example.com../", kInvalid, "empty label"},
};

class BadUrlTest : public ::testing::TestWithParam<BadUrl> {};

TEST_P(BadUrlTest, IsRejectedWithTheRightCode) {
  const BadUrl& bad = GetParam();
  absl::Status status = CheckUrlLiteral(bad.url, UrlGuardOptions{});
  ASSERT_FALSE(status.ok()) << bad.url;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.url;
  EXPECT_EQ(HttpStatusFor(status), 422) << bad.url;
  v1::ErrorInfo info = ErrorInfoOf(status);
  EXPECT_EQ(info.code(), bad.code) << bad.url << ": " << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(bad.message_part)) << bad.url;
  ASSERT_EQ(info.details_size(), 1) << bad.url;
  EXPECT_EQ(info.details(0).field(), "recording_url");
  EXPECT_THAT(std::string(status.message()), HasSubstr(info.details(0).issue()));
}

INSTANTIATE_TEST_SUITE_P(UrlGuard, BadUrlTest, ::testing::ValuesIn(kBadUrls));

const char* const kGoodUrls[] = {
    "https://example.com/a.wav",
    "http://example.com/a.wav",
    "HTTPS://EXAMPLE.com/A.WAV",
    "https://example.com:8443/rec?id=1&sig=abc%2F",
    "https://example.com/a.wav#t=10",
    "https://example.com./a.wav",
    "https://user:secret@recordings.example.com/r.wav",
    "https://api.twilio.com/2010-04-01/Accounts/AC1/Recordings/RE1.wav",
    "https://s3.eu-west-1.amazonaws.com/bucket/key%20name.wav",
    "https://my_bucket.storage.example/x",
    "https://xn--bcher-kva.example/r.mp3",
    "https://8.8.8.8/x",
    "http://1.1.1.1:8080/x",
    "http://134744072/x",
    "http://0x08080808/x",
    "https://100.63.255.255/x",
    "https://100.128.0.1/x",
    "https://172.32.0.1/x",
    "https://172.15.255.255/x",
    "https://192.169.0.1/x",
    "https://169.255.0.1/x",
    "https://223.255.255.254/x",
    "https://[2606:4700::1111]/x",
    "https://[2001:4860:4860::8888]:443/",
    "https://[::ffff:8.8.8.8]/",
    "https://[64:ff9b::808:808]/",
    "https://[2002:808:808::1]/",
    "https://[2a00:1450:4001:80b::200e]/a.wav",
};

class GoodUrlTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoodUrlTest, IsAccepted) {
  EXPECT_TRUE(CheckUrlLiteral(GetParam(), UrlGuardOptions{}).ok())
      << GetParam() << ": " << CheckUrlLiteral(GetParam(), UrlGuardOptions{});
}

INSTANTIATE_TEST_SUITE_P(UrlGuard, GoodUrlTest, ::testing::ValuesIn(kGoodUrls));

UrlGuardOptions Allowing(std::vector<std::string> hosts) {
  UrlGuardOptions options;
  options.allowed_hosts = std::move(hosts);
  return options;
}

TEST(AllowedHostsTest, MatchOnlyTheHostAsWritten) {
  UrlGuardOptions options = Allowing({"127.0.0.1"});
  EXPECT_TRUE(CheckUrlLiteral("http://127.0.0.1:8080/x.wav", options).ok());
  EXPECT_TRUE(CheckUrlLiteral("https://127.0.0.1/x.wav", options).ok());
  for (const char* url :
       {"http://localhost:8080/", "http://127.1/", "http://0x7f.1/", "http://2130706433/",
        "http://0177.0.0.1/", "http://127.0.0.1./", "http://[::ffff:127.0.0.1]/",
        "http://127.0.0.2/", "http://[::1]/", "http://127.000.000.001/"}) {
    absl::Status status = CheckUrlLiteral(url, options);
    EXPECT_EQ(ErrorInfoOf(status).code(), kUrlNotPublicCode) << url << ": " << status;
  }
}

TEST(AllowedHostsTest, StillCheckTheScheme) {
  UrlGuardOptions options = Allowing({"127.0.0.1"});
  EXPECT_EQ(ErrorInfoOf(CheckUrlLiteral("ftp://127.0.0.1/a", options)).code(), kUrlNotPublicCode);
  EXPECT_EQ(ErrorInfoOf(CheckUrlLiteral("http://127.0.0.1:0/a", options)).code(), kInvalidUrlCode);
}

TEST(AllowedHostsTest, NamesMatchIgnoringCase) {
  UrlGuardOptions options = Allowing({"localhost", "Minio.Internal"});
  EXPECT_TRUE(CheckUrlLiteral("http://localhost:9000/a", options).ok());
  EXPECT_TRUE(CheckUrlLiteral("http://LocalHost:9000/a", options).ok());
  EXPECT_TRUE(CheckUrlLiteral("http://minio.internal/a", options).ok());
  EXPECT_FALSE(CheckUrlLiteral("http://localhost./a", options).ok());
  EXPECT_FALSE(CheckUrlLiteral("http://foo.localhost/a", options).ok());
  EXPECT_FALSE(CheckUrlLiteral("http://127.0.0.1/a", options).ok());
}

TEST(AllowedHostsTest, Ipv6WithOrWithoutBrackets) {
  EXPECT_TRUE(CheckUrlLiteral("http://[::1]:9/a", Allowing({"[::1]"})).ok());
  EXPECT_TRUE(CheckUrlLiteral("http://[::1]:9/a", Allowing({"::1"})).ok());
  EXPECT_FALSE(CheckUrlLiteral("http://[0:0::1]:9/a", Allowing({"::1"})).ok());
  EXPECT_FALSE(CheckUrlLiteral("http://[fe80::1%25lo]/a", Allowing({"fe80::1%25lo"})).ok());
}

TEST(AllowedHostsTest, ParseCommaList) {
  EXPECT_THAT(ParseAllowedHosts(" 127.0.0.1, minio.internal ,,[::1]"),
              ::testing::ElementsAre("127.0.0.1", "minio.internal", "[::1]"));
  EXPECT_TRUE(ParseAllowedHosts("").empty());
}

TEST(UrlGuardTest, WebSocketSchemesWhenAllowed) {
  UrlGuardOptions options;
  options.allowed_schemes = {"http", "https", "ws", "wss"};
  EXPECT_TRUE(CheckUrlLiteral("wss://agent.example.com/socket", options, "websocket_url").ok());
  absl::Status status = CheckUrlLiteral("ws://127.0.0.1:9/socket", options, "websocket_url");
  EXPECT_EQ(ErrorInfoOf(status).code(), kUrlNotPublicCode);
  EXPECT_EQ(ErrorInfoOf(status).details(0).field(), "websocket_url");
  EXPECT_THAT(std::string(status.message()), HasSubstr("websocket_url must be a public"));
}

TEST(UrlGuardTest, ParsedParts) {
  absl::StatusOr<ParsedUrl> parsed =
      CheckAndParseUrl("HTTPS://user:pw@Example.com:8443/a/b.wav?x=1#frag", UrlGuardOptions{});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->scheme, "https");
  EXPECT_EQ(parsed->host, "Example.com");
  EXPECT_EQ(parsed->port, 8443);
  EXPECT_EQ(parsed->path, "/a/b.wav?x=1");
  EXPECT_TRUE(parsed->has_credentials);
  EXPECT_FALSE(parsed->allowed_host);

  parsed = CheckAndParseUrl("http://[2606:4700::1111]", UrlGuardOptions{});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->host, "[2606:4700::1111]");
  EXPECT_EQ(parsed->port, 80);
  EXPECT_EQ(parsed->path, "/");
}

TEST(UrlGuardTest, MessagesNeverShowCredentials) {
  absl::Status status = CheckUrlLiteral("http://admin:hunter2@10.0.0.1/", UrlGuardOptions{});
  EXPECT_THAT(std::string(status.message()), ::testing::Not(HasSubstr("hunter2")));
  EXPECT_EQ(RedactUrl("https://u:p@example.com/a?b=c@d"), "https://example.com/a?b=c@d");
  EXPECT_EQ(RedactUrl("https://example.com/a"), "https://example.com/a");
  EXPECT_EQ(RedactUrl("not a url"), "not a url");
}

TEST(ParseIpv4LiteralTest, AllSpellings) {
  auto dotted = [](absl::string_view text) -> std::string {
    std::optional<in_addr> addr = ParseIpv4Literal(text);
    if (!addr) return "none";
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &*addr, buf, sizeof buf);
    return buf;
  };
  EXPECT_EQ(dotted("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(dotted("127.1"), "127.0.0.1");
  EXPECT_EQ(dotted("127.0.1"), "127.0.0.1");
  EXPECT_EQ(dotted("2130706433"), "127.0.0.1");
  EXPECT_EQ(dotted("0x7f000001"), "127.0.0.1");
  EXPECT_EQ(dotted("0x7f.1"), "127.0.0.1");
  EXPECT_EQ(dotted("0177.0.0.1"), "127.0.0.1");
  EXPECT_EQ(dotted("0x7f.0.0x0.01"), "127.0.0.1");
  EXPECT_EQ(dotted("0x"), "0.0.0.0");
  EXPECT_EQ(dotted("4294967295"), "255.255.255.255");
  EXPECT_EQ(dotted("1.16777215"), "1.255.255.255");
  EXPECT_EQ(dotted("4294967296"), "none");
  EXPECT_EQ(dotted("1.16777216"), "none");
  EXPECT_EQ(dotted("256.1"), "none");
  EXPECT_EQ(dotted("09"), "none");
  EXPECT_EQ(dotted("1..1"), "none");
  EXPECT_EQ(dotted("1.2.3.4.5"), "none");
  EXPECT_EQ(dotted("example"), "none");
  EXPECT_EQ(dotted(""), "none");
}

sockaddr_in V4Sockaddr(const char* text) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, text, &sa.sin_addr);
  return sa;
}

sockaddr_in6 V6Sockaddr(const char* text) {
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  inet_pton(AF_INET6, text, &sa.sin6_addr);
  return sa;
}

TEST(IsPublicAddressTest, Sockaddrs) {
  for (const char* text : {"8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "192.0.1.255",
                           "198.17.255.255", "223.255.255.255"}) {
    sockaddr_in sa = V4Sockaddr(text);
    EXPECT_TRUE(IsPublicAddress(reinterpret_cast<sockaddr*>(&sa))) << text;
  }
  for (const char* text :
       {"127.0.0.1", "10.1.2.3", "172.20.0.1", "192.168.0.1", "169.254.169.254", "100.64.0.1",
        "224.0.0.251", "240.0.0.1", "255.255.255.255", "0.0.0.0", "192.0.0.1", "192.0.2.1",
        "198.18.0.1", "198.51.100.1", "203.0.113.1", "192.88.99.1"}) {
    sockaddr_in sa = V4Sockaddr(text);
    EXPECT_FALSE(IsPublicAddress(reinterpret_cast<sockaddr*>(&sa))) << text;
  }
  for (const char* text : {"2606:4700::1111", "2001:4860:4860::8888", "::ffff:8.8.8.8",
                           "64:ff9b::808:808", "2002:808:808::1"}) {
    sockaddr_in6 sa = V6Sockaddr(text);
    EXPECT_TRUE(IsPublicAddress(reinterpret_cast<sockaddr*>(&sa))) << text;
  }
  for (const char* text :
       {"::1", "::", "::ffff:127.0.0.1", "::ffff:192.168.0.1", "fe80::1", "fc00::1", "fd00::1",
        "fec0::1", "ff02::1", "2001:db8::1", "64:ff9b::7f00:1", "2002:a00:1::", "::10.0.0.1"}) {
    sockaddr_in6 sa = V6Sockaddr(text);
    EXPECT_FALSE(IsPublicAddress(reinterpret_cast<sockaddr*>(&sa))) << text;
  }
  sockaddr_un unix_addr{};
  unix_addr.sun_family = AF_UNIX;
  EXPECT_FALSE(IsPublicAddress(reinterpret_cast<sockaddr*>(&unix_addr)));
  EXPECT_FALSE(IsPublicAddress(static_cast<const sockaddr*>(nullptr)));
}

TEST(IsPublicAddressTest, ReasonsAndTextForms) {
  sockaddr_in6 sa = V6Sockaddr("::ffff:169.254.169.254");
  EXPECT_EQ(NonPublicReason(reinterpret_cast<sockaddr*>(&sa)),
            "an IPv4-mapped form of 169.254.169.254, the cloud metadata address (link-local)");
  EXPECT_EQ(AddressToString(reinterpret_cast<sockaddr*>(&sa)), "::ffff:169.254.169.254");
  sockaddr_in v4 = V4Sockaddr("10.0.0.1");
  EXPECT_EQ(NonPublicReason(v4.sin_addr), "a private address");
  EXPECT_EQ(AddressToString(reinterpret_cast<sockaddr*>(&v4)), "10.0.0.1");
}

}  // namespace
}  // namespace calleval

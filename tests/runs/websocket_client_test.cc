#include "services/runs/websocket_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "tests/support/websocket_test_server.h"

namespace calleval::runs {
namespace {

// Echoes every message back, text as text and binary as binary, until the client closes.
void Echo(WebSocketConnection& connection) {
  while (true) {
    auto messages = connection.Poll(absl::Milliseconds(50));
    if (!messages.ok()) return;
    for (const auto& m : *messages) {
      absl::Status sent = m.binary ? connection.SendBinary(m.data) : connection.SendText(m.data);
      if (!sent.ok()) return;
    }
  }
}

WebSocketOptions Allowed() {
  WebSocketOptions options;
  options.guard.allowed_hosts = {"127.0.0.1"};
  options.connect_timeout = absl::Seconds(2);
  return options;
}

std::vector<WebSocketMessage> ReceiveAtLeast(WebSocketConnection& c, size_t n) {
  std::vector<WebSocketMessage> all;
  for (int i = 0; i < 100 && all.size() < n; ++i) {
    auto got = c.Poll(absl::Milliseconds(20));
    if (!got.ok()) break;
    all.insert(all.end(), got->begin(), got->end());
  }
  return all;
}

TEST(WebSocketClientTest, TextAndBinaryRoundTrip) {
  WebSocketTestServer server(Echo);
  auto c = WebSocketConnection::Connect(server.url("/media"), Allowed());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->SendText(R"({"event":"connected"})").ok());
  ASSERT_TRUE((*c)->SendBinary(std::string("\x00\x01\xff", 3)).ok());
  const auto got = ReceiveAtLeast(**c, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_FALSE(got[0].binary);
  EXPECT_EQ(got[0].data, R"({"event":"connected"})");
  EXPECT_TRUE(got[1].binary);
  EXPECT_EQ(got[1].data, std::string("\x00\x01\xff", 3));
  // Nothing more: Poll returns empty after its wait.
  auto none = (*c)->Poll(absl::Milliseconds(30));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  (*c)->Close();
}

TEST(WebSocketClientTest, NonPublicAddressesAreRefusedBeforeConnecting) {
  WebSocketTestServer server(Echo);
  WebSocketOptions options;  // no allow-list
  auto literal = WebSocketConnection::Connect(server.url("/"), options);
  ASSERT_FALSE(literal.ok());
  EXPECT_EQ(HttpStatusFor(literal.status()), 422);
  EXPECT_EQ(ErrorInfoOf(literal.status()).code(), "url_not_public");
  // DNS rebinding: a public-looking name that resolves to loopback.
  options.resolve_override = {{"public.test", "127.0.0.1"}};
  auto rebound = WebSocketConnection::Connect(
      absl::StrCat("ws://public.test:", server.port(), "/"), options);
  ASSERT_FALSE(rebound.ok());
  EXPECT_EQ(ErrorInfoOf(rebound.status()).code(), "url_not_public");
  EXPECT_NE(std::string(rebound.status().message()).find("127.0.0.1"), std::string::npos);
  // Allowing the literal does not allow a name that resolves to it.
  options.guard.allowed_hosts = {"127.0.0.1"};
  EXPECT_FALSE(WebSocketConnection::Connect(absl::StrCat("ws://public.test:", server.port(), "/"),
                                            options)
                   .ok());
  EXPECT_EQ(server.connections(), 0);
  // Only ws and wss.
  EXPECT_EQ(HttpStatusFor(WebSocketConnection::Connect(
                              absl::StrCat("http://127.0.0.1:", server.port(), "/"), Allowed())
                              .status()),
            422);
}

TEST(WebSocketClientTest, AnUpgradeThatNeverComesTimesOut) {
  // A socket that listens but never answers.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  WebSocketOptions options = Allowed();
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto c = WebSocketConnection::Connect(absl::StrCat("ws://127.0.0.1:", ntohs(addr.sin_port), "/"),
                                        options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  ::close(fd);
}

TEST(WebSocketClientTest, APeerThatClosesEndsThePoll) {
  WebSocketTestServer server([](WebSocketConnection& c) { (void)c.SendText("bye"); });
  auto c = WebSocketConnection::Connect(server.url("/"), Allowed());
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status ended;
  std::vector<std::string> got;
  for (int i = 0; i < 100; ++i) {
    auto messages = (*c)->Poll(absl::Milliseconds(20));
    if (!messages.ok()) {
      ended = messages.status();
      break;
    }
    for (auto& m : *messages) got.push_back(m.data);
  }
  EXPECT_EQ(got, std::vector<std::string>{"bye"});
  EXPECT_EQ(ended.code(), absl::StatusCode::kCancelled) << ended;
}

}  // namespace
}  // namespace calleval::runs

namespace calleval::runs {
namespace {

// A throwaway certificate authority and server certificate, made with the openssl tool.
class TlsFiles {
 public:
  explicit TlsFiles(const std::string& subject_alt_name) {
    char tmpl[] = "/tmp/wss_XXXXXX";
    dir_ = mkdtemp(tmpl);
    const std::string command = absl::StrCat(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=calleval-test -addext "
        "subjectAltName=",
        subject_alt_name, " -keyout ", key(), " -out ", cert(), " >/dev/null 2>&1");
    ok_ = std::system(command.c_str()) == 0;
  }
  ~TlsFiles() { std::system(absl::StrCat("rm -rf ", dir_).c_str()); }
  bool ok() const { return ok_; }
  std::string cert() const { return dir_ + "/cert.pem"; }
  std::string key() const { return dir_ + "/key.pem"; }

 private:
  std::string dir_;
  bool ok_ = false;
};

TEST(WebSocketClientTest, WssVerifiesTheCertificateAndTheHostName) {
  TlsFiles tls("IP:127.0.0.1");
  if (!tls.ok()) GTEST_SKIP() << "the openssl tool is not installed";
  WebSocketTestServer server(Echo, tls.cert(), tls.key());
  WebSocketOptions options = Allowed();
  // Not in the system's trust store: refused.
  auto untrusted = WebSocketConnection::Connect(server.url("/"), options);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), absl::StatusCode::kUnavailable) << untrusted.status();
  // Trusted through ca_file: a working TLS websocket.
  options.ca_file = tls.cert();
  auto c = WebSocketConnection::Connect(server.url("/secure"), options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->SendText("over tls").ok());
  const auto got = ReceiveAtLeast(**c, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, "over tls");
  (*c)->Close();
}

TEST(WebSocketClientTest, WssRefusesACertificateForAnotherHost) {
  TlsFiles tls("DNS:other.test");
  if (!tls.ok()) GTEST_SKIP() << "the openssl tool is not installed";
  WebSocketTestServer server(Echo, tls.cert(), tls.key());
  WebSocketOptions options = Allowed();
  options.ca_file = tls.cert();
  auto c = WebSocketConnection::Connect(server.url("/"), options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
}

}  // namespace
}  // namespace calleval::runs

// The edge's hop to a phone line held by another process (edge/media_relay.h): a forwarded
// request keeps what the holder checks (method, path, signature headers, body) and its answer
// comes back as the holder gave it; a spliced stream carries the upgrade request first, then
// bytes both ways until the sides close; a holder that cannot be reached, or work beyond the
// cap, is 503; Shutdown cuts what is still relayed once the drain is over.

#include "edge/media_relay.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/support/test_http_server.h"

namespace calleval::edge {
namespace {

// Reads from `fd` until `want` bytes came or the peer closed (the test's deadline is ctest's).
std::string ReadSome(int fd, size_t want) {
  std::string got;
  char buffer[4096];
  while (got.size() < want) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

std::string ReadToEnd(int fd) { return ReadSome(fd, static_cast<size_t>(-1)); }

// A TCP holder that reads the upgrade request, answers "hi ", then echoes until its peer
// closes; `received_first` is what it read before answering.
class EchoHolder {
 public:
  explicit EchoHolder(size_t first_bytes) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(listen_fd_, 8);
    thread_ = std::thread([this, first_bytes] {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      received_first_.set_value(ReadSome(fd, first_bytes));
      send(fd, "hi ", 3, MSG_NOSIGNAL);
      char buffer[4096];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) send(fd, buffer, n, MSG_NOSIGNAL);
      close(fd);
    });
  }
  ~EchoHolder() {
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::string received_first() { return received_first_.get_future().get(); }

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  std::promise<std::string> received_first_;
  std::thread thread_;
};

// An address nothing listens on.
std::string ClosedAddress() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
}

LocalResponse ForwardAndWait(MediaRelay& relay, LocalRequest request, const std::string& holder) {
  std::promise<LocalResponse> answered;
  relay.Forward(std::move(request), holder,
                [&answered](LocalResponse response) { answered.set_value(std::move(response)); });
  return answered.get_future().get();
}

void WaitUntilIdle(const MediaRelay& relay) {
  while (relay.active() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

TEST(MediaRelayTest, ForwardsARequestAsTheHolderChecksItAndRelaysItsAnswer) {
  TestHttpServer holder;
  holder.HandlePrefix("/media/", [](const TestHttpServer::Request& r) {
    TestHttpServer::Response out;
    out.status = 403;  // the holder's verdict, whatever it is, is the carrier's answer
    out.content_type = "application/json; charset=utf-8";
    out.body = absl::StrCat(r.method, " ", r.target, "|sig=", r.Header("x-twilio-signature"),
                            "|type=", r.Header("content-type"), "|te=",
                            r.Header("transfer-encoding"), "|body=", r.body);
    return out;
  });
  MediaRelay relay;
  LocalRequest request;
  request.method = "POST";
  request.path = "/media/twilio/token.route.mac/events";
  request.headers = {{"content-type", "application/x-www-form-urlencoded"},
                     {"x-twilio-signature", "c2lnbmF0dXJl"},
                     {"connection", "keep-alive"},
                     {"transfer-encoding", "chunked"},  // one hop's: not passed on
                     {"host", "calls.example.com"}};
  request.body = "CallStatus=ringing&CallSid=CA1";
  const LocalResponse answer =
      ForwardAndWait(relay, request, absl::StrCat("127.0.0.1:", holder.port()));
  EXPECT_EQ(answer.status, 403);
  EXPECT_EQ(answer.content_type, "application/json; charset=utf-8");
  EXPECT_EQ(answer.body,
            "POST /media/twilio/token.route.mac/events|sig=c2lnbmF0dXJl|type=application/"
            "x-www-form-urlencoded|te=|body=CallStatus=ringing&CallSid=CA1");
  ASSERT_EQ(holder.requests().size(), 1u);
  EXPECT_EQ(holder.requests()[0].Header("host"), absl::StrCat("127.0.0.1:", holder.port()));
  WaitUntilIdle(relay);
}

TEST(MediaRelayTest, AHolderThatCannotBeReachedOrAnswersTooMuchIsUnavailable) {
  MediaRelay relay;
  LocalRequest request;
  request.method = "POST";
  request.path = "/media/twilio/t/events";
  LocalResponse answer = ForwardAndWait(relay, request, ClosedAddress());
  EXPECT_EQ(answer.status, 503);
  EXPECT_TRUE(absl::StrContains(answer.body, "cannot be reached")) << answer.body;

  TestHttpServer holder;
  holder.Serve("/media/twilio/t/events", std::string(4096, 'x'), "text/plain");
  MediaRelayOptions small;
  small.max_response_bytes = 1024;
  MediaRelay capped(small);
  answer = ForwardAndWait(capped, request, absl::StrCat("127.0.0.1:", holder.port()));
  EXPECT_EQ(answer.status, 503) << answer.body;
}

TEST(MediaRelayTest, SplicesTheUpgradeFirstThenBytesBothWays) {
  const std::string upgrade =
      "GET /media/twilio/t HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
  EchoHolder holder(upgrade.size() + 5);
  MediaRelay relay;
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  // What the edge had read: the request head and the first bytes after it.
  relay.Splice(UpgradedConnection{pair[0], upgrade + "frame"}, holder.address());
  EXPECT_EQ(holder.received_first(), upgrade + "frame");
  EXPECT_EQ(ReadSome(pair[1], 3), "hi ");
  EXPECT_EQ(relay.active(), 1);
  ASSERT_EQ(send(pair[1], "media-1", 7, 0), 7);
  EXPECT_EQ(ReadSome(pair[1], 7), "media-1");
  // The carrier hangs up: the holder sees the end, closes, and the stream is over.
  shutdown(pair[1], SHUT_WR);
  EXPECT_EQ(ReadToEnd(pair[1]), "");
  WaitUntilIdle(relay);
  close(pair[1]);
}

TEST(MediaRelayTest, BeyondTheCapOrWithoutAHolderTheCarrierGets503) {
  const std::string upgrade = "GET /media/twilio/t HTTP/1.1\r\n\r\n";
  EchoHolder holder(upgrade.size());
  MediaRelayOptions options;
  options.max_active = 1;
  MediaRelay relay(options);
  int first[2], second[2], third[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, first), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, second), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, third), 0);
  relay.Splice(UpgradedConnection{first[0], upgrade}, holder.address());
  EXPECT_EQ(ReadSome(first[1], 3), "hi ");

  relay.Splice(UpgradedConnection{second[0], upgrade}, holder.address());
  const std::string refused = ReadToEnd(second[1]);
  EXPECT_TRUE(absl::StartsWith(refused, "HTTP/1.1 503 ")) << refused;
  EXPECT_TRUE(absl::StrContains(refused, "\"overloaded\"")) << refused;
  LocalRequest request;
  request.method = "POST";
  request.path = "/media/twilio/t/events";
  EXPECT_EQ(ForwardAndWait(relay, request, holder.address()).status, 503);

  shutdown(first[1], SHUT_WR);
  EXPECT_EQ(ReadToEnd(first[1]), "");
  WaitUntilIdle(relay);

  relay.Splice(UpgradedConnection{third[0], upgrade}, ClosedAddress());
  const std::string unreachable = ReadToEnd(third[1]);
  EXPECT_TRUE(absl::StartsWith(unreachable, "HTTP/1.1 503 ")) << unreachable;
  WaitUntilIdle(relay);
  for (int fd : {first[1], second[1], third[1]}) close(fd);
}

TEST(MediaRelayTest, ShutdownCutsStreamsStillRelayedAfterTheDrain) {
  const std::string upgrade = "GET /media/twilio/t HTTP/1.1\r\n\r\n";
  EchoHolder holder(upgrade.size());
  MediaRelayOptions options;
  options.drain_timeout = absl::ZeroDuration();
  MediaRelay relay(options);
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  relay.Splice(UpgradedConnection{pair[0], upgrade}, holder.address());
  EXPECT_EQ(ReadSome(pair[1], 3), "hi ");
  relay.Shutdown();
  EXPECT_EQ(relay.active(), 0);
  EXPECT_EQ(ReadToEnd(pair[1]), "");  // closed by the relay
  // Nothing new is taken once it is shutting down.
  int late[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, late), 0);
  relay.Splice(UpgradedConnection{late[0], upgrade}, holder.address());
  EXPECT_TRUE(absl::StartsWith(ReadToEnd(late[1]), "HTTP/1.1 503 "));
  close(pair[1]);
  close(late[1]);
}

}  // namespace
}  // namespace calleval::edge

// The registry of pending phone lines: tokens, the webhooks' delivery and refusal, the media
// token's single use, expiry.

#include "services/runs/phone_lines.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/match.h"

namespace calleval::runs {
namespace {

// A reader that accepts a webhook whose "signature" header says "good".
WebhookReader Reader() {
  return [](const CarrierWebhook& hook) -> absl::StatusOr<std::vector<CarrierEvent>> {
    auto it = hook.headers.find("signature");
    if (it == hook.headers.end() || it->second != "good") {
      return absl::UnauthenticatedError("bad signature");
    }
    CarrierEvent event;
    event.progress = CarrierEvent::kRinging;
    event.detail = hook.url;  // what the line signed: the public URL
    return std::vector<CarrierEvent>{event};
  };
}

CarrierWebhook Hook(const std::string& signature) {
  CarrierWebhook hook;
  hook.method = "POST";
  hook.headers["signature"] = signature;
  return hook;
}

std::string PathOf(const std::string& url) { return url.substr(url.find("/media/")); }

TEST(PhoneLinesTest, TokensAreLongRandomAndNameTheLinesUrls) {
  PhoneLines lines("https://calls.example.com");
  auto a = lines.Open("twilio", Reader(), absl::Minutes(1));
  auto b = lines.Open("twilio", Reader(), absl::Minutes(1));
  EXPECT_NE(a->token(), b->token());
  // 32 random bytes in base64url: 43 characters, safe in a path.
  EXPECT_EQ(a->token().size(), 43u);
  EXPECT_EQ(a->token().find_first_not_of(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
            std::string::npos);
  EXPECT_EQ(a->media_url(), "wss://calls.example.com/media/twilio/" + a->token());
  EXPECT_EQ(a->events_url(), "https://calls.example.com/media/twilio/" + a->token() + "/events");
  EXPECT_EQ(lines.open_lines(), 2u);
  b.reset();
  EXPECT_EQ(lines.open_lines(), 1u);
}

TEST(PhoneLinesTest, SignedWebhooksAreDeliveredAndForgedOnesChangeNothing) {
  PhoneLines lines("https://calls.example.com");
  auto line = lines.Open("twilio", Reader(), absl::Minutes(1));
  const std::string path = PathOf(line->events_url());
  EXPECT_EQ(lines.Webhook(path, Hook("forged")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(line->Wait(absl::Milliseconds(10)).events.empty());

  ASSERT_TRUE(lines.Webhook(path, Hook("good")).ok());
  PhoneLine::Arrived arrived = line->Wait(absl::Seconds(1));
  ASSERT_EQ(arrived.events.size(), 1u);
  EXPECT_EQ(arrived.events[0].detail, line->events_url());

  // Unknown token, another carrier's path, a closed line: all 404 alike.
  EXPECT_EQ(lines.Webhook("/media/twilio/nope/events", Hook("good")).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(lines.Webhook("/media/telnyx/" + line->token() + "/events", Hook("good")).code(),
            absl::StatusCode::kNotFound);
  line.reset();
  EXPECT_EQ(lines.Webhook(path, Hook("good")).code(), absl::StatusCode::kNotFound);
}

TEST(PhoneLinesTest, ExpiredLinesAnswerNotFound) {
  PhoneLines lines("https://calls.example.com");
  auto line = lines.Open("twilio", Reader(), absl::ZeroDuration());
  EXPECT_EQ(lines.Webhook(PathOf(line->events_url()), Hook("good")).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(lines.ClaimMedia(PathOf(line->media_url())).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PhoneLinesTest, ASignedAnswerFetchTellsTheRunAndAnyFetchGetsTheDocument) {
  PhoneLines lines("https://calls.example.com");
  auto line = lines.Open("plivo", Reader(), absl::Minutes(1));
  line->set_answer_document("<Response/>");
  const std::string path = PathOf(line->answer_url());
  CarrierWebhook fetch = Hook("good");
  fetch.body = "CallStatus=in-progress";
  absl::StatusOr<std::string> document = lines.Answer(path, fetch);
  ASSERT_TRUE(document.ok()) << document.status();
  EXPECT_EQ(*document, "<Response/>");
  PhoneLine::Arrived arrived = line->Wait(absl::Seconds(2));
  ASSERT_EQ(arrived.events.size(), 1u);
  EXPECT_EQ(arrived.events[0].detail, line->answer_url());  // what the line verified: its URL

  // Unsigned (or a GET): the same document, and nothing reaches the run.
  fetch = Hook("bad");
  fetch.body = "CallStatus=in-progress";
  EXPECT_EQ(*lines.Answer(path, fetch), "<Response/>");
  EXPECT_EQ(*lines.Answer(path), "<Response/>");
  EXPECT_TRUE(line->Wait(absl::Milliseconds(50)).events.empty());
}

TEST(PhoneLinesTest, MediaTokenIsSingleUseAndTheConnectionReachesTheRun) {
  PhoneLines lines("http://127.0.0.1:8080");
  auto line = lines.Open("twilio", Reader(), absl::Minutes(1));
  EXPECT_TRUE(absl::StartsWith(line->media_url(), "ws://127.0.0.1:8080/media/twilio/"));
  const std::string path = PathOf(line->media_url());
  auto take = lines.ClaimMedia(path);
  ASSERT_TRUE(take.ok()) << take.status();
  EXPECT_EQ(lines.ClaimMedia(path).status().code(), absl::StatusCode::kAlreadyExists);

  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::thread edge([&] { (*take)(MediaHandoff{fds[0], "GET / HTTP/1.1\r\n\r\n"}); });
  PhoneLine::Arrived arrived = line->Wait(absl::Seconds(2));
  edge.join();
  ASSERT_TRUE(arrived.media.has_value());
  EXPECT_EQ(arrived.media->fd, fds[0]);
  EXPECT_EQ(arrived.media->received, "GET / HTTP/1.1\r\n\r\n");
  ::close(arrived.media->fd);
  ::close(fds[1]);
}

TEST(PhoneLinesTest, AConnectionForALineThatClosedMeanwhileIsClosed) {
  PhoneLines lines("http://127.0.0.1:8080");
  auto line = lines.Open("twilio", Reader(), absl::Minutes(1));
  auto take = lines.ClaimMedia(PathOf(line->media_url()));
  ASSERT_TRUE(take.ok());
  line.reset();
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  (*take)(MediaHandoff{fds[0], ""});
  char byte;
  EXPECT_EQ(::read(fds[1], &byte, 1), 0);  // the other end was closed
  ::close(fds[1]);
}

}  // namespace
}  // namespace calleval::runs

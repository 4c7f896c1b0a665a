// The registry of pending phone lines: tokens, the webhooks' delivery and refusal, the media
// token's single use, expiry; inbound lines, the numbers they await and the incoming calls
// matched to them.

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

// A Twilio incoming-call webhook from `from` to `to` (the form Twilio posts), signed as
// `signature`.
CarrierWebhook IncomingHook(const std::string& from, const std::string& to,
                            const std::string& signature, const std::string& sid = "CA1") {
  CarrierWebhook hook = Hook(signature);
  hook.content_type = "application/x-www-form-urlencoded";
  hook.body = "CallSid=" + sid + "&From=%2B" + from.substr(1) + "&To=%2B" + to.substr(1) +
              "&CallStatus=ringing&Direction=inbound";
  return hook;
}

TEST(PhoneLinesTest, InboundLinesAwaitNumbersNoOtherLineFromTheAgentAwaits) {
  PhoneLines lines("https://calls.example.com");
  const std::vector<std::string> numbers = {"+14155550001", "+14155550002"};
  auto a = lines.OpenInbound("twilio", Reader(), absl::Minutes(1), "+14155559999", numbers);
  auto b = lines.OpenInbound("twilio", Reader(), absl::Minutes(1), "+14155559999", numbers);
  // Another agent's line, and another carrier's, do not take a number from these.
  auto other = lines.OpenInbound("twilio", Reader(), absl::Minutes(1), "+14155558888", numbers);
  auto telnyx = lines.OpenInbound("telnyx", Reader(), absl::Minutes(1), "+14155559999", numbers);
  EXPECT_EQ(a->awaited_number(), "+14155550001");
  EXPECT_EQ(b->awaited_number(), "+14155550002");
  EXPECT_EQ(other->awaited_number(), "+14155550001");
  EXPECT_EQ(telnyx->awaited_number(), "+14155550001");
  // Every number is awaited: the first, shared; its calls go to the lines in opening order.
  auto c = lines.OpenInbound("twilio", Reader(), absl::Minutes(1), "+14155559999", numbers);
  EXPECT_EQ(c->awaited_number(), "+14155550001");
  // A dialled call's line awaits nothing.
  EXPECT_EQ(lines.Open("twilio", Reader(), absl::Minutes(1))->awaited_number(), "");

  // Each call goes to the line awaiting its number: b's number to b, a's to a then c.
  ASSERT_TRUE(lines
                  .Incoming("/media/twilio/incoming",
                            IncomingHook("+14155559999", numbers[1], "good", "CAb"))
                  ->matched);
  PhoneLine::Arrived arrived = b->Wait(absl::Seconds(1));
  ASSERT_EQ(arrived.events.size(), 1u);
  EXPECT_EQ(arrived.events[0].call_id, "CAb");
  ASSERT_TRUE(lines
                  .Incoming("/media/twilio/incoming",
                            IncomingHook("+14155559999", numbers[0], "good", "CAa"))
                  ->matched);
  ASSERT_TRUE(lines
                  .Incoming("/media/twilio/incoming",
                            IncomingHook("+14155559999", numbers[0], "good", "CAc"))
                  ->matched);
  EXPECT_EQ(a->Wait(absl::Seconds(1)).events.at(0).call_id, "CAa");
  EXPECT_EQ(c->Wait(absl::Seconds(1)).events.at(0).call_id, "CAc");
  // All taken now: the next call is refused.
  absl::StatusOr<PhoneLines::IncomingAnswer> refused = lines.Incoming(
      "/media/twilio/incoming", IncomingHook("+14155559999", numbers[0], "good", "CAd"));
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->matched);
  EXPECT_EQ(refused->document, "<Response><Reject reason=\"busy\"/></Response>");
}

TEST(PhoneLinesTest, AnIncomingCallIsTakenOnlyOnceItsSignatureVerifies) {
  PhoneLines lines("https://calls.example.com");
  auto line =
      lines.OpenInbound("twilio", Reader(), absl::Minutes(1), "+14155559999", {"+14155550001"});
  line->set_answer_document("<Response><Connect><Stream url=\"wss://x\"/></Connect></Response>");
  const std::string path = "/media/twilio/incoming";

  // Forged: 403, and the line still waits.
  EXPECT_EQ(
      lines.Incoming(path, IncomingHook("+14155559999", "+14155550001", "forged")).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(line->Wait(absl::Milliseconds(20)).events.empty());
  // No line for these numbers: Twilio's rejection, unverified (nothing is read from it).
  absl::StatusOr<PhoneLines::IncomingAnswer> other =
      lines.Incoming(path, IncomingHook("+14155558888", "+14155550001", "forged"));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->matched);
  // Not an incoming call at all; another path.
  CarrierWebhook empty = Hook("good");
  empty.content_type = "application/x-www-form-urlencoded";
  EXPECT_EQ(lines.Incoming(path, empty).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lines
                .Incoming("/media/twilio/x/incoming",
                          IncomingHook("+14155559999", "+14155550001", "good"))
                .status()
                .code(),
            absl::StatusCode::kNotFound);

  // Signed: the line's document, and the run learns the call's id. The URL the line verified
  // is the incoming webhook's public one.
  absl::StatusOr<PhoneLines::IncomingAnswer> taken =
      lines.Incoming(path, IncomingHook("+14155559999", "+14155550001", "good", "CA42"));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(taken->matched);
  EXPECT_EQ(taken->document, "<Response><Connect><Stream url=\"wss://x\"/></Connect></Response>");
  PhoneLine::Arrived arrived = line->Wait(absl::Seconds(1));
  ASSERT_EQ(arrived.events.size(), 1u);
  EXPECT_EQ(arrived.events[0].progress, CarrierEvent::kAnswered);
  EXPECT_EQ(arrived.events[0].call_id, "CA42");
  // Taken once: a redelivery is refused, and a closed line takes nothing.
  EXPECT_FALSE(
      lines.Incoming(path, IncomingHook("+14155559999", "+14155550001", "good", "CA42"))->matched);
  line.reset();
  EXPECT_FALSE(lines.Incoming(path, IncomingHook("+14155559999", "+14155550001", "good"))->matched);
}

TEST(PhoneLinesTest, NumbersMatchWhateverTheCarrierPrefixesThem) {
  // Plivo writes numbers without their '+'.
  PhoneLines lines("https://calls.example.com");
  auto line =
      lines.OpenInbound("plivo", Reader(), absl::Minutes(1), "+919876543201", {"+14155552671"});
  CarrierWebhook hook = Hook("good");
  hook.content_type = "application/x-www-form-urlencoded";
  hook.body = "CallUUID=abc&From=919876543201&To=14155552671&Direction=inbound";
  absl::StatusOr<PhoneLines::IncomingAnswer> taken = lines.Incoming("/media/plivo/incoming", hook);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(taken->matched);
  EXPECT_EQ(line->Wait(absl::Seconds(1)).events.at(0).call_id, "abc");
}

TEST(PhoneLinesTest, TelnyxEventsThatAreNotAnIncomingCallAreLeftAlone) {
  PhoneLines lines("https://calls.example.com");
  auto line =
      lines.OpenInbound("telnyx", Reader(), absl::Minutes(1), "+33612345601", {"+14155552671"});
  CarrierWebhook hook = Hook("good");
  hook.body =
      R"({"data":{"event_type":"call.hangup","payload":{"call_control_id":"v3:1","from":"+33612345601","to":"+14155552671","direction":"incoming"}}})";
  absl::StatusOr<PhoneLines::IncomingAnswer> answer =
      lines.Incoming("/media/telnyx/incoming", hook);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_FALSE(answer->matched);
  EXPECT_EQ(answer->document, "");
  EXPECT_TRUE(line->Wait(absl::Milliseconds(20)).events.empty());
  // The call's start is matched; no document (Telnyx is answered by command).
  hook.body =
      R"({"data":{"event_type":"call.initiated","payload":{"call_control_id":"v3:1","from":"+33612345601","to":"+14155552671","direction":"incoming"}}})";
  answer = lines.Incoming("/media/telnyx/incoming", hook);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_TRUE(answer->matched);
  EXPECT_EQ(line->Wait(absl::Seconds(1)).events.at(0).call_id, "v3:1");
}

}  // namespace
}  // namespace calleval::runs

// Twilio as the phone channel's carrier: the REST requests against a local server, the
// signature scheme against Twilio's published example, the status callbacks' mapping, and the
// media dialect from the application's side.

#include "services/runs/twilio_carrier.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/carrier.h"
#include "tests/support/test_http_server.h"

namespace calleval::runs {
namespace {

using ::nlohmann::json;

constexpr char kSid[] = "AC0123456789abcdef0123456789abcdef";
constexpr char kToken[] = "secret-token";

CarrierAccount Account() {
  CarrierAccount account;
  account.carrier = "twilio";
  account.account_id = kSid;
  account.secret = kToken;
  account.caller_numbers = {"+14155550100"};
  return account;
}

std::vector<std::string> Values(const FormFields& form, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& [key, value] : form) {
    if (key == name) out.push_back(value);
  }
  return out;
}

// Twilio's documented example of request validation: this URL, these parameters and the auth
// token 12345 give this signature.
TEST(TwilioSignatureTest, MatchesTwilioPublishedExample) {
  FormFields params = {{"CallSid", "CA1234567890ABCDE"},
                       {"Caller", "+14158675309"},
                       {"Digits", "1234"},
                       {"From", "+14158675309"},
                       {"To", "+18005551212"}};
  EXPECT_EQ(TwilioSignature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params),
            "RSOYDt4T1cUTdK1PDd93/VVr8B8=");
  // The order the parameters came in does not matter; every input does.
  std::reverse(params.begin(), params.end());
  EXPECT_EQ(TwilioSignature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params),
            "RSOYDt4T1cUTdK1PDd93/VVr8B8=");
  EXPECT_NE(TwilioSignature("12346", "https://mycompany.com/myapp.php?foo=1&bar=2", params),
            "RSOYDt4T1cUTdK1PDd93/VVr8B8=");
  EXPECT_NE(TwilioSignature("12345", "https://mycompany.com/myapp.php?foo=1&bar=3", params),
            "RSOYDt4T1cUTdK1PDd93/VVr8B8=");
}

TEST(TwilioFormTest, RoundTripsAndDecodesPlusAndEscapes) {
  const FormFields fields = {{"To", "+1 415"}, {"Twiml", "<Response a=\"b&c\"/>"}, {"E", ""}};
  const std::string encoded = EncodeForm(fields);
  // A space becomes '+', a '+' is escaped.
  EXPECT_TRUE(absl::StrContains(encoded, "To=%2B1+415"));
  EXPECT_EQ(ParseForm(encoded), fields);
  EXPECT_EQ(ParseForm("a=%zz&b"), (FormFields{{"a", "%zz"}, {"b", ""}}));
}

TEST(TwilioTwimlTest, ConnectsTheCallToTheStreamWithTheUrlEscaped) {
  EXPECT_EQ(TwilioStreamTwiml("wss://example.com/media/twilio/a-b_c?x=1&y=2"),
            "<Response><Connect><Stream url=\"wss://example.com/media/twilio/a-b_c?x=1&amp;y=2\"/>"
            "</Connect></Response>");
}

class TwilioClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto client = NewCarrierClient(Account(), server_.url(""));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  CarrierWebhook Signed(const std::string& url, const FormFields& form,
                        const std::string& token = kToken) {
    CarrierWebhook hook;
    hook.url = url;
    hook.method = "POST";
    hook.content_type = "application/x-www-form-urlencoded";
    hook.body = EncodeForm(form);
    hook.headers["x-twilio-signature"] = TwilioSignature(token, url, form);
    return hook;
  }

  TestHttpServer server_;
  std::unique_ptr<CarrierClient> client_;
};

TEST_F(TwilioClientTest, PlaceCallPostsTheDocumentedForm) {
  TestHttpServer::Request seen;
  server_.Handle(std::string("/2010-04-01/Accounts/") + kSid + "/Calls.json",
                 [&seen](const TestHttpServer::Request& request) {
                   seen = request;
                   TestHttpServer::Response response;
                   response.status = 201;
                   response.content_type = "application/json";
                   response.body = R"({"sid":"CA42","status":"queued"})";
                   return response;
                 });
  OutboundCall call;
  call.from = "+14155550100";
  call.to = "+14155550199";
  call.media_url = "wss://public.example/media/twilio/tok";
  call.events_url = "https://public.example/media/twilio/tok/events";
  call.ring_timeout = absl::Seconds(25);
  call.time_limit = absl::Seconds(90);
  absl::StatusOr<std::string> sid = client_->PlaceCall(call);
  ASSERT_TRUE(sid.ok()) << sid.status();
  EXPECT_EQ(*sid, "CA42");
  EXPECT_EQ(seen.method, "POST");
  EXPECT_EQ(seen.Header("authorization"),
            "Basic " + Base64Encode(std::string(kSid) + ":" + kToken));
  EXPECT_TRUE(absl::StartsWith(seen.Header("content-type"), "application/x-www-form-urlencoded"));
  const FormFields form = ParseForm(seen.body);
  EXPECT_EQ(Values(form, "To"), std::vector<std::string>{"+14155550199"});
  EXPECT_EQ(Values(form, "From"), std::vector<std::string>{"+14155550100"});
  EXPECT_EQ(Values(form, "Twiml"),
            std::vector<std::string>{"<Response><Connect><Stream "
                                     "url=\"wss://public.example/media/twilio/tok\"/></Connect>"
                                     "</Response>"});
  EXPECT_EQ(Values(form, "StatusCallback"), std::vector<std::string>{call.events_url});
  EXPECT_EQ(Values(form, "StatusCallbackEvent"),
            (std::vector<std::string>{"initiated", "ringing", "answered", "completed"}));
  EXPECT_EQ(Values(form, "Timeout"), std::vector<std::string>{"25"});
  EXPECT_EQ(Values(form, "TimeLimit"), std::vector<std::string>{"90"});
  EXPECT_EQ(Values(form, "MachineDetection"), std::vector<std::string>{"Enable"});
  EXPECT_EQ(Values(form, "AsyncAmd"), std::vector<std::string>{"true"});
  EXPECT_EQ(Values(form, "AsyncAmdStatusCallback"), std::vector<std::string>{call.events_url});
}

TEST_F(TwilioClientTest, RefusedCallSaysTwiliosMessageAndIsNotRetried) {
  server_.Handle(
      std::string("/2010-04-01/Accounts/") + kSid + "/Calls.json",
      [](const TestHttpServer::Request&) {
        TestHttpServer::Response response;
        response.status = 400;
        response.content_type = "application/json";
        response.body =
            R"({"code":21211,"message":"The 'To' number is not a valid phone number.","status":400})";
        return response;
      });
  server_.Status(std::string("/2010-04-01/Accounts/") + kSid + "/Calls/CA9.json", 503);
  OutboundCall call;
  call.from = "+14155550100";
  call.to = "+1";
  absl::StatusOr<std::string> sid = client_->PlaceCall(call);
  ASSERT_FALSE(sid.ok());
  EXPECT_EQ(sid.status().code(), absl::StatusCode::kFailedPrecondition) << sid.status();
  EXPECT_TRUE(absl::StrContains(sid.status().message(), "not a valid phone number"))
      << sid.status();
  EXPECT_EQ(server_.hits(std::string("/2010-04-01/Accounts/") + kSid + "/Calls.json"), 1);
}

TEST_F(TwilioClientTest, HangupPostsStatusCompleted) {
  std::string body;
  server_.Handle(std::string("/2010-04-01/Accounts/") + kSid + "/Calls/CA42.json",
                 [&body](const TestHttpServer::Request& request) {
                   body = request.body;
                   TestHttpServer::Response response;
                   response.content_type = "application/json";
                   response.body = R"({"sid":"CA42","status":"completed"})";
                   return response;
                 });
  ASSERT_TRUE(client_->Hangup("CA42").ok());
  EXPECT_EQ(body, "Status=completed");
}

TEST_F(TwilioClientTest, WebhooksAreReadOnlyWithAValidSignature) {
  const std::string url = "https://public.example/media/twilio/tok/events";
  const FormFields ringing = {{"CallSid", "CA42"}, {"CallStatus", "ringing"}, {"AccountSid", kSid}};
  auto events = client_->ReadWebhook(Signed(url, ringing), absl::Now());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].progress, CarrierEvent::kRinging);
  EXPECT_EQ((*events)[0].call_id, "CA42");

  // Signed with another token, for another URL, tampered with, or not signed: refused.
  EXPECT_EQ(client_->ReadWebhook(Signed(url, ringing, "other"), absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
  CarrierWebhook elsewhere = Signed(url + "x", ringing);
  elsewhere.url = url;
  EXPECT_EQ(client_->ReadWebhook(elsewhere, absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
  CarrierWebhook tampered = Signed(url, ringing);
  tampered.body = EncodeForm({{"CallSid", "CA42"}, {"CallStatus", "busy"}, {"AccountSid", kSid}});
  EXPECT_EQ(client_->ReadWebhook(tampered, absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
  CarrierWebhook unsigned_hook = Signed(url, ringing);
  unsigned_hook.headers.clear();
  EXPECT_EQ(client_->ReadWebhook(unsigned_hook, absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// An agent calling in: the voice webhook's numbers are read before anything is verified (they
// pick the line whose account verifies it), the TwiML answer streams the call, and no command is
// needed to answer it.
TEST_F(TwilioClientTest, AnIncomingCallIsReadAnsweredWithTheStreamAndVerifiedLikeAWebhook) {
  const std::string url = "https://calleval.example/media/twilio/incoming";
  const FormFields form = {{"AccountSid", kSid},      {"CallSid", "CA0f"},
                           {"CallStatus", "ringing"}, {"Direction", "inbound"},
                           {"From", "+14155550100"},  {"To", "+14155552671"}};
  CarrierWebhook hook = Signed(url, form);
  absl::StatusOr<IncomingCall> call = ReadIncomingCall("twilio", hook);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->from, "+14155550100");
  EXPECT_EQ(call->to, "+14155552671");
  EXPECT_EQ(call->call_id, "CA0f");
  EXPECT_TRUE(client_->ReadWebhook(hook, absl::Now()).ok());
  EXPECT_FALSE(client_->ReadWebhook(Signed(url, form, "other-token"), absl::Now()).ok());

  EXPECT_EQ(client_->IncomingCallAnswer("wss://calleval.example/media/twilio/tok"),
            "<Response><Connect><Stream url=\"wss://calleval.example/media/twilio/tok\"/>"
            "</Connect></Response>");
  EXPECT_TRUE(client_->AnswerIncoming("CA0f", "wss://x", "https://x").ok());
  EXPECT_TRUE(server_.requests().empty());
  EXPECT_EQ(IncomingCallRejection("twilio"), "<Response><Reject reason=\"busy\"/></Response>");

  // Not a voice webhook: no From, or not a form.
  EXPECT_EQ(ReadIncomingCall("twilio", Signed(url, {{"CallSid", "CA0f"}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  hook.content_type = "application/json";
  EXPECT_EQ(ReadIncomingCall("twilio", hook).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadIncomingCall("sinch", hook).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TwilioEventsTest, MapsCallStatusAndAnsweringMachineDetection) {
  auto progress = [](FormFields form) {
    std::vector<CarrierEvent> events = TwilioEvents(form);
    std::vector<CarrierEvent::Progress> out;
    for (const auto& e : events) out.push_back(e.progress);
    return out;
  };
  using P = std::vector<CarrierEvent::Progress>;
  EXPECT_EQ(progress({{"CallStatus", "initiated"}}), P{CarrierEvent::kOther});
  EXPECT_EQ(progress({{"CallStatus", "ringing"}}), P{CarrierEvent::kRinging});
  EXPECT_EQ(progress({{"CallStatus", "in-progress"}}), P{CarrierEvent::kAnswered});
  EXPECT_EQ(progress({{"CallStatus", "completed"}}), P{CarrierEvent::kCompleted});
  EXPECT_EQ(progress({{"CallStatus", "busy"}}), P{CarrierEvent::kBusy});
  EXPECT_EQ(progress({{"CallStatus", "no-answer"}}), P{CarrierEvent::kNoAnswer});
  EXPECT_EQ(progress({{"CallStatus", "failed"}}), P{CarrierEvent::kFailed});
  EXPECT_EQ(progress({{"CallStatus", "canceled"}}), P{CarrierEvent::kFailed});
  EXPECT_EQ(progress({{"AnsweredBy", "machine_end_beep"}}), P{CarrierEvent::kMachine});
  EXPECT_EQ(progress({{"AnsweredBy", "fax"}}), P{CarrierEvent::kMachine});
  EXPECT_EQ(progress({{"AnsweredBy", "human"}}), P{});
}

TEST(TwilioMediaDialectTest, ReadsTheStreamAndWritesMediaMarkAndClear) {
  auto dialect = NewMediaDialect("twilio");
  ASSERT_TRUE(dialect.ok());
  MediaDialect& d = **dialect;
  EXPECT_EQ(d.Parse(R"({"event":"connected","protocol":"Call","version":"1.0.0"})")->kind,
            MediaEvent::kConnected);
  auto start = d.Parse(
      R"({"event":"start","sequenceNumber":"1","start":{"accountSid":"AC1","streamSid":"MZ1",)"
      R"("callSid":"CA1","tracks":["inbound"],"mediaFormat":{"encoding":"audio/x-mulaw",)"
      R"("sampleRate":8000,"channels":1}},"streamSid":"MZ1"})");
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->kind, MediaEvent::kStart);
  EXPECT_EQ(start->stream_id, "MZ1");
  EXPECT_EQ(start->call_id, "CA1");
  auto media =
      d.Parse(json{{"event", "media"},
                   {"streamSid", "MZ1"},
                   {"media", {{"track", "inbound"}, {"payload", Base64Encode("\xff\x7f")}}}}
                  .dump());
  ASSERT_TRUE(media.ok());
  EXPECT_EQ(media->kind, MediaEvent::kMedia);
  EXPECT_EQ(media->mulaw, "\xff\x7f");
  EXPECT_EQ(d.Parse(R"({"event":"mark","streamSid":"MZ1","mark":{"name":"line-1"}})")->mark,
            "line-1");
  EXPECT_EQ(d.Parse(R"({"event":"stop","streamSid":"MZ1","stop":{}})")->kind, MediaEvent::kStop);
  EXPECT_EQ(d.Parse(R"({"event":"dtmf"})")->kind, MediaEvent::kOther);
  EXPECT_FALSE(d.Parse("not json").ok());
  EXPECT_FALSE(d.Parse(R"({"event":"media","media":{"payload":"!!"}})").ok());

  EXPECT_EQ(json::parse(d.Media("MZ1", "\xff")),
            (json{{"event", "media"}, {"streamSid", "MZ1"}, {"media", {{"payload", "/w=="}}}}));
  EXPECT_EQ(json::parse(d.Mark("MZ1", "line-2")),
            (json{{"event", "mark"}, {"streamSid", "MZ1"}, {"mark", {{"name", "line-2"}}}}));
  EXPECT_EQ(json::parse(d.Clear("MZ1")), (json{{"event", "clear"}, {"streamSid", "MZ1"}}));
}

TEST(CarrierFactoryTest, TelnyxAndPlivoAreServedToo) {
  CarrierAccount telnyx;
  telnyx.carrier = "telnyx";
  telnyx.account_id = "1494404757140276705";
  telnyx.secret = "KEYtelnyx";
  telnyx.public_key = Base64Encode(std::string(32, 'k'));
  EXPECT_TRUE(NewCarrierClient(telnyx, "http://x").ok());
  // The factory hands the carrier's own checks on: Telnyx wants its webhook key.
  telnyx.public_key.clear();
  EXPECT_EQ(NewCarrierClient(telnyx, "http://x").status().code(),
            absl::StatusCode::kFailedPrecondition);
  CarrierAccount plivo;
  plivo.carrier = "plivo";
  plivo.account_id = "MAFAKEPLIVOAUTHID000";
  plivo.secret = "token";
  EXPECT_TRUE(NewCarrierClient(plivo, "http://x").ok());
  for (const char* carrier : {"telnyx", "plivo"}) {
    absl::StatusOr<std::unique_ptr<MediaDialect>> dialect = NewMediaDialect(carrier);
    ASSERT_TRUE(dialect.ok()) << carrier;
  }
  // Each its own dialect: Plivo plays the caller's audio with playAudio, Telnyx with media.
  EXPECT_TRUE(absl::StrContains((*NewMediaDialect("plivo"))->Media("s", "\xff"), "playAudio"));
  EXPECT_FALSE(absl::StrContains((*NewMediaDialect("telnyx"))->Media("s", "\xff"), "playAudio"));
}

TEST(CarrierFactoryTest, OtherCarriersAreNotSupported) {
  CarrierAccount account = Account();
  account.carrier = "acme";
  EXPECT_EQ(NewCarrierClient(account, "http://x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewMediaDialect("acme").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace calleval::runs

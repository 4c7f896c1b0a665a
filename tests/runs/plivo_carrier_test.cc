#include "services/runs/plivo_carrier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "tests/support/fake_carriers.h"
#include "tests/support/test_http_server.h"

namespace calleval::runs {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
using Params = std::multimap<std::string, std::string>;

constexpr char kAuthId[] = "MAXXXXXXXXXXXXXXXXXX";
constexpr char kAuthToken[] = "plivo_auth_token_0123456789";
constexpr char kEventsUrl[] = "https://calleval.example/media/plivo/tok/events";

// Signature V3 computed here with OpenSSL alone, over a signed string written out by hand as
// Plivo's SDKs build it, so the production code is checked against an independent reading.
std::string HandSignature(const std::string& token, const std::string& signed_string) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(signed_string.data()), signed_string.size(), mac,
       &n);
  unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  const int len = EVP_EncodeBlock(b64, mac, static_cast<int>(n));
  return std::string(reinterpret_cast<char*>(b64), len);
}

CarrierAccount Account() {
  CarrierAccount account;
  account.carrier = "plivo";
  account.account_id = kAuthId;
  account.secret = kAuthToken;
  account.caller_numbers = {"+15550001111"};
  return account;
}

// A hangup callback as Plivo posts it (form-encoded).
constexpr char kHangupForm[] =
    "ALegRequestUUID=5b40a428-bfc7-4daf-9d06-726c558bf3b8&BillDuration=60&CallStatus=completed&"
    "CallUUID=e6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4&Direction=outbound&Duration=42&"
    "Event=Hangup&From=%2B15550001111&HangupCause=NORMAL_CLEARING&HangupCauseCode=4000&"
    "HangupCauseName=Normal+Hangup&HangupSource=Callee&"
    "RequestUUID=5b40a428-bfc7-4daf-9d06-726c558bf3b8&To=%2B15550002222";

// The same, in the order Plivo's SDKs sign it: names sorted, each name then its value.
constexpr char kHangupSigned[] =
    "https://calleval.example/media/plivo/tok/events?"
    "ALegRequestUUID5b40a428-bfc7-4daf-9d06-726c558bf3b8BillDuration60CallStatuscompleted"
    "CallUUIDe6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4DirectionoutboundDuration42EventHangup"
    "From+15550001111HangupCauseNORMAL_CLEARINGHangupCauseCode4000"
    "HangupCauseNameNormal HangupHangupSourceCallee"
    "RequestUUID5b40a428-bfc7-4daf-9d06-726c558bf3b8To+15550002222";

CarrierWebhook Hook(const std::string& url, const std::string& form, const std::string& nonce,
                    const std::string& signature) {
  CarrierWebhook hook;
  hook.url = url;
  hook.method = "POST";
  hook.content_type = "application/x-www-form-urlencoded";
  hook.body = form;
  hook.headers["x-plivo-signature-v3-nonce"] = nonce;
  hook.headers["x-plivo-signature-v3"] = signature;
  return hook;
}

TEST(PlivoSignatureTest, SignsTheStringPlivosSdksBuild) {
  absl::StatusOr<Params> form = ParseFormParams(kHangupForm);
  ASSERT_TRUE(form.ok());
  EXPECT_EQ(PlivoSignatureV3Base("POST", kEventsUrl, *form), kHangupSigned);
  // The URL's own query comes first, sorted as k=v pairs, then "." and the posted parameters.
  EXPECT_EQ(PlivoSignatureV3Base("POST", "https://h.example/e?run=7&a=b%20c&a=a",
                                 Params{{"Z", "1"}, {"A", "2"}}),
            "https://h.example/e?a=a&a=b c&run=7.A2Z1");
  // No parameters: the URL as it is (query sorted).
  EXPECT_EQ(PlivoSignatureV3Base("POST", "https://h.example/e", {}), "https://h.example/e");
  EXPECT_EQ(PlivoSignatureV3Base("POST", "https://h.example/e?b=1&a=2", {}),
            "https://h.example/e?a=2&b=1");
  // GET: the parameters join the query.
  EXPECT_EQ(PlivoSignatureV3Base("GET", "https://h.example/e?b=1", Params{{"a", "2"}}),
            "https://h.example/e?a=2&b=1");
  EXPECT_EQ(PlivoSignatureV3(kAuthToken, kHangupSigned, "nonce-1"),
            HandSignature(kAuthToken, absl::StrCat(kHangupSigned, ".nonce-1")));
}

TEST(PlivoSignatureTest, AcceptsPlivosSignatureAndRefusesForgeries) {
  auto client = NewPlivoCarrierClient(Account(), "http://127.0.0.1:9");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string nonce = "05429567804466091622";
  const std::string good = HandSignature(kAuthToken, absl::StrCat(kHangupSigned, ".", nonce));
  const absl::Time now = absl::Now();

  absl::StatusOr<std::vector<CarrierEvent>> events =
      (*client)->ReadWebhook(Hook(kEventsUrl, kHangupForm, nonce, good), now);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].progress, CarrierEvent::kCompleted);
  EXPECT_TRUE((*events)[0].hangup_by_callee);
  EXPECT_EQ((*events)[0].call_id, "5b40a428-bfc7-4daf-9d06-726c558bf3b8");
  EXPECT_EQ((*events)[0].detail, "completed (Normal Hangup)");
  // Several signatures (one per auth token while one is rotated): any one matching is enough.
  const std::string nonce2 = "05429567804466091623";
  const std::string good2 = HandSignature(kAuthToken, absl::StrCat(kHangupSigned, ".", nonce2));
  EXPECT_TRUE((*client)
                  ->ReadWebhook(Hook(kEventsUrl, kHangupForm, nonce2,
                                     absl::StrCat(HandSignature("old", "x"), ",", good2)),
                                now)
                  .ok());

  auto refused = [&](const CarrierWebhook& hook, const std::string& why) {
    EXPECT_EQ((*client)->ReadWebhook(hook, now).status().code(),
              absl::StatusCode::kUnauthenticated)
        << why;
  };
  std::string tampered = kHangupForm;
  tampered.replace(tampered.find("HangupSource=Callee"), 19, "HangupSource=Caller");
  refused(Hook(kEventsUrl, tampered, nonce, good), "tampered body");
  refused(Hook(kEventsUrl, absl::StrCat(kHangupForm, "&Extra=1"), nonce, good), "added field");
  refused(Hook("https://calleval.example/media/plivo/other/events", kHangupForm, nonce, good),
          "another URL");
  refused(Hook(kEventsUrl, kHangupForm, "another-nonce", good), "another nonce");
  refused(Hook(kEventsUrl, kHangupForm, nonce,
               HandSignature("wrong-token", absl::StrCat(kHangupSigned, ".", nonce))),
          "signed with another token");
  refused(Hook(kEventsUrl, kHangupForm, "", good), "no nonce");
  refused(Hook(kEventsUrl, kHangupForm, nonce, ""), "no signature");
  refused(Hook(kEventsUrl, "CallStatus=%zz", nonce, good), "not a form");
}

// Plivo signs no timestamp: a webhook posted again as it was (its nonce already taken) is refused,
// while a forgery does not use up the nonce it names.
TEST(PlivoSignatureTest, RefusesAReplayedWebhook) {
  auto client = NewPlivoCarrierClient(Account(), "http://127.0.0.1:9");
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Time now = absl::FromUnixSeconds(1795000000);
  auto hook = [](const std::string& nonce, const std::string& token) {
    return Hook(kEventsUrl, kHangupForm, nonce,
                HandSignature(token, absl::StrCat(kHangupSigned, ".", nonce)));
  };

  // A forgery naming Plivo's next nonce first: refused, and the nonce is still Plivo's to use.
  EXPECT_EQ((*client)->ReadWebhook(hook("111", "wrong-token"), now).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE((*client)->ReadWebhook(hook("111", kAuthToken), now).ok());
  absl::StatusOr<std::vector<CarrierEvent>> replayed =
      (*client)->ReadWebhook(hook("111", kAuthToken), now + absl::Seconds(5));
  EXPECT_EQ(replayed.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(replayed.status().message().find("replayed"), std::string::npos) << replayed.status();
  // Another nonce is another webhook.
  EXPECT_TRUE((*client)->ReadWebhook(hook("222", kAuthToken), now + absl::Seconds(6)).ok());
  // Still refused an hour later; forgotten only after 6 hours, when no line lives any more.
  EXPECT_FALSE((*client)->ReadWebhook(hook("111", kAuthToken), now + absl::Hours(1)).ok());
  EXPECT_TRUE((*client)->ReadWebhook(hook("111", kAuthToken), now + absl::Hours(7)).ok());
  // Nonces are remembered per client: another call's client has seen none of them.
  auto other = NewPlivoCarrierClient(Account(), "http://127.0.0.1:9");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->ReadWebhook(hook("222", kAuthToken), now).ok());
}

// An agent calling in: Plivo posts the call's parameters to the number's answer URL (the numbers
// without '+', as Plivo writes them); they are read before anything is verified, the signature
// is checked like a callback's, and the answer is the bidirectional <Stream> document.
TEST(PlivoIncomingTest, AnIncomingCallIsReadVerifiedAndAnsweredWithTheStream) {
  auto client = NewPlivoCarrierClient(Account(), "http://127.0.0.1:9");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string url = "https://calleval.example/media/plivo/incoming";
  const std::string form =
      "CallStatus=ringing&CallUUID=0e2c7ab4-cc8a-11ef-9f0b-3b9f0f3f3a11&Direction=inbound&"
      "Event=StartApp&From=919876543201&To=15550001111";
  const std::string nonce = "7717";
  const Params params = *ParseFormParams(form);
  const std::string good = HandSignature(
      kAuthToken, absl::StrCat(PlivoSignatureV3Base("POST", url, params), ".", nonce));
  CarrierWebhook hook = Hook(url, form, nonce, good);
  absl::StatusOr<IncomingCall> call = ReadIncomingCall("plivo", hook);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->from, "919876543201");
  EXPECT_EQ(call->to, "15550001111");
  EXPECT_EQ(call->call_id, "0e2c7ab4-cc8a-11ef-9f0b-3b9f0f3f3a11");
  EXPECT_TRUE((*client)->ReadWebhook(hook, absl::Now()).ok());
  EXPECT_FALSE(
      (*client)->ReadWebhook(Hook(url, form, nonce, HandSignature("x", "y")), absl::Now()).ok());

  const std::string document =
      (*client)->IncomingCallAnswer("wss://calleval.example/media/plivo/t&k");
  EXPECT_THAT(document, HasSubstr("<Stream bidirectional=\"true\""));
  EXPECT_THAT(document, HasSubstr(">wss://calleval.example/media/plivo/t&amp;k</Stream>"));
  EXPECT_TRUE((*client)->AnswerIncoming("0e2c", "wss://x", "https://x").ok());
  EXPECT_THAT(IncomingCallRejection("plivo"),
              HasSubstr("<Response><Hangup reason=\"busy\"/></Response>"));
  EXPECT_EQ(ReadIncomingCall("plivo", Hook(url, "CallUUID=1&From=1", nonce, good)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlivoSignatureTest, ClientNeedsItsCredentials) {
  CarrierAccount account = Account();
  account.secret = "";
  EXPECT_EQ(NewPlivoCarrierClient(account, "https://api.plivo.com").status().code(),
            absl::StatusCode::kFailedPrecondition);
  account = Account();
  account.account_id = "";
  EXPECT_EQ(NewPlivoCarrierClient(account, "https://api.plivo.com").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlivoCallbackTest, MapsCallbacksToTheRunsProgress) {
  struct Case {
    Params params;
    CarrierEvent::Progress progress;
    bool by_callee;
    std::string detail;
  };
  const std::vector<Case> cases = {
      {{{"CallStatus", "ringing"}, {"Event", "Ring"}}, CarrierEvent::kRinging, false, "ringing"},
      {{{"CallStatus", "in-progress"}, {"Event", "StartApp"}}, CarrierEvent::kAnswered, false,
       "in-progress"},
      {{{"CallStatus", "completed"}, {"HangupSource", "Callee"},
        {"HangupCauseName", "Normal Hangup"}},
       CarrierEvent::kCompleted, true, "completed (Normal Hangup)"},
      {{{"CallStatus", "completed"}, {"HangupSource", "Call recipient"}},
       CarrierEvent::kCompleted, true, "completed"},
      {{{"CallStatus", "completed"}, {"HangupSource", "API Request"}}, CarrierEvent::kCompleted,
       false, "completed"},
      {{{"CallStatus", "busy"}, {"HangupCauseName", "Busy Line"}}, CarrierEvent::kBusy, false,
       "busy (Busy Line)"},
      {{{"CallStatus", "no-answer"}}, CarrierEvent::kNoAnswer, false, "no-answer"},
      {{{"CallStatus", "timeout"}}, CarrierEvent::kNoAnswer, false, "timeout"},
      {{{"CallStatus", "failed"}, {"HangupCauseName", "Invalid Destination Address"}},
       CarrierEvent::kFailed, false, "failed (Invalid Destination Address)"},
      {{{"CallStatus", "in-progress"}, {"Machine", "true"}}, CarrierEvent::kMachine, false,
       "machine"},
      {{{"CallStatus", "in-progress"}, {"Machine", "false"}}, CarrierEvent::kOther, false,
       "human"},
      {{{"Event", "StreamStatus"}}, CarrierEvent::kOther, false, ""},
  };
  for (const Case& c : cases) {
    Params params = c.params;
    params.emplace("CallUUID", "call-uuid");
    std::vector<CarrierEvent> events = ReadPlivoCallback(params);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].progress, c.progress) << c.detail;
    EXPECT_EQ(events[0].hangup_by_callee, c.by_callee) << c.detail;
    EXPECT_EQ(events[0].detail, c.detail);
    EXPECT_EQ(events[0].call_id, "call-uuid");  // no RequestUUID here
  }
}

TEST(PlivoMediaDialectTest, ReadsPlivosEventsAndWritesTheApplicationsMessages) {
  std::unique_ptr<MediaDialect> dialect = NewPlivoMediaDialect();
  absl::StatusOr<MediaEvent> start = dialect->Parse(
      json{{"event", "start"},
           {"sequenceNumber", 0},
           {"start",
            {{"callId", "e6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4"},
             {"streamId", "20170ada-f610-433b-8758-c02a2aab3662"},
             {"accountId", "1234"},
             {"tracks", {"inbound"}},
             {"mediaFormat", {{"encoding", "audio/x-mulaw"}, {"sampleRate", 8000}}}}},
           {"extra_headers", "{}"}}
          .dump());
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->kind, MediaEvent::kStart);
  EXPECT_EQ(start->stream_id, "20170ada-f610-433b-8758-c02a2aab3662");
  EXPECT_EQ(start->call_id, "e6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4");

  const std::string frame(160, '\xff');
  absl::StatusOr<MediaEvent> media = dialect->Parse(
      json{{"event", "media"},
           {"sequenceNumber", 3},
           {"streamId", "s"},
           {"media",
            {{"track", "inbound"}, {"timestamp", "1700000000000"}, {"chunk", 2},
             {"payload", Base64Encode(frame)}}},
           {"extra_headers", "{}"}}
          .dump());
  ASSERT_TRUE(media.ok());
  EXPECT_EQ(media->kind, MediaEvent::kMedia);
  EXPECT_EQ(media->mulaw, frame);
  absl::StatusOr<MediaEvent> played = dialect->Parse(
      R"({"event": "playedStream", "sequenceNumber": 9, "streamId": "s", "name": "turn-2"})");
  ASSERT_TRUE(played.ok());
  EXPECT_EQ(played->kind, MediaEvent::kMark);
  EXPECT_EQ(played->mark, "turn-2");
  absl::StatusOr<MediaEvent> cleared =
      dialect->Parse(R"({"event": "clearedAudio", "sequenceNumber": 10, "streamId": "s"})");
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(cleared->kind, MediaEvent::kOther);
  EXPECT_EQ(cleared->event, "clearedAudio");
  EXPECT_FALSE(dialect->Parse("[]").ok());
  EXPECT_FALSE(dialect->Parse(R"({"event": "media"})").ok());

  EXPECT_EQ(json::parse(dialect->Media("s", frame)),
            (json{{"event", "playAudio"},
                  {"media",
                   {{"contentType", "audio/x-mulaw"},
                    {"sampleRate", 8000},
                    {"payload", Base64Encode(frame)}}}}));
  EXPECT_EQ(json::parse(dialect->Mark("s", "turn-2")),
            (json{{"event", "checkpoint"}, {"streamId", "s"}, {"name", "turn-2"}}));
  EXPECT_EQ(json::parse(dialect->Clear("s")), (json{{"event", "clearAudio"}, {"streamId", "s"}}));
  // The audio the application plays reads back as the same bytes.
  absl::StatusOr<MediaEvent> echoed = dialect->Parse(absl::StrCat(
      R"({"event": "media", "media": )", json::parse(dialect->Media("s", frame))["media"].dump(),
      "}"));
  ASSERT_TRUE(echoed.ok());
  EXPECT_EQ(echoed->mulaw, frame);
}

OutboundCall Call() {
  OutboundCall call;
  call.from = "+15550001111";
  call.to = "+15550002222";
  call.media_url = "wss://calleval.example/media/plivo/tok?a=1&b=2";
  call.events_url = kEventsUrl;
  call.answer_url = "https://calleval.example/media/plivo/tok/answer";
  call.ring_timeout = absl::Seconds(25);
  call.time_limit = absl::Seconds(180);
  return call;
}

TEST(PlivoCallApiTest, PlacesTheCallAndHangsItUp) {
  TestHttpServer plivo;
  const std::string account = absl::StrCat("/v1/Account/", kAuthId);
  plivo.Handle(account + "/Call/", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.status = 201;
    r.content_type = "application/json";
    r.body = R"({"api_id": "97ceeb52-58b6-11e1-86da-77300b68f8bb", "message": "call fired",
                 "request_uuid": "75cfbf2f-1ab3-4a8f-a5f4-43a8a9ebd1b2"})";
    return r;
  });
  plivo.HandlePrefix(account + "/", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.status = 204;
    return r;
  });
  auto client = NewPlivoCarrierClient(Account(), plivo.url("/"));
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string basic =
      absl::StrCat("Basic ", Base64Encode(absl::StrCat(kAuthId, ":", kAuthToken)));

  absl::StatusOr<std::string> id = (*client)->PlaceCall(Call());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "75cfbf2f-1ab3-4a8f-a5f4-43a8a9ebd1b2");
  std::vector<TestHttpServer::Request> requests = plivo.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].target, account + "/Call/");
  EXPECT_EQ(requests[0].Header("authorization"), basic);
  EXPECT_EQ(requests[0].Header("content-type"), "application/json");
  EXPECT_EQ(json::parse(requests[0].body),
            (json{{"from", "+15550001111"},
                  {"to", "+15550002222"},
                  {"answer_url", "https://calleval.example/media/plivo/tok/answer"},
                  {"answer_method", "POST"},
                  {"ring_url", kEventsUrl},
                  {"ring_method", "POST"},
                  {"hangup_url", kEventsUrl},
                  {"hangup_method", "POST"},
                  {"ring_timeout", 25},
                  {"time_limit", 180},
                  {"machine_detection", "true"},
                  {"machine_detection_url", kEventsUrl},
                  {"machine_detection_method", "POST"}}))
      << requests[0].body;

  // Before any webhook named the call, hanging up cancels the request.
  ASSERT_TRUE((*client)->Hangup(*id).ok());
  requests = plivo.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].method, "DELETE");
  EXPECT_EQ(requests[1].target, account + "/Request/75cfbf2f-1ab3-4a8f-a5f4-43a8a9ebd1b2/");
  EXPECT_EQ(requests[1].Header("authorization"), basic);

  // Once the answer callback named the CallUUID, hanging up ends that call.
  const std::string form =
      "CallStatus=in-progress&CallUUID=e6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4&Event=StartApp&"
      "RequestUUID=75cfbf2f-1ab3-4a8f-a5f4-43a8a9ebd1b2";
  const std::string nonce = "1";
  const std::string signature = HandSignature(
      kAuthToken,
      absl::StrCat(kEventsUrl,
                   "?CallStatusin-progressCallUUIDe6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4"
                   "EventStartAppRequestUUID75cfbf2f-1ab3-4a8f-a5f4-43a8a9ebd1b2.",
                   nonce));
  absl::StatusOr<std::vector<CarrierEvent>> answered =
      (*client)->ReadWebhook(Hook(kEventsUrl, form, nonce, signature), absl::Now());
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_EQ((*answered)[0].progress, CarrierEvent::kAnswered);
  EXPECT_EQ((*answered)[0].call_id, *id);
  ASSERT_TRUE((*client)->Hangup(*id).ok());
  requests = plivo.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[2].method, "DELETE");
  EXPECT_EQ(requests[2].target, account + "/Call/e6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4/");

  // The answer document streams the call both ways to the media websocket.
  EXPECT_EQ((*client)->AnswerDocument(Call()),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Stream bidirectional=\"true\" "
            "keepCallAlive=\"true\" contentType=\"audio/x-mulaw;rate=8000\">"
            "wss://calleval.example/media/plivo/tok?a=1&amp;b=2</Stream></Response>");
}

TEST(PlivoCallApiTest, QuotesPlivosRefusalAndTreatsAnEndedCallAsHungUp) {
  TestHttpServer plivo;
  const std::string account = absl::StrCat("/v1/Account/", kAuthId);
  plivo.Handle(account + "/Call/", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.status = 401;
    r.content_type = "application/json";
    r.body = R"({"api_id": "0b1ab3f0-2b59-11ec-8d5c-0242ac110003",
                 "error": "Authentication credentials invalid."})";
    return r;
  });
  plivo.HandlePrefix(account + "/", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.status = 404;
    r.content_type = "application/json";
    r.body = R"({"api_id": "x", "error": "not found"})";
    return r;
  });
  auto client = NewPlivoCarrierClient(Account(), plivo.url(""));
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::string> id = (*client)->PlaceCall(Call());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(id.status().message(), HasSubstr("HTTP 401"));
  EXPECT_THAT(id.status().message(), HasSubstr("Authentication credentials invalid."));
  EXPECT_EQ(plivo.hits(account + "/Call/"), 1);  // a refused call is not retried

  // Neither a request nor a call by that id: nothing is left to hang up.
  EXPECT_TRUE((*client)->Hangup("a-call-already-over").ok());
  std::vector<TestHttpServer::Request> requests = plivo.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].target, account + "/Request/a-call-already-over/");
  EXPECT_EQ(requests[2].target, account + "/Call/a-call-already-over/");
  EXPECT_TRUE((*client)->Hangup("../../x").ok());
  EXPECT_EQ(plivo.requests()[3].target, account + "/Request/..%2F..%2Fx/");
}

// The service's side of the callbacks, over real HTTP: each one read by the client, as the run
// does (401 when it does not verify); the answer URL answered with the answer document.
class CallbackReceiver {
 public:
  CallbackReceiver(CarrierClient* client, OutboundCall* call) : client_(client), call_(call) {
    http_.HandlePrefix("/media/", [this](const TestHttpServer::Request& request) {
      CarrierWebhook hook;
      hook.url = http_.url(request.target);
      hook.method = request.method;
      hook.content_type = request.Header("content-type");
      hook.body = request.body;
      for (const auto& [name, value] : request.headers) hook.headers[name] = value;
      absl::StatusOr<std::vector<CarrierEvent>> read = client_->ReadWebhook(hook, absl::Now());
      TestHttpServer::Response r;
      if (!read.ok()) {
        r.status = read.status().code() == absl::StatusCode::kUnauthenticated ? 401 : 400;
        return r;
      }
      if (absl::EndsWith(request.path, "/answer")) {
        r.content_type = "application/xml";
        r.body = client_->AnswerDocument(*call_);
      }
      std::lock_guard<std::mutex> lock(mu_);
      events_.insert(events_.end(), read->begin(), read->end());
      return r;
    });
  }
  std::string url(absl::string_view path) const { return http_.url(path); }
  std::vector<CarrierEvent> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  CarrierClient* const client_;
  OutboundCall* const call_;
  mutable std::mutex mu_;
  std::vector<CarrierEvent> events_;
  TestHttpServer http_;
};

TEST(PlivoCallApiTest, ACallThroughAFakePlivoAndItsSignedCallbacks) {
  FakePlivo plivo;
  CarrierAccount account;
  account.carrier = "plivo";
  account.account_id = plivo.auth_id();
  account.secret = plivo.auth_token();
  auto client = NewPlivoCarrierClient(account, plivo.url());
  ASSERT_TRUE(client.ok()) << client.status();
  OutboundCall call = Call();
  CallbackReceiver service(client->get(), &call);
  call.events_url = service.url("/media/plivo/tok/events");
  call.answer_url = service.url("/media/plivo/tok/answer");

  absl::StatusOr<std::string> id = (*client)->PlaceCall(call);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(plivo.calls().size(), 1u);
  const FakePlivo::Call placed = plivo.calls()[0];
  EXPECT_EQ(placed.request_uuid, *id);

  absl::StatusOr<WebhookAnswer> ring = plivo.Callback(*id, "ring_url", {{"CallStatus", "ringing"}});
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->status, 200);
  absl::StatusOr<WebhookAnswer> answer =
      plivo.Callback(*id, "answer_url", {{"CallStatus", "in-progress"}, {"Event", "StartApp"}});
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->status, 200);
  EXPECT_THAT(answer->body, HasSubstr("<Stream bidirectional=\"true\""));
  EXPECT_THAT(answer->body, HasSubstr("wss://calleval.example/media/plivo/tok?a=1&amp;b=2"));
  absl::StatusOr<WebhookAnswer> forged =
      plivo.Callback(*id, "hangup_url", {{"CallStatus", "completed"}, {"HangupSource", "Callee"}},
                     "not-the-token");
  ASSERT_TRUE(forged.ok());
  EXPECT_EQ(forged->status, 401);
  absl::StatusOr<WebhookAnswer> hangup = plivo.Callback(*id, "hangup_url",
                                                        {{"CallStatus", "completed"},
                                                         {"HangupSource", "Callee"},
                                                         {"HangupCauseName", "Normal Hangup"}});
  ASSERT_TRUE(hangup.ok());
  EXPECT_EQ(hangup->status, 200);

  std::vector<CarrierEvent> events = service.events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].progress, CarrierEvent::kRinging);
  EXPECT_EQ(events[1].progress, CarrierEvent::kAnswered);
  EXPECT_EQ(events[2].progress, CarrierEvent::kCompleted);
  EXPECT_TRUE(events[2].hangup_by_callee);
  for (const CarrierEvent& e : events) EXPECT_EQ(e.call_id, *id);

  // The answer named the call, so hanging up ends it by its CallUUID.
  EXPECT_TRUE((*client)->Hangup(*id).ok());
  EXPECT_EQ(plivo.deletes(),
            std::vector<std::string>{
                absl::StrCat("/v1/Account/", plivo.auth_id(), "/Call/", placed.call_uuid, "/")});

  plivo.RefuseCalls(402, "Insufficient credit.");
  absl::StatusOr<std::string> refused = (*client)->PlaceCall(call);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("Insufficient credit."));
}

}  // namespace
}  // namespace calleval::runs

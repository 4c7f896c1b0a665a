#include "services/runs/telnyx_carrier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

// Telnyx signs timestamp|body with an Ed25519 key; the test makes its own.
class TelnyxKey : public Ed25519TestKey {
 public:
  std::string Sign(const std::string& timestamp, const std::string& body) const {
    return Ed25519TestKey::Sign(absl::StrCat(timestamp, "|", body));
  }
};

const absl::Time kNow = absl::FromUnixSeconds(1764340000);

std::string Webhook(const std::string& type, const json& payload) {
  return json{{"data",
               {{"event_type", type},
                {"id", "0ccc7b54-4df3-4bca-a65a-3da1ecc777f0"},
                {"occurred_at", "2025-11-28T14:26:40.000000Z"},
                {"payload", payload},
                {"record_type", "event"}}},
              {"meta", {{"attempt", 1}, {"delivered_to", "https://calleval.example/x"}}}}
      .dump();
}

CarrierAccount Account(const TelnyxKey& key) {
  CarrierAccount account;
  account.carrier = "telnyx";
  account.account_id = "1494404757140276705";
  account.secret = "KEY0123456789ABCDEF_secret";
  account.public_key = key.PublicKeyBase64();
  account.caller_numbers = {"+15550001111"};
  return account;
}

CarrierWebhook Signed(const TelnyxKey& key, const std::string& body, absl::Time when) {
  CarrierWebhook hook;
  hook.url = "https://calleval.example/media/telnyx/tok/events";
  hook.method = "POST";
  hook.content_type = "application/json";
  hook.body = body;
  const std::string timestamp = absl::StrCat(absl::ToUnixSeconds(when));
  hook.headers["telnyx-timestamp"] = timestamp;
  hook.headers["telnyx-signature-ed25519"] = key.Sign(timestamp, body);
  return hook;
}

TEST(TelnyxSignatureTest, AcceptsTelnyxsSignatureAndRefusesForgeries) {
  TelnyxKey key, other;
  auto client = NewTelnyxCarrierClient(Account(key), "http://127.0.0.1:9");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string body =
      Webhook("call.answered", {{"call_control_id", "v3:abc"}, {"connection_id", "1"}});

  absl::StatusOr<std::vector<CarrierEvent>> events =
      (*client)->ReadWebhook(Signed(key, body, kNow), kNow);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].progress, CarrierEvent::kAnswered);
  EXPECT_EQ((*events)[0].call_id, "v3:abc");
  // Five minutes either way is still on time.
  EXPECT_TRUE((*client)->ReadWebhook(Signed(key, body, kNow - absl::Seconds(300)), kNow).ok());
  EXPECT_TRUE((*client)->ReadWebhook(Signed(key, body, kNow + absl::Seconds(300)), kNow).ok());

  auto refused = [&](CarrierWebhook hook, const std::string& why) {
    absl::StatusOr<std::vector<CarrierEvent>> read = (*client)->ReadWebhook(hook, kNow);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kUnauthenticated) << why;
  };
  CarrierWebhook tampered = Signed(key, body, kNow);
  tampered.body[tampered.body.find("v3:abc") + 3] = 'X';
  refused(tampered, "tampered body");
  refused(Signed(other, body, kNow), "signed with another key");
  refused(Signed(key, body, kNow - absl::Seconds(301)), "stale");
  refused(Signed(key, body, kNow + absl::Seconds(301)), "from the future");
  CarrierWebhook moved = Signed(key, body, kNow);
  moved.headers["telnyx-timestamp"] = absl::StrCat(absl::ToUnixSeconds(kNow) + 1);
  refused(moved, "timestamp changed after signing");
  CarrierWebhook unsigned_hook = Signed(key, body, kNow);
  unsigned_hook.headers.erase("telnyx-signature-ed25519");
  refused(unsigned_hook, "no signature");
  CarrierWebhook untimed = Signed(key, body, kNow);
  untimed.headers.erase("telnyx-timestamp");
  refused(untimed, "no timestamp");
  CarrierWebhook garbage = Signed(key, body, kNow);
  garbage.headers["telnyx-signature-ed25519"] = "bm90IGEgc2lnbmF0dXJl";
  refused(garbage, "not a signature");
  CarrierWebhook signed_hex = Signed(key, body, kNow);
  signed_hex.headers["telnyx-timestamp"] = "0x69";
  refused(signed_hex, "timestamp not decimal");
}

TEST(TelnyxSignatureTest, ClientNeedsItsCredentialsAndAUsableKey) {
  TelnyxKey key;
  CarrierAccount account = Account(key);
  account.public_key = "";
  EXPECT_EQ(NewTelnyxCarrierClient(account, "https://api.telnyx.com").status().code(),
            absl::StatusCode::kFailedPrecondition);
  account.public_key = Base64Encode("short");
  EXPECT_EQ(NewTelnyxCarrierClient(account, "https://api.telnyx.com").status().code(),
            absl::StatusCode::kFailedPrecondition);
  account = Account(key);
  account.secret = "";
  EXPECT_EQ(NewTelnyxCarrierClient(account, "https://api.telnyx.com").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(TelnyxWebhookTest, MapsCallControlEventsToTheRunsProgress) {
  struct Case {
    std::string type;
    json payload;
    CarrierEvent::Progress progress;
    bool by_callee;
    std::string detail;
  };
  const std::vector<Case> cases = {
      {"call.initiated", {{"direction", "outgoing"}, {"state", "bridging"}},
       CarrierEvent::kRinging, false, "call.initiated"},
      {"call.answered", json::object(), CarrierEvent::kAnswered, false, "call.answered"},
      {"call.hangup", {{"hangup_cause", "normal_clearing"}, {"hangup_source", "callee"}},
       CarrierEvent::kCompleted, true, "normal_clearing"},
      {"call.hangup", {{"hangup_cause", "normal_clearing"}, {"hangup_source", "caller"}},
       CarrierEvent::kCompleted, false, "normal_clearing"},
      {"call.hangup", {{"hangup_cause", "time_limit"}, {"hangup_source", "unknown"}},
       CarrierEvent::kCompleted, false, "time_limit"},
      {"call.hangup", {{"hangup_cause", "user_busy"}, {"hangup_source", "callee"}},
       CarrierEvent::kBusy, true, "user_busy"},
      {"call.hangup", {{"hangup_cause", "call_rejected"}}, CarrierEvent::kBusy, false,
       "call_rejected"},
      {"call.hangup", {{"hangup_cause", "timeout"}}, CarrierEvent::kNoAnswer, false, "timeout"},
      {"call.hangup", {{"hangup_cause", "no_answer"}}, CarrierEvent::kNoAnswer, false,
       "no_answer"},
      {"call.hangup", {{"hangup_cause", "not_found"}}, CarrierEvent::kFailed, false,
       "not_found"},
      {"call.hangup", json::object(), CarrierEvent::kFailed, false, "unspecified"},
      {"call.machine.detection.ended", {{"result", "machine"}}, CarrierEvent::kMachine, false,
       "machine"},
      {"call.machine.detection.ended", {{"result", "human"}}, CarrierEvent::kOther, false,
       "human"},
      {"call.machine.detection.ended", {{"result", "not_sure"}}, CarrierEvent::kOther, false,
       "not_sure"},
      {"call.machine.premium.detection.ended", {{"result", "machine"}}, CarrierEvent::kMachine,
       false, "machine"},
      {"streaming.started", {{"stream_url", "wss://x"}}, CarrierEvent::kOther, false,
       "streaming.started"},
  };
  for (const Case& c : cases) {
    json payload = c.payload;
    payload["call_control_id"] = "v3:call-1";
    absl::StatusOr<std::vector<CarrierEvent>> events =
        ParseTelnyxWebhook(Webhook(c.type, payload));
    ASSERT_TRUE(events.ok()) << c.type << " " << events.status();
    ASSERT_EQ(events->size(), 1u);
    const CarrierEvent& e = (*events)[0];
    EXPECT_EQ(e.progress, c.progress) << c.type << " " << c.payload;
    EXPECT_EQ(e.hangup_by_callee, c.by_callee) << c.type << " " << c.payload;
    EXPECT_EQ(e.detail, c.detail) << c.type << " " << c.payload;
    EXPECT_EQ(e.call_id, "v3:call-1");
  }
  EXPECT_EQ(ParseTelnyxWebhook("not json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTelnyxWebhook(R"({"data": {}})").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TelnyxMediaDialectTest, ReadsTelnyxsEventsAndWritesTheApplicationsMessages) {
  std::unique_ptr<MediaDialect> dialect = NewTelnyxMediaDialect();
  absl::StatusOr<MediaEvent> connected =
      dialect->Parse(R"({"event": "connected", "version": "1.0.0"})");
  ASSERT_TRUE(connected.ok());
  EXPECT_EQ(connected->kind, MediaEvent::kConnected);

  absl::StatusOr<MediaEvent> start = dialect->Parse(json{
      {"event", "start"},
      {"sequence_number", "1"},
      {"start",
       {{"user_id", "3e6f995f-85f7-4705-9741-53b116d28237"},
        {"call_control_id", "v3:call-1"},
        {"client_state", "aGF2ZSBhIG5pY2UgZGF5ID1d"},
        {"media_format", {{"encoding", "PCMU"}, {"sample_rate", 8000}, {"channels", 1}}}}},
      {"stream_id", "32de0dea-53cb-4b21-89a4-9e1819c043bc"}}.dump());
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->kind, MediaEvent::kStart);
  EXPECT_EQ(start->stream_id, "32de0dea-53cb-4b21-89a4-9e1819c043bc");
  EXPECT_EQ(start->call_id, "v3:call-1");

  const std::string frame(160, '\x7f');
  absl::StatusOr<MediaEvent> media = dialect->Parse(
      json{{"event", "media"},
           {"sequence_number", "4"},
           {"media",
            {{"track", "inbound"}, {"chunk", "2"}, {"timestamp", "5"},
             {"payload", Base64Encode(frame)}}},
           {"stream_id", "s"}}
          .dump());
  ASSERT_TRUE(media.ok());
  EXPECT_EQ(media->kind, MediaEvent::kMedia);
  EXPECT_EQ(media->mulaw, frame);

  absl::StatusOr<MediaEvent> mark = dialect->Parse(
      R"({"event": "mark", "sequence_number": "5", "stream_id": "s", "mark": {"name": "turn-3"}})");
  ASSERT_TRUE(mark.ok());
  EXPECT_EQ(mark->kind, MediaEvent::kMark);
  EXPECT_EQ(mark->mark, "turn-3");
  absl::StatusOr<MediaEvent> stop = dialect->Parse(
      R"({"event": "stop", "sequence_number": "6", "stop": {"call_control_id": "v3:call-1"},)"
      R"( "stream_id": "s"})");
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->kind, MediaEvent::kStop);
  absl::StatusOr<MediaEvent> dtmf =
      dialect->Parse(R"({"event": "dtmf", "dtmf": {"digit": "1"}, "stream_id": "s"})");
  ASSERT_TRUE(dtmf.ok());
  EXPECT_EQ(dtmf->kind, MediaEvent::kOther);
  EXPECT_EQ(dtmf->event, "dtmf");

  EXPECT_FALSE(dialect->Parse("nope").ok());
  EXPECT_FALSE(dialect->Parse(R"({"event": "media", "media": {}})").ok());
  EXPECT_FALSE(dialect->Parse(R"({"event": "media", "media": {"payload": "%%"}})").ok());

  EXPECT_EQ(json::parse(dialect->Media("s", frame)),
            (json{{"event", "media"}, {"media", {{"payload", Base64Encode(frame)}}}}));
  EXPECT_EQ(json::parse(dialect->Mark("s", "turn-3")),
            (json{{"event", "mark"}, {"mark", {{"name", "turn-3"}}}}));
  EXPECT_EQ(json::parse(dialect->Clear("s")), (json{{"event", "clear"}}));
  // What the application sends for media reads back as the same audio.
  absl::StatusOr<MediaEvent> echoed = dialect->Parse(dialect->Media("s", frame));
  ASSERT_TRUE(echoed.ok());
  EXPECT_EQ(echoed->mulaw, frame);
}

OutboundCall Call() {
  OutboundCall call;
  call.from = "+15550001111";
  call.to = "+15550002222";
  call.media_url = "wss://calleval.example/media/telnyx/tok";
  call.events_url = "https://calleval.example/media/telnyx/tok/events";
  call.answer_url = "https://calleval.example/media/telnyx/tok/answer";
  call.ring_timeout = absl::Seconds(25);
  call.time_limit = absl::Seconds(180);
  return call;
}

TEST(TelnyxCallControlTest, DialsWithABidirectionalStreamAndHangsUp) {
  TelnyxKey key;
  TestHttpServer telnyx;
  telnyx.Handle("/v2/calls", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.content_type = "application/json";
    r.body = R"({"data": {
                 "call_control_id": "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg",
                 "call_leg_id": "2dc6fc34-f9e0-11ea-b68e-02420a0f7768",
                 "call_session_id": "2dc1b3c8-f9e0-11ea-bc5a-02420a0f7768",
                 "is_alive": false, "record_type": "call"}})";
    return r;
  });
  telnyx.HandlePrefix("/v2/calls/", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.content_type = "application/json";
    r.body = R"({"data": {"result": "ok"}})";
    return r;
  });
  auto client = NewTelnyxCarrierClient(Account(key), telnyx.url("/"));
  ASSERT_TRUE(client.ok()) << client.status();

  absl::StatusOr<std::string> id = (*client)->PlaceCall(Call());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg");
  EXPECT_TRUE((*client)->Hangup(*id).ok());
  EXPECT_EQ((*client)->AnswerDocument(Call()), "");

  std::vector<TestHttpServer::Request> requests = telnyx.requests();
  ASSERT_EQ(requests.size(), 2u);
  const TestHttpServer::Request& dial = requests[0];
  EXPECT_EQ(dial.method, "POST");
  EXPECT_EQ(dial.target, "/v2/calls");
  EXPECT_EQ(dial.Header("authorization"), "Bearer KEY0123456789ABCDEF_secret");
  EXPECT_EQ(dial.Header("content-type"), "application/json");
  EXPECT_EQ(json::parse(dial.body), (json{{"connection_id", "1494404757140276705"},
                                          {"to", "+15550002222"},
                                          {"from", "+15550001111"},
                                          {"stream_url", "wss://calleval.example/media/telnyx/tok"},
                                          {"stream_track", "inbound_track"},
                                          {"stream_bidirectional_mode", "rtp"},
                                          {"stream_bidirectional_codec", "PCMU"},
                                          {"webhook_url",
                                           "https://calleval.example/media/telnyx/tok/events"},
                                          {"webhook_url_method", "POST"},
                                          {"timeout_secs", 25},
                                          {"time_limit_secs", 180},
                                          {"answering_machine_detection", "detect"}}))
      << dial.body;
  const TestHttpServer::Request& hangup = requests[1];
  EXPECT_EQ(hangup.method, "POST");
  EXPECT_EQ(hangup.target,
            "/v2/calls/v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg/actions/hangup");
  EXPECT_EQ(hangup.Header("authorization"), "Bearer KEY0123456789ABCDEF_secret");

  // Without machine detection the field is left out; an id with a slash stays one segment.
  OutboundCall plain = Call();
  plain.detect_machine = false;
  ASSERT_TRUE((*client)->PlaceCall(plain).ok());
  EXPECT_FALSE(json::parse(telnyx.requests()[2].body).contains("answering_machine_detection"));
  EXPECT_TRUE((*client)->Hangup("v3:a/../b").ok());
  EXPECT_EQ(telnyx.requests()[3].target, "/v2/calls/v3:a%2F..%2Fb/actions/hangup");
}

// An agent calling in: Telnyx announces the call with call.initiated (direction incoming) and
// the run answers it by command, streaming it both ways to the line.
TEST(TelnyxCallControlTest, AnIncomingCallIsReadThenAnsweredByCommand) {
  TelnyxKey key;
  const std::string body = Webhook("call.initiated", {{"call_control_id", "v3:in-1"},
                                                      {"connection_id", "1494404757140276705"},
                                                      {"direction", "incoming"},
                                                      {"from", "+33612345601"},
                                                      {"to", "+15550001111"},
                                                      {"state", "parked"}});
  CarrierWebhook hook = Signed(key, body, absl::Now());
  absl::StatusOr<IncomingCall> call = ReadIncomingCall("telnyx", hook);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->from, "+33612345601");
  EXPECT_EQ(call->to, "+15550001111");
  EXPECT_EQ(call->call_id, "v3:in-1");
  // An outgoing call's start, or another event, is not an incoming call.
  EXPECT_EQ(ReadIncomingCall(
                "telnyx", Signed(key,
                                 Webhook("call.initiated",
                                         {{"direction", "outgoing"}, {"from", "+1"}, {"to", "+2"}}),
                                 absl::Now()))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  hook.body = "{}";
  EXPECT_EQ(ReadIncomingCall("telnyx", hook).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IncomingCallRejection("telnyx"), "");

  TestHttpServer telnyx;
  telnyx.HandlePrefix("/v2/calls/", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.content_type = "application/json";
    r.body = R"({"data": {"result": "ok"}})";
    return r;
  });
  auto client = NewTelnyxCarrierClient(Account(key), telnyx.url("/"));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->IncomingCallAnswer("wss://calleval.example/media/telnyx/tok"), "");
  ASSERT_TRUE((*client)
                  ->AnswerIncoming("v3:in-1", "wss://calleval.example/media/telnyx/tok",
                                   "https://calleval.example/media/telnyx/tok/events")
                  .ok());
  ASSERT_EQ(telnyx.requests().size(), 1u);
  const TestHttpServer::Request answer = telnyx.requests()[0];
  EXPECT_EQ(answer.method, "POST");
  EXPECT_EQ(answer.target, "/v2/calls/v3:in-1/actions/answer");
  EXPECT_EQ(answer.Header("authorization"), "Bearer KEY0123456789ABCDEF_secret");
  EXPECT_EQ(json::parse(answer.body),
            (json{{"stream_url", "wss://calleval.example/media/telnyx/tok"},
                  {"stream_track", "inbound_track"},
                  {"stream_bidirectional_mode", "rtp"},
                  {"stream_bidirectional_codec", "PCMU"},
                  {"webhook_url", "https://calleval.example/media/telnyx/tok/events"},
                  {"webhook_url_method", "POST"}}))
      << answer.body;
}

TEST(TelnyxCallControlTest, QuotesTelnyxsRefusal) {
  TelnyxKey key;
  TestHttpServer telnyx;
  telnyx.Handle("/v2/calls", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.status = 401;
    r.content_type = "application/json";
    r.body = R"({"errors": [{"code": "10009", "title": "Authentication failed",
                 "detail": "Could not understand the provided credentials.",
                 "meta": {"url": "https://developers.telnyx.com/docs/overview/errors/10009"}}]})";
    return r;
  });
  telnyx.HandlePrefix("/v2/calls/", [](const TestHttpServer::Request&) {
    TestHttpServer::Response r;
    r.status = 422;
    r.content_type = "application/json";
    r.body = R"({"errors": [{"code": "90018", "title": "Call has already ended",
                 "detail": "This call is no longer active and can't receive commands."}]})";
    return r;
  });
  auto client = NewTelnyxCarrierClient(Account(key), telnyx.url(""));
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::string> id = (*client)->PlaceCall(Call());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(id.status().message(), HasSubstr("HTTP 401"));
  EXPECT_THAT(id.status().message(),
              HasSubstr("Authentication failed: Could not understand the provided credentials."));
  EXPECT_EQ(telnyx.hits("/v2/calls"), 1);  // a refused dial is not retried
  // Hanging up a call that is already over succeeds: it is over.
  EXPECT_TRUE((*client)->Hangup("v3:gone").ok());

  // An unreachable Telnyx is kUnavailable.
  auto unreachable = NewTelnyxCarrierClient(Account(key), "http://127.0.0.1:1");
  ASSERT_TRUE(unreachable.ok());
  EXPECT_EQ((*unreachable)->PlaceCall(Call()).status().code(), absl::StatusCode::kUnavailable);
}

// The service's side of the webhooks, over real HTTP: each one read by the client, as the run
// does; 200 when it verifies, 401 when not.
class WebhookReceiver {
 public:
  explicit WebhookReceiver(CarrierClient* client) : client_(client) {
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
  mutable std::mutex mu_;
  std::vector<CarrierEvent> events_;
  TestHttpServer http_;
};

TEST(TelnyxCallControlTest, ACallThroughAFakeTelnyxAndItsSignedWebhooks) {
  FakeTelnyx telnyx;
  CarrierAccount account;
  account.carrier = "telnyx";
  account.account_id = telnyx.connection_id();
  account.secret = telnyx.api_key();
  account.public_key = telnyx.public_key();
  auto client = NewTelnyxCarrierClient(account, telnyx.url());
  ASSERT_TRUE(client.ok()) << client.status();
  WebhookReceiver service(client->get());
  OutboundCall call = Call();
  call.events_url = service.url("/media/telnyx/tok/events");

  absl::StatusOr<std::string> id = (*client)->PlaceCall(call);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(telnyx.dials().size(), 1u);
  EXPECT_EQ(telnyx.dials()[0].body["stream_url"], call.media_url);
  absl::StatusOr<WebhookAnswer> answered = telnyx.SendWebhook(*id, "call.answered", {});
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_EQ(answered->status, 200);
  absl::StatusOr<WebhookAnswer> hangup = telnyx.SendWebhook(
      *id, "call.hangup", {{"hangup_cause", "normal_clearing"}, {"hangup_source", "callee"}});
  ASSERT_TRUE(hangup.ok());
  EXPECT_EQ(hangup->status, 200);
  // A replayed webhook (signed ten minutes ago) is refused.
  absl::StatusOr<WebhookAnswer> replayed =
      telnyx.SendWebhook(*id, "call.answered", {}, absl::Now() - absl::Minutes(10));
  ASSERT_TRUE(replayed.ok());
  EXPECT_EQ(replayed->status, 401);

  std::vector<CarrierEvent> events = service.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].progress, CarrierEvent::kAnswered);
  EXPECT_EQ(events[0].call_id, *id);
  EXPECT_EQ(events[1].progress, CarrierEvent::kCompleted);
  EXPECT_TRUE(events[1].hangup_by_callee);

  EXPECT_TRUE((*client)->Hangup(*id).ok());
  EXPECT_TRUE((*client)->Hangup(*id).ok());  // Telnyx: 422 "Call has already ended"
  EXPECT_EQ(telnyx.hangups(), std::vector<std::string>{*id});

  telnyx.RefuseDials(403, "Forbidden", "The destination is not allowed.");
  absl::StatusOr<std::string> refused = (*client)->PlaceCall(call);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("The destination is not allowed."));
}

}  // namespace
}  // namespace calleval::runs

// The voice platforms' webhooks (services/agents/platform_events.h): Vapi's and Retell's
// end-of-call events read into calls, their signatures checked (Retell's against a signature its
// own SDK made), and the handler over real stores: a call for each workspace whose secret
// verifies the event and whose agent it names, nothing for the others. On both backends.
#include "services/agents/platform_events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/schema.h"
#include "google/protobuf/util/json_util.h"
#include "services/accounts/accounts_store.h"
#include "tests/support/test_database.h"

namespace calleval::agents {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kVapiReport[] = R"({"message": {
  "type": "end-of-call-report", "endedReason": "assistant-ended-call", "cost": 0.25,
  "startedAt": "2026-11-28T10:00:00.000Z", "durationSeconds": 12.6,
  "call": {"id": "c-1", "assistantId": "asst-1", "type": "outboundPhoneCall"},
  "customer": {"number": "+14155550142"},
  "artifact": {"recordingUrl": "https://r.example/mono.wav",
               "stereoRecordingUrl": "https://r.example/stereo.wav",
               "messages": [
    {"role": "system", "message": "prompt", "secondsFromStart": 0},
    {"role": "bot", "message": "Hello", "secondsFromStart": 0.5, "duration": 1000},
    {"role": "user", "message": "Hi", "secondsFromStart": 2, "time": 1000, "endTime": 1750},
    {"role": "tool_calls", "secondsFromStart": 3}]}}})";

constexpr char kRetellEvent[] = R"({"event": "call_analyzed", "call": {
  "call_id": "r-1", "agent_id": "agent-1", "agent_version": 7, "direction": "inbound",
  "from_number": "+14155550142", "to_number": "+14155550100",
  "start_timestamp": 1764324000000, "end_timestamp": 1764324010400,
  "recording_url": "https://r.example/mono.wav", "disconnection_reason": "user_hangup",
  "call_cost": {"combined_cost": 7},
  "transcript_object": [
    {"role": "agent", "content": "Hello", "words": [{"word": "Hello", "start": 0.2, "end": 0.7}]},
    {"role": "user", "content": "Hi", "words": []}]}})";

std::string Json(const google::protobuf::Message& message) {
  std::string out;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(message, &out).ok());
  return out;
}

// A Struct's keys and their values as JSON text (the Struct's map has no order).
using Metadata = std::map<std::string, std::string>;
Metadata Fields(const google::protobuf::Struct& metadata) {
  Metadata out;
  for (const auto& [key, value] : metadata.fields()) out[key] = Json(value);
  return out;
}

TEST(ParsePlatformEventTest, VapiReportBecomesACall) {
  absl::StatusOr<PlatformEvent> event = ParseVapiEvent(kVapiReport);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(event->makes_call);
  EXPECT_EQ(event->assistant_id, "asst-1");
  const v1::IngestCallRequest& call = event->call;
  EXPECT_EQ(call.call_identifier(), "vapi-c-1");
  EXPECT_EQ(call.recording_url(), "https://r.example/stereo.wav");
  EXPECT_EQ(call.observation_type(), "voice");
  EXPECT_EQ(call.call_end_reason(), "assistant-ended-call");
  EXPECT_EQ(call.call_direction(), "outbound");
  EXPECT_EQ(call.customer_number(), "+14155550142");
  EXPECT_EQ(call.duration_seconds(), 13);
  EXPECT_EQ(call.call_timestamp(), "2026-11-28T10:00:00.000Z");
  ASSERT_EQ(call.transcript_size(), 2);
  EXPECT_EQ(Json(call.transcript(0)),
            R"({"role":"AI Assistant","content":"Hello","startTime":0.5,"endTime":1.5})");
  EXPECT_EQ(Json(call.transcript(1)),
            R"({"role":"User","content":"Hi","startTime":2,"endTime":2.75})");
  EXPECT_EQ(Fields(call.metadata()),
            (Metadata{{"platform", R"("vapi")"},
                      {"ended_reason", R"("assistant-ended-call")"},
                      {"cost", "0.25"}}));
  EXPECT_FALSE(call.has_agent_id());
  // Vapi's assistants have no version.
  EXPECT_EQ(event->platform_version, std::nullopt);
}

TEST(ParsePlatformEventTest, RetellCallAnalyzedBecomesACall) {
  absl::StatusOr<PlatformEvent> event = ParseRetellEvent(kRetellEvent);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(event->makes_call);
  EXPECT_EQ(event->assistant_id, "agent-1");
  // The version of the agent that took the call, as text.
  EXPECT_EQ(event->platform_version, "7");
  const v1::IngestCallRequest& call = event->call;
  EXPECT_EQ(call.call_identifier(), "retell-r-1");
  // No multi-channel recording: the mixed one.
  EXPECT_EQ(call.recording_url(), "https://r.example/mono.wav");
  EXPECT_EQ(call.call_direction(), "inbound");
  EXPECT_EQ(call.customer_number(), "+14155550142");
  EXPECT_EQ(call.duration_seconds(), 10);
  EXPECT_EQ(call.call_timestamp(), "2025-11-28T10:00:00Z");
  ASSERT_EQ(call.transcript_size(), 2);
  EXPECT_EQ(Json(call.transcript(0)),
            R"({"role":"AI Assistant","content":"Hello","startTime":0.2,"endTime":0.7})");
  // A turn without words has no times.
  EXPECT_EQ(Json(call.transcript(1)), R"({"role":"User","content":"Hi"})");
  EXPECT_EQ(Fields(call.metadata()),
            (Metadata{{"platform", R"("retell")"},
                      {"ended_reason", R"("user_hangup")"},
                      {"cost", "0.07"}}));
}

TEST(ParsePlatformEventTest, OtherEventsMakeNoCallAndBadBodiesAreRefused) {
  absl::StatusOr<PlatformEvent> other =
      ParseVapiEvent(R"({"message": {"type": "status-update"}})");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->makes_call);
  other = ParseRetellEvent(R"({"event": "call_ended", "call": {}})");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->makes_call);
  EXPECT_EQ(ErrorInfoOf(ParseVapiEvent("{").status()).code(), "malformed_json");
  EXPECT_EQ(ErrorInfoOf(ParseRetellEvent("[1]").status()).code(), "malformed_json");
  const absl::Status no_assistant =
      ParseVapiEvent(R"({"message": {"type": "end-of-call-report", "call": {"id": "x"}}})")
          .status();
  EXPECT_EQ(ErrorInfoOf(no_assistant).code(), "validation_failed");
  EXPECT_EQ(ErrorInfoOf(no_assistant).details(0).field(), "message.call.assistantId");
  EXPECT_EQ(HttpStatusFor(ParseRetellEvent(R"({"event": "call_analyzed"})").status()), 422);
}

TEST(VerifyPlatformSignatureTest, RetellAsItsSdkSigns) {
  // retell-sdk 5.66.1: symmetric.sign("hello", "key", 1700000000000).
  const std::string signature =
      "v=1700000000000,d=5dd4471b4fa470f16f649a4a53c998065e5e4d4a77abbe8abaf201fb56b49fef";
  const absl::Time signed_at = absl::FromUnixMillis(1700000000000);
  EXPECT_TRUE(VerifyRetellSignature(signature, "hello", "key", signed_at));
  EXPECT_TRUE(VerifyRetellSignature(signature, "hello", "key", signed_at + absl::Minutes(5)));
  EXPECT_TRUE(VerifyRetellSignature(signature, "hello", "key", signed_at - absl::Minutes(5)));
  EXPECT_FALSE(VerifyRetellSignature(signature, "hello", "key",
                                     signed_at + absl::Minutes(5) + absl::Milliseconds(1)));
  EXPECT_FALSE(VerifyRetellSignature(signature, "hello", "key",
                                     signed_at - absl::Minutes(5) - absl::Milliseconds(1)));
  EXPECT_FALSE(VerifyRetellSignature(signature, "hello!", "key", signed_at));
  EXPECT_FALSE(VerifyRetellSignature(signature, "hello", "other", signed_at));
  EXPECT_FALSE(VerifyRetellSignature(signature, "hello", "", signed_at));
  // The SDK reads the digest in either case.
  EXPECT_TRUE(VerifyRetellSignature(
      "v=1700000000000,d=5DD4471B4FA470F16F649A4A53C998065E5E4D4A77ABBE8ABAF201FB56B49FEF",
      "hello", "key", signed_at));
  for (const char* garbled : {"", "v=,d=", "d=5dd4,v=1700000000000", "v=17e11,d=00",
                              "v=1700000000000;d=5dd4", "v=-1,d=00"}) {
    EXPECT_FALSE(VerifyRetellSignature(garbled, "hello", "key", signed_at)) << garbled;
  }
}

TEST(VerifyPlatformSignatureTest, VapiSecretBearerOrHmac) {
  const absl::Time now = absl::FromUnixSeconds(1764324000);
  const std::string body = R"({"message":{}})";
  using Headers = std::map<std::string, std::string>;
  EXPECT_TRUE(VerifyVapiRequest(Headers{{"x-vapi-secret", "s3cret"}}, body, "s3cret", now));
  EXPECT_FALSE(VerifyVapiRequest(Headers{{"x-vapi-secret", "s3cre"}}, body, "s3cret", now));
  EXPECT_TRUE(VerifyVapiRequest(Headers{{"authorization", "Bearer s3cret"}}, body, "s3cret", now));
  EXPECT_FALSE(VerifyVapiRequest(Headers{{"authorization", "Basic s3cret"}}, body, "s3cret", now));
  const std::string over_body = HexEncode(HmacSha256("s3cret", body));
  EXPECT_TRUE(VerifyVapiRequest(Headers{{"x-vapi-signature", over_body}}, body, "s3cret", now));
  EXPECT_TRUE(VerifyVapiRequest(Headers{{"x-signature", "sha256=" + over_body}}, body, "s3cret",
                                now));
  const std::string stamped = HexEncode(HmacSha256("s3cret", "1764324000." + body));
  EXPECT_TRUE(VerifyVapiRequest(Headers{{"x-signature", stamped}, {"x-timestamp", "1764324000"}},
                                body, "s3cret", now));
  // Six minutes later the same request is stale.
  EXPECT_FALSE(VerifyVapiRequest(Headers{{"x-signature", stamped}, {"x-timestamp", "1764324000"}},
                                 body, "s3cret", now + absl::Minutes(6)));
  const std::string stamped_ms = HexEncode(HmacSha256("s3cret", "1764324000000." + body));
  EXPECT_TRUE(VerifyVapiRequest(
      Headers{{"x-signature", stamped_ms}, {"x-timestamp", "1764324000000"}}, body, "s3cret",
      now));
  EXPECT_FALSE(VerifyVapiRequest(Headers{{"x-vapi-signature", over_body}}, body + " ", "s3cret",
                                 now));
  EXPECT_FALSE(VerifyVapiRequest(Headers{}, body, "s3cret", now));
  EXPECT_FALSE(VerifyVapiRequest(Headers{{"x-vapi-secret", ""}}, body, "", now));
}

class PlatformEventHandlerTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    accounts_ = std::make_unique<accounts::AccountsStore>(database_->db());
    ours_ = accounts_->CreateWorkspace("ours", 0)->id;
    theirs_ = accounts_->CreateWorkspace("theirs", 0)->id;
    agents_ = std::make_unique<AgentsStore>(database_->db());
    integrations_ = std::make_unique<IntegrationsStore>(database_->db(), RandomBytes(32));
    handler_ = std::make_unique<PlatformEventHandler>(
        agents_.get(), integrations_.get(),
        [this](int64_t workspace_id, const v1::IngestCallRequest& call,
               const std::optional<std::string>& platform_version) -> absl::StatusOr<v1::Call> {
          const std::string key = absl::StrCat(workspace_id, "/", call.call_identifier());
          for (const auto& [stored_key, agent] : stored_) {
            if (stored_key == key) {
              return ConflictError("duplicate_call_identifier", "already submitted");
            }
          }
          stored_.emplace_back(key, call.agent_id());
          versions_.push_back(platform_version);
          v1::Call made;
          made.set_id(static_cast<int64_t>(stored_.size()));
          return made;
        },
        [this] { return now_; });
  }

  int64_t Agent(int64_t workspace, const std::string& source, const std::string& assistant) {
    v1::AgentFields fields;
    fields.set_name(absl::StrCat(source, "-", assistant));
    fields.set_phone_number("+14155550100");
    fields.set_agent_source(source);
    fields.set_assistant_id(assistant);
    for (const char* key : {"name", "phone_number", "agent_source", "assistant_id"}) {
      fields.add_set_fields(key);
    }
    absl::StatusOr<v1::Agent> agent = agents_->Create(workspace, fields);
    EXPECT_TRUE(agent.ok()) << agent.status();
    return agent.ok() ? agent->id() : 0;
  }

  void Settings(int64_t workspace, const std::string& provider, const std::string& key,
                const std::string& secret) {
    google::protobuf::Struct body;
    (*body.mutable_fields())[key].set_string_value(secret);
    ASSERT_TRUE(integrations_->Write(workspace, provider, body, /*replace=*/true).ok());
  }

  v1::PlatformEventRequest Retell(const std::string& body, const std::string& api_key) {
    v1::PlatformEventRequest request;
    request.set_provider("retell");
    request.set_body(body);
    const std::string millis = absl::StrCat(absl::ToUnixMillis(now_));
    (*request.mutable_headers())["x-retell-signature"] = absl::StrCat(
        "v=", millis, ",d=", HexEncode(HmacSha256(api_key, absl::StrCat(body, millis))));
    return request;
  }

  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<accounts::AccountsStore> accounts_;
  std::unique_ptr<AgentsStore> agents_;
  std::unique_ptr<IntegrationsStore> integrations_;
  std::unique_ptr<PlatformEventHandler> handler_;
  std::vector<std::pair<std::string, int64_t>> stored_;  // "workspace/identifier", agent
  std::vector<std::optional<std::string>> versions_;     // each stored call's platform_version
  absl::Time now_ = absl::FromUnixSeconds(1764324000);
  int64_t ours_ = 0, theirs_ = 0;
};

TEST_P(PlatformEventHandlerTest, OnlyTheWorkspaceWhoseSecretSignsGetsTheCall) {
  // Both workspaces name the same Retell agent; each has its own key.
  const int64_t our_agent = Agent(ours_, "external_retell", "agent-1");
  Agent(ours_, "external_retell", "agent-1");  // a younger twin: the oldest takes the call
  Agent(theirs_, "external_retell", "agent-1");
  Agent(ours_, "external_vapi", "agent-1");  // another platform's assistant of the same id
  Settings(ours_, "retell", "api_key", "key-ours");
  Settings(theirs_, "retell", "api_key", "key-theirs");

  absl::StatusOr<v1::PlatformEventResponse> handled =
      handler_->Handle(Retell(kRetellEvent, "key-ours"));
  ASSERT_TRUE(handled.ok()) << handled.status();
  EXPECT_EQ(handled->outcome(), "stored");
  EXPECT_THAT(handled->call_ids(), ElementsAre(1));
  ASSERT_EQ(stored_.size(), 1u);
  EXPECT_EQ(stored_[0].first, absl::StrCat(ours_, "/retell-r-1"));
  EXPECT_EQ(stored_[0].second, our_agent);
  // Retell's agent_version goes with the call to the calls service.
  EXPECT_THAT(versions_, ElementsAre(std::optional<std::string>("7")));

  // Redelivered: acknowledged, nothing new.
  handled = handler_->Handle(Retell(kRetellEvent, "key-ours"));
  ASSERT_TRUE(handled.ok()) << handled.status();
  EXPECT_EQ(handled->outcome(), "duplicate");
  EXPECT_THAT(handled->call_ids(), IsEmpty());
  EXPECT_EQ(stored_.size(), 1u);

  // Signed with a key no workspace of the agent holds.
  handled = handler_->Handle(Retell(kRetellEvent, "key-someone"));
  EXPECT_EQ(ErrorInfoOf(handled.status()).code(), "invalid_signature");
  EXPECT_EQ(HttpStatusFor(handled.status()), 401);
  // Stale: the clock has moved on six minutes since it was signed.
  v1::PlatformEventRequest stale = Retell(kRetellEvent, "key-theirs");
  now_ += absl::Minutes(6);
  EXPECT_EQ(HttpStatusFor(handler_->Handle(stale).status()), 401);
  EXPECT_EQ(stored_.size(), 1u);
}

TEST_P(PlatformEventHandlerTest, UnknownAssistantsAndOtherEventsAreIgnored) {
  Settings(ours_, "vapi", "webhook_secret", "s3cret");
  Agent(ours_, "external_vapi", "asst-other");
  v1::PlatformEventRequest request;
  request.set_provider("vapi");
  request.set_body(kVapiReport);
  (*request.mutable_headers())["x-vapi-secret"] = "s3cret";
  absl::StatusOr<v1::PlatformEventResponse> handled = handler_->Handle(request);
  ASSERT_TRUE(handled.ok()) << handled.status();
  EXPECT_EQ(handled->outcome(), "ignored");
  request.set_body(R"({"message": {"type": "speech-update"}})");
  handled = handler_->Handle(request);
  ASSERT_TRUE(handled.ok()) << handled.status();
  EXPECT_EQ(handled->outcome(), "ignored");
  EXPECT_THAT(stored_, IsEmpty());

  // A workspace with the agent but without settings cannot verify anything.
  const int64_t agent = Agent(theirs_, "external_vapi", "asst-1");
  request.set_body(kVapiReport);
  EXPECT_EQ(HttpStatusFor(handler_->Handle(request).status()), 401);
  Settings(theirs_, "vapi", "webhook_secret", "s3cret");
  handled = handler_->Handle(request);
  ASSERT_TRUE(handled.ok()) << handled.status();
  EXPECT_EQ(handled->outcome(), "stored");
  ASSERT_EQ(stored_.size(), 1u);
  EXPECT_EQ(stored_[0].second, agent);
  EXPECT_THAT(versions_, ElementsAre(std::nullopt));

  request.set_provider("twilio");
  EXPECT_EQ(ErrorInfoOf(handler_->Handle(request).status()).code(), "unknown_provider");
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(PlatformEventHandlerTest);

}  // namespace
}  // namespace calleval::agents

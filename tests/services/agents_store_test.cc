#include "services/agents/agents_store.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/errors.h"
#include "common/schema.h"
#include "tests/support/test_database.h"
#include "common/status_macros.h"
#include "common/database.h"
#include "common/thread_pool.h"
#include "services/accounts/accounts_store.h"
#include "services/accounts/authenticator.h"
#include "services/agents/agents_service.h"

namespace calleval::agents {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The fields of an error's details, in order.
std::vector<std::string> ErrorFields(const absl::Status& status) {
  const v1::ErrorInfo info = ErrorInfoOf(status);
  std::vector<std::string> fields;
  for (const auto& d : info.details()) fields.push_back(d.field());
  return fields;
}

std::string ErrorCode(const absl::Status& status) { return ErrorInfoOf(status).code(); }

// A request as the edge's JSON codec builds it: every key with a value is in set_fields.
class Request {
 public:
  Request& Name(std::string v) {
    return Set("name", [&] { f_.set_name(v); });
  }
  Request& Phone(std::string v) {
    return Set("phone_number", [&] { f_.set_phone_number(v); });
  }
  Request& Source(std::string v) {
    return Set("agent_source", [&] { f_.set_agent_source(v); });
  }
  Request& IntegrationType(std::string v) {
    return Set("integration_type", [&] { f_.set_integration_type(v); });
  }
  Request& AgentKind(std::string v) {
    return Set("agent_kind", [&] { f_.set_agent_kind(v); });
  }
  Request& AssistantId(std::string v) {
    return Set("assistant_id", [&] { f_.set_assistant_id(v); });
  }
  Request& Directions(std::vector<std::string> v) {
    return Set("call_directions", [&] {
      f_.clear_call_directions();
      for (auto& d : v) f_.add_call_directions(d);
    });
  }
  Request& Language(int64_t v) {
    return Set("language_id", [&] { f_.set_language_id(v); });
  }
  Request& Instructions(std::string v) {
    return Set("instructions", [&] { f_.set_instructions(v); });
  }
  Request& Opening(std::optional<std::string> mode, std::optional<std::string> text,
                   std::optional<int> delay_ms) {
    return Set("opening_message", [&] {
      auto* om = f_.mutable_opening_message();
      if (mode) om->set_mode(*mode);
      if (text) om->set_text(*text);
      if (delay_ms) om->set_delay_ms(*delay_ms);
    });
  }
  Request& FirstMessage(std::string v) {
    return Set("first_message", [&] { f_.set_first_message(v); });
  }
  Request& MaxDuration(int v) {
    return Set("max_call_duration_seconds", [&] { f_.set_max_call_duration_seconds(v); });
  }
  Request& DisabledMetrics(std::vector<int64_t> v) {
    return Set("disabled_metric_ids", [&] {
      f_.clear_disabled_metric_ids();
      for (int64_t id : v) f_.add_disabled_metric_ids(id);
    });
  }
  Request& Silence(int v) {
    return Set("silence_threshold_ms", [&] { f_.set_silence_threshold_ms(v); });
  }
  Request& Model(std::string v) {
    return Set("model", [&] { f_.set_model(v); });
  }
  Request& Version(std::string v) {
    return Set("version", [&] { f_.set_version(v); });
  }
  Request& Voice(std::string v) {
    return Set("voice", [&] { f_.set_voice(v); });
  }
  // web_channel keys; nullopt sends the key as null.
  Request& Web(std::vector<std::pair<std::string, std::optional<std::string>>> keys) {
    return Set("web_channel", [&] {
      auto& fields = *f_.mutable_web_channel()->mutable_fields();
      for (auto& [k, v] : keys) {
        if (v) {
          fields[k].set_string_value(*v);
        } else {
          fields[k].set_null_value(google::protobuf::NULL_VALUE);
        }
      }
    });
  }
  Request& Transport(std::string v) {
    return Set("transport", [&] { f_.set_transport(v); });
  }
  Request& Null(std::string key) {
    f_.add_null_fields(key);
    return *this;
  }

  const v1::AgentFields& fields() const { return f_; }
  operator const v1::AgentFields&() const { return f_; }  // NOLINT: reads like the JSON body

 private:
  template <typename Fn>
  Request& Set(const std::string& key, Fn fn) {
    fn();
    if (std::find(f_.set_fields().begin(), f_.set_fields().end(), key) == f_.set_fields().end()) {
      f_.add_set_fields(key);
    }
    return *this;
  }
  v1::AgentFields f_;
};

// The smallest valid internal agent.
Request Internal() {
  return std::move(
      Request().Name("Support bot").Phone("+16502530000").Language(1).Instructions("Be kind."));
}

Request External(std::string source) {
  return std::move(
      Request().Name("Vendor bot").Phone("+16502530000").Source(source).AssistantId("asst_1"));
}

// Every case on a SQLite file and on PostgreSQL.
class AgentsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    db::Database::Options options;
    options.synchronous_full = false;
    auto database =
        calleval::testing::TestDatabase::Create(GetParam(), SchemaMigrations(), options);
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts::AccountsStore accounts(db_.get());
    auto ws = accounts.CreateWorkspace("one", 0);
    ASSERT_TRUE(ws.ok()) << ws.status();
    ws_ = ws->id;
    auto other = accounts.CreateWorkspace("two", 0);
    ASSERT_TRUE(other.ok()) << other.status();
    other_ws_ = other->id;
    AgentsStore::Options store_options;
    store_options.credentials_key = std::string(32, 'c');
    store_ = std::make_unique<AgentsStore>(db_.get(), store_options);
  }

  void TearDown() override {
    store_.reset();
    db_.reset();
    database_.reset();
  }

  v1::Agent MustCreate(const v1::AgentFields& fields, int64_t ws = 0) {
    auto agent = store_->Create(ws ? ws : ws_, fields);
    EXPECT_TRUE(agent.ok()) << agent.status();
    return agent.ok() ? *agent : v1::Agent();
  }

  // Asserts `status` is one 422 validation_failed error whose details name `fields`.
  static void ExpectInvalid(const absl::Status& status, std::vector<std::string> fields) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(HttpStatusFor(status), 422);
    EXPECT_EQ(ErrorCode(status), "validation_failed");
    EXPECT_EQ(ErrorFields(status), fields) << status;
  }

  std::unique_ptr<calleval::testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<AgentsStore> store_;
  int64_t ws_ = 0;
  int64_t other_ws_ = 0;
};

// ---- create: defaults and response shape ----

TEST_P(AgentsStoreTest, CreateInternalAgentWithDefaults) {
  v1::Agent agent = MustCreate(Internal());
  EXPECT_GT(agent.id(), 0);
  EXPECT_EQ(agent.client_id(), ws_);
  EXPECT_EQ(agent.name(), "Support bot");
  EXPECT_EQ(agent.phone_number(), "+16502530000");
  EXPECT_EQ(agent.telephony_carrier(), "twilio");
  EXPECT_EQ(agent.agent_source(), "internal");
  EXPECT_FALSE(agent.has_assistant_id());
  EXPECT_THAT(agent.call_directions(), ElementsAre("inbound"));
  EXPECT_EQ(agent.language_id(), 1);
  EXPECT_EQ(agent.instructions(), "Be kind.");
  EXPECT_EQ(agent.opening_message().mode(), "agent_speaks_first");
  EXPECT_FALSE(agent.opening_message().has_text());
  EXPECT_EQ(agent.opening_message().delay_ms(), 0);
  EXPECT_FALSE(agent.has_transport());
  EXPECT_FALSE(agent.has_web_channel());
  EXPECT_EQ(agent.max_call_duration_seconds(), 600);
  EXPECT_THAT(agent.disabled_metric_ids(), IsEmpty());
  EXPECT_FALSE(agent.has_silence_threshold_ms());
  EXPECT_FALSE(agent.has_model());
  EXPECT_FALSE(agent.has_voice());
  EXPECT_TRUE(absl::EndsWith(agent.created_at(), "Z")) << agent.created_at();
  EXPECT_EQ(agent.created_at().substr(10, 1), "T");
  EXPECT_EQ(agent.created_at(), agent.updated_at());
}

TEST_P(AgentsStoreTest, CreateStoresEveryFieldAndGetReturnsTheSame) {
  v1::Agent created = MustCreate(Internal()
                                     .Directions({"outbound", "inbound"})
                                     .Opening("user_speaks_first", "Hello!", 250)
                                     .MaxDuration(7200)
                                     .DisabledMetrics({3, 1})
                                     .Silence(1500)
                                     .Model("gpt-4o-mini")
                                     .Voice("alloy"));
  EXPECT_THAT(created.call_directions(), ElementsAre("outbound", "inbound"));
  EXPECT_EQ(created.opening_message().mode(), "user_speaks_first");
  EXPECT_EQ(created.opening_message().text(), "Hello!");
  EXPECT_EQ(created.opening_message().delay_ms(), 250);
  EXPECT_EQ(created.max_call_duration_seconds(), 7200);
  EXPECT_THAT(created.disabled_metric_ids(), ElementsAre(3, 1));
  EXPECT_EQ(created.silence_threshold_ms(), 1500);
  EXPECT_EQ(created.model(), "gpt-4o-mini");
  EXPECT_EQ(created.voice(), "alloy");

  auto got = store_->Get(ws_, created.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*got, created))
      << got->DebugString() << "\nvs\n"
      << created.DebugString();
}

TEST_P(AgentsStoreTest, FieldsSetWithoutSetFieldsCountAsSent) {
  // A gRPC client does not fill set_fields; the set fields alone must be enough.
  v1::AgentFields fields;
  fields.set_name("Plain gRPC");
  fields.set_phone_number("+442079460958");
  fields.set_language_id(2);
  fields.set_instructions("Hi");
  fields.add_call_directions("outbound");
  v1::Agent agent = MustCreate(fields);
  EXPECT_EQ(agent.telephony_carrier(), "twilio");
  EXPECT_THAT(agent.call_directions(), ElementsAre("outbound"));

  v1::AgentFields patch;
  patch.set_model("m1");
  auto updated = store_->Update(ws_, agent.id(), patch);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->model(), "m1");
  EXPECT_EQ(updated->name(), "Plain gRPC");
}

// ---- phone number ----

TEST_P(AgentsStoreTest, PhoneNumberIsNormalizedToE164) {
  EXPECT_EQ(MustCreate(Internal().Phone("+1 (650) 253-0000")).phone_number(), "+16502530000");
  EXPECT_EQ(MustCreate(Internal().Phone(" +44 20 7946 0958 ")).phone_number(), "+442079460958");
  EXPECT_EQ(MustCreate(Internal().Phone("+33 1.42.68.53.00")).phone_number(), "+33142685300");
}

TEST_P(AgentsStoreTest, CarrierIsDerivedFromCountryCallingCode) {
  EXPECT_EQ(MustCreate(Internal().Phone("+16502530000")).telephony_carrier(), "twilio");
  EXPECT_EQ(MustCreate(Internal().Phone("+442079460958")).telephony_carrier(), "twilio");
  EXPECT_EQ(MustCreate(Internal().Phone("+919876543210")).telephony_carrier(), "plivo");
  EXPECT_EQ(MustCreate(Internal().Phone("+33142685300")).telephony_carrier(), "telnyx");
}

TEST_P(AgentsStoreTest, CarrierTableIsConfigurable) {
  AgentsStore::Options options;
  options.carriers = {{33, "orange"}, {1, "bandwidth"}};
  options.default_carrier = "vonage";
  AgentsStore store(db_.get(), options);
  auto french = store.Create(ws_, Internal().Phone("+33142685300"));
  ASSERT_TRUE(french.ok()) << french.status();
  EXPECT_EQ(french->telephony_carrier(), "orange");
  auto us = store.Create(ws_, Internal().Phone("+16502530000"));
  ASSERT_TRUE(us.ok()) << us.status();
  EXPECT_EQ(us->telephony_carrier(), "bandwidth");
  auto uk = store.Create(ws_, Internal().Phone("+442079460958"));
  ASSERT_TRUE(uk.ok()) << uk.status();
  EXPECT_EQ(uk->telephony_carrier(), "vonage");
  EXPECT_EQ(store.CarrierFor(91), "vonage");
  EXPECT_EQ(store_->CarrierFor(91), "plivo");
}

TEST_P(AgentsStoreTest, PhoneNumberIsRequired) {
  Request missing = std::move(Request().Name("a").Language(1).Instructions("x"));
  absl::Status status = store_->Create(ws_, missing).status();
  ExpectInvalid(status, {"phone_number"});
  EXPECT_EQ(status.message(), "phone_number is required unless web_channel is given");
  EXPECT_EQ(ErrorInfoOf(status).details(0).issue(), "is required unless web_channel is given");

  ExpectInvalid(store_->Create(ws_, Request(missing).Null("phone_number")).status(),
                {"phone_number"});
}

TEST_P(AgentsStoreTest, InvalidPhoneNumbersSayWhy) {
  auto issue = [&](const std::string& phone) {
    absl::Status status = store_->Create(ws_, Internal().Phone(phone)).status();
    const v1::ErrorInfo info = ErrorInfoOf(status);
    return info.details_size() == 1 ? info.details(0).issue() : status.ToString();
  };
  EXPECT_EQ(issue("+1 555"), "is not a valid phone number for country calling code +1: too short");
  EXPECT_EQ(issue("+99912345678"), "is not a valid phone number: unknown country calling code");
  EXPECT_EQ(issue("12345"),
            "must be an E.164 number: + followed by the country calling code and the number, "
            "e.g. +14155552671");
  EXPECT_THAT(issue("+1650253000000000000"), ::testing::HasSubstr("too long"));
}

TEST_P(AgentsStoreTest, InvalidPhoneNumbersAreRejected) {
  for (const char* phone :
       {"+1 555", "+1555", "12345", "+99912345678", "+3314268530", "16502530000", "+1 800 FLOWERS",
        "+16502530000 ext 12", "+1650253000000000", "", "+", "tel:+16502530000"}) {
    SCOPED_TRACE(phone);
    ExpectInvalid(store_->Create(ws_, Internal().Phone(phone)).status(), {"phone_number"});
  }
}

// ---- name, lengths ----

TEST_P(AgentsStoreTest, NameRules) {
  Request no_name = std::move(Request().Phone("+16502530000").Language(1).Instructions("x"));
  ExpectInvalid(store_->Create(ws_, no_name).status(), {"name"});
  ExpectInvalid(store_->Create(ws_, Internal().Name("")).status(), {"name"});
  ExpectInvalid(store_->Create(ws_, Internal().Name("   ")).status(), {"name"});
  ExpectInvalid(store_->Create(ws_, Internal().Name(std::string(256, 'a'))).status(), {"name"});
  ExpectInvalid(store_->Create(ws_, Request(no_name).Null("name")).status(), {"name"});
  // The limit counts characters, not bytes.
  std::string accented;
  for (int i = 0; i < 255; ++i) accented += "\xC3\xA9";  // é
  EXPECT_EQ(MustCreate(Internal().Name(accented)).name(), accented);
}

TEST_P(AgentsStoreTest, ModelAndVoiceAreFreeStringsUpTo255) {
  v1::Agent agent = MustCreate(Internal().Model(std::string(255, 'm')).Voice("nova"));
  EXPECT_EQ(agent.model().size(), 255u);
  ExpectInvalid(store_->Create(ws_, Internal().Model(std::string(256, 'm'))).status(), {"model"});
  ExpectInvalid(store_->Create(ws_, Internal().Voice(std::string(256, 'v'))).status(), {"voice"});
  // Empty means "none".
  EXPECT_FALSE(MustCreate(Internal().Model("")).has_model());
}

// The version label (docs/api.md §5.10): stored, changed and cleared like the other free
// strings, and what a call of the agent records.
TEST_P(AgentsStoreTest, VersionLabelIsStoredChangedAndCleared) {
  v1::Agent agent = MustCreate(Internal().Version("2026-11-28.1"));
  EXPECT_EQ(agent.version(), "2026-11-28.1");
  EXPECT_EQ(store_->Get(ws_, agent.id())->version(), "2026-11-28.1");
  EXPECT_EQ(store_->GetCallAgent(ws_, agent.id())->version(), "2026-11-28.1");
  auto changed = store_->Update(ws_, agent.id(), Request().Version("v2"));
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(store_->Get(ws_, agent.id())->version(), "v2");
  // A PATCH without it keeps it; sent empty it is cleared.
  ASSERT_TRUE(store_->Update(ws_, agent.id(), Request().Name("Renamed")).ok());
  EXPECT_EQ(store_->Get(ws_, agent.id())->version(), "v2");
  ASSERT_TRUE(store_->Update(ws_, agent.id(), Request().Version("")).ok());
  EXPECT_FALSE(store_->Get(ws_, agent.id())->has_version());
  EXPECT_FALSE(store_->GetCallAgent(ws_, agent.id())->has_version());
  ExpectInvalid(store_->Create(ws_, Internal().Version(std::string(256, 'v'))).status(),
                {"version"});
}

TEST_P(AgentsStoreTest, AllFieldErrorsAreReportedTogether) {
  Request bad = std::move(Request()
                              .Name("")
                              .Phone("12345")
                              .Directions({"sideways"})
                              .Language(999)
                              .Opening("shout", std::nullopt, -1)
                              .MaxDuration(0)
                              .DisabledMetrics({0})
                              .Silence(10)
                              .Model(std::string(300, 'x')));
  absl::Status status = store_->Create(ws_, bad).status();
  ExpectInvalid(status,
                {"name", "phone_number", "call_directions[0]", "language_id", "instructions",
                 "opening_message.mode", "opening_message.delay_ms", "max_call_duration_seconds",
                 "disabled_metric_ids[0]", "silence_threshold_ms", "model"});
  EXPECT_TRUE(absl::StartsWith(status.message(), "11 fields are invalid: name must not be empty"))
      << status.message();
}

// ---- agent_source and legacy fields ----

TEST_P(AgentsStoreTest, AgentSourceValues) {
  EXPECT_EQ(MustCreate(Internal().Source("internal")).agent_source(), "internal");
  EXPECT_EQ(MustCreate(External("external_vapi")).agent_source(), "external_vapi");
  EXPECT_EQ(MustCreate(External("external_retell")).agent_source(), "external_retell");
  ExpectInvalid(store_->Create(ws_, Internal().Source("external_other")).status(),
                {"agent_source"});
  ExpectInvalid(store_->Create(ws_, Internal().Source("")).status(), {"agent_source"});
  // null means the default.
  EXPECT_EQ(MustCreate(Internal().Null("agent_source")).agent_source(), "internal");
}

TEST_P(AgentsStoreTest, LegacyIntegrationTypeAndAgentKindAreMapped) {
  const std::vector<std::pair<std::string, std::string>> mapping = {
      {"internal", "internal"},      {"custom", "internal"},
      {"rubric", "internal"},        {"native", "internal"},
      {"Custom", "internal"},        {"vapi", "external_vapi"},
      {"VAPI", "external_vapi"},     {"external_vapi", "external_vapi"},
      {"retell", "external_retell"}, {"external_retell", "external_retell"},
  };
  for (const auto& [legacy, source] : mapping) {
    SCOPED_TRACE(legacy);
    EXPECT_EQ(MustCreate(Internal().AssistantId("a").IntegrationType(legacy)).agent_source(),
              source);
    EXPECT_EQ(MustCreate(Internal().AssistantId("a").AgentKind(legacy)).agent_source(), source);
  }
}

TEST_P(AgentsStoreTest, LegacyUnknownValueIsRejected) {
  ExpectInvalid(store_->Create(ws_, Internal().IntegrationType("bland")).status(),
                {"integration_type"});
  ExpectInvalid(store_->Create(ws_, Internal().AgentKind("")).status(), {"agent_kind"});
}

TEST_P(AgentsStoreTest, LegacyFieldDisagreeingWithAgentSourceIsRejected) {
  ExpectInvalid(store_->Create(ws_, External("external_vapi").IntegrationType("retell")).status(),
                {"integration_type"});
  ExpectInvalid(store_->Create(ws_, Internal().Source("internal").AgentKind("vapi")).status(),
                {"agent_kind"});
  // The source is unknown then, so the rules that depend on it are not reported.
  ExpectInvalid(
      store_
          ->Create(
              ws_,
              Request().Name("n").Phone("+16502530000").Source("internal").IntegrationType("vapi"))
          .status(),
      {"integration_type"});
  // Two legacy fields that disagree with each other.
  ExpectInvalid(
      store_->Create(ws_, Internal().IntegrationType("custom").AgentKind("retell")).status(),
      {"agent_kind"});
  // Agreeing values are fine.
  EXPECT_EQ(MustCreate(External("external_vapi").IntegrationType("vapi").AgentKind("vapi"))
                .agent_source(),
            "external_vapi");
}

TEST_P(AgentsStoreTest, ExternalAgentsNeedAssistantIdButNotLanguageOrInstructions) {
  Request no_assistant =
      std::move(Request().Name("v").Phone("+16502530000").Source("external_vapi"));
  absl::Status status = store_->Create(ws_, no_assistant).status();
  ExpectInvalid(status, {"assistant_id"});
  EXPECT_EQ(ErrorInfoOf(status).details(0).issue(),
            "is required when agent_source is external_vapi");
  ExpectInvalid(store_->Create(ws_, External("external_retell").AssistantId(" ")).status(),
                {"assistant_id"});
  ExpectInvalid(
      store_->Create(ws_, External("external_retell").AssistantId(std::string(256, 'a'))).status(),
      {"assistant_id"});

  v1::Agent agent = MustCreate(External("external_retell"));
  EXPECT_EQ(agent.assistant_id(), "asst_1");
  EXPECT_FALSE(agent.has_language_id());
  EXPECT_FALSE(agent.has_instructions());
  // A language given to an external agent must still exist.
  ExpectInvalid(store_->Create(ws_, External("external_vapi").Language(999)).status(),
                {"language_id"});
}

TEST_P(AgentsStoreTest, InternalAgentsIgnoreAssistantId) {
  v1::Agent agent = MustCreate(Internal().AssistantId("asst_9"));
  EXPECT_FALSE(agent.has_assistant_id());
}

TEST_P(AgentsStoreTest, InternalAgentsNeedAnExistingLanguageAndInstructions) {
  Request bare = std::move(Request().Name("a").Phone("+16502530000"));
  ExpectInvalid(store_->Create(ws_, bare).status(), {"language_id", "instructions"});
  ExpectInvalid(store_->Create(ws_, Internal().Language(999)).status(), {"language_id"});
  ExpectInvalid(store_->Create(ws_, Internal().Language(0)).status(), {"language_id"});
  ExpectInvalid(store_->Create(ws_, Internal().Instructions("  \n")).status(), {"instructions"});
  ExpectInvalid(
      store_->Create(ws_, Internal().Instructions(std::string(kMaxInstructionsLength + 1, 'i')))
          .status(),
      {"instructions"});
  ExpectInvalid(store_->Create(ws_, Request(bare).Instructions("x").Null("language_id")).status(),
                {"language_id"});
}

// ---- opening message ----

TEST_P(AgentsStoreTest, OpeningMessageRules) {
  v1::Agent partial = MustCreate(Internal().Opening(std::nullopt, "Hi there", std::nullopt));
  EXPECT_EQ(partial.opening_message().mode(), "agent_speaks_first");
  EXPECT_EQ(partial.opening_message().text(), "Hi there");
  EXPECT_EQ(partial.opening_message().delay_ms(), 0);

  v1::Agent user_first = MustCreate(Internal().Opening("user_speaks_first", std::nullopt, 60000));
  EXPECT_EQ(user_first.opening_message().mode(), "user_speaks_first");
  EXPECT_EQ(user_first.opening_message().delay_ms(), 60000);

  ExpectInvalid(store_->Create(ws_, Internal().Opening("agent_first", "x", 0)).status(),
                {"opening_message.mode"});
  ExpectInvalid(store_->Create(ws_, Internal().Opening(std::nullopt, "x", -1)).status(),
                {"opening_message.delay_ms"});
  ExpectInvalid(store_->Create(ws_, Internal().Opening(std::nullopt, "x", 60001)).status(),
                {"opening_message.delay_ms"});
  ExpectInvalid(
      store_->Create(ws_, Internal().Opening(std::nullopt, std::string(10001, 't'), 0)).status(),
      {"opening_message.text"});
}

TEST_P(AgentsStoreTest, LegacyFirstMessageBecomesOpeningMessage) {
  v1::Agent agent = MustCreate(Internal().FirstMessage("Thanks for calling"));
  EXPECT_EQ(agent.opening_message().mode(), "agent_speaks_first");
  EXPECT_EQ(agent.opening_message().text(), "Thanks for calling");
  EXPECT_EQ(agent.opening_message().delay_ms(), 0);

  // Both spellings may be sent when they agree.
  v1::Agent both = MustCreate(Internal().FirstMessage("Hi").Opening(std::nullopt, "Hi", 300));
  EXPECT_EQ(both.opening_message().text(), "Hi");
  EXPECT_EQ(both.opening_message().delay_ms(), 300);

  ExpectInvalid(
      store_
          ->Create(ws_, Internal().FirstMessage("Hi").Opening(std::nullopt, "Hello", std::nullopt))
          .status(),
      {"first_message"});
  ExpectInvalid(store_
                    ->Create(ws_, Internal().FirstMessage("Hi").Opening("user_speaks_first",
                                                                        std::nullopt, std::nullopt))
                    .status(),
                {"first_message"});
}

// ---- call directions, limits, metric ids ----

TEST_P(AgentsStoreTest, CallDirectionsRules) {
  EXPECT_THAT(MustCreate(Internal().Directions({"outbound", "outbound", "inbound", "outbound"}))
                  .call_directions(),
              ElementsAre("outbound", "inbound"));
  ExpectInvalid(store_->Create(ws_, Internal().Directions({})).status(), {"call_directions"});
  ExpectInvalid(store_->Create(ws_, Internal().Directions({"inbound", "Outbound"})).status(),
                {"call_directions[1]"});
  EXPECT_THAT(MustCreate(Internal().Null("call_directions")).call_directions(),
              ElementsAre("inbound"));
}

TEST_P(AgentsStoreTest, MaxCallDurationBounds) {
  EXPECT_EQ(MustCreate(Internal().MaxDuration(1)).max_call_duration_seconds(), 1);
  EXPECT_EQ(MustCreate(Internal().MaxDuration(7200)).max_call_duration_seconds(), 7200);
  ExpectInvalid(store_->Create(ws_, Internal().MaxDuration(0)).status(),
                {"max_call_duration_seconds"});
  ExpectInvalid(store_->Create(ws_, Internal().MaxDuration(7201)).status(),
                {"max_call_duration_seconds"});
  ExpectInvalid(store_->Create(ws_, Internal().MaxDuration(-5)).status(),
                {"max_call_duration_seconds"});
}

TEST_P(AgentsStoreTest, SilenceThresholdBounds) {
  EXPECT_EQ(MustCreate(Internal().Silence(500)).silence_threshold_ms(), 500);
  EXPECT_EQ(MustCreate(Internal().Silence(60000)).silence_threshold_ms(), 60000);
  ExpectInvalid(store_->Create(ws_, Internal().Silence(499)).status(), {"silence_threshold_ms"});
  ExpectInvalid(store_->Create(ws_, Internal().Silence(60001)).status(), {"silence_threshold_ms"});
  EXPECT_FALSE(MustCreate(Internal().Null("silence_threshold_ms")).has_silence_threshold_ms());
}

TEST_P(AgentsStoreTest, DisabledMetricIdsAreDeduplicatedAndPositive) {
  EXPECT_THAT(MustCreate(Internal().DisabledMetrics({5, 2, 5, 12, 2})).disabled_metric_ids(),
              ElementsAre(5, 2, 12));
  ExpectInvalid(store_->Create(ws_, Internal().DisabledMetrics({3, 0, -4})).status(),
                {"disabled_metric_ids[1]", "disabled_metric_ids[2]"});
  EXPECT_THAT(MustCreate(Internal().DisabledMetrics({})).disabled_metric_ids(), IsEmpty());
}

// ---- get, delete, workspaces ----

TEST_P(AgentsStoreTest, AgentsOfAnotherWorkspaceAreNotFound) {
  v1::Agent agent = MustCreate(Internal());
  EXPECT_EQ(store_->Get(other_ws_, agent.id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get(ws_, agent.id() + 1000).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(HttpStatusFor(store_->Get(other_ws_, agent.id()).status()), 404);
  EXPECT_EQ(store_->Update(other_ws_, agent.id(), Request().Name("stolen")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(other_ws_, agent.id()).code(), absl::StatusCode::kNotFound);
  auto still = store_->Get(ws_, agent.id());
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->name(), "Support bot");
}

TEST_P(AgentsStoreTest, Delete) {
  v1::Agent agent = MustCreate(Internal());
  EXPECT_TRUE(store_->Delete(ws_, agent.id()).ok());
  EXPECT_EQ(store_->Get(ws_, agent.id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(ws_, agent.id()).code(), absl::StatusCode::kNotFound);
}

TEST_P(AgentsStoreTest, CheckAgentInWorkspace) {
  v1::Agent agent = MustCreate(Internal());
  EXPECT_TRUE(store_->CheckAgentInWorkspace(ws_, agent.id()).ok());

  absl::Status status = store_->CheckAgentInWorkspace(other_ws_, agent.id());
  EXPECT_EQ(HttpStatusFor(status), 422);
  EXPECT_EQ(ErrorCode(status), "agent_not_found");
  ASSERT_EQ(ErrorInfoOf(status).details_size(), 1);
  EXPECT_EQ(ErrorInfoOf(status).details(0).field(), "agent_id");
  EXPECT_EQ(
      ErrorInfoOf(status).details(0).issue(),
      "no agent " + std::to_string(agent.id()) + " in workspace " + std::to_string(other_ws_));

  EXPECT_EQ(ErrorCode(store_->CheckAgentInWorkspace(ws_, 424242)), "agent_not_found");
}

// ---- update (PATCH) ----

TEST_P(AgentsStoreTest, UpdateChangesOnlySentKeys) {
  v1::Agent agent = MustCreate(Internal()
                                   .Model("m")
                                   .Voice("v")
                                   .Silence(2000)
                                   .Directions({"inbound", "outbound"})
                                   .DisabledMetrics({4})
                                   .Opening("user_speaks_first", "Hi", 100));
  auto updated = store_->Update(ws_, agent.id(), Request().Name("Renamed").Phone("+919876543210"));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->name(), "Renamed");
  EXPECT_EQ(updated->phone_number(), "+919876543210");
  EXPECT_EQ(updated->telephony_carrier(), "plivo");
  // Everything else is kept.
  EXPECT_EQ(updated->model(), "m");
  EXPECT_EQ(updated->voice(), "v");
  EXPECT_EQ(updated->silence_threshold_ms(), 2000);
  EXPECT_THAT(updated->call_directions(), ElementsAre("inbound", "outbound"));
  EXPECT_THAT(updated->disabled_metric_ids(), ElementsAre(4));
  EXPECT_EQ(updated->opening_message().mode(), "user_speaks_first");
  EXPECT_EQ(updated->opening_message().text(), "Hi");
  EXPECT_EQ(updated->instructions(), "Be kind.");
  EXPECT_EQ(updated->language_id(), 1);
  EXPECT_EQ(updated->created_at(), agent.created_at());
  EXPECT_GE(updated->updated_at(), agent.updated_at());

  auto got = store_->Get(ws_, agent.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*got, *updated));
}

TEST_P(AgentsStoreTest, UpdateWithNullClearsNullableFieldsAndRestoresDefaults) {
  v1::Agent agent = MustCreate(Internal()
                                   .Model("m")
                                   .Voice("v")
                                   .Silence(2000)
                                   .MaxDuration(30)
                                   .Directions({"outbound"})
                                   .DisabledMetrics({4, 5})
                                   .Opening("user_speaks_first", "Hi", 100));
  auto updated = store_->Update(ws_, agent.id(),
                                Request()
                                    .Null("model")
                                    .Null("voice")
                                    .Null("silence_threshold_ms")
                                    .Null("max_call_duration_seconds")
                                    .Null("call_directions")
                                    .Null("disabled_metric_ids")
                                    .Null("opening_message"));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_FALSE(updated->has_model());
  EXPECT_FALSE(updated->has_voice());
  EXPECT_FALSE(updated->has_silence_threshold_ms());
  EXPECT_EQ(updated->max_call_duration_seconds(), 600);
  EXPECT_THAT(updated->call_directions(), ElementsAre("inbound"));
  EXPECT_THAT(updated->disabled_metric_ids(), IsEmpty());
  EXPECT_EQ(updated->opening_message().mode(), "agent_speaks_first");
  EXPECT_FALSE(updated->opening_message().has_text());
  EXPECT_EQ(updated->opening_message().delay_ms(), 0);
  EXPECT_EQ(updated->name(), "Support bot");
}

TEST_P(AgentsStoreTest, UpdateRejectsNullOnRequiredFieldsAndKeepsTheAgent) {
  v1::Agent agent = MustCreate(Internal());
  absl::Status status = store_->Update(ws_, agent.id(), Request().Null("phone_number")).status();
  ExpectInvalid(status, {"phone_number"});
  EXPECT_EQ(status.message(), "phone_number is required unless web_channel is given");
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().Null("name")).status(), {"name"});
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().Null("instructions")).status(),
                {"instructions"});
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().Null("language_id")).status(),
                {"language_id"});
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().Directions({})).status(),
                {"call_directions"});
  // A rejected PATCH changes nothing, even the keys that were valid.
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().Name("New").Phone("+1 555")).status(),
                {"phone_number"});
  auto got = store_->Get(ws_, agent.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*got, agent));
}

TEST_P(AgentsStoreTest, UpdateValidatesTheMergedAgent) {
  v1::Agent agent = MustCreate(Internal());
  // Switching to an external source needs an assistant id, which is not stored yet.
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().Source("external_vapi")).status(),
                {"assistant_id"});
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().IntegrationType("retell")).status(),
                {"assistant_id"});

  auto external =
      store_->Update(ws_, agent.id(), Request().Source("external_vapi").AssistantId("a-1"));
  ASSERT_TRUE(external.ok()) << external.status();
  EXPECT_EQ(external->agent_source(), "external_vapi");
  EXPECT_EQ(external->assistant_id(), "a-1");

  // External agents may drop instructions; switching back to internal then needs them.
  auto cleared = store_->Update(ws_, agent.id(), Request().Null("instructions"));
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_FALSE(cleared->has_instructions());
  ExpectInvalid(store_->Update(ws_, agent.id(), Request().Source("internal")).status(),
                {"instructions"});

  auto internal =
      store_->Update(ws_, agent.id(), Request().AgentKind("custom").Instructions("Back."));
  ASSERT_TRUE(internal.ok()) << internal.status();
  EXPECT_EQ(internal->agent_source(), "internal");
  EXPECT_FALSE(internal->has_assistant_id());  // ignored for internal agents
  EXPECT_EQ(internal->instructions(), "Back.");

  // null on agent_source restores the default (internal).
  auto ext_again =
      store_->Update(ws_, agent.id(), Request().Source("external_retell").AssistantId("r"));
  ASSERT_TRUE(ext_again.ok()) << ext_again.status();
  auto reset = store_->Update(ws_, agent.id(), Request().Null("agent_source"));
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_EQ(reset->agent_source(), "internal");
}

TEST_P(AgentsStoreTest, UpdateMergesOpeningMessageKeys) {
  v1::Agent agent = MustCreate(Internal().Opening("user_speaks_first", "Hi", 100));
  auto text_only =
      store_->Update(ws_, agent.id(), Request().Opening(std::nullopt, "Hello", std::nullopt));
  ASSERT_TRUE(text_only.ok()) << text_only.status();
  EXPECT_EQ(text_only->opening_message().mode(), "user_speaks_first");
  EXPECT_EQ(text_only->opening_message().text(), "Hello");
  EXPECT_EQ(text_only->opening_message().delay_ms(), 100);

  auto legacy = store_->Update(ws_, agent.id(), Request().FirstMessage("Welcome"));
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->opening_message().mode(), "agent_speaks_first");
  EXPECT_EQ(legacy->opening_message().text(), "Welcome");
  EXPECT_EQ(legacy->opening_message().delay_ms(), 100);

  ExpectInvalid(
      store_
          ->Update(ws_, agent.id(), Request().Opening("nobody_speaks", std::nullopt, std::nullopt))
          .status(),
      {"opening_message.mode"});
}

TEST_P(AgentsStoreTest, UpdateReplacesListsAndDeduplicates) {
  v1::Agent agent = MustCreate(Internal().DisabledMetrics({1, 2}));
  auto updated = store_->Update(
      ws_, agent.id(), Request().DisabledMetrics({7, 7, 3}).Directions({"outbound", "outbound"}));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_THAT(updated->disabled_metric_ids(), ElementsAre(7, 3));
  EXPECT_THAT(updated->call_directions(), ElementsAre("outbound"));
  auto emptied = store_->Update(ws_, agent.id(), Request().DisabledMetrics({}));
  ASSERT_TRUE(emptied.ok()) << emptied.status();
  EXPECT_THAT(emptied->disabled_metric_ids(), IsEmpty());
}

TEST_P(AgentsStoreTest, UpdateOfMissingAgentIsNotFound) {
  EXPECT_EQ(store_->Update(ws_, 31337, Request().Name("x")).status().code(),
            absl::StatusCode::kNotFound);
}

// ---- listing ----

TEST_P(AgentsStoreTest, ListIsPaginatedNewestFirstWithinTheWorkspace) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(MustCreate(Internal().Name("a" + std::to_string(i))).id());
  MustCreate(Internal().Name("elsewhere"), other_ws_);

  auto page1 = store_->List(ws_, 1, 2);
  ASSERT_TRUE(page1.ok()) << page1.status();
  ASSERT_EQ(page1->data_size(), 2);
  EXPECT_EQ(page1->data(0).id(), ids[4]);
  EXPECT_EQ(page1->data(1).id(), ids[3]);
  EXPECT_EQ(page1->pagination().current_page(), 1);
  EXPECT_EQ(page1->pagination().per_page(), 2);
  EXPECT_EQ(page1->pagination().total_count(), 5);
  EXPECT_EQ(page1->pagination().total_pages(), 3);

  auto page3 = store_->List(ws_, 3, 2);
  ASSERT_TRUE(page3.ok()) << page3.status();
  ASSERT_EQ(page3->data_size(), 1);
  EXPECT_EQ(page3->data(0).id(), ids[0]);

  auto beyond = store_->List(ws_, 4, 2);
  ASSERT_TRUE(beyond.ok()) << beyond.status();
  EXPECT_EQ(beyond->data_size(), 0);
  EXPECT_EQ(beyond->pagination().total_count(), 5);

  auto all = store_->List(ws_, 1, kDefaultPerPage);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data_size(), 5);
  EXPECT_EQ(all->pagination().total_pages(), 1);

  auto other = store_->List(other_ws_, 1, 100);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->data_size(), 1);
  EXPECT_EQ(other->data(0).name(), "elsewhere");
}

TEST_P(AgentsStoreTest, ListOfEmptyWorkspace) {
  auto empty = store_->List(ws_, 1, 25);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->data_size(), 0);
  EXPECT_EQ(empty->pagination().total_count(), 0);
  EXPECT_EQ(empty->pagination().total_pages(), 0);
}

TEST_P(AgentsStoreTest, ListRejectsBadPagination) {
  ExpectInvalid(store_->List(ws_, 0, 25).status(), {"page"});
  ExpectInvalid(store_->List(ws_, -1, 25).status(), {"page"});
  ExpectInvalid(store_->List(ws_, 1, 0).status(), {"per_page"});
  ExpectInvalid(store_->List(ws_, 1, 101).status(), {"per_page"});
  ExpectInvalid(store_->List(ws_, 0, 101).status(), {"page", "per_page"});
  EXPECT_TRUE(store_->List(ws_, 1, 100).ok());
}

TEST_P(AgentsStoreTest, ListLanguages) {
  auto languages = store_->ListLanguages();
  ASSERT_TRUE(languages.ok()) << languages.status();
  ASSERT_GE(languages->data_size(), 10);
  std::vector<std::string> codes;
  int64_t previous = 0;
  for (const auto& l : languages->data()) {
    EXPECT_GT(l.id(), previous);
    previous = l.id();
    EXPECT_FALSE(l.name().empty());
    codes.push_back(l.code());
  }
  EXPECT_NE(std::find(codes.begin(), codes.end(), "en-US"), codes.end());
}

// ---- the gRPC adapter: authentication and workspace resolution ----

class AgentsServiceTest : public AgentsStoreTest {
 protected:
  void SetUp() override {
    AgentsStoreTest::SetUp();
    accounts_ = std::make_unique<accounts::AccountsStore>(db_.get());
    auto key = accounts_->CreateKey(ws_, {});
    ASSERT_TRUE(key.ok()) << key.status();
    key_ = key->api_key;
    auto third = accounts_->CreateWorkspace("three", 0);
    ASSERT_TRUE(third.ok()) << third.status();
    third_ws_ = third->id;
    auto granted = accounts_->CreateKey(third_ws_, {other_ws_});
    ASSERT_TRUE(granted.ok()) << granted.status();
    granted_key_ = granted->api_key;
    authenticator_ = accounts::NewStoreAuthenticator(accounts_.get());
    pool_ = std::make_unique<ThreadPool>(2);
    service_ = std::make_unique<AgentsService>(store_.get(), authenticator_.get(), pool_.get());
    grpc_service_ = std::make_unique<GrpcTableService<AgentsService>>(service_.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(grpc_service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Agents::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override {
    server_->Shutdown();
    pool_.reset();
    AgentsStoreTest::TearDown();
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& key) {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
    return context;
  }

  std::unique_ptr<accounts::AccountsStore> accounts_;
  std::string key_;
  std::string granted_key_;
  int64_t third_ws_ = 0;
  std::unique_ptr<accounts::Authenticator> authenticator_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<AgentsService> service_;
  std::unique_ptr<GrpcTableService<AgentsService>> grpc_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Agents::Stub> stub_;
};

TEST_P(AgentsServiceTest, CrudInTheKeysWorkspace) {
  v1::Agent created;
  grpc::Status status = stub_->CreateAgent(Context(key_).get(), Internal(), &created);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(created.client_id(), ws_);

  v1::GetAgentRequest get;
  get.set_id(created.id());
  v1::Agent got;
  ASSERT_TRUE(stub_->GetAgent(Context(key_).get(), get, &got).ok());
  EXPECT_EQ(got.name(), "Support bot");

  v1::UpdateAgentRequest update;
  update.set_id(created.id());
  *update.mutable_agent() = Request().Name("Renamed").Null("model");
  v1::Agent updated;
  ASSERT_TRUE(stub_->UpdateAgent(Context(key_).get(), update, &updated).ok());
  EXPECT_EQ(updated.name(), "Renamed");

  v1::ListAgentsRequest list;
  v1::ListAgentsResponse listed;
  ASSERT_TRUE(stub_->ListAgents(Context(key_).get(), list, &listed).ok());
  EXPECT_EQ(listed.pagination().per_page(), kDefaultPerPage);
  EXPECT_EQ(listed.pagination().current_page(), 1);
  ASSERT_EQ(listed.data_size(), 1);

  list.set_per_page(0);
  EXPECT_EQ(stub_->ListAgents(Context(key_).get(), list, &listed).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::DeleteAgentRequest del;
  del.set_id(created.id());
  google::protobuf::Empty empty;
  ASSERT_TRUE(stub_->DeleteAgent(Context(key_).get(), del, &empty).ok());
  EXPECT_EQ(stub_->GetAgent(Context(key_).get(), get, &got).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_P(AgentsServiceTest, RequiresAKey) {
  v1::Agent agent;
  EXPECT_EQ(stub_->CreateAgent(Context("").get(), Internal(), &agent).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->CreateAgent(Context("cev_unknown").get(), Internal(), &agent).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::ListLanguagesResponse languages;
  EXPECT_EQ(
      stub_->ListLanguages(Context("").get(), v1::ListLanguagesRequest(), &languages).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(
      stub_->ListLanguages(Context(key_).get(), v1::ListLanguagesRequest(), &languages).ok());
  EXPECT_GE(languages.data_size(), 10);
}

TEST_P(AgentsServiceTest, ClientIdTargetsGrantedWorkspacesOnly) {
  v1::AgentFields fields = Internal();
  fields.set_client_id(other_ws_);
  v1::Agent agent;
  ASSERT_TRUE(stub_->CreateAgent(Context(granted_key_).get(), fields, &agent).ok());
  EXPECT_EQ(agent.client_id(), other_ws_);
  // The key of workspace one may not act on workspace two.
  EXPECT_EQ(stub_->CreateAgent(Context(key_).get(), fields, &agent).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  v1::GetAgentRequest get;
  get.set_id(agent.id());
  v1::Agent got;
  // Without client_id the granted key acts on its own workspace, where the agent is not.
  EXPECT_EQ(stub_->GetAgent(Context(granted_key_).get(), get, &got).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.set_client_id(other_ws_);
  EXPECT_TRUE(stub_->GetAgent(Context(granted_key_).get(), get, &got).ok());
}

}  // namespace
}  // namespace calleval::agents

namespace calleval::agents {
namespace {

// --- Web channel -------------------------------------------------------------------------

Request WebOnly() {
  return std::move(Request().Name("Web bot").Language(1).Instructions("Be kind.").Web(
      {{"transport", "websocket"},
       {"websocket_url", "wss://agent.example.com/media"},
       {"auth_token", "tok-123"}}));
}

const google::protobuf::Value* Key(const v1::Agent& agent, const std::string& key) {
  auto it = agent.web_channel().fields().find(key);
  return it == agent.web_channel().fields().end() ? nullptr : &it->second;
}

TEST_P(AgentsStoreTest, WebsocketChannelWithAWriteOnlyCredential) {
  v1::Agent agent = MustCreate(WebOnly());
  EXPECT_FALSE(agent.has_phone_number());  // the web channel reaches it
  EXPECT_EQ(agent.transport(), "websocket");
  ASSERT_NE(Key(agent, "websocket_url"), nullptr);
  EXPECT_EQ(Key(agent, "websocket_url")->string_value(), "wss://agent.example.com/media");
  EXPECT_EQ(Key(agent, "protocol")->string_value(), "twilio_media_streams");
  EXPECT_TRUE(Key(agent, "auth_token_set")->bool_value());
  EXPECT_EQ(Key(agent, "auth_token"), nullptr);
  EXPECT_EQ(agent.web_channel().fields().size(), 4);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*store_->Get(ws_, agent.id()),
                                                                 agent));

  // The runner gets the credential back; the database only holds it sealed.
  auto channel = store_->GetWebChannel(ws_, agent.id());
  ASSERT_TRUE(channel.ok() && channel->has_value()) << channel.status();
  EXPECT_EQ((**channel).credentials["auth_token"], "tok-123");
  auto raw =
      db::ReadResult<std::string>(*db_, [&](db::Connection& c) -> absl::StatusOr<std::string> {
        ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT web_channel, web_channel_credentials FROM "
                                              "agents WHERE id = ?"));
        stmt.Bind(1, agent.id());
        ASSIGN_OR_RETURN(bool row, stmt.Step());
        if (!row) return absl::NotFoundError("agent");
        return stmt.Text(0) + " " + stmt.Text(1);  // the fields, then the sealed bytes as stored
      });
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->find("tok-123"), std::string::npos);

  // Another key cannot open it.
  AgentsStore::Options other;
  other.credentials_key = std::string(32, 'x');
  AgentsStore wrong_key(db_.get(), other);
  EXPECT_EQ(wrong_key.GetWebChannel(ws_, agent.id()).status().code(),
            absl::StatusCode::kDataLoss);
  // A phone-only agent has none.
  EXPECT_FALSE(store_->GetWebChannel(ws_, MustCreate(Internal()).id())->has_value());
}

TEST_P(AgentsStoreTest, WebChannelRejectionsOfTheSeed) {
  auto invalid = [&](Request request, std::vector<std::string> fields) {
    ExpectInvalid(store_->Create(ws_, request).status(), fields);
  };
  Request base = std::move(Request().Name("w").Language(1).Instructions("x"));
  invalid(Request(base).Web({{"transport", "websocket"}}), {"web_channel.websocket_url"});
  invalid(Request(base).Transport("websocket"), {"web_channel.websocket_url"});
  invalid(Request(base).Web({{"transport", "websocket"}, {"websocket_url", "ws://127.0.0.1/x"}}),
          {"web_channel.websocket_url"});
  invalid(Request(base).Web({{"transport", "websocket"}, {"websocket_url", "wss://localhost/x"}}),
          {"web_channel.websocket_url"});
  invalid(Request(base).Web({{"transport", "websocket"}, {"websocket_url", "wss://10.1.2.3/x"}}),
          {"web_channel.websocket_url"});
  invalid(Request(base).Web({{"transport", "websocket"}, {"websocket_url", "wss://0x7f.1/x"}}),
          {"web_channel.websocket_url"});
  invalid(Request(base).Web({{"transport", "websocket"},
                             {"websocket_url", "https://agent.example.com/x"}}),
          {"web_channel.websocket_url"});
  invalid(Request(base).Web({{"transport", "websocket"},
                             {"websocket_url", "wss://agent.example.com/x"},
                             {"protocol", "sip"}}),
          {"web_channel.protocol"});
  invalid(Request(base).Web({{"transport", "livekit"}, {"room_management", "client"}}),
          {"web_channel.bot_runner_url"});
  invalid(Request(base).Web({{"transport", "daily"},
                             {"room_management", "client"},
                             {"bot_runner_url", "http://192.168.1.10/start"}}),
          {"web_channel.bot_runner_url"});
  invalid(Request(base).Web({{"transport", "daily"}, {"room_management", "mine"}}),
          {"web_channel.room_management"});
  invalid(Request(base).Web({{"transport", "livekit"}, {"agent_name", std::string(129, 'a')}}),
          {"web_channel.agent_name"});
  invalid(Request(base).Web({{"transport", "sip"}}), {"web_channel.transport"});
  invalid(Request(base).Web({{"websocket_url", "wss://agent.example.com/x"}}),
          {"web_channel.transport"});
  invalid(Request(base).Web({{"transport", "vapi"}}).Transport("retell"), {"transport"});
  invalid(Request(base), {"phone_number"});  // neither phone nor web channel
}

TEST_P(AgentsStoreTest, WebChannelPatchMergesKeyByKey) {
  v1::Agent agent = MustCreate(Request(WebOnly()).Phone("+16502530000"));
  // One key changes; the URL and the credential stay.
  auto patched = store_->Update(ws_, agent.id(), Request().Web({{"protocol", "pcm16"}}));
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(Key(*patched, "protocol")->string_value(), "pcm16");
  EXPECT_EQ(Key(*patched, "websocket_url")->string_value(), "wss://agent.example.com/media");
  EXPECT_TRUE(Key(*patched, "auth_token_set")->bool_value());
  EXPECT_EQ((**store_->GetWebChannel(ws_, agent.id())).credentials["auth_token"], "tok-123");
  // A new credential replaces the old; null removes it.
  ASSERT_TRUE(store_->Update(ws_, agent.id(), Request().Web({{"auth_token", "tok-456"}})).ok());
  EXPECT_EQ((**store_->GetWebChannel(ws_, agent.id())).credentials["auth_token"], "tok-456");
  patched = store_->Update(ws_, agent.id(), Request().Web({{"auth_token", std::nullopt}}));
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_FALSE(Key(*patched, "auth_token_set")->bool_value());
  EXPECT_TRUE((**store_->GetWebChannel(ws_, agent.id())).credentials.empty());
  // Switching transport keeps nothing of the old one.
  patched = store_->Update(ws_, agent.id(),
                           Request().Web({{"transport", "livekit"},
                                          {"room_management", "client"},
                                          {"bot_runner_url", "https://bots.example.com/run"}}));
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(patched->transport(), "livekit");
  EXPECT_EQ(Key(*patched, "websocket_url"), nullptr);
  EXPECT_EQ(Key(*patched, "protocol"), nullptr);
  EXPECT_EQ(Key(*patched, "bot_runner_url")->string_value(), "https://bots.example.com/run");
  EXPECT_FALSE(Key(*patched, "room_api_key_set")->bool_value());
  // A rubric room names the LiveKit agent to dispatch; a client room has no use for it.
  patched = store_->Update(
      ws_, agent.id(),
      Request().Web({{"room_management", "rubric"}, {"agent_name", "cleaning-agent"}}));
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(Key(*patched, "agent_name")->string_value(), "cleaning-agent");
  patched = store_->Update(ws_, agent.id(),
                           Request().Web({{"room_management", "client"},
                                          {"bot_runner_url", "https://bots.example.com/run"}}));
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(Key(*patched, "agent_name"), nullptr);
  // The shorthand changes the transport; the new one's rules apply to the merged channel.
  patched = store_->Update(ws_, agent.id(), Request().Transport("vapi"));
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(Key(*patched, "transport")->string_value(), "vapi");
  EXPECT_FALSE(Key(*patched, "platform_api_key_set")->bool_value());
  // null removes the channel; without a phone that would leave the agent unreachable.
  patched = store_->Update(ws_, agent.id(), Request().Null("web_channel"));
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_FALSE(patched->has_transport());
  EXPECT_FALSE(patched->has_web_channel());
  v1::Agent web_only = MustCreate(WebOnly());
  ExpectInvalid(store_->Update(ws_, web_only.id(), Request().Null("web_channel")).status(),
                {"phone_number"});
}

TEST_P(AgentsStoreTest, RoomAndPlatformTransportsReportTheirCredentials) {
  v1::Agent room = MustCreate(Request(Internal())
                                  .Web({{"transport", "daily"},
                                        {"room_server_url", "https://rooms.example.com"},
                                        {"room_api_key", "k"},
                                        {"room_api_secret", "s"},
                                        {"unknown_key", "ignored"}}));
  EXPECT_EQ(Key(room, "room_management")->string_value(), "rubric");
  EXPECT_TRUE(Key(room, "room_api_key_set")->bool_value());
  EXPECT_TRUE(Key(room, "room_api_secret_set")->bool_value());
  EXPECT_EQ(Key(room, "unknown_key"), nullptr);
  EXPECT_EQ(Key(room, "room_api_secret"), nullptr);
  v1::Agent platform = MustCreate(Request(Internal()).Transport("retell"));
  EXPECT_EQ(platform.transport(), "retell");
  EXPECT_FALSE(Key(platform, "platform_api_key_set")->bool_value());
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(AgentsServiceTest);
CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(AgentsStoreTest);

}  // namespace
}  // namespace calleval::agents

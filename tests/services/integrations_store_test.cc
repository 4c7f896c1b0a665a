// A workspace's integration settings (services/agents/integrations_store.h): each provider's
// fields checked and normalized, secrets write-only and sealed, PUT replacing and PATCH merging,
// one workspace never seeing another's. On both backends.
#include "services/agents/integrations_store.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "tests/support/test_database.h"

namespace calleval::agents {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

google::protobuf::Struct Body(const std::string& json) {
  google::protobuf::Struct body;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &body).ok()) << json;
  return body;
}

std::string Json(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(message, &out, options).ok());
  return out;
}

std::vector<std::string> ErrorFields(const absl::Status& status) {
  const v1::ErrorInfo info = ErrorInfoOf(status);
  std::vector<std::string> fields;
  for (const auto& d : info.details()) fields.push_back(d.field());
  return fields;
}

constexpr char kSid[] = "AC0123456789abcdef0123456789abcdef";

class IntegrationsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    accounts_ = std::make_unique<accounts::AccountsStore>(database_->db());
    workspace_ = accounts_->CreateWorkspace("w", 0)->id;
    other_ = accounts_->CreateWorkspace("o", 0)->id;
    key_ = RandomBytes(32);
    store_ = std::make_unique<IntegrationsStore>(database_->db(), key_);
  }

  absl::StatusOr<v1::Integration> Put(const std::string& provider, const std::string& json,
                                      int64_t workspace = 0) {
    return store_->Write(workspace ? workspace : workspace_, provider, Body(json), true);
  }
  absl::StatusOr<v1::Integration> Patch(const std::string& provider, const std::string& json) {
    return store_->Write(workspace_, provider, Body(json), false);
  }

  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<accounts::AccountsStore> accounts_;
  std::unique_ptr<IntegrationsStore> store_;
  std::string key_;
  int64_t workspace_ = 0, other_ = 0;
};

TEST_P(IntegrationsStoreTest, SecretsAreWriteOnlyAndNumbersNormalized) {
  auto put = Put("twilio", absl::StrCat(R"({"account_sid": ")", kSid,
                                        R"(", "auth_token": "tok-1", "caller_numbers":
                                        ["+1 415-555-2671", "+14155552671", "+442071838750"],
                                        "api_key": "ignored: not a twilio key"})"));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->provider(), "twilio");
  const std::string json = Json(put->settings());
  EXPECT_THAT(json, HasSubstr("\"auth_token_set\":true"));
  EXPECT_THAT(json, HasSubstr("\"caller_numbers\":[\"+14155552671\",\"+442071838750\"]"));
  EXPECT_THAT(json, Not(HasSubstr("tok-1")));
  EXPECT_THAT(json, Not(HasSubstr("api_key")));
  EXPECT_FALSE(put->created_at().empty());
  auto got = store_->Get(workspace_, "twilio");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(nlohmann::json::parse(Json(got->settings())), nlohmann::json::parse(json));
  // The secret is in the clear only for the roles that dial the carrier.
  auto secrets = store_->GetWithSecrets(workspace_, "twilio");
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ(secrets->secrets["auth_token"], "tok-1");
  EXPECT_EQ(secrets->fields["account_sid"], kSid);
}

TEST_P(IntegrationsStoreTest, SecretsAreSealedInTheDatabase) {
  ASSERT_TRUE(Put("retell", R"({"api_key": "key_very_secret_value"})").ok());
  std::string stored;
  ASSERT_TRUE(database_->db()
                  ->Read([&](db::Connection& c) -> absl::Status {
                    auto stmt = c.Prepare(
                        "SELECT fields, secrets_set, sealed_secrets FROM integration_settings");
                    if (!stmt.ok()) return stmt.status();
                    auto found = stmt->Step();
                    if (!found.ok()) return found.status();
                    stored = stmt->Text(0) + stmt->Text(1) + stmt->Text(2);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_THAT(stored, HasSubstr("api_key"));  // the name, in secrets_set
  EXPECT_THAT(stored, Not(HasSubstr("key_very_secret_value")));
  // Another key does not open them.
  IntegrationsStore other_key(database_->db(), RandomBytes(32));
  EXPECT_FALSE(other_key.GetWithSecrets(workspace_, "retell").ok());
}

TEST_P(IntegrationsStoreTest, PatchMergesAndNullRemoves) {
  ASSERT_TRUE(Put("vapi", R"({"api_key": "k1", "webhook_secret": "s1"})").ok());
  auto patched = Patch("vapi", R"({"webhook_secret": null})");
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_THAT(Json(patched->settings()), HasSubstr("\"webhook_secret_set\":false"));
  auto secrets = store_->GetWithSecrets(workspace_, "vapi");
  ASSERT_TRUE(secrets.ok());
  EXPECT_EQ(secrets->secrets["api_key"], "k1");  // kept through the merge
  EXPECT_FALSE(secrets->secrets.contains("webhook_secret"));
  // A PATCH may not leave the settings unusable.
  auto emptied = Patch("vapi", R"({"api_key": null})");
  EXPECT_EQ(ErrorInfoOf(emptied.status()).code(), "validation_failed");
  EXPECT_THAT(emptied.status().message(), HasSubstr("webhook_secret is required for vapi"));
  // A PATCH of settings that do not exist yet creates them, checked as a PUT.
  EXPECT_THAT(ErrorFields(Patch("plivo", R"({"auth_id": "MAXXXXXXXXXXXXXXXXXX"})").status()),
              ElementsAre("auth_token"));
  ASSERT_TRUE(Patch("plivo", R"({"auth_id": "MAXXXXXXXXXXXXXXXXXX", "auth_token": "t"})").ok());
}

TEST_P(IntegrationsStoreTest, PutReplacesEverything) {
  ASSERT_TRUE(Put("telnyx", R"({"api_key": "KEY1", "connection_id": "c-1",
                               "caller_numbers": ["+14155552671"]})")
                  .ok());
  auto replaced = Put("telnyx", R"({"api_key": "KEY2"})");
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_THAT(Json(replaced->settings()), HasSubstr("\"connection_id\":null"));
  EXPECT_THAT(Json(replaced->settings()), HasSubstr("\"caller_numbers\":[]"));
}

TEST_P(IntegrationsStoreTest, EveryFieldProblemIsNamed) {
  auto bad = Put("twilio", R"({"account_sid": "SK123", "auth_token": 5,
                              "caller_numbers": ["+1415", 7, "555-1234"]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ErrorFields(bad.status()), ElementsAre("auth_token", "caller_numbers[1]"));
  bad = Put("twilio", R"({"account_sid": "SK123", "caller_numbers": ["+1415", "555-1234"]})");
  EXPECT_THAT(ErrorFields(bad.status()),
              ElementsAre("account_sid", "auth_token", "caller_numbers[0]", "caller_numbers[1]"));
  EXPECT_THAT(bad.status().message(), HasSubstr("AC followed by 32 hexadecimal digits"));
  bad = Put("telnyx", R"({"api_key": "k", "public_key": "bm90IDMyIGJ5dGVz"})");
  EXPECT_THAT(ErrorFields(bad.status()), ElementsAre("public_key"));
  EXPECT_TRUE(Put("telnyx", absl::StrCat(R"({"api_key": "k", "public_key": ")",
                                         Base64Encode(std::string(32, 'x')), R"("})"))
                  .ok());
  bad = Put("livekit", R"({"server_url": "ftp://x", "api_key": "", "api_secret": "s"})");
  EXPECT_THAT(ErrorFields(bad.status()), ElementsAre("server_url", "api_key"));
  bad = Put("retell", R"({"api_key": "a\nb"})");
  EXPECT_THAT(bad.status().message(), HasSubstr("control characters"));
  bad = Put("retell", R"({})");
  EXPECT_THAT(ErrorFields(bad.status()), ElementsAre("api_key"));
  bad = Put("retell", absl::StrCat(R"({"api_key": ")", std::string(4097, 'k'), R"("})"));
  EXPECT_THAT(bad.status().message(), HasSubstr("at most 4096"));
  std::string many = R"({"account_sid": ")" + std::string(kSid) +
                     R"(", "auth_token": "t", "caller_numbers": [)";
  for (int i = 0; i < 101; ++i) absl::StrAppend(&many, i ? "," : "", "\"+14155552671\"");
  EXPECT_THAT(Put("twilio", many + "]}").status().message(), HasSubstr("at most 100"));
}

// The privacy settings say what a replay masks (services/agents/replay.h): flags and a list
// of metadata keys, none required, no secret.
TEST_P(IntegrationsStoreTest, PrivacySettingsTakeFlagsAndKeys) {
  auto stored = Put("privacy", R"({"mask_emails": false, "mask_metadata_keys": ["name", "crm"]})");
  ASSERT_TRUE(stored.ok()) << stored.status();
  // A flag not sent is null: the default, true.
  const auto& fields = stored->settings().fields();
  EXPECT_FALSE(fields.at("mask_emails").bool_value());
  EXPECT_TRUE(fields.at("mask_emails").has_bool_value());
  EXPECT_TRUE(fields.at("mask_phone_numbers").has_null_value());
  EXPECT_TRUE(fields.at("mask_card_numbers").has_null_value());
  ASSERT_EQ(fields.at("mask_metadata_keys").list_value().values_size(), 2);
  EXPECT_EQ(fields.at("mask_metadata_keys").list_value().values(1).string_value(), "crm");
  auto bad = Put("privacy", R"({"mask_emails": "no", "mask_metadata_keys": ["ok", 3, ""]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(ErrorFields(bad.status()), ElementsAre("mask_emails", "mask_metadata_keys[1]"));
  bad = Put("privacy", R"({"mask_metadata_keys": [""]})");
  EXPECT_THAT(ErrorFields(bad.status()), ElementsAre("mask_metadata_keys[0]"));
  EXPECT_TRUE(Put("privacy", "{}").ok());
}

TEST_P(IntegrationsStoreTest, UnknownProviderAndMissingSettingsAreNotFound) {
  auto unknown = store_->Get(workspace_, "skype");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorInfoOf(unknown.status()).code(), "unknown_provider");
  EXPECT_THAT(unknown.status().message(), HasSubstr("twilio, telnyx, plivo, vapi, retell, livekit, privacy"));
  EXPECT_EQ(ErrorInfoOf(Put("skype", "{}").status()).code(), "unknown_provider");
  EXPECT_EQ(ErrorInfoOf(store_->Get(workspace_, "twilio").status()).code(),
            "integration_not_found");
  EXPECT_EQ(ErrorInfoOf(store_->Delete(workspace_, "twilio")).code(), "integration_not_found");
}

TEST_P(IntegrationsStoreTest, WorkspacesAreApart) {
  ASSERT_TRUE(Put("retell", R"({"api_key": "mine"})").ok());
  ASSERT_TRUE(Put("vapi", R"({"api_key": "mine"})").ok());
  ASSERT_TRUE(Put("retell", R"({"api_key": "theirs"})", other_).ok());
  EXPECT_EQ(store_->GetWithSecrets(other_, "retell")->secrets["api_key"], "theirs");
  EXPECT_EQ(store_->GetWithSecrets(workspace_, "retell")->secrets["api_key"], "mine");
  EXPECT_EQ(ErrorInfoOf(store_->Get(other_, "vapi").status()).code(), "integration_not_found");
  auto list = store_->List(workspace_);
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<std::string> providers;
  for (const auto& i : list->data()) providers.push_back(i.provider());
  EXPECT_THAT(providers, ElementsAre("vapi", "retell"));
  ASSERT_TRUE(store_->Delete(workspace_, "retell").ok());
  EXPECT_EQ(store_->List(workspace_)->data_size(), 1);
  EXPECT_TRUE(store_->Get(other_, "retell").ok());
}

TEST_P(IntegrationsStoreTest, UpdatedAtMovesCreatedAtStays) {
  auto first = Put("retell", R"({"api_key": "a"})");
  ASSERT_TRUE(first.ok());
  auto second = Patch("retell", R"({"api_key": "b"})");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->created_at(), first->created_at());
  EXPECT_GE(second->updated_at(), first->updated_at());
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(IntegrationsStoreTest);

}  // namespace
}  // namespace calleval::agents

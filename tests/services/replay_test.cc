// The pure parts of a replay (services/agents/replay.h): masking, the caller's lines and the
// failing metrics of a call.

#include "services/agents/replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace calleval::agents {
namespace {

using ::testing::ElementsAre;

TEST(LuhnTest, KnownNumbers) {
  EXPECT_TRUE(LuhnValid("4111111111111111"));
  EXPECT_TRUE(LuhnValid("5500005555555559"));
  EXPECT_TRUE(LuhnValid("378282246310005"));
  EXPECT_FALSE(LuhnValid("4111111111111112"));
  EXPECT_FALSE(LuhnValid("1234567812345678"));
  EXPECT_FALSE(LuhnValid(""));
  EXPECT_FALSE(LuhnValid("41x1"));
}

TEST(MaskTextTest, CardsPhonesAndEmails) {
  const MaskOptions all;
  EXPECT_EQ(MaskText("card 4111 1111 1111 1111 ok", all), "card [card] ok");
  EXPECT_EQ(MaskText("card 4111-1111-1111-1111.", all), "card [card].");
  // Not Luhn-valid: 16 digits read as a number that is too long for a phone, kept.
  EXPECT_EQ(MaskText("ref 1234 5678 1234 5678", all), "ref 1234 5678 1234 5678");
  EXPECT_EQ(MaskText("call +1 (415) 555-0199 now", all), "call [phone] now");
  EXPECT_EQ(MaskText("call 415.555.0199", all), "call [phone]");
  EXPECT_EQ(MaskText("or 07700 900123, thanks", all), "or [phone], thanks");
  EXPECT_EQ(MaskText("mail ada.l+x@mail.example.org.", all), "mail [email].");
  EXPECT_EQ(MaskText("a@b and c@d.io", all), "a@b and [email]");
  // Short numbers and numbers glued to words stay.
  EXPECT_EQ(MaskText("a table for 2 at 8 pm, room 12", all), "a table for 2 at 8 pm, room 12");
  EXPECT_EQ(MaskText("order A12345678 please", all), "order A12345678 please");
  EXPECT_EQ(MaskText("", all), "");
}

TEST(MaskTextTest, EachKindCanBeTurnedOff) {
  MaskOptions none;
  none.phone_numbers = none.emails = none.card_numbers = false;
  const std::string text = "4111 1111 1111 1111 +14155550199 ada@example.org";
  EXPECT_EQ(MaskText(text, none), text);
  MaskOptions phones_only = none;
  phones_only.phone_numbers = true;
  // A card number is then just a long run of digits: too long for a phone, kept.
  EXPECT_EQ(MaskText(text, phones_only), "4111 1111 1111 1111 [phone] ada@example.org");
}

TEST(MaskTextTest, ListedMetadataValues) {
  google::protobuf::Struct metadata;
  (*metadata.mutable_fields())["customer_name"].set_string_value("Ada Lovelace");
  (*metadata.mutable_fields())["crm_id"].set_string_value("A-1");
  (*metadata.mutable_fields())["account"].set_number_value(98765);
  MaskOptions options;
  options.metadata_keys = {"customer_name", "crm_id", "account", "missing"};
  // A-1 is too short to mask safely.
  EXPECT_EQ(MaskText("I am Ada Lovelace, account 98765, A-1", options, metadata),
            "I am [customer_name], account [account], A-1");
}

TEST(MaskOptionsTest, FromSettings) {
  google::protobuf::Struct fields;
  EXPECT_TRUE(MaskOptionsFrom(fields).emails);
  (*fields.mutable_fields())["mask_emails"].set_bool_value(false);
  auto* keys = (*fields.mutable_fields())["mask_metadata_keys"].mutable_list_value();
  keys->add_values()->set_string_value("name");
  keys->add_values()->set_number_value(3);
  const MaskOptions options = MaskOptionsFrom(fields);
  EXPECT_FALSE(options.emails);
  EXPECT_TRUE(options.phone_numbers);
  EXPECT_THAT(options.metadata_keys, ElementsAre("name"));
}

TEST(CallerLinesTest, UserTurnsInOrderMasked) {
  v1::Call call;
  auto turn = [&](const std::string& role, const std::string& content) {
    v1::Turn* t = call.add_transcript();
    t->set_role(role);
    t->set_content(content);
  };
  turn("AI Assistant", "Hello, call me back on +14155550100?");
  turn("User", "  I want to book. ");
  turn("Function Call", "");
  turn("User", "   ");
  turn("User", "Reach me at bob@example.com");
  EXPECT_THAT(CallerLines(call, MaskOptions()),
              ElementsAre("I want to book.", "Reach me at [email]"));
}

TEST(FailingMetricIdsTest, OnlyCompletedResultsWithAFailingOutcome) {
  v1::Call call;
  auto result = [&](int64_t id, const std::string& status, const std::string& outcome) {
    v1::MetricResult* r = call.add_metric_results();
    r->set_metric_id(id);
    r->set_status(status);
    if (!outcome.empty()) r->mutable_structured_output()->set_outcome_classification(outcome);
  };
  result(101, "completed", "meets_expectations");
  result(102, "completed", "requires_attention");
  result(103, "failed", "requires_attention");  // the judge failed, not the agent
  result(104, "completed", "");                 // no structured outcome
  result(105, "completed", "exceeds_expectations");
  result(106, "completed", "does_not_meet_expectations");
  result(102, "completed", "requires_attention");
  EXPECT_THAT(FailingMetricIds(call), ElementsAre(102, 106));
}

}  // namespace
}  // namespace calleval::agents

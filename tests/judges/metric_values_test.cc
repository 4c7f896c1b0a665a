#include "services/judges/metric_values.h"

#include <cmath>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::judges {
namespace {

using google::protobuf::Value;
using ::testing::HasSubstr;

Value Bool(bool b) {
  Value v;
  v.set_bool_value(b);
  return v;
}
Value Num(double d) {
  Value v;
  v.set_number_value(d);
  return v;
}
Value Str(const std::string& s) {
  Value v;
  v.set_string_value(s);
  return v;
}
Value Null() {
  Value v;
  v.set_null_value(google::protobuf::NULL_VALUE);
  return v;
}
Value List(const std::vector<Value>& items) {
  Value v;
  v.mutable_list_value();  // an empty list is still a list
  for (const Value& i : items) *v.mutable_list_value()->add_values() = i;
  return v;
}
Value Struct(const std::vector<std::pair<std::string, Value>>& fields) {
  Value v;
  auto* f = v.mutable_struct_value()->mutable_fields();
  for (const auto& [k, val] : fields) (*f)[k] = val;
  return v;
}

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

// ---------------------------------------------------------------------------------------------
// CheckResultValue

struct CheckCase {
  std::string name;
  Value value;
  std::string result_type;
  bool ok;
};

void PrintTo(const CheckCase& c, std::ostream* os) { *os << c.name; }

class CheckResultValueTest : public ::testing::TestWithParam<CheckCase> {};

TEST_P(CheckResultValueTest, Accepts) {
  const CheckCase& c = GetParam();
  absl::Status s = CheckResultValue(c.value, c.result_type, {"good", "bad", "Très bien"});
  EXPECT_EQ(s.ok(), c.ok) << s;
  if (!s.ok()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CheckResultValueTest,
    ::testing::Values(CheckCase{"BoolTrue", Bool(true), "boolean", true},
                      CheckCase{"BoolFalse", Bool(false), "boolean", true},
                      CheckCase{"BoolFromString", Str("true"), "boolean", false},
                      CheckCase{"BoolFromNumber", Num(1), "boolean", false},
                      CheckCase{"BoolFromNull", Null(), "boolean", false},
                      CheckCase{"BoolFromUnset", Value(), "boolean", false},
                      CheckCase{"RatingOne", Num(1), "rating", true},
                      CheckCase{"RatingFive", Num(5), "rating", true},
                      CheckCase{"RatingFraction", Num(4.5), "rating", true},
                      CheckCase{"RatingBelow", Num(0.999), "rating", false},
                      CheckCase{"RatingAbove", Num(5.001), "rating", false},
                      CheckCase{"RatingZero", Num(0), "rating", false},
                      CheckCase{"RatingNaN", Num(kNaN), "rating", false},
                      CheckCase{"RatingString", Str("4"), "rating", false},
                      CheckCase{"RatingBool", Bool(true), "rating", false},
                      CheckCase{"NumericInt", Num(42), "numeric", true},
                      CheckCase{"NumericNegative", Num(-3.25), "numeric", true},
                      CheckCase{"NumericZero", Num(0), "numeric", true},
                      CheckCase{"NumericHuge", Num(1e300), "numeric", true},
                      CheckCase{"NumericInf", Num(kInf), "numeric", false},
                      CheckCase{"NumericNegInf", Num(-kInf), "numeric", false},
                      CheckCase{"NumericNaN", Num(kNaN), "numeric", false},
                      CheckCase{"NumericBool", Bool(false), "numeric", false},
                      CheckCase{"NumericString", Str("12"), "numeric", false},
                      CheckCase{"NumericList", List({Num(1)}), "numeric", false},
                      CheckCase{"EnumMember", Str("good"), "enum", true},
                      CheckCase{"EnumUnicodeMember", Str("Très bien"), "enum", true},
                      CheckCase{"EnumWrongCase", Str("Good"), "enum", false},
                      CheckCase{"EnumPadded", Str(" good"), "enum", false},
                      CheckCase{"EnumOther", Str("meh"), "enum", false},
                      CheckCase{"EnumNumber", Num(1), "enum", false},
                      CheckCase{"EnumNull", Null(), "enum", false},
                      CheckCase{"UnknownType", Bool(true), "text", false},
                      CheckCase{"EmptyType", Bool(true), "", false}),
    [](const ::testing::TestParamInfo<CheckCase>& info) { return info.param.name; });

TEST(CheckResultValueMessageTest, SaysWhatWasExpectedAndWhatCame) {
  EXPECT_EQ(CheckResultValue(Str("yes"), "boolean", {}).message(),
            "metric['result'] must be a boolean (true or false), got \"yes\"");
  EXPECT_EQ(CheckResultValue(Num(7), "rating", {}).message(),
            "metric['result'] must be a rating, a number from 1 to 5, got 7");
  EXPECT_EQ(CheckResultValue(Bool(true), "numeric", {}).message(),
            "metric['result'] must be a finite number, got true");
  EXPECT_EQ(CheckResultValue(Num(kNaN), "numeric", {}).message(),
            "metric['result'] must be a finite number, got NaN");
  EXPECT_EQ(CheckResultValue(Null(), "numeric", {}).message(),
            "metric['result'] must be a finite number, got null");
  EXPECT_EQ(CheckResultValue(Str("meh"), "enum", {"good", "bad"}).message(),
            "metric['result'] must be one of \"good\", \"bad\", got \"meh\"");
  EXPECT_EQ(CheckResultValue(Str("x"), "enum", {}).message(),
            "metric['result'] must be one of the metric's enum_values, but it has none, got \"x\"");
  EXPECT_EQ(CheckResultValue(List({Num(1), Str("a")}), "boolean", {}).message(),
            "metric['result'] must be a boolean (true or false), got [1,\"a\"]");
  EXPECT_EQ(CheckResultValue(Bool(true), "text", {}).message(),
            "unknown result_type \"text\" (expected boolean, rating, numeric or enum)");
}

TEST(CheckResultValueMessageTest, LongValuesAreCut) {
  std::string long_text(500, 'x');
  const std::string message(CheckResultValue(Str(long_text), "boolean", {}).message());
  EXPECT_EQ(message, "metric['result'] must be a boolean (true or false), got \"" +
                         std::string(59, 'x') + "…\"");
  std::vector<std::string> many;
  for (int i = 0; i < 30; ++i) many.push_back("v" + std::to_string(i));
  EXPECT_THAT(CheckResultValue(Str("x"), "enum", many).message(),
              HasSubstr("\"v19\" and 10 more, got \"x\""));
}

// ---------------------------------------------------------------------------------------------
// MetricResultText

struct TextCase {
  std::string name;
  Value value;
  std::string text;
};

void PrintTo(const TextCase& c, std::ostream* os) { *os << c.name; }

class MetricResultTextTest : public ::testing::TestWithParam<TextCase> {};

TEST_P(MetricResultTextTest, Text) {
  EXPECT_EQ(MetricResultText(GetParam().value), GetParam().text);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MetricResultTextTest,
    ::testing::Values(
        TextCase{"True", Bool(true), "pass"}, TextCase{"False", Bool(false), "fail"},
        TextCase{"Int", Num(4), "4"}, TextCase{"Half", Num(4.5), "4.5"},
        TextCase{"Zero", Num(0), "0"}, TextCase{"NegativeZero", Num(-0.0), "0"},
        TextCase{"Negative", Num(-12), "-12"}, TextCase{"Tenth", Num(0.1), "0.1"},
        TextCase{"Sum", Num(0.1 + 0.2), "0.30000000000000004"},
        TextCase{"Third", Num(1.0 / 3), "0.3333333333333333"},
        TextCase{"LargeInt", Num(12345678901234567.0), "12345678901234568"},
        TextCase{"MaxSafeInt", Num(9007199254740993.0), "9007199254740992"},
        TextCase{"AboveInt64", Num(1e20), "100000000000000000000"},
        TextCase{"Huge", Num(1e21), "1e+21"}, TextCase{"Tiny", Num(1e-7), "1e-7"},
        TextCase{"SmallDecimal", Num(0.0001), "0.0001"},
        TextCase{"Infinity", Num(kInf), "Infinity"}, TextCase{"NaN", Num(kNaN), "NaN"},
        TextCase{"String", Str("Très bien"), "Très bien"}, TextCase{"EmptyString", Str(""), ""},
        TextCase{"Null", Null(), ""}, TextCase{"Unset", Value(), ""},
        TextCase{"List", List({Num(1), Str("a\"b"), Bool(true), Null()}),
                 "[1,\"a\\\"b\",true,null]"},
        TextCase{"EmptyList", List({}), "[]"},
        TextCase{"Struct", Struct({{"b", Num(2.5)}, {"a", List({Str("x\n")})}, {"c", Struct({})}}),
                 "{\"a\":[\"x\\n\"],\"b\":2.5,\"c\":{}}"}),
    [](const ::testing::TestParamInfo<TextCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// ClassifyOutcome

v1::StructuredOutputRule Rule(const std::string& condition, const std::string& expected,
                              const std::string& outcome = "meets_expectations",
                              std::optional<std::string> name = std::nullopt) {
  v1::StructuredOutputRule r;
  r.set_condition(condition);
  r.set_as_metrics_expected_value(expected);
  r.set_outcome_classification(outcome);
  if (name.has_value()) r.set_set_metrics_name(*name);
  return r;
}

google::protobuf::RepeatedPtrField<v1::StructuredOutputRule> Rules(
    const std::vector<v1::StructuredOutputRule>& rules) {
  google::protobuf::RepeatedPtrField<v1::StructuredOutputRule> out;
  for (const auto& r : rules) *out.Add() = r;
  return out;
}

struct HoldsCase {
  std::string name;
  Value value;
  std::string condition;
  std::string expected;
  bool holds;
};

void PrintTo(const HoldsCase& c, std::ostream* os) { *os << c.name; }

class ConditionTest : public ::testing::TestWithParam<HoldsCase> {};

TEST_P(ConditionTest, Holds) {
  const HoldsCase& c = GetParam();
  auto outcome = ClassifyOutcome(c.value, Rules({Rule(c.condition, c.expected)}));
  EXPECT_EQ(outcome.has_value(), c.holds)
      << MetricResultText(c.value) << " " << c.condition << " " << c.expected;
}

INSTANTIATE_TEST_SUITE_P(
    Booleans, ConditionTest,
    ::testing::Values(HoldsCase{"TrueEqualsTrue", Bool(true), "equals", "true", true},
                      HoldsCase{"TrueEqualsTRUE", Bool(true), "equals", " TRUE ", true},
                      HoldsCase{"TrueEqualsFalse", Bool(true), "equals", "false", false},
                      HoldsCase{"FalseEqualsFalse", Bool(false), "equals", "false", true},
                      HoldsCase{"TrueEqualsPass", Bool(true), "equals", "Pass", true},
                      HoldsCase{"FalseEqualsFail", Bool(false), "equals", "fail", true},
                      HoldsCase{"TrueEqualsYes", Bool(true), "equals", "yes", true},
                      HoldsCase{"FalseEqualsNo", Bool(false), "equals", "NO", true},
                      HoldsCase{"TrueEqualsOne", Bool(true), "equals", "1", true},
                      HoldsCase{"FalseEqualsZero", Bool(false), "equals", "0", true},
                      HoldsCase{"TrueEqualsGarbage", Bool(true), "equals", "maybe", false},
                      HoldsCase{"TrueNotEqualsFalse", Bool(true), "not_equals", "false", true},
                      HoldsCase{"TrueNotEqualsTrue", Bool(true), "not_equals", "true", false},
                      HoldsCase{"NotEqualsGarbage", Bool(true), "not_equals", "maybe", false},
                      HoldsCase{"GreaterThan", Bool(true), "greater_than", "0", false},
                      HoldsCase{"LessThan", Bool(false), "less_than", "1", false},
                      HoldsCase{"AtLeast", Bool(true), "at_least", "true", false},
                      HoldsCase{"AtMost", Bool(true), "at_most", "true", false},
                      HoldsCase{"Contains", Bool(true), "contains", "true", false}),
    [](const ::testing::TestParamInfo<HoldsCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Numbers, ConditionTest,
    ::testing::Values(HoldsCase{"Equals", Num(4), "equals", "4", true},
                      HoldsCase{"EqualsDecimalForm", Num(4), "equals", "4.0", true},
                      HoldsCase{"EqualsPadded", Num(4), "equals", " 4 ", true},
                      HoldsCase{"EqualsExponent", Num(400), "equals", "4e2", true},
                      HoldsCase{"EqualsTolerance", Num(0.1 + 0.2), "equals", "0.3", true},
                      HoldsCase{"EqualsDifferent", Num(4), "equals", "4.001", false},
                      HoldsCase{"EqualsGarbage", Num(4), "equals", "four", false},
                      HoldsCase{"EqualsTrue", Num(1), "equals", "true", false},
                      HoldsCase{"NotEquals", Num(4), "not_equals", "5", true},
                      HoldsCase{"NotEqualsSame", Num(4), "not_equals", "4", false},
                      HoldsCase{"NotEqualsGarbage", Num(4), "not_equals", "four", false},
                      HoldsCase{"GreaterThan", Num(5), "greater_than", "4", true},
                      HoldsCase{"GreaterThanSame", Num(4), "greater_than", "4", false},
                      HoldsCase{"GreaterThanTolerance", Num(0.1 + 0.2), "greater_than", "0.3",
                                false},
                      HoldsCase{"GreaterThanLess", Num(3), "greater_than", "4", false},
                      HoldsCase{"GreaterThanNegative", Num(-1), "greater_than", "-2.5", true},
                      HoldsCase{"LessThan", Num(3), "less_than", "4", true},
                      HoldsCase{"LessThanSame", Num(4), "less_than", "4", false},
                      HoldsCase{"LessThanMore", Num(5), "less_than", "4", false},
                      HoldsCase{"AtLeastSame", Num(4), "at_least", "4", true},
                      HoldsCase{"AtLeastMore", Num(4.5), "at_least", "4", true},
                      HoldsCase{"AtLeastLess", Num(3.5), "at_least", "4", false},
                      HoldsCase{"AtMostSame", Num(4), "at_most", "4", true},
                      HoldsCase{"AtMostLess", Num(3), "at_most", "4", true},
                      HoldsCase{"AtMostMore", Num(4.5), "at_most", "4", false},
                      HoldsCase{"AtMostGarbage", Num(4), "at_most", "lots", false},
                      HoldsCase{"AtMostInfinite", Num(4), "at_most", "inf", false},
                      HoldsCase{"AtLeastNaNExpected", Num(4), "at_least", "nan", false},
                      HoldsCase{"NaNValue", Num(kNaN), "not_equals", "4", false},
                      HoldsCase{"InfValue", Num(kInf), "greater_than", "4", false},
                      HoldsCase{"Contains", Num(45), "contains", "4", false}),
    [](const ::testing::TestParamInfo<HoldsCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Strings, ConditionTest,
    ::testing::Values(
        HoldsCase{"Equals", Str("good"), "equals", "good", true},
        HoldsCase{"EqualsCase", Str("Good"), "equals", "GOOD", true},
        HoldsCase{"EqualsTrimmed", Str(" good\n"), "equals", "  good ", true},
        HoldsCase{"EqualsUnicodeCase", Str("TRÈS BIEN"), "equals", "très bien", true},
        HoldsCase{"EqualsSharpS", Str("STRASSE"), "equals", "straße", true},
        HoldsCase{"EqualsDifferent", Str("good"), "equals", "bad", false},
        HoldsCase{"EqualsInnerSpace", Str("very good"), "equals", "very  good", false},
        HoldsCase{"EqualsNumberText", Str("4.0"), "equals", "4", false},
        HoldsCase{"NotEquals", Str("good"), "not_equals", "bad", true},
        HoldsCase{"NotEqualsCase", Str("good"), "not_equals", "GOOD", false},
        HoldsCase{"ContainsSubstring", Str("Very Good indeed"), "contains", "good", true},
        HoldsCase{"ContainsWordPart", Str("goodness"), "contains", "good", true},
        HoldsCase{"ContainsMissing", Str("bad"), "contains", "good", false},
        HoldsCase{"ContainsUnicode", Str("C'EST TRÈS BIEN"), "contains", "très", true},
        HoldsCase{"ContainsBlank", Str("good"), "contains", "  ", false},
        HoldsCase{"NumericStringGreater", Str("4.5"), "greater_than", "4", true},
        HoldsCase{"NumericStringLess", Str(" 3 "), "less_than", "4", true},
        HoldsCase{"NumericStringAtLeast", Str("4"), "at_least", "4.0", true},
        HoldsCase{"NumericStringAtMost", Str("5"), "at_most", "4", false},
        HoldsCase{"NonNumericGreater", Str("high"), "greater_than", "4", false},
        HoldsCase{"NonNumericExpected", Str("5"), "greater_than", "four", false}),
    [](const ::testing::TestParamInfo<HoldsCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    ListsAndOthers, ConditionTest,
    ::testing::Values(
        HoldsCase{"ListContainsString", List({Str("billing"), Str("Refund")}), "contains", "refund",
                  true},
        HoldsCase{"ListContainsSubstringOnly", List({Str("refunds")}), "contains", "refund", false},
        HoldsCase{"ListContainsNumber", List({Num(1), Num(2)}), "contains", "2", true},
        HoldsCase{"ListContainsBool", List({Bool(true)}), "contains", "true", true},
        HoldsCase{"ListContainsMissing", List({Str("a")}), "contains", "b", false},
        HoldsCase{"ListContainsNested", List({List({Str("a")})}), "contains", "a", false},
        HoldsCase{"EmptyListContains", List({}), "contains", "a", false},
        HoldsCase{"ListEquals", List({Str("a")}), "equals", "a", false},
        HoldsCase{"ListNotEquals", List({Str("a")}), "not_equals", "b", false},
        HoldsCase{"ListGreater", List({Num(5)}), "greater_than", "4", false},
        HoldsCase{"StructEquals", Struct({{"a", Str("a")}}), "equals", "a", false},
        HoldsCase{"StructContains", Struct({{"a", Str("a")}}), "contains", "a", false},
        HoldsCase{"NullEquals", Null(), "equals", "null", false},
        HoldsCase{"NullNotEquals", Null(), "not_equals", "x", false},
        HoldsCase{"UnsetNotEquals", Value(), "not_equals", "x", false},
        HoldsCase{"UnknownCondition", Str("a"), "is", "a", false},
        HoldsCase{"ConditionCaseMatters", Str("a"), "EQUALS", "a", false}),
    [](const ::testing::TestParamInfo<HoldsCase>& info) { return info.param.name; });

TEST(ClassifyOutcomeTest, FirstHoldingRuleWins) {
  auto rules = Rules({Rule("greater_than", "4", "exceeds_expectations", "Great"),
                      Rule("at_least", "3", "meets_expectations", "Good"),
                      Rule("less_than", "3", "requires_attention", "Poor")});
  auto great = ClassifyOutcome(Num(5), rules);
  ASSERT_TRUE(great.has_value());
  EXPECT_EQ(great->set_metrics_name(), "Great");
  EXPECT_EQ(great->as_metrics_expected_value(), "4");
  EXPECT_EQ(great->outcome_classification(), "exceeds_expectations");

  auto good = ClassifyOutcome(Num(4), rules);  // 4 is not > 4
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->set_metrics_name(), "Good");
  EXPECT_EQ(good->outcome_classification(), "meets_expectations");

  auto poor = ClassifyOutcome(Num(1), rules);
  ASSERT_TRUE(poor.has_value());
  EXPECT_EQ(poor->outcome_classification(), "requires_attention");
}

TEST(ClassifyOutcomeTest, OnlySetFieldsAreCopied) {
  v1::StructuredOutputRule rule;
  rule.set_condition("equals");
  rule.set_as_metrics_expected_value("true");
  auto outcome = ClassifyOutcome(Bool(true), Rules({rule}));
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(outcome->has_set_metrics_name());
  EXPECT_FALSE(outcome->has_outcome_classification());
  EXPECT_EQ(outcome->as_metrics_expected_value(), "true");
}

TEST(ClassifyOutcomeTest, NothingHolds) {
  auto rules = Rules({Rule("equals", "true")});
  EXPECT_FALSE(ClassifyOutcome(Bool(false), rules).has_value());
  EXPECT_FALSE(ClassifyOutcome(Null(), rules).has_value());
  EXPECT_FALSE(ClassifyOutcome(Bool(true), Rules({})).has_value());
}

TEST(ClassifyOutcomeTest, IncompleteRulesAreSkipped) {
  v1::StructuredOutputRule no_condition;
  no_condition.set_as_metrics_expected_value("true");
  no_condition.set_outcome_classification("requires_attention");
  v1::StructuredOutputRule no_expected;
  no_expected.set_condition("not_equals");
  no_expected.set_outcome_classification("requires_attention");
  auto outcome = ClassifyOutcome(
      Bool(true), Rules({no_condition, no_expected, Rule("equals", "true", "meets_expectations")}));
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->outcome_classification(), "meets_expectations");
}

TEST(ClassifyOutcomeTest, ExpectedValueIsCopiedAsWritten) {
  auto outcome = ClassifyOutcome(Str("good"), Rules({Rule("equals", " GOOD ")}));
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->as_metrics_expected_value(), " GOOD ");
}

// ---------------------------------------------------------------------------------------------
// ValidateStructuredOutput

struct ValidateCase {
  std::string name;
  std::string result_type;
  v1::StructuredOutputRule rule;
  // "field: issue" of each expected issue, field without the "structured_output[0]." prefix.
  std::vector<std::string> issues;
};

void PrintTo(const ValidateCase& c, std::ostream* os) { *os << c.name; }

class ValidateTest : public ::testing::TestWithParam<ValidateCase> {};

TEST_P(ValidateTest, Issues) {
  const ValidateCase& c = GetParam();
  std::vector<FieldIssue> issues =
      ValidateStructuredOutput(Rules({c.rule}), c.result_type, {"good", "bad", "Très bien"});
  std::vector<std::string> got;
  for (const FieldIssue& i : issues) {
    ASSERT_TRUE(i.field.has_value());
    const std::string prefix = "structured_output[0].";
    ASSERT_EQ(i.field->substr(0, prefix.size()), prefix);
    got.push_back(i.field->substr(prefix.size()) + ": " + i.issue);
  }
  EXPECT_EQ(got, c.issues);
}

v1::StructuredOutputRule Without(v1::StructuredOutputRule r, const std::string& field) {
  if (field == "condition") r.clear_condition();
  if (field == "expected") r.clear_as_metrics_expected_value();
  if (field == "outcome") r.clear_outcome_classification();
  return r;
}

const char kConditionList[] =
    "condition: must be one of equals, not_equals, greater_than, less_than, at_least, at_most, "
    "contains";
const char kOutcomeList[] =
    "outcome_classification: must be one of meets_expectations, exceeds_expectations, "
    "requires_attention, not_applicable";

INSTANTIATE_TEST_SUITE_P(
    Common, ValidateTest,
    ::testing::Values(
        ValidateCase{"Valid", "numeric", Rule("at_least", "3", "exceeds_expectations", "Fine"), {}},
        ValidateCase{"EveryOutcome1", "numeric", Rule("equals", "1", "meets_expectations"), {}},
        ValidateCase{"EveryOutcome2", "numeric", Rule("equals", "1", "exceeds_expectations"), {}},
        ValidateCase{"EveryOutcome3", "numeric", Rule("equals", "1", "requires_attention"), {}},
        ValidateCase{"EveryOutcome4", "numeric", Rule("equals", "1", "not_applicable"), {}},
        ValidateCase{"NoCondition",
                     "numeric",
                     Without(Rule("equals", "1"), "condition"),
                     {"condition: is required"}},
        ValidateCase{"EmptyCondition", "numeric", Rule("", "1"), {"condition: is required"}},
        ValidateCase{"UnknownCondition", "numeric", Rule("bigger", "1"), {kConditionList}},
        ValidateCase{"ConditionCase", "numeric", Rule("Equals", "1"), {kConditionList}},
        ValidateCase{"NoOutcome",
                     "numeric",
                     Without(Rule("equals", "1"), "outcome"),
                     {"outcome_classification: is required"}},
        ValidateCase{"UnknownOutcome", "numeric", Rule("equals", "1", "good"), {kOutcomeList}},
        ValidateCase{"NoExpected",
                     "numeric",
                     Without(Rule("equals", "1"), "expected"),
                     {"as_metrics_expected_value: is required"}},
        ValidateCase{"BlankExpected",
                     "enum",
                     Rule("equals", "  "),
                     {"as_metrics_expected_value: is required"}},
        ValidateCase{"Everything",
                     "numeric",
                     v1::StructuredOutputRule(),
                     {"condition: is required", "outcome_classification: is required",
                      "as_metrics_expected_value: is required"}},
        ValidateCase{"LongName",
                     "numeric",
                     Rule("equals", "1", "meets_expectations", std::string(256, 'n')),
                     {"set_metrics_name: must be at most 255 characters"}},
        ValidateCase{"NameAtLimit",
                     "numeric",
                     Rule("equals", "1", "meets_expectations", std::string(255, 'n')),
                     {}},
        ValidateCase{"NameCountsCharacters",
                     "numeric",
                     Rule("equals", "1", "meets_expectations",
                          [] {
                            std::string s;
                            for (int i = 0; i < 255; ++i) s += "é";
                            return s;
                          }()),
                     {}},
        ValidateCase{"UnknownResultType", "text", Rule("greater_than", "x"), {}}),
    [](const ::testing::TestParamInfo<ValidateCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Boolean, ValidateTest,
    ::testing::Values(
        ValidateCase{"EqualsTrue", "boolean", Rule("equals", "true"), {}},
        ValidateCase{"NotEqualsFalse", "boolean", Rule("not_equals", "False"), {}},
        ValidateCase{"EqualsPass", "boolean", Rule("equals", "pass"), {}},
        ValidateCase{"EqualsGarbage",
                     "boolean",
                     Rule("equals", "maybe"),
                     {"as_metrics_expected_value: must be true or false for a boolean result"}},
        ValidateCase{"GreaterThan",
                     "boolean",
                     Rule("greater_than", "true"),
                     {"condition: must be equals or not_equals for a boolean result"}},
        ValidateCase{"LessThan",
                     "boolean",
                     Rule("less_than", "true"),
                     {"condition: must be equals or not_equals for a boolean result"}},
        ValidateCase{"AtLeast",
                     "boolean",
                     Rule("at_least", "true"),
                     {"condition: must be equals or not_equals for a boolean result"}},
        ValidateCase{"AtMost",
                     "boolean",
                     Rule("at_most", "true"),
                     {"condition: must be equals or not_equals for a boolean result"}},
        ValidateCase{"Contains",
                     "boolean",
                     Rule("contains", "true"),
                     {"condition: must be equals or not_equals for a boolean result"}}),
    [](const ::testing::TestParamInfo<ValidateCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    RatingAndNumeric, ValidateTest,
    ::testing::Values(
        ValidateCase{"RatingEquals", "rating", Rule("equals", "5"), {}},
        ValidateCase{"RatingNotEquals", "rating", Rule("not_equals", "1"), {}},
        ValidateCase{"RatingGreaterThan", "rating", Rule("greater_than", "3.5"), {}},
        ValidateCase{"RatingLessThan", "rating", Rule("less_than", "2"), {}},
        ValidateCase{"RatingAtLeast", "rating", Rule("at_least", "4"), {}},
        ValidateCase{"RatingAtMost", "rating", Rule("at_most", " 2 "), {}},
        ValidateCase{"RatingTooHigh",
                     "rating",
                     Rule("at_least", "6"),
                     {"as_metrics_expected_value: must be a rating from 1 to 5"}},
        ValidateCase{"RatingTooLow",
                     "rating",
                     Rule("equals", "0"),
                     {"as_metrics_expected_value: must be a rating from 1 to 5"}},
        ValidateCase{"RatingNotNumber",
                     "rating",
                     Rule("at_least", "good"),
                     {"as_metrics_expected_value: must be a number for a rating result"}},
        ValidateCase{"RatingContains",
                     "rating",
                     Rule("contains", "4"),
                     {"condition: contains cannot be used with a rating result; compare numbers "
                      "instead"}},
        ValidateCase{"NumericEquals", "numeric", Rule("equals", "-12.5"), {}},
        ValidateCase{"NumericLarge", "numeric", Rule("greater_than", "1e6"), {}},
        ValidateCase{"NumericNotNumber",
                     "numeric",
                     Rule("less_than", "ten"),
                     {"as_metrics_expected_value: must be a number for a numeric result"}},
        ValidateCase{"NumericEqualsNotNumber",
                     "numeric",
                     Rule("equals", "ten"),
                     {"as_metrics_expected_value: must be a number for a numeric result"}},
        ValidateCase{"NumericInfinity",
                     "numeric",
                     Rule("less_than", "inf"),
                     {"as_metrics_expected_value: must be a number for a numeric result"}},
        ValidateCase{"NumericContains",
                     "numeric",
                     Rule("contains", "1"),
                     {"condition: contains cannot be used with a numeric result; compare "
                      "numbers instead"}}),
    [](const ::testing::TestParamInfo<ValidateCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Enum, ValidateTest,
    ::testing::Values(
        ValidateCase{"Equals", "enum", Rule("equals", "good"), {}},
        ValidateCase{"EqualsCaseInsensitive", "enum", Rule("equals", "GOOD"), {}},
        ValidateCase{"EqualsUnicodeCase", "enum", Rule("not_equals", "TRÈS BIEN"), {}},
        ValidateCase{"NotMember",
                     "enum",
                     Rule("equals", "meh"),
                     {"as_metrics_expected_value: must be one of \"good\", \"bad\", \"Très "
                      "bien\""}},
        ValidateCase{"NotEqualsNotMember",
                     "enum",
                     Rule("not_equals", "meh"),
                     {"as_metrics_expected_value: must be one of \"good\", \"bad\", \"Très "
                      "bien\""}},
        ValidateCase{"ContainsAnyText", "enum", Rule("contains", "très"), {}},
        ValidateCase{"GreaterThan",
                     "enum",
                     Rule("greater_than", "1"),
                     {"condition: must be equals, not_equals or contains for an enum result"}},
        ValidateCase{"LessThan",
                     "enum",
                     Rule("less_than", "1"),
                     {"condition: must be equals, not_equals or contains for an enum result"}},
        ValidateCase{"AtLeast",
                     "enum",
                     Rule("at_least", "1"),
                     {"condition: must be equals, not_equals or contains for an enum result"}},
        ValidateCase{"AtMost",
                     "enum",
                     Rule("at_most", "1"),
                     {"condition: must be equals, not_equals or contains for an enum result"}}),
    [](const ::testing::TestParamInfo<ValidateCase>& info) { return info.param.name; });

TEST(ValidateStructuredOutputTest, FieldNamesCarryTheIndex) {
  auto rules = Rules({Rule("equals", "true"), Rule("at_least", "true"), Rule("nope", "true")});
  std::vector<FieldIssue> issues = ValidateStructuredOutput(rules, "boolean", {});
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].field, "structured_output[1].condition");
  EXPECT_EQ(issues[1].field, "structured_output[2].condition");
}

TEST(ValidateStructuredOutputTest, EnumWithoutValues) {
  std::vector<FieldIssue> issues =
      ValidateStructuredOutput(Rules({Rule("equals", "x")}), "enum", {});
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].issue, "must be one of enum_values, which is empty");
}

TEST(ValidateStructuredOutputTest, NoRulesNoIssues) {
  EXPECT_TRUE(ValidateStructuredOutput(Rules({}), "boolean", {}).empty());
}

// Every rule the validator accepts is one the classifier can evaluate: for each result type, a
// valid rule holds for some value of that type.
TEST(ValidateStructuredOutputTest, AcceptedRulesCanHold) {
  struct Probe {
    std::string result_type;
    v1::StructuredOutputRule rule;
    Value value;
  };
  std::vector<Probe> probes = {
      {"boolean", Rule("equals", "yes"), Bool(true)},
      {"boolean", Rule("not_equals", "0"), Bool(true)},
      {"rating", Rule("at_most", "2.5"), Num(2)},
      {"numeric", Rule("greater_than", "1e3"), Num(1001)},
      {"enum", Rule("equals", "TRÈS BIEN"), Str("Très bien")},
      {"enum", Rule("contains", "bien"), Str("Très bien")},
  };
  for (const Probe& p : probes) {
    auto rules = Rules({p.rule});
    EXPECT_TRUE(ValidateStructuredOutput(rules, p.result_type, {"good", "Très bien"}).empty())
        << p.rule.ShortDebugString();
    EXPECT_TRUE(ClassifyOutcome(p.value, rules).has_value()) << p.rule.ShortDebugString();
  }
}

}  // namespace
}  // namespace calleval::judges

#pragma once

// Typing and classifying metric results (docs/api.md §4): whether a value fits a result_type, the
// text form test_code reports, and the structured_output rules that turn a result into an
// outcome_classification. Pure functions, shared by every judge.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/metrics.pb.h"
#include "common/errors.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "google/protobuf/struct.pb.h"

namespace calleval::judges {

// boolean: a JSON bool; rating: a number 1–5 (fractions allowed); numeric: a finite number
// (bools are not numbers, nor are strings holding one); enum: a string among `enum_values`,
// exactly. kInvalidArgument naming what was expected and showing (briefly) what came, e.g.
// `metric['result'] must be a boolean (true or false), got "yes"`; also for an unknown
// result_type.
absl::Status CheckResultValue(const google::protobuf::Value& value, absl::string_view result_type,
                              const std::vector<std::string>& enum_values);

// "pass"/"fail" for booleans, otherwise the value as text: numbers as the shortest text that
// reads back the same ("4", "4.5", integers in full below 1e21, "1e-7"), strings as they are,
// null as "", lists and objects as compact JSON with sorted keys.
std::string MetricResultText(const google::protobuf::Value& value);

// The first rule whose condition holds between `value` and its as_metrics_expected_value, as
// the result's structured_output; nullopt when no rule holds (or there are none).
// Conditions: equals / not_equals (booleans and numbers compared as such, text
// case-insensitively), greater_than / less_than / at_least / at_most (numbers), contains
// (case-insensitive substring of the value's text, or membership for a list).
// A boolean's expected value may be true/false, pass/fail, yes/no or 1/0 (any case); numbers
// are equal within a relative 1e-9; text is trimmed and Unicode case-folded; numeric
// conditions on text hold only when both sides read as numbers. A comparison that does not
// apply to the value's type, or an expected value that does not read as that type, makes the
// rule not hold (not even not_equals). A null value, an object, or a rule without condition or
// expected value never holds. The outcome copies the fields the rule sets.
std::optional<v1::MetricOutcome> ClassifyOutcome(
    const google::protobuf::Value& value,
    const google::protobuf::RepeatedPtrField<v1::StructuredOutputRule>& rules);

// Field-level problems of a metric's structured_output for its result_type (unknown condition
// or outcome, a numeric comparison on a boolean or enum, an expected value that cannot be
// compared: not a number, not true/false, not one of enum_values). Field names are
// "structured_output[i].<key>". condition and outcome_classification are required and must be
// known; as_metrics_expected_value is required and not blank; set_metrics_name is optional, at
// most 255 characters. boolean: equals/not_equals only, expected a boolean spelling; rating and
// numeric: no contains, expected a number (1–5 for rating); enum: no numeric comparisons,
// equals/not_equals expect one of enum_values (case-insensitively). An unknown result_type
// gets only the checks that do not depend on it.
std::vector<FieldIssue> ValidateStructuredOutput(
    const google::protobuf::RepeatedPtrField<v1::StructuredOutputRule>& rules,
    absl::string_view result_type, const std::vector<std::string>& enum_values);

}  // namespace calleval::judges

#include "services/judges/metric_values.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "unicode/normalizer2.h"
#include "unicode/unistr.h"

namespace calleval::judges {
namespace {

using google::protobuf::Value;

constexpr absl::string_view kResult = "metric['result']";

// Values quoted in error messages are cut to this many characters.
constexpr size_t kMaxShownChars = 60;
// Enum values listed in an error message.
constexpr size_t kMaxListedEnumValues = 20;
constexpr size_t kMaxSetMetricsNameChars = 255;

// Two numbers closer than this (relative to their size, at least 1) compare equal, so a result
// computed as 0.1 + 0.2 equals an expected "0.3".
constexpr double kRelativeTolerance = 1e-9;

enum class Condition { kEquals, kNotEquals, kGreaterThan, kLessThan, kAtLeast, kAtMost, kContains };

constexpr std::pair<absl::string_view, Condition> kConditions[] = {
    {"equals", Condition::kEquals},
    {"not_equals", Condition::kNotEquals},
    {"greater_than", Condition::kGreaterThan},
    {"less_than", Condition::kLessThan},
    {"at_least", Condition::kAtLeast},
    {"at_most", Condition::kAtMost},
    {"contains", Condition::kContains},
};

constexpr absl::string_view kOutcomes[] = {"meets_expectations", "exceeds_expectations",
                                           "requires_attention", "not_applicable"};

std::optional<Condition> ParseCondition(absl::string_view name) {
  for (const auto& [n, c] : kConditions) {
    if (n == name) return c;
  }
  return std::nullopt;
}

bool IsNumericComparison(Condition c) {
  return c == Condition::kGreaterThan || c == Condition::kLessThan || c == Condition::kAtLeast ||
         c == Condition::kAtMost;
}

// ---------------------------------------------------------------------------------------------
// Text

size_t CountChars(absl::string_view utf8) {
  // Every byte that does not continue a multi-byte sequence starts a character.
  return static_cast<size_t>(
      std::count_if(utf8.begin(), utf8.end(), [](char b) { return (b & 0xC0) != 0x80; }));
}

// At most `max_chars` characters of `utf8`, cut on a character boundary, with "…" when cut.
std::string Truncate(absl::string_view utf8, size_t max_chars) {
  size_t chars = 0;
  for (size_t i = 0; i < utf8.size(); ++i) {
    if ((utf8[i] & 0xC0) == 0x80) continue;
    if (chars == max_chars) return absl::StrCat(utf8.substr(0, i), "…");
    ++chars;
  }
  return std::string(utf8);
}

// For case-insensitive comparisons of text: trimmed, NFC, fully case-folded (so "Très Bien"
// equals "très bien" and "STRASSE" equals "straße").
std::string Fold(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_SUCCESS(err)) {
    icu::UnicodeString composed = nfc->normalize(u, err);
    if (U_SUCCESS(err)) u = std::move(composed);
  }
  u.foldCase();
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::optional<double> ParseNumber(absl::string_view text) {
  double d = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &d) || !std::isfinite(d)) {
    return std::nullopt;
  }
  return d;
}

// The spellings of a boolean an expected value may use.
std::optional<bool> ParseBool(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  for (absl::string_view t : {"true", "pass", "yes", "1"}) {
    if (absl::EqualsIgnoreCase(text, t)) return true;
  }
  for (absl::string_view f : {"false", "fail", "no", "0"}) {
    if (absl::EqualsIgnoreCase(text, f)) return false;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Numbers and JSON

// The shortest text that reads back as `d`: integers in full up to 1e21 ("4", not "4.0";
// 12345678901234567 not 1.2345678901234568e+16), otherwise the fewest significant digits that
// round-trip ("4.5", "0.1", "1e-7", "1e+21"), as JavaScript prints numbers.
std::string FormatNumber(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == std::trunc(d) && std::fabs(d) < 1e21) {
    if (std::fabs(d) < 9.2e18) return absl::StrCat(static_cast<int64_t>(d));
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", d);
    return buf;
  }
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // printf writes exponents with at least two digits ("1e-07"); JSON and JavaScript do not.
  std::string out = buf;
  const size_t e = out.find('e');
  if (e != std::string::npos) {
    size_t digits = e + 2;  // after the sign
    while (digits + 1 < out.size() && out[digits] == '0') out.erase(digits, 1);
  }
  return out;
}

void AppendJsonString(absl::string_view s, std::string& out) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// Compact JSON with the keys of objects sorted, so the same value always reads the same.
void AppendJson(const Value& v, std::string& out) {
  switch (v.kind_case()) {
    case Value::kBoolValue:
      out += v.bool_value() ? "true" : "false";
      return;
    case Value::kNumberValue:
      // JSON has no NaN or infinity.
      out += std::isfinite(v.number_value()) ? FormatNumber(v.number_value()) : "null";
      return;
    case Value::kStringValue:
      AppendJsonString(v.string_value(), out);
      return;
    case Value::kListValue: {
      out.push_back('[');
      bool first = true;
      for (const Value& e : v.list_value().values()) {
        if (!first) out.push_back(',');
        first = false;
        AppendJson(e, out);
      }
      out.push_back(']');
      return;
    }
    case Value::kStructValue: {
      std::vector<const std::string*> keys;
      for (const auto& [k, unused] : v.struct_value().fields()) keys.push_back(&k);
      std::sort(keys.begin(), keys.end(),
                [](const std::string* a, const std::string* b) { return *a < *b; });
      out.push_back('{');
      bool first = true;
      for (const std::string* k : keys) {
        if (!first) out.push_back(',');
        first = false;
        AppendJsonString(*k, out);
        out.push_back(':');
        AppendJson(v.struct_value().fields().at(*k), out);
      }
      out.push_back('}');
      return;
    }
    case Value::kNullValue:
    case Value::KIND_NOT_SET:
      out += "null";
      return;
  }
}

// A value as an error message shows it: JSON, cut short.
std::string Shown(const Value& v) {
  if (v.kind_case() == Value::kNumberValue) return FormatNumber(v.number_value());
  std::string json;
  AppendJson(v, json);
  if (CountChars(json) <= kMaxShownChars) return json;
  std::string cut = Truncate(json, kMaxShownChars);
  if (v.kind_case() == Value::kStringValue) cut.push_back('"');
  return cut;
}

std::string QuotedList(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (size_t i = 0; i < values.size() && i < kMaxListedEnumValues; ++i) {
    quoted.push_back(absl::StrCat("\"", Truncate(values[i], kMaxShownChars), "\""));
  }
  std::string list = absl::StrJoin(quoted, ", ");
  if (values.size() > kMaxListedEnumValues) {
    absl::StrAppend(&list, " and ", values.size() - kMaxListedEnumValues, " more");
  }
  return list;
}

// ---------------------------------------------------------------------------------------------
// Conditions

bool NumbersEqual(double a, double b) {
  const double scale = std::max({1.0, std::fabs(a), std::fabs(b)});
  return std::fabs(a - b) <= kRelativeTolerance * scale;
}

bool CompareNumbers(double value, Condition c, double expected) {
  const bool equal = NumbersEqual(value, expected);
  switch (c) {
    case Condition::kEquals:
      return equal;
    case Condition::kNotEquals:
      return !equal;
    case Condition::kGreaterThan:
      return !equal && value > expected;
    case Condition::kLessThan:
      return !equal && value < expected;
    case Condition::kAtLeast:
      return equal || value > expected;
    case Condition::kAtMost:
      return equal || value < expected;
    case Condition::kContains:
      return false;
  }
  return false;
}

// Whether `c` holds between a result and the rule's expected value. A comparison that is not
// defined for the value's type, or an expected value that cannot be read as that type, does
// not hold (not even not_equals): the rule is skipped.
bool Holds(const Value& value, Condition c, absl::string_view expected) {
  switch (value.kind_case()) {
    case Value::kBoolValue: {
      if (c != Condition::kEquals && c != Condition::kNotEquals) return false;
      const std::optional<bool> b = ParseBool(expected);
      if (!b.has_value()) return false;
      return (value.bool_value() == *b) == (c == Condition::kEquals);
    }
    case Value::kNumberValue: {
      if (c == Condition::kContains || !std::isfinite(value.number_value())) return false;
      const std::optional<double> d = ParseNumber(expected);
      return d.has_value() && CompareNumbers(value.number_value(), c, *d);
    }
    case Value::kStringValue: {
      if (c == Condition::kEquals || c == Condition::kNotEquals) {
        return (Fold(value.string_value()) == Fold(expected)) == (c == Condition::kEquals);
      }
      if (c == Condition::kContains) {
        const std::string needle = Fold(expected);
        return !needle.empty() && Fold(value.string_value()).find(needle) != std::string::npos;
      }
      const std::optional<double> v = ParseNumber(value.string_value());
      const std::optional<double> d = ParseNumber(expected);
      return v.has_value() && d.has_value() && CompareNumbers(*v, c, *d);
    }
    case Value::kListValue: {
      if (c != Condition::kContains) return false;
      for (const Value& e : value.list_value().values()) {
        if (e.kind_case() != Value::kListValue && Holds(e, Condition::kEquals, expected)) {
          return true;
        }
      }
      return false;
    }
    case Value::kStructValue:
    case Value::kNullValue:
    case Value::KIND_NOT_SET:
      return false;
  }
  return false;
}

}  // namespace

absl::Status CheckResultValue(const Value& value, absl::string_view result_type,
                              const std::vector<std::string>& enum_values) {
  const bool is_number = value.kind_case() == Value::kNumberValue;
  if (result_type == "boolean") {
    if (value.kind_case() == Value::kBoolValue) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(kResult, " must be a boolean (true or false), got ", Shown(value)));
  }
  if (result_type == "rating") {
    if (is_number && value.number_value() >= 1 && value.number_value() <= 5) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(kResult, " must be a rating, a number from 1 to 5, got ", Shown(value)));
  }
  if (result_type == "numeric") {
    if (is_number && std::isfinite(value.number_value())) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(kResult, " must be a finite number, got ", Shown(value)));
  }
  if (result_type == "enum") {
    if (value.kind_case() == Value::kStringValue &&
        std::find(enum_values.begin(), enum_values.end(), value.string_value()) !=
            enum_values.end()) {
      return absl::OkStatus();
    }
    if (enum_values.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kResult, " must be one of the metric's enum_values, but it has none, got ",
                       Shown(value)));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(kResult, " must be one of ", QuotedList(enum_values), ", got ", Shown(value)));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown result_type \"",
                                                 Truncate(result_type, kMaxShownChars),
                                                 "\" (expected boolean, rating, numeric or enum)"));
}

std::string MetricResultText(const Value& value) {
  switch (value.kind_case()) {
    case Value::kBoolValue:
      return value.bool_value() ? "pass" : "fail";
    case Value::kNumberValue:
      return FormatNumber(value.number_value());
    case Value::kStringValue:
      return value.string_value();
    case Value::kListValue:
    case Value::kStructValue: {
      std::string json;
      AppendJson(value, json);
      return json;
    }
    case Value::kNullValue:
    case Value::KIND_NOT_SET:
      return "";
  }
  return "";
}

std::optional<v1::MetricOutcome> ClassifyOutcome(
    const Value& value, const google::protobuf::RepeatedPtrField<v1::StructuredOutputRule>& rules) {
  for (const v1::StructuredOutputRule& rule : rules) {
    if (!rule.has_condition() || !rule.has_as_metrics_expected_value()) continue;
    const std::optional<Condition> c = ParseCondition(rule.condition());
    if (!c.has_value() || !Holds(value, *c, rule.as_metrics_expected_value())) continue;
    v1::MetricOutcome outcome;
    if (rule.has_set_metrics_name()) outcome.set_set_metrics_name(rule.set_metrics_name());
    if (rule.has_as_metrics_expected_value()) {
      outcome.set_as_metrics_expected_value(rule.as_metrics_expected_value());
    }
    if (rule.has_outcome_classification()) {
      outcome.set_outcome_classification(rule.outcome_classification());
    }
    return outcome;
  }
  return std::nullopt;
}

std::vector<FieldIssue> ValidateStructuredOutput(
    const google::protobuf::RepeatedPtrField<v1::StructuredOutputRule>& rules,
    absl::string_view result_type, const std::vector<std::string>& enum_values) {
  std::vector<FieldIssue> issues;
  std::vector<std::string> folded_enum_values;
  for (const std::string& e : enum_values) folded_enum_values.push_back(Fold(e));

  for (int i = 0; i < rules.size(); ++i) {
    const v1::StructuredOutputRule& rule = rules[i];
    const std::string prefix = absl::StrCat("structured_output[", i, "].");
    auto add = [&](absl::string_view key, std::string issue) {
      issues.push_back(FieldIssue{absl::StrCat(prefix, key), std::move(issue)});
    };

    std::optional<Condition> condition;
    if (!rule.has_condition() || rule.condition().empty()) {
      add("condition", "is required");
    } else {
      condition = ParseCondition(rule.condition());
      if (!condition.has_value()) {
        add("condition",
            "must be one of equals, not_equals, greater_than, less_than, at_least, at_most, "
            "contains");
      }
    }

    if (!rule.has_outcome_classification() || rule.outcome_classification().empty()) {
      add("outcome_classification", "is required");
    } else if (std::find(std::begin(kOutcomes), std::end(kOutcomes),
                         rule.outcome_classification()) == std::end(kOutcomes)) {
      add("outcome_classification",
          "must be one of meets_expectations, exceeds_expectations, requires_attention, "
          "not_applicable");
    }

    if (rule.has_set_metrics_name() &&
        CountChars(rule.set_metrics_name()) > kMaxSetMetricsNameChars) {
      add("set_metrics_name",
          absl::StrCat("must be at most ", kMaxSetMetricsNameChars, " characters"));
    }

    // Even equals "" is refused: an empty expected value is nearly always a rule left
    // unfinished, and a result that should be empty is better tested another way.
    const absl::string_view expected = absl::StripAsciiWhitespace(rule.as_metrics_expected_value());
    const bool has_expected = !expected.empty();
    if (!has_expected) add("as_metrics_expected_value", "is required");
    if (!condition.has_value()) continue;

    const bool equality = *condition == Condition::kEquals || *condition == Condition::kNotEquals;
    if (result_type == "boolean") {
      if (!equality) {
        add("condition", "must be equals or not_equals for a boolean result");
      } else if (has_expected && !ParseBool(expected).has_value()) {
        add("as_metrics_expected_value", "must be true or false for a boolean result");
      }
    } else if (result_type == "rating" || result_type == "numeric") {
      if (*condition == Condition::kContains) {
        add("condition", absl::StrCat("contains cannot be used with a ", result_type,
                                      " result; compare numbers instead"));
        continue;
      }
      if (!has_expected) continue;
      const std::optional<double> d = ParseNumber(expected);
      if (!d.has_value()) {
        add("as_metrics_expected_value",
            absl::StrCat("must be a number for a ", result_type, " result"));
      } else if (result_type == "rating" && (*d < 1 || *d > 5)) {
        add("as_metrics_expected_value", "must be a rating from 1 to 5");
      }
    } else if (result_type == "enum") {
      if (IsNumericComparison(*condition)) {
        add("condition", "must be equals, not_equals or contains for an enum result");
      } else if (equality && has_expected &&
                 std::find(folded_enum_values.begin(), folded_enum_values.end(), Fold(expected)) ==
                     folded_enum_values.end()) {
        add("as_metrics_expected_value",
            enum_values.empty() ? std::string("must be one of enum_values, which is empty")
                                : absl::StrCat("must be one of ", QuotedList(enum_values)));
      }
    }
  }
  return issues;
}

}  // namespace calleval::judges

#include "cmd/callevalctl/gate.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace calleval::ctl {
namespace {

// The scalar keys of each standard metric's `result` (docs/api.md §3.1). An assertion on
// another key of a standard metric is a usage error before any work; tests/cmd/gate_test checks
// every key here appears in a real analysis, so the table cannot drift from the analyser.
struct StandardFigures {
  absl::string_view key;
  std::vector<absl::string_view> result_keys;
};

const std::vector<StandardFigures>& StandardFigureTable() {
  static const auto* table = new std::vector<StandardFigures>{
      {"latency", {"average_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms",
                   "count"}},
      {"ai_interruptions", {"count"}},
      {"user_interruptions", {"count"}},
      {"stop_time_after_interruption", {"average_ms"}},
      {"silence_detection", {"count", "total_ms", "threshold_ms"}},
      {"words_per_minute", {"ai_wpm", "user_wpm", "ai_words", "ai_speaking_s", "user_words",
                            "user_speaking_s", "transcript"}},
      {"transcription_accuracy", {"accuracy", "wer", "substitutions", "deletions", "insertions",
                                  "reference_words"}},
      {"voice_tone_clarity", {"score", "snr_db", "clipping_ratio", "speech_level_dbfs"}},
      {"voice_change_detection", {"changed"}},
      {"talk_ratio", {"ai_ratio", "user_ratio", "silence_ratio"}},
      {"user_sentiment", {"value", "explanation"}},
      {"task_completion", {"value", "explanation"}},
  };
  return *table;
}

const StandardFigures* FindStandard(absl::string_view key) {
  for (const StandardFigures& s : StandardFigureTable()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

// The keys every metric has besides its result's.
constexpr absl::string_view kStatus = "status";
constexpr absl::string_view kScore = "score";
constexpr absl::string_view kValue = "value";
constexpr absl::string_view kDuration = "duration_seconds";

// "latency.p95_ms" -> {"latency", "p95_ms"}; "duration_seconds" -> {"duration_seconds", ""}.
std::pair<absl::string_view, absl::string_view> SplitFigure(absl::string_view figure) {
  const size_t dot = figure.find('.');
  if (dot == absl::string_view::npos) return {figure, ""};
  return {figure.substr(0, dot), figure.substr(dot + 1)};
}

std::optional<FigureValue> ScalarOf(const nlohmann::json& value) {
  if (value.is_null()) return FigureValue{};
  if (value.is_boolean()) return FigureValue{value.get<bool>()};
  if (value.is_number()) return FigureValue{value.get<double>()};
  if (value.is_string()) return FigureValue{value.get<std::string>()};
  return std::nullopt;  // arrays and objects are not figures
}

const nlohmann::json* Member(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

void SetScalar(const nlohmann::json& object, const char* name, const std::string& figure,
               Figures* figures) {
  if (const nlohmann::json* value = Member(object, name)) {
    if (auto scalar = ScalarOf(*value)) (*figures)[figure] = std::move(*scalar);
  }
}

std::string ComparisonText(Comparison comparison) {
  switch (comparison) {
    case Comparison::kLess: return "<";
    case Comparison::kLessEqual: return "<=";
    case Comparison::kGreater: return ">";
    case Comparison::kGreaterEqual: return ">=";
    case Comparison::kEqual: return "==";
    case Comparison::kNotEqual: return "!=";
  }
  return "?";
}

bool IsFigureChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

absl::Status Malformed(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed assertion '", text, "': ", why));
}

absl::StatusOr<FigureValue> ParseExpected(absl::string_view text, absl::string_view value) {
  if (value.empty()) return Malformed(text, "no value after the comparison");
  if (value == "true") return FigureValue{true};
  if (value == "false") return FigureValue{false};
  if (value == "null") return FigureValue{};
  if (value.front() == '"') {
    std::string out;
    for (size_t i = 1; i < value.size(); ++i) {
      const char c = value[i];
      if (c == '\\' && i + 1 < value.size()) {
        out.push_back(value[++i]);
      } else if (c == '"') {
        if (i + 1 != value.size()) return Malformed(text, "text after the closing quote");
        return FigureValue{std::move(out)};
      } else {
        out.push_back(c);
      }
    }
    return Malformed(text, "the quoted value is not closed");
  }
  double number = 0;
  if (absl::SimpleAtod(value, &number)) {
    if (!std::isfinite(number)) return Malformed(text, "the number must be finite");
    return FigureValue{number};
  }
  for (char c : value) {
    if (!IsFigureChar(c) && c != '-' && c != ':') {
      return Malformed(text, "a value that is not a number, true, false or null is a word of "
                             "letters, digits, _ . - : or a \"quoted\" string");
    }
  }
  return FigureValue{std::string(value)};
}

bool Compare(double actual, Comparison comparison, double expected) {
  switch (comparison) {
    case Comparison::kLess: return actual < expected;
    case Comparison::kLessEqual: return actual <= expected;
    case Comparison::kGreater: return actual > expected;
    case Comparison::kGreaterEqual: return actual >= expected;
    case Comparison::kEqual: return actual == expected;
    case Comparison::kNotEqual: return actual != expected;
  }
  return false;
}

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default:
        // XML 1.0 forbids the other control characters even as references.
        out.push_back(c < 0x20 ? '?' : static_cast<char>(c));
    }
  }
  return out;
}

std::string Seconds(double seconds) { return absl::StrFormat("%.3f", std::max(0.0, seconds)); }

std::string OutcomeName(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::Kind::kPassed: return "passed";
    case Outcome::Kind::kFailed: return "failed";
    case Outcome::Kind::kSkipped: return "skipped";
  }
  return "failed";
}

}  // namespace

std::string FigureText(const FigureValue& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "null"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(double d) const {
      // Integers print without a fraction; others with the digits the API gave.
      if (d == std::floor(d) && std::fabs(d) < 1e15) return absl::StrFormat("%.0f", d);
      return absl::StrFormat("%.10g", d);
    }
    std::string operator()(const std::string& s) const { return nlohmann::json(s).dump(); }
  };
  return std::visit(Visitor{}, value);
}

nlohmann::json FigureJson(const FigureValue& value) {
  struct Visitor {
    nlohmann::json operator()(std::monostate) const { return nullptr; }
    nlohmann::json operator()(bool b) const { return b; }
    nlohmann::json operator()(double d) const { return d; }
    nlohmann::json operator()(const std::string& s) const { return s; }
  };
  return std::visit(Visitor{}, value);
}

std::string MetricSlug(absl::string_view name) {
  std::string slug;
  bool pending_separator = false;
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u)) {
      if (pending_separator && !slug.empty()) slug.push_back('_');
      pending_separator = false;
      slug.push_back(absl::ascii_tolower(u));
    } else {
      pending_separator = true;
    }
  }
  return slug;
}

Figures FiguresOfCall(const nlohmann::json& call) {
  Figures figures;
  SetScalar(call, "duration_seconds", std::string(kDuration), &figures);
  SetScalar(call, "analysis_status", "call.analysis_status", &figures);
  SetScalar(call, "transcription_status", "call.transcription_status", &figures);
  if (const nlohmann::json* standard = Member(call, "standard_metrics");
      standard != nullptr && standard->is_array()) {
    for (const nlohmann::json& metric : *standard) {
      const nlohmann::json* key = Member(metric, "standard_metric_key");
      if (key == nullptr || !key->is_string()) continue;
      const std::string prefix = key->get<std::string>();
      if (const nlohmann::json* result = Member(metric, "result");
          result != nullptr && result->is_object()) {
        for (const auto& [name, value] : result->items()) {
          if (auto scalar = ScalarOf(value)) figures[absl::StrCat(prefix, ".", name)] = *scalar;
        }
      }
      // The element's own status and headline score win over result keys of the same name.
      SetScalar(metric, "status", absl::StrCat(prefix, ".", kStatus), &figures);
      const std::string score = absl::StrCat(prefix, ".", kScore);
      if (Member(metric, "score") != nullptr) {
        SetScalar(metric, "score", score, &figures);
      } else if (figures.count(score) == 0) {
        figures[score] = FigureValue{};
      }
    }
  }
  if (const nlohmann::json* custom = Member(call, "metric_results");
      custom != nullptr && custom->is_array()) {
    // Slugs two metrics share, or that name a standard metric, are not used: "metric_<id>" is.
    std::map<std::string, int> slug_uses;
    for (const nlohmann::json& metric : *custom) {
      if (const nlohmann::json* name = Member(metric, "name"); name && name->is_string()) {
        ++slug_uses[MetricSlug(name->get<std::string>())];
      }
    }
    for (const nlohmann::json& metric : *custom) {
      std::vector<std::string> prefixes;
      if (const nlohmann::json* id = Member(metric, "metric_id"); id && id->is_number_integer()) {
        prefixes.push_back(absl::StrCat("metric_", id->get<int64_t>()));
      }
      if (const nlohmann::json* name = Member(metric, "name"); name && name->is_string()) {
        std::string slug = MetricSlug(name->get<std::string>());
        if (!slug.empty() && slug_uses[slug] == 1 && FindStandard(slug) == nullptr &&
            slug != "call" && slug != "run" && slug != kDuration) {
          prefixes.push_back(std::move(slug));
        }
      }
      for (const std::string& prefix : prefixes) {
        SetScalar(metric, "value", absl::StrCat(prefix, ".", kValue), &figures);
        SetScalar(metric, "status", absl::StrCat(prefix, ".", kStatus), &figures);
      }
    }
  }
  return figures;
}

void AddRunFigures(const nlohmann::json& run, Figures* figures) {
  SetScalar(run, "status", "run.status", figures);
  SetScalar(run, "end_reason", "run.end_reason", figures);
  // A run without an outcome yet has passed null; absent counts the same.
  (*figures)["run.passed"] = FigureValue{};
  SetScalar(run, "passed", "run.passed", figures);
}

absl::StatusOr<Assertion> ParseAssertion(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return absl::InvalidArgumentError("an empty assertion");
  const size_t op = text.find_first_of("<>=!");
  if (op == absl::string_view::npos) {
    return Malformed(text, "no comparison (FIGURE OP VALUE, OP one of <= >= < > == !=)");
  }
  Assertion assertion;
  assertion.text = std::string(text);
  const absl::string_view figure = absl::StripAsciiWhitespace(text.substr(0, op));
  if (figure.empty()) return Malformed(text, "no figure before the comparison");
  for (char c : figure) {
    if (!IsFigureChar(c)) {
      return Malformed(text, absl::StrCat("a figure is letters, digits, _ and . (",
                                          "like latency.p95_ms), not '", figure, "'"));
    }
  }
  if (figure.front() == '.' || figure.back() == '.' || absl::StrContains(figure, "..")) {
    return Malformed(text, absl::StrCat("'", figure, "' is not METRIC.KEY"));
  }
  assertion.figure = std::string(figure);
  absl::string_view rest = text.substr(op);
  struct Operator {
    absl::string_view text;
    Comparison comparison;
  };
  static constexpr Operator kOperators[] = {
      {"<=", Comparison::kLessEqual}, {">=", Comparison::kGreaterEqual},
      {"==", Comparison::kEqual},     {"!=", Comparison::kNotEqual},
      {"<", Comparison::kLess},       {">", Comparison::kGreater},
  };
  const Operator* matched = nullptr;
  for (const Operator& o : kOperators) {
    if (absl::StartsWith(rest, o.text)) {
      matched = &o;
      break;
    }
  }
  if (matched == nullptr) {
    return Malformed(text, rest.front() == '=' ? "compare with ==, not ="
                                               : "OP is one of <= >= < > == !=");
  }
  assertion.comparison = matched->comparison;
  const absl::string_view value = absl::StripAsciiWhitespace(rest.substr(matched->text.size()));
  if (!value.empty() && absl::string_view("<>=!").find(value.front()) != absl::string_view::npos) {
    return Malformed(text, "OP is one of <= >= < > == !=");
  }
  auto expected = ParseExpected(text, value);
  if (!expected.ok()) return expected.status();
  assertion.expected = std::move(*expected);
  const bool ordering = assertion.comparison != Comparison::kEqual &&
                        assertion.comparison != Comparison::kNotEqual;
  if (ordering && !std::holds_alternative<double>(assertion.expected)) {
    return Malformed(text, absl::StrCat(matched->text, " compares numbers"));
  }
  return assertion;
}

bool IsStandardFigure(absl::string_view figure) {
  const auto [metric, key] = SplitFigure(figure);
  return metric == kDuration || FindStandard(metric) != nullptr;
}

absl::Status CheckStandardFigure(const Assertion& assertion) {
  const auto [metric, key] = SplitFigure(assertion.figure);
  if (metric == kDuration) {
    if (key.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("duration_seconds has no figure '", key, "'"));
  }
  const StandardFigures* standard = FindStandard(metric);
  if (standard == nullptr) {
    std::vector<absl::string_view> names;
    for (const StandardFigures& s : StandardFigureTable()) names.push_back(s.key);
    names.push_back(kDuration);
    return absl::InvalidArgumentError(absl::StrCat("unknown metric '", metric, "' in '",
                                                   assertion.text, "' (one of ",
                                                   absl::StrJoin(names, ", "), ")"));
  }
  std::vector<absl::string_view> keys = standard->result_keys;
  for (absl::string_view extra : {kStatus, kScore}) {
    if (std::find(keys.begin(), keys.end(), extra) == keys.end()) keys.push_back(extra);
  }
  if (std::find(keys.begin(), keys.end(), key) != keys.end()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      metric, key.empty() ? " needs a figure" : absl::StrCat(" has no figure '", key, "'"),
      " in '", assertion.text, "' (one of ", absl::StrJoin(keys, ", "), ")"));
}

Outcome Evaluate(const Assertion& assertion, const Figures& figures) {
  Outcome outcome;
  const auto [metric, key] = SplitFigure(assertion.figure);
  // A metric that did not apply to this call, or was not run, has nothing to judge.
  if (!key.empty() && key != kStatus) {
    auto status = figures.find(absl::StrCat(metric, ".", kStatus));
    if (status != figures.end()) {
      if (const auto* s = std::get_if<std::string>(&status->second);
          s != nullptr && (*s == "not_applicable" || *s == "skipped")) {
        outcome.kind = Outcome::Kind::kSkipped;
        outcome.message = absl::StrCat(metric, " is ", *s, " for this call");
        return outcome;
      }
    }
  }
  auto found = figures.find(assertion.figure);
  if (found != figures.end()) outcome.actual = found->second;
  const FigureValue& actual = outcome.actual;
  const std::string wanted =
      absl::StrCat("wanted ", ComparisonText(assertion.comparison), " ",
                   FigureText(assertion.expected));
  bool holds = false;
  if (const double* expected = std::get_if<double>(&assertion.expected)) {
    const double* number = std::get_if<double>(&actual);
    holds = number != nullptr && Compare(*number, assertion.comparison, *expected);
  } else if (assertion.comparison == Comparison::kEqual) {
    holds = actual == assertion.expected;
  } else {  // != with a boolean, string or null
    holds = found != figures.end() && actual != assertion.expected;
    if (std::holds_alternative<std::monostate>(assertion.expected)) {
      holds = !std::holds_alternative<std::monostate>(actual);
    }
  }
  if (holds) {
    outcome.kind = Outcome::Kind::kPassed;
    outcome.message = absl::StrCat(assertion.figure, " is ", FigureText(actual));
    return outcome;
  }
  outcome.kind = Outcome::Kind::kFailed;
  if (found == figures.end()) {
    auto status = figures.find(absl::StrCat(metric, ".", kStatus));
    outcome.message =
        status == figures.end() && !key.empty()
            ? absl::StrCat("the call has no metric ", metric, ", ", wanted)
            : absl::StrCat("the call has no figure ", assertion.figure, ", ", wanted);
    if (status != figures.end()) {
      absl::StrAppend(&outcome.message, " (", metric, " is ", FigureText(status->second), ")");
    }
  } else {
    outcome.message = absl::StrCat(assertion.figure, " is ", FigureText(actual), ", ", wanted);
  }
  return outcome;
}

void GateReport::EvaluateAll() {
  for (CaseReport& c : cases) {
    c.outcomes.clear();
    if (c.error.has_value()) continue;
    for (const Assertion& assertion : assertions) {
      c.outcomes.push_back(Evaluate(assertion, c.figures));
    }
  }
}

GateTotals GateReport::Totals() const {
  GateTotals totals;
  totals.cases = cases.size();
  for (const CaseReport& c : cases) {
    if (c.error.has_value()) {
      ++totals.errors;
      continue;
    }
    for (const Outcome& o : c.outcomes) {
      ++totals.assertions;
      switch (o.kind) {
        case Outcome::Kind::kPassed: ++totals.passed; break;
        case Outcome::Kind::kFailed: ++totals.failed; break;
        case Outcome::Kind::kSkipped: ++totals.skipped; break;
      }
    }
  }
  return totals;
}

int GateReport::ExitCode() const {
  const GateTotals totals = Totals();
  return totals.errors == 0 && totals.failed == 0 ? 0 : 1;
}

std::string JUnitXml(const GateReport& report, absl::Time timestamp) {
  // Counted per <testcase>: a case with an error is one errored testcase per assertion (or one
  // when there are none), matching what the elements below say.
  size_t tests = 0, failures = 0, errors = 0, skipped = 0;
  double seconds = 0;
  std::string body;
  const size_t per_case = std::max<size_t>(1, report.assertions.size());
  for (const CaseReport& c : report.cases) {
    seconds += c.seconds;
    // The case's time is shared by its assertions (they were judged on one analysis).
    const std::string time = Seconds(c.seconds / static_cast<double>(per_case));
    const std::string classname = XmlEscape(c.name);
    for (size_t i = 0; i < per_case; ++i) {
      const bool has_assertion = i < report.assertions.size();
      const std::string name =
          has_assertion ? XmlEscape(report.assertions[i].text) : std::string("completed");
      ++tests;
      absl::StrAppend(&body, "    <testcase classname=\"", classname, "\" name=\"", name,
                      "\" time=\"", time, "\"");
      if (c.error.has_value()) {
        ++errors;
        absl::StrAppend(&body, ">\n      <error type=\"error\" message=\"", XmlEscape(*c.error),
                        "\">", XmlEscape(*c.error), "</error>\n    </testcase>\n");
        continue;
      }
      if (!has_assertion || i >= c.outcomes.size() ||
          c.outcomes[i].kind == Outcome::Kind::kPassed) {
        absl::StrAppend(&body, "/>\n");
        continue;
      }
      const Outcome& o = c.outcomes[i];
      const std::string message = XmlEscape(o.message);
      if (o.kind == Outcome::Kind::kSkipped) {
        ++skipped;
        absl::StrAppend(&body, ">\n      <skipped message=\"", message,
                        "\"/>\n    </testcase>\n");
      } else {
        ++failures;
        absl::StrAppend(&body, ">\n      <failure type=\"assertion\" message=\"", message, "\">",
                        message, "</failure>\n    </testcase>\n");
      }
    }
  }
  const std::string suite = XmlEscape(report.suite);
  const std::string counts =
      absl::StrCat("tests=\"", tests, "\" failures=\"", failures, "\" errors=\"", errors, "\"");
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"", suite, "\" ", counts,
      " time=\"", Seconds(seconds), "\">\n  <testsuite name=\"", suite, "\" ", counts,
      " skipped=\"", skipped, "\" time=\"", Seconds(seconds), "\" timestamp=\"",
      // Without a zone: the form the Ant schema most CI servers follow wants (UTC).
      absl::FormatTime("%Y-%m-%dT%H:%M:%S", timestamp, absl::UTCTimeZone()), "\">\n", body,
      "  </testsuite>\n</testsuites>\n");
}

nlohmann::json SummaryJson(const GateReport& report) {
  const GateTotals totals = report.Totals();
  nlohmann::json assertions = nlohmann::json::array();
  for (const Assertion& a : report.assertions) assertions.push_back(a.text);
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseReport& c : report.cases) {
    nlohmann::json figures = nlohmann::json::object();
    for (const auto& [name, value] : c.figures) figures[name] = FigureJson(value);
    nlohmann::json outcomes = nlohmann::json::array();
    for (size_t i = 0; i < c.outcomes.size() && i < report.assertions.size(); ++i) {
      outcomes.push_back({{"assertion", report.assertions[i].text},
                          {"outcome", OutcomeName(c.outcomes[i].kind)},
                          {"actual", FigureJson(c.outcomes[i].actual)},
                          {"message", c.outcomes[i].message}});
    }
    cases.push_back({{"name", c.name},
                     {"seconds", std::round(c.seconds * 1000) / 1000},
                     {"error", c.error.has_value() ? nlohmann::json(*c.error) : nullptr},
                     {"figures", std::move(figures)},
                     {"outcomes", std::move(outcomes)}});
  }
  return {{"suite", report.suite},
          {"exit_code", report.ExitCode()},
          {"totals",
           {{"cases", totals.cases},
            {"errors", totals.errors},
            {"assertions", totals.assertions},
            {"passed", totals.passed},
            {"failed", totals.failed},
            {"skipped", totals.skipped}}},
          {"assertions", std::move(assertions)},
          {"cases", std::move(cases)}};
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      return absl::UnavailableError(absl::StrCat("cannot write ", path));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

Progress::Progress(std::ostream* out, size_t total, bool terminal)
    : out_(out), total_(total), terminal_(terminal) {
  std::lock_guard<std::mutex> lock(mu_);
  if (terminal_) Draw();
}

void Progress::Done(absl::string_view name, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  if (!ok) ++failed_;
  if (terminal_) {
    Draw();
  } else {
    *out_ << done_ << "/" << total_ << " " << (ok ? "ok" : "FAILED") << " " << name << "\n";
    out_->flush();
  }
}

void Progress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (terminal_) {
    *out_ << "\n";
    out_->flush();
  }
}

void Progress::Draw() {
  constexpr size_t kWidth = 30;
  const size_t filled = total_ == 0 ? kWidth : done_ * kWidth / total_;
  std::string bar(filled, '=');
  if (filled < kWidth) {
    bar.push_back('>');
    bar.append(kWidth - filled - 1, ' ');
  }
  std::string line = absl::StrCat("\r[", bar, "] ", done_, "/", total_);
  if (failed_ > 0) absl::StrAppend(&line, "  ", failed_, " failed");
  if (done_ > 0 && done_ < total_) {
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
    const int64_t left = static_cast<int64_t>(elapsed / done_ * (total_ - done_) + 0.5);
    absl::StrAppend(&line, absl::StrFormat("  %d:%02d left", left / 60, left % 60));
  }
  // Clears what a longer previous line left at the end.
  absl::StrAppend(&line, "\033[K");
  *out_ << line;
  out_->flush();
}

}  // namespace calleval::ctl

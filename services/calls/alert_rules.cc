#include "services/calls/alert_rules.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/crypto.h"
#include "common/errors.h"

namespace calleval::calls {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view issue) {
  return ValidationError("validation_failed", absl::StrCat(field, " ", issue),
                         {{std::string(field), std::string(issue)}});
}

std::string FormatValue(const std::optional<double>& value) {
  if (!value.has_value()) return "no value";
  return absl::StrFormat("%.4g", *value);
}

// Slack reads `&`, `<` and `>` as markup in text and mrkdwn (`<!channel>` notifies everyone):
// a rule's name is the workspace's text, so it goes in escaped.
std::string SlackEscape(absl::string_view text) {
  std::string out;
  for (char ch : text) {
    if (ch == '&') {
      out += "&amp;";
    } else if (ch == '<') {
      out += "&lt;";
    } else if (ch == '>') {
      out += "&gt;";
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<AlertFigure> ParseAlertFigure(absl::string_view text) {
  AlertFigure figure;
  if (text == "latency.p50_ms") {
    figure.kind = AlertFigure::Kind::kLatencyP50;
  } else if (text == "latency.p95_ms") {
    figure.kind = AlertFigure::Kind::kLatencyP95;
  } else if (text == "latency.mean_ms") {
    figure.kind = AlertFigure::Kind::kLatencyMean;
  } else if (text == "pass_rate") {
    figure.kind = AlertFigure::Kind::kPassRate;
  } else if (text == "calls.failed_rate") {
    figure.kind = AlertFigure::Kind::kCallsFailedRate;
  } else {
    // metric.<metric_id>.<outcome>_rate; an outcome may hold underscores (meets_expectations).
    absl::string_view rest = text;
    constexpr absl::string_view kMust =
        "must be latency.p50_ms, latency.p95_ms, latency.mean_ms, pass_rate, calls.failed_rate "
        "or metric.<metric_id>.<outcome>_rate";
    if (!absl::ConsumePrefix(&rest, "metric.") || !absl::ConsumeSuffix(&rest, "_rate")) {
      return Invalid("figure", kMust);
    }
    const size_t dot = rest.find('.');
    if (dot == absl::string_view::npos) return Invalid("figure", kMust);
    const absl::string_view id = rest.substr(0, dot);
    const absl::string_view outcome = rest.substr(dot + 1);
    if (id.empty() || !absl::SimpleAtoi(id, &figure.metric_id) || figure.metric_id <= 0 ||
        !absl::ascii_isdigit(id[0])) {
      return Invalid("figure",
                     "names a metric by its numeric id: metric.<metric_id>.<outcome>_rate");
    }
    if (outcome.empty() || outcome.size() > 100) return Invalid("figure", kMust);
    for (char ch : outcome) {
      if (!absl::ascii_isalnum(ch) && ch != '_' && ch != '-') {
        return Invalid("figure", "the outcome holds letters, digits, '_' and '-' only");
      }
    }
    figure.kind = AlertFigure::Kind::kMetricOutcome;
    figure.outcome = std::string(outcome);
  }
  return figure;
}

absl::Status CheckAlertOp(absl::string_view op) {
  if (op == ">" || op == ">=" || op == "<" || op == "<=") return absl::OkStatus();
  return Invalid("op", "must be >, >=, < or <=");
}

bool AlertConditionHolds(absl::string_view op, double value, double threshold) {
  if (op == ">") return value > threshold;
  if (op == ">=") return value >= threshold;
  if (op == "<") return value < threshold;
  if (op == "<=") return value <= threshold;
  return false;
}

absl::StatusOr<AlertWindow> ParseAlertWindow(absl::string_view text) {
  constexpr absl::string_view kMust =
      "must be a duration <n>m, <n>h or <n>d (5m to 30d) or "
      "a count \"<n> calls\" (10 to 10000)";
  AlertWindow window;
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (absl::ConsumeSuffix(&rest, " calls")) {
    int64_t n = 0;
    if (rest.empty() || !absl::ascii_isdigit(rest[0]) || !absl::SimpleAtoi(rest, &n) ||
        n < kMinWindowCount || n > kMaxWindowCount) {
      return Invalid("window", kMust);
    }
    window.count = n;
    return window;
  }
  if (rest.size() < 2) return Invalid("window", kMust);
  int64_t unit = 0;
  switch (rest.back()) {
    case 'm':
      unit = 60;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'd':
      unit = 86400;
      break;
    default:
      return Invalid("window", kMust);
  }
  rest.remove_suffix(1);
  int64_t n = 0;
  if (!absl::ascii_isdigit(rest[0]) || !absl::SimpleAtoi(rest, &n) || n <= 0 ||
      n > kMaxWindowSeconds / unit || n * unit < kMinWindowSeconds) {
    return Invalid("window", kMust);
  }
  window.seconds = n * unit;
  return window;
}

AlertStep StepAlert(const AlertState& current, std::optional<bool> holds, int64_t newest_sample,
                    int64_t now, const AlertDamping& damping) {
  AlertStep step;
  step.next = current;
  // Too few samples: no evidence either way. A firing rule stays firing.
  if (!holds.has_value()) return step;
  AlertState& next = step.next;
  const bool firing = current.state == "firing";
  // The condition points away from the current state: a streak towards the change.
  const bool towards_change = firing ? !*holds : *holds;
  if (!towards_change) {
    next.state = firing ? "firing" : "ok";
    next.streak = 0;
    next.streak_time = 0;
    next.streak_mark = 0;
    return step;
  }
  const bool counted = current.streak == 0 || newest_sample != current.streak_mark ||
                       now - current.streak_time >= absl::ToInt64Seconds(damping.min_spacing);
  if (counted) {
    next.streak = current.streak + 1;
    next.streak_time = now;
    next.streak_mark = newest_sample;
  }
  if (firing) {
    if (next.streak >= damping.resolve_after) {
      next = AlertState();
      next.state = "ok";
      next.resolved_time = now;
      step.event = "resolved";
    }
    return step;
  }
  const bool recently_resolved =
      current.resolved_time > 0 &&
      now - current.resolved_time < absl::ToInt64Seconds(damping.quiet_period);
  const int needed = recently_resolved ? damping.refire_after : 1;
  if (next.streak >= needed) {
    const int64_t resolved_time = current.resolved_time;
    next = AlertState();
    next.state = "firing";
    next.resolved_time = resolved_time;
    step.event = "firing";
  } else {
    next.state = "ok";
  }
  return step;
}

std::string AlertSignature(absl::string_view secret, int64_t t, absl::string_view body) {
  return absl::StrCat("t=", t, ",v1=", HexEncode(HmacSha256(secret, absl::StrCat(t, ".", body))));
}

std::string AlertBody(absl::string_view format, const AlertNotice& notice) {
  const nlohmann::json value =
      notice.value.has_value() ? nlohmann::json(*notice.value) : nlohmann::json(nullptr);
  if (format != "slack") {
    nlohmann::json body = {{"type", absl::StrCat("alert.", notice.event)},
                           {"rule", notice.rule},
                           {"value", value},
                           {"threshold", notice.threshold},
                           {"samples", notice.samples},
                           {"window", notice.window},
                           {"at", notice.at}};
    return body.dump();
  }
  // A Slack incoming webhook's message: `text` is the notification's fallback, `blocks` what
  // Slack shows (a header and a section of fields, mrkdwn).
  const std::string name = notice.rule.value("name", "");
  const std::string figure = notice.rule.value("figure", "");
  const std::string op = notice.rule.value("op", "");
  const bool firing = notice.event == "firing";
  const std::string title = absl::StrCat(firing ? "Alert firing: " : "Alert resolved: ", name);
  const std::string text =
      absl::StrCat(SlackEscape(title), " (", figure, " ", SlackEscape(op), " ",
                   FormatValue(notice.threshold), " over ", notice.window, "; now ",
                   FormatValue(notice.value), " from ", notice.samples, " samples)");
  nlohmann::json fields = nlohmann::json::array();
  fields.push_back({{"type", "mrkdwn"},
                    {"text", absl::StrCat("*Condition*\n`", figure, " ", SlackEscape(op), " ",
                                          FormatValue(notice.threshold), "`")}});
  fields.push_back(
      {{"type", "mrkdwn"}, {"text", absl::StrCat("*Value*\n", FormatValue(notice.value))}});
  fields.push_back({{"type", "mrkdwn"}, {"text", absl::StrCat("*Window*\n", notice.window)}});
  fields.push_back({{"type", "mrkdwn"}, {"text", absl::StrCat("*Samples*\n", notice.samples)}});
  nlohmann::json blocks = nlohmann::json::array();
  blocks.push_back(
      {{"type", "header"},
       {"text", {{"type", "plain_text"}, {"text", title.substr(0, 150)}, {"emoji", true}}}});
  blocks.push_back({{"type", "section"}, {"fields", fields}});
  blocks.push_back(
      {{"type", "context"},
       {"elements",
        nlohmann::json::array(
            {{{"type", "mrkdwn"},
              {"text", absl::StrCat("calleval alert rule ", notice.rule.value("id", int64_t{0}),
                                    " at ", notice.at)}}})}});
  nlohmann::json body = {{"text", text}, {"blocks", blocks}};
  return body.dump();
}

}  // namespace calleval::calls

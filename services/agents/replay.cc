#include "services/agents/replay.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace calleval::agents {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

bool IsEmailLocal(char c) {
  return IsAlnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
}
bool IsEmailDomain(char c) { return IsAlnum(c) || c == '.' || c == '-'; }

// Replaces each address local@domain.tld with [email].
std::string MaskEmails(absl::string_view text) {
  std::string out;
  size_t copied = 0;
  for (size_t at = text.find('@'); at != absl::string_view::npos; at = text.find('@', at + 1)) {
    if (at < copied) continue;
    size_t begin = at;
    while (begin > copied && IsEmailLocal(text[begin - 1])) --begin;
    size_t end = at + 1;
    while (end < text.size() && IsEmailDomain(text[end])) ++end;
    while (end > at + 1 && (text[end - 1] == '.' || text[end - 1] == '-')) --end;
    const absl::string_view domain = text.substr(at + 1, end - at - 1);
    const size_t dot = domain.find('.');
    if (begin == at || dot == absl::string_view::npos || dot == 0) continue;
    absl::StrAppend(&out, text.substr(copied, begin - copied), "[email]");
    copied = end;
    at = end - 1;
  }
  absl::StrAppend(&out, text.substr(copied));
  return out;
}

// Replaces runs of digits that read as a card number (13 to 19 digits, Luhn-valid, spaces or
// dashes between groups) or a phone number (7 to 15 digits) as asked.
std::string MaskNumbers(absl::string_view text, bool cards, bool phones) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const bool starts =
        IsDigit(c) || ((c == '+' || c == '(') && i + 1 < text.size() && IsDigit(text[i + 1]));
    // A run glued to a word ("A12345678", "v2") is an identifier, not a number to mask.
    if (!starts || (i > 0 && IsAlnum(text[i - 1]))) {
      out.push_back(c);
      ++i;
      continue;
    }
    size_t end = i;
    size_t last_digit = i;
    std::string digits;
    bool phone_marks = c == '+' || c == '(';
    while (end < text.size()) {
      const char d = text[end];
      if (IsDigit(d)) {
        digits.push_back(d);
        last_digit = end;
      } else if (d == ' ' || d == '-' || d == '.' || d == '(' || d == ')' || d == '+') {
        // A separator belongs to the run only when a digit follows it closely.
        if (end + 1 >= text.size() ||
            !(IsDigit(text[end + 1]) || text[end + 1] == '(' || text[end + 1] == ' ')) {
          break;
        }
        if (d == '(' || d == ')' || d == '+' || d == '.') phone_marks = true;
      } else {
        break;
      }
      ++end;
    }
    const size_t run_end = last_digit + 1;
    const bool glued = run_end < text.size() && IsAlnum(text[run_end]);
    const size_t n = digits.size();
    absl::string_view marker;
    if (!glued && cards && !phone_marks && n >= 13 && n <= 19 && LuhnValid(digits)) {
      marker = "[card]";
    } else if (!glued && phones && n >= 7 && n <= 15) {
      marker = "[phone]";
    }
    if (marker.empty()) {
      absl::StrAppend(&out, text.substr(i, run_end - i));
    } else {
      absl::StrAppend(&out, marker);
    }
    i = run_end;
  }
  return out;
}

}  // namespace

MaskOptions MaskOptionsFrom(const google::protobuf::Struct& fields) {
  MaskOptions options;
  auto flag = [&](const char* key, bool& target) {
    auto it = fields.fields().find(key);
    if (it != fields.fields().end() && it->second.has_bool_value()) {
      target = it->second.bool_value();
    }
  };
  flag("mask_phone_numbers", options.phone_numbers);
  flag("mask_emails", options.emails);
  flag("mask_card_numbers", options.card_numbers);
  auto keys = fields.fields().find("mask_metadata_keys");
  if (keys != fields.fields().end() && keys->second.has_list_value()) {
    for (const google::protobuf::Value& key : keys->second.list_value().values()) {
      if (key.has_string_value() && !key.string_value().empty()) {
        options.metadata_keys.push_back(key.string_value());
      }
    }
  }
  return options;
}

bool LuhnValid(absl::string_view digits) {
  if (digits.empty()) return false;
  int sum = 0;
  bool twice = false;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (!IsDigit(*it)) return false;
    int d = *it - '0';
    if (twice) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    twice = !twice;
  }
  return sum % 10 == 0;
}

std::string MaskText(absl::string_view text, const MaskOptions& options,
                     const google::protobuf::Struct& metadata) {
  std::string out(text);
  // Metadata values first: a listed value may itself hold an address or a number.
  for (const std::string& key : options.metadata_keys) {
    auto it = metadata.fields().find(key);
    if (it == metadata.fields().end()) continue;
    std::string value;
    if (it->second.has_string_value()) {
      value = std::string(absl::StripAsciiWhitespace(it->second.string_value()));
    } else if (it->second.has_number_value()) {
      value = absl::StrCat(it->second.number_value());
    }
    // Very short values ("a", "1") would mask ordinary words and numbers.
    if (value.size() < 4) continue;
    absl::StrReplaceAll({{value, absl::StrCat("[", key, "]")}}, &out);
  }
  if (options.emails) out = MaskEmails(out);
  if (options.card_numbers || options.phone_numbers) {
    out = MaskNumbers(out, options.card_numbers, options.phone_numbers);
  }
  return out;
}

std::vector<std::string> CallerLines(const v1::Call& call, const MaskOptions& options) {
  std::vector<std::string> lines;
  for (const v1::Turn& turn : call.transcript()) {
    if (turn.role() != "User") continue;
    std::string line =
        std::string(absl::StripAsciiWhitespace(MaskText(turn.content(), options, call.metadata())));
    if (!line.empty()) lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<int64_t> FailingMetricIds(const v1::Call& call) {
  std::vector<int64_t> ids;
  std::set<int64_t> seen;
  for (const v1::MetricResult& result : call.metric_results()) {
    if (result.status() != "completed" || !result.has_structured_output()) continue;
    const std::string& outcome = result.structured_output().outcome_classification();
    if (outcome.empty() || outcome == "meets_expectations" || outcome == "exceeds_expectations") {
      continue;
    }
    if (seen.insert(result.metric_id()).second) ids.push_back(result.metric_id());
  }
  return ids;
}

absl::StatusOr<WrittenPersona> WritePersona(LlmClient& client,
                                            const std::vector<std::string>& caller_lines) {
  std::string lines;
  for (size_t i = 0; i < caller_lines.size(); ++i) {
    absl::StrAppend(&lines, i + 1, ". ", caller_lines[i], "\n");
  }
  ChatRequest request;
  request.messages = {
      {"system",
       "You turn a real caller's side of a phone or chat conversation into a simulated caller "
       "for testing the agent again. Answer with a single JSON object and nothing else: "
       "{\"persona\": \"<who the caller is and how they speak, in the second person>\", "
       "\"goal\": \"<what the caller wants to get done, one or two sentences>\"}. Keep every "
       "masked marker such as [phone] or [email] as it is; never invent personal data."},
      {"user", absl::StrCat("The caller's lines, in order:\n", lines)}};
  request.temperature = 0.2;
  ASSIGN_OR_RETURN(ChatResponse response, client.Complete(request));
  nlohmann::json answer = nlohmann::json::parse(response.content, nullptr, false);
  if (!answer.is_object()) {
    const size_t open = response.content.find('{');
    const size_t close = response.content.rfind('}');
    if (open != std::string::npos && close != std::string::npos && close > open) {
      answer =
          nlohmann::json::parse(response.content.substr(open, close - open + 1), nullptr, false);
    }
  }
  WrittenPersona out;
  if (answer.is_object()) {
    if (answer.contains("persona") && answer["persona"].is_string()) {
      out.persona = std::string(absl::StripAsciiWhitespace(answer["persona"].get<std::string>()));
    }
    if (answer.contains("goal") && answer["goal"].is_string()) {
      out.goal = std::string(absl::StripAsciiWhitespace(answer["goal"].get<std::string>()));
    }
  }
  if (out.persona.empty() || out.goal.empty()) {
    return MakeError(absl::StatusCode::kUnavailable, "llm_bad_response",
                     "the LLM provider's persona could not be read: it needs a persona and a goal");
  }
  return out;
}

}  // namespace calleval::agents

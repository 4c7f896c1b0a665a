#include "services/judges/llm_judge.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/errors.h"
#include "services/judges/code_context.h"
#include "services/judges/metric_values.h"

namespace calleval::judges {
namespace {

constexpr absl::string_view kSystemPrompt =
    "You are an impartial evaluator of conversations between an AI agent (\"AI Assistant\") and a "
    "caller (\"User\"); lines marked Function Call and Function Call Result are the agent's tool "
    "use. You judge one metric of one conversation, using only what the transcript shows. Answer "
    "with a single JSON object and nothing else: {\"result\": <value>, \"explanation\": \"<one "
    "or two sentences that cite the turns your judgement rests on>\"}.";

constexpr absl::string_view kBatchSystemPrompt =
    "You are an impartial evaluator of conversations between an AI agent (\"AI Assistant\") and a "
    "caller (\"User\"); lines marked Function Call and Function Call Result are the agent's tool "
    "use. You judge several metrics of one conversation, each on its own, using only what the "
    "transcript shows. Answer with a single JSON object and nothing else: {\"results\": "
    "{\"<metric key>\": {\"result\": <value>, \"explanation\": \"<one or two sentences that "
    "cite the turns your judgement rests on>\"}, ...}} with one entry for every metric key.";

// Samples of more than one answer need some spread; a single answer should be the model's most
// likely one.
constexpr double kSampledTemperature = 0.7;

std::string ResultSpec(const LlmQuestion& q) {
  if (q.result_type == "boolean") return "true or false (a JSON boolean)";
  if (q.result_type == "rating") {
    return "an integer from 1 to 5 (1 = very poor, 3 = acceptable, 5 = excellent)";
  }
  if (q.result_type == "enum") {
    std::vector<std::string> quoted;
    for (const std::string& v : q.enum_values) quoted.push_back(absl::StrCat("\"", v, "\""));
    return absl::StrCat("exactly one of the strings ", absl::StrJoin(quoted, ", "));
  }
  return "a number (a JSON number)";
}

std::string Compact(const google::protobuf::Struct& s) { return ToJson(s).dump(); }

std::string TurnLine(size_t index, const v1::Turn& turn) {
  std::string line = absl::StrCat("[", index, "] ", turn.role(), ": ");
  const auto& fields = turn.data().fields();
  auto text = [&](const char* key) -> std::string {
    auto it = fields.find(key);
    if (it == fields.end()) return "";
    return it->second.has_string_value() ? it->second.string_value() : ToJson(it->second).dump();
  };
  if (turn.role() == "Function Call" && turn.has_data()) {
    absl::StrAppend(&line, text("name"), "(", text("arguments"), ")");
  } else if (turn.role() == "Function Call Result" && turn.has_data()) {
    const std::string name = text("name");
    const std::string result = text("result");
    absl::StrAppend(&line, name.empty() ? "" : absl::StrCat("(", name, ") "),
                    result.empty() ? Compact(turn.data()) : result);
  }
  if (turn.has_content() && !turn.content().empty()) {
    if (line.back() != ' ') line.push_back(' ');
    line += turn.content();
  }
  return line;
}

bool ParseBool(absl::string_view text, bool* out) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "true" || t == "yes" || t == "pass") {
    *out = true;
    return true;
  }
  if (t == "false" || t == "no" || t == "fail") {
    *out = false;
    return true;
  }
  return false;
}

// The JSON object in a model's answer: the whole text, or a ```json fence, or the outermost
// braces of the text.
nlohmann::json ExtractObject(absl::string_view content) {
  nlohmann::json parsed = nlohmann::json::parse(content.begin(), content.end(), nullptr, false);
  if (parsed.is_object()) return parsed;
  const size_t open = content.find('{');
  const size_t close = content.rfind('}');
  if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
    return nlohmann::json();
  }
  absl::string_view inner = content.substr(open, close - open + 1);
  parsed = nlohmann::json::parse(inner.begin(), inner.end(), nullptr, false);
  return parsed.is_object() ? parsed : nlohmann::json();
}

// Majority for booleans and enums, mean for ratings and numbers (see LlmJudgement::agreement).
LlmJudgement Aggregate(const LlmQuestion& q, const std::vector<ParsedAnswer>& answers) {
  LlmJudgement out;
  out.ok = true;
  if (answers.size() == 1) {
    out.value = answers[0].value;
    out.explanation = answers[0].explanation;
    return out;
  }
  const double n = static_cast<double>(answers.size());
  if (q.result_type == "boolean" || q.result_type == "enum") {
    // Ties go to the answer seen first.
    std::vector<std::pair<std::string, int>> counts;
    for (const ParsedAnswer& a : answers) {
      const std::string key = MetricResultText(a.value);
      auto it = std::find_if(counts.begin(), counts.end(),
                             [&](const auto& c) { return c.first == key; });
      if (it == counts.end()) {
        counts.push_back({key, 1});
      } else {
        ++it->second;
      }
    }
    auto best = std::max_element(counts.begin(), counts.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
    for (const ParsedAnswer& a : answers) {
      if (MetricResultText(a.value) == best->first) {
        out.value = a.value;
        out.explanation = a.explanation;
        break;
      }
    }
    out.agreement = best->second / n;
    return out;
  }
  double sum = 0;
  for (const ParsedAnswer& a : answers) sum += a.value.number_value();
  const double mean = sum / n;
  int agreeing = 0;
  const ParsedAnswer* closest = &answers[0];
  for (const ParsedAnswer& a : answers) {
    const double v = a.value.number_value();
    const bool agrees = q.result_type == "rating"
                            ? std::lround(v) == std::lround(mean)
                            : std::fabs(v - mean) <= 0.1 * std::fabs(mean);
    agreeing += agrees ? 1 : 0;
    if (std::fabs(v - mean) < std::fabs(closest->value.number_value() - mean)) closest = &a;
  }
  out.value.set_number_value(mean);
  out.explanation = closest->explanation;
  out.agreement = agreeing / n;
  return out;
}

}  // namespace

std::string RenderTranscript(const std::vector<v1::Turn>& transcript, size_t max_chars) {
  std::vector<std::string> lines;
  lines.reserve(transcript.size());
  size_t total = 0;
  for (size_t i = 0; i < transcript.size(); ++i) {
    lines.push_back(TurnLine(i + 1, transcript[i]));
    total += lines.back().size() + 1;
  }
  if (total <= max_chars) return absl::StrJoin(lines, "\n");
  // Keep the opening and the end of the conversation, where requests and outcomes usually are.
  std::string head, tail;
  size_t first = 0, last = lines.size();
  while (first < last && head.size() + lines[first].size() + 1 <= max_chars / 2) {
    absl::StrAppend(&head, lines[first++], "\n");
  }
  std::vector<std::string> tail_lines;
  size_t tail_size = 0;
  while (last > first && tail_size + lines[last - 1].size() + 1 <= max_chars / 2) {
    tail_size += lines[last - 1].size() + 1;
    tail_lines.insert(tail_lines.begin(), lines[--last]);
  }
  return absl::StrCat(head, "[… ", last - first, " turns omitted for length …]\n",
                      absl::StrJoin(tail_lines, "\n"));
}

std::vector<ChatMessage> JudgePrompt(const LlmQuestion& question,
                                     const std::vector<v1::Turn>& transcript) {
  std::string user = absl::StrCat("Metric: ", question.name, "\nInstructions: ",
                                  question.instructions, "\n\"result\" must be ",
                                  ResultSpec(question), ".\n\nTranscript:\n",
                                  RenderTranscript(transcript));
  return {{"system", std::string(kSystemPrompt)}, {"user", std::move(user)}};
}

std::vector<ChatMessage> BatchPrompt(const std::vector<const LlmQuestion*>& questions,
                                     const std::vector<v1::Turn>& transcript) {
  std::string user = "Metrics:\n";
  for (size_t i = 0; i < questions.size(); ++i) {
    const LlmQuestion& q = *questions[i];
    absl::StrAppend(&user, "- key \"m", i + 1, "\": ", q.name, "\n  Instructions: ",
                    q.instructions, "\n  \"result\" must be ", ResultSpec(q), ".\n");
  }
  absl::StrAppend(&user, "\nTranscript:\n", RenderTranscript(transcript));
  return {{"system", std::string(kBatchSystemPrompt)}, {"user", std::move(user)}};
}

absl::StatusOr<ParsedAnswer> ParseAnswer(absl::string_view content, const LlmQuestion& q) {
  const nlohmann::json answer = ExtractObject(content);
  if (!answer.is_object()) {
    return absl::InvalidArgumentError("the answer is not a JSON object");
  }
  auto it = answer.find("result");
  if (it == answer.end() || it->is_null()) {
    return absl::InvalidArgumentError("the answer has no \"result\"");
  }
  ParsedAnswer out;
  if (auto e = answer.find("explanation"); e != answer.end() && !e->is_null()) {
    out.explanation = e->is_string() ? e->get<std::string>() : e->dump();
  }
  const nlohmann::json& result = *it;
  if (q.result_type == "boolean") {
    bool b = false;
    if (result.is_boolean()) {
      b = result.get<bool>();
    } else if (!result.is_string() || !ParseBool(result.get<std::string>(), &b)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"result\" must be true or false, got ", result.dump()));
    }
    out.value.set_bool_value(b);
  } else if (q.result_type == "rating" || q.result_type == "numeric") {
    double d = 0;
    if (result.is_number()) {
      d = result.get<double>();
    } else if (!result.is_string() ||
               !absl::SimpleAtod(absl::StripAsciiWhitespace(result.get<std::string>()), &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"result\" must be a number, got ", result.dump()));
    }
    out.value.set_number_value(d);
  } else if (q.result_type == "enum") {
    if (!result.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"result\" must be one of the listed strings, got ", result.dump()));
    }
    const std::string got =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(result.get<std::string>()));
    for (const std::string& v : q.enum_values) {
      if (absl::AsciiStrToLower(absl::StripAsciiWhitespace(v)) == got) {
        out.value.set_string_value(v);
      }
    }
    if (!out.value.has_string_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"result\" must be one of the listed strings, got ", result.dump()));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown result_type ", q.result_type));
  }
  // The same typing every judge's result gets (a rating outside 1–5 is refused here).
  absl::Status typed = CheckResultValue(out.value, q.result_type, q.enum_values);
  if (!typed.ok()) return absl::InvalidArgumentError(typed.message());
  return out;
}

LlmJudgement JudgeWithLlm(LlmClient& client, const LlmQuestion& question,
                          const std::vector<v1::Turn>& transcript) {
  const std::vector<ChatMessage> prompt = JudgePrompt(question, transcript);
  const int samples = std::clamp(question.samples, 1, 5);
  std::vector<ParsedAnswer> answers;
  std::string last_error;
  for (int s = 0; s < samples; ++s) {
    ChatRequest request;
    request.messages = prompt;
    request.temperature = samples > 1 ? kSampledTemperature : 0;
    // One retry on a malformed answer, telling the model what was wrong.
    for (int attempt = 0; attempt < 2; ++attempt) {
      absl::StatusOr<ChatResponse> response = client.Complete(request);
      if (!response.ok()) {
        const std::string code = ErrorInfoOf(response.status()).code();
        last_error = absl::StrCat(code.empty() ? "llm_error" : code, ": ",
                                  response.status().message());
        break;
      }
      absl::StatusOr<ParsedAnswer> parsed = ParseAnswer(response->content, question);
      if (parsed.ok()) {
        answers.push_back(*std::move(parsed));
        break;
      }
      last_error = absl::StrCat("the judge's answer was unusable: ", parsed.status().message());
      request.messages.push_back({"assistant", response->content});
      request.messages.push_back(
          {"user", absl::StrCat("That answer cannot be used: ", parsed.status().message(),
                                ". Answer again with only the JSON object {\"result\": …, "
                                "\"explanation\": …}, where \"result\" is ",
                                ResultSpec(question), ".")});
    }
  }
  if (answers.empty()) {
    LlmJudgement failed;
    failed.error = last_error;
    return failed;
  }
  return Aggregate(question, answers);
}

std::vector<LlmJudgement> JudgeAllWithLlm(LlmClient& client,
                                          const std::vector<LlmQuestion>& questions,
                                          const std::vector<v1::Turn>& transcript,
                                          int max_batch) {
  std::vector<LlmJudgement> out(questions.size());
  std::vector<bool> done(questions.size(), false);
  std::vector<size_t> batchable;
  for (size_t i = 0; i < questions.size(); ++i) {
    if (max_batch > 1 && questions[i].samples <= 1) batchable.push_back(i);
  }
  // A batch of one is an ordinary question.
  if (batchable.size() == 1) batchable.clear();
  for (size_t start = 0; start < batchable.size(); start += max_batch) {
    const size_t end = std::min(batchable.size(), start + static_cast<size_t>(max_batch));
    std::vector<const LlmQuestion*> batch;
    for (size_t k = start; k < end; ++k) batch.push_back(&questions[batchable[k]]);
    if (batch.size() == 1) break;  // the remainder is asked on its own below
    ChatRequest request;
    request.messages = BatchPrompt(batch, transcript);
    absl::StatusOr<ChatResponse> response = client.Complete(request);
    if (!response.ok()) {
      const std::string code = ErrorInfoOf(response.status()).code();
      for (size_t k = start; k < end; ++k) {
        out[batchable[k]].error = absl::StrCat(code.empty() ? "llm_error" : code, ": ",
                                               response.status().message());
        done[batchable[k]] = true;
      }
      continue;
    }
    const nlohmann::json answer = ExtractObject(response->content);
    const nlohmann::json* results = nullptr;
    if (answer.is_object()) {
      auto it = answer.find("results");
      if (it != answer.end() && it->is_object()) results = &*it;
    }
    for (size_t k = start; results != nullptr && k < end; ++k) {
      auto entry = results->find(absl::StrCat("m", k - start + 1));
      if (entry == results->end() || !entry->is_object()) continue;
      absl::StatusOr<ParsedAnswer> parsed = ParseAnswer(entry->dump(), questions[batchable[k]]);
      if (!parsed.ok()) continue;
      out[batchable[k]] = Aggregate(questions[batchable[k]], {*std::move(parsed)});
      done[batchable[k]] = true;
    }
  }
  for (size_t i = 0; i < questions.size(); ++i) {
    if (!done[i]) out[i] = JudgeWithLlm(client, questions[i], transcript);
  }
  return out;
}

}  // namespace calleval::judges

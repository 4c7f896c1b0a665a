#include "services/metrics/metric_generator.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace calleval::metrics {
namespace {

constexpr absl::string_view kSystemPrompt =
    "You design evaluation metrics for AI voice and chat agents. Each metric is a question an "
    "impartial judge answers from a conversation transcript. Answer with a single JSON object "
    "and nothing else: {\"metrics\": [{\"name\": \"<short title, at most 60 characters>\", "
    "\"description\": \"<what it measures>\", \"result_type\": \"boolean\" | \"rating\" | "
    "\"enum\" | \"numeric\", \"enum_values\": [\"<only for enum: 2 to 5 values>\"], "
    "\"llm_instructions\": \"<the exact question for the judge, saying what each result "
    "means>\"}]}. Prefer boolean or rating results. Each metric must test something different "
    "and specific to this agent.";

absl::Status BadResponse(absl::string_view why) {
  return MakeError(absl::StatusCode::kUnavailable, "llm_bad_response",
                   absl::StrCat("the LLM provider's proposal could not be read: ", why));
}

std::string Text(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

absl::StatusOr<std::vector<v1::MetricFields>> ProposeMetrics(
    LlmClient& client, const AgentBrief& agent, int count, absl::string_view additional_context,
    const std::vector<std::string>& avoid_names) {
  std::string user = absl::StrCat("Propose ", count, " metrics for this agent.\n\nAgent name: ",
                                  agent.name, "\nAgent instructions:\n", agent.instructions);
  if (!agent.opening_message.empty()) {
    absl::StrAppend(&user, "\nOpening message: ", agent.opening_message);
  }
  if (!additional_context.empty()) {
    absl::StrAppend(&user, "\n\nWhat the team wants to evaluate:\n", additional_context);
  }
  if (!avoid_names.empty()) {
    absl::StrAppend(&user, "\n\nThese metrics exist already; do not propose them again: ",
                    absl::StrJoin(avoid_names, "; "));
  }
  ChatRequest request;
  request.messages = {{"system", std::string(kSystemPrompt)}, {"user", std::move(user)}};
  request.temperature = 0.4;  // some variety between requests, still on topic
  ASSIGN_OR_RETURN(ChatResponse response, client.Complete(request));

  const std::string& content = response.content;
  nlohmann::json answer = nlohmann::json::parse(content, nullptr, false);
  if (!answer.is_object()) {
    const size_t open = content.find('{');
    const size_t close = content.rfind('}');
    if (open != std::string::npos && close != std::string::npos && close > open) {
      answer = nlohmann::json::parse(content.substr(open, close - open + 1), nullptr, false);
    }
  }
  if (!answer.is_object() || !answer.contains("metrics") || !answer["metrics"].is_array()) {
    return BadResponse("no \"metrics\" list");
  }
  std::vector<v1::MetricFields> out;
  for (const nlohmann::json& item : answer["metrics"]) {
    if (!item.is_object()) continue;
    v1::MetricFields fields;
    fields.set_name(std::string(absl::StripAsciiWhitespace(Text(item, "name"))));
    const std::string description = Text(item, "description");
    if (!description.empty()) fields.set_description(description);
    fields.set_metrics_type("custom_evaluation");
    const std::string result_type = Text(item, "result_type");
    fields.set_result_type(result_type.empty() ? "boolean" : result_type);
    if (fields.result_type() == "enum" && item.contains("enum_values") &&
        item["enum_values"].is_array()) {
      for (const nlohmann::json& v : item["enum_values"]) {
        if (v.is_string()) fields.add_enum_values(v.get<std::string>());
      }
    }
    fields.set_llm_instructions(Text(item, "llm_instructions"));
    out.push_back(std::move(fields));
  }
  return out;
}

}  // namespace calleval::metrics

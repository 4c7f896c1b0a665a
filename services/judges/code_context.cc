#include "services/judges/code_context.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace calleval::judges {
namespace {

// Doubles below 2^53 that hold an integer are exact as int64.
constexpr double kMaxExactInteger = 9007199254740992.0;

nlohmann::json OptionalText(bool has, const std::string& value) {
  return has ? nlohmann::json(value) : nlohmann::json(nullptr);
}

nlohmann::json CallJson(const v1::Call& call) {
  nlohmann::json out = {
      {"id", call.id()},
      {"call_identifier", call.call_identifier()},
      {"client_id", call.client_id()},
      {"agent_id", call.agent_id()},
      {"observation_type", call.observation_type()},
      {"call_direction", call.call_direction()},
      {"recording_url", OptionalText(call.has_recording_url(), call.recording_url())},
      {"call_timestamp", call.call_timestamp()},
      {"call_end_reason", OptionalText(call.has_call_end_reason(), call.call_end_reason())},
      {"customer_number", OptionalText(call.has_customer_number(), call.customer_number())},
      {"tag", OptionalText(call.has_tag(), call.tag())},
      {"label", OptionalText(call.has_label(), call.label())},
      {"metadata", ToJson(call.metadata())},
  };
  out["duration_seconds"] =
      call.has_duration_seconds() ? nlohmann::json(call.duration_seconds()) : nullptr;
  return out;
}

nlohmann::json TurnJson(const v1::Turn& turn) {
  nlohmann::json out = {{"role", turn.role()},
                        {"content", OptionalText(turn.has_content(), turn.content())}};
  out["start_time"] = turn.has_start_time() ? nlohmann::json(turn.start_time()) : nullptr;
  out["end_time"] = turn.has_end_time() ? nlohmann::json(turn.end_time()) : nullptr;
  if (turn.has_data()) out["data"] = ToJson(turn.data());
  return out;
}

}  // namespace

nlohmann::json ToJson(const google::protobuf::Struct& value) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, field] : value.fields()) out[key] = ToJson(field);
  return out;
}

nlohmann::json ToJson(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue: {
      const double d = value.number_value();
      if (!std::isfinite(d)) return nullptr;  // JSON has no NaN or infinity
      if (std::trunc(d) == d && std::fabs(d) < kMaxExactInteger) {
        return static_cast<int64_t>(d);
      }
      return d;
    }
    case google::protobuf::Value::kStringValue:
      return value.string_value();
    case google::protobuf::Value::kBoolValue:
      return value.bool_value();
    case google::protobuf::Value::kStructValue:
      return ToJson(value.struct_value());
    case google::protobuf::Value::kListValue: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : value.list_value().values()) out.push_back(ToJson(item));
      return out;
    }
    default:
      return nullptr;
  }
}

google::protobuf::Value FromJson(const nlohmann::json& json) {
  google::protobuf::Value out;
  if (json.is_boolean()) {
    out.set_bool_value(json.get<bool>());
  } else if (json.is_number()) {
    out.set_number_value(json.get<double>());
  } else if (json.is_string()) {
    out.set_string_value(json.get<std::string>());
  } else if (json.is_array()) {
    auto* list = out.mutable_list_value();
    for (const auto& item : json) *list->add_values() = FromJson(item);
  } else if (json.is_object()) {
    auto* fields = out.mutable_struct_value()->mutable_fields();
    for (const auto& [key, item] : json.items()) (*fields)[key] = FromJson(item);
  } else {
    out.set_null_value(google::protobuf::NULL_VALUE);
  }
  return out;
}

nlohmann::json BuildCodeContext(const v1::Call& call, const std::vector<v1::Turn>& transcript,
                                const std::vector<v1::StandardMetricResult>& standard,
                                const std::vector<v1::MetricResult>& metric_results,
                                const v1::JobAgent& agent) {
  nlohmann::json context;
  context["call"] = CallJson(call);
  nlohmann::json turns = nlohmann::json::array();
  std::string text;
  for (const v1::Turn& turn : transcript) {
    turns.push_back(TurnJson(turn));
    if (turn.has_content()) absl::StrAppend(&text, turn.role(), ": ", turn.content(), "\n");
  }
  context["transcript"] = std::move(turns);
  context["transcript_text"] = std::move(text);

  // Results that measured something: completed, or not_applicable with its zero counts.
  nlohmann::json by_key = nlohmann::json::object();
  for (const v1::StandardMetricResult& r : standard) {
    if (r.status() != "completed" && r.status() != "not_applicable") continue;
    by_key[r.standard_metric_key()] = ToJson(r.result());
  }
  auto result_of = [&](const char* key) -> nlohmann::json {
    auto it = by_key.find(key);
    return it == by_key.end() ? nlohmann::json(nullptr) : *it;
  };
  const bool voice = call.observation_type() == "voice";
  context["silence"] = voice ? result_of("silence_detection") : nullptr;
  context["latency"] = voice ? result_of("latency") : nullptr;
  context["interruptions"] = voice ? nlohmann::json{{"ai", result_of("ai_interruptions")},
                                                    {"user", result_of("user_interruptions")}}
                                   : nlohmann::json(nullptr);
  context["words_per_minute"] = voice ? result_of("words_per_minute") : nullptr;
  context["standard_metrics"] = std::move(by_key);

  nlohmann::json judged = nlohmann::json::object();
  for (const v1::MetricResult& r : metric_results) {
    judged[r.name()] = {{"value", ToJson(r.value())},
                        {"explanation", OptionalText(r.has_explanation(), r.explanation())}};
  }
  context["metric_results"] = std::move(judged);
  context["agent"] = {
      {"id", agent.id()}, {"name", agent.name()}, {"agent_source", agent.agent_source()}};
  return context;
}

}  // namespace calleval::judges

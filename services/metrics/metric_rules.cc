#include "services/metrics/metric_rules.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "common/sent_fields.h"
#include "common/status_macros.h"
#include "services/judges/metric_values.h"
#include "services/metrics/metrics_store.h"  // the default credit costs
#include "unicode/unistr.h"

namespace calleval::metrics::rules {
namespace {

// Limits the API reference sets where the interface is silent (docs/api.md §4).
constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxDescriptionLength = 5000;
constexpr size_t kMaxInstructionsLength = 20000;  // llm_instructions, trigger prompt
constexpr int kMaxJudgeSamples = 5;
constexpr size_t kMaxCodeBytes = 100000;  // code_snippet, trigger code_snippet
constexpr int kMaxEnumValues = 50;
constexpr size_t kMaxEnumValueLength = 255;
constexpr int kMaxPhrases = 100;  // phrases, options, trigger phrases
constexpr size_t kMaxPhraseLength = 500;
constexpr int kMaxRules = 20;
constexpr int64_t kMaxCreditCost = 1000;

bool IsCustomType(absl::string_view t) {
  return t == kCustomEvaluation || t == kPhraseCheck || t == kOptionsCheck || t == kCodeAsJudge;
}

bool IsResultType(absl::string_view t) {
  return t == "boolean" || t == "rating" || t == "enum" || t == "numeric";
}

bool IsSpeaker(absl::string_view s) { return s == "AI Assistant" || s == "User" || s == "any"; }

// Keys of MetricFields that are not metric fields: bookkeeping, and the read-only keys a client
// may send back as it got them (ignored).
bool IsIgnoredKey(absl::string_view name) {
  return name == "set_fields" || name == "null_fields" || name == "id" ||
         name == "standard_metric_key" || name == "is_custom" || name == "scope";
}

// A list of strings: min_items..kMaxPhrases entries, none blank, each at most `max_length`
// characters. `missing` is the issue when there are fewer than min_items.
void CheckTextList(const google::protobuf::RepeatedPtrField<std::string>& values,
                   absl::string_view field, int min_items, size_t max_length,
                   absl::string_view missing, Issues& issues) {
  if (values.size() < min_items) {
    issues.Add(field, std::string(missing));
    return;
  }
  if (values.size() > kMaxPhrases) {
    issues.Add(field, absl::StrCat("must have at most ", kMaxPhrases, " entries"));
    return;
  }
  for (int i = 0; i < values.size(); ++i) {
    const std::string item = absl::StrCat(field, "[", i, "]");
    if (IsBlank(values[i])) {
      issues.Add(item, "must not be empty");
    } else if (CharLength(values[i]) > max_length) {
      issues.Add(item, absl::StrCat("must be at most ", max_length, " characters"));
    }
  }
}

// A required text: present, not blank, at most `max_length` characters (or bytes when
// `bytes`).
bool CheckRequiredText(bool has, const std::string& value, absl::string_view field,
                       size_t max_length, bool bytes, absl::string_view missing, Issues& issues) {
  if (!has || IsBlank(value)) {
    issues.Add(field, std::string(missing));
    return false;
  }
  if ((bytes ? value.size() : CharLength(value)) > max_length) {
    issues.Add(field,
               absl::StrCat("must be at most ", max_length, bytes ? " bytes" : " characters"));
    return false;
  }
  return true;
}

void ValidateTrigger(const v1::MetricFields& m, v1::EvaluationTrigger& out, Issues& issues) {
  out.set_type("always");  // no trigger sent: always
  if (!m.has_evaluation_trigger()) return;
  const v1::EvaluationTrigger& in = m.evaluation_trigger();
  if (!in.has_type()) {
    if (in.phrases_size() > 0 || in.has_code_snippet() || in.has_prompt()) {
      issues.Add("evaluation_trigger.type", "is required (always, phrase, code, llm)");
    }
    return;
  }
  const std::string& type = in.type();
  out.set_type(type);
  if (type == "always") return;
  if (type == "phrase") {
    CheckTextList(in.phrases(), "evaluation_trigger.phrases", 1, kMaxPhraseLength,
                  "is required for a phrase trigger", issues);
    *out.mutable_phrases() = in.phrases();
  } else if (type == "code") {
    CheckRequiredText(in.has_code_snippet(), in.code_snippet(), "evaluation_trigger.code_snippet",
                      kMaxCodeBytes, /*bytes=*/true, "is required for a code trigger", issues);
    out.set_code_snippet(in.code_snippet());
  } else if (type == "llm") {
    CheckRequiredText(in.has_prompt(), in.prompt(), "evaluation_trigger.prompt",
                      kMaxInstructionsLength, /*bytes=*/false, "is required for an llm trigger",
                      issues);
    out.set_prompt(in.prompt());
  } else {
    issues.Add("evaluation_trigger.type", "must be one of always, phrase, code, llm");
  }
}

}  // namespace

// Unicode case folding, so "ÉTAT" and "état" are the same name.
std::string Fold(absl::string_view s) {
  icu::UnicodeString u =
      icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.foldCase();
  std::string out;
  u.toUTF8String(out);
  return out;
}

// What names are compared on: trimmed and case-folded.
std::string NameKey(absl::string_view name) { return Fold(absl::StripAsciiWhitespace(name)); }

bool IsStandardId(int64_t id) { return FindStandardMetric(id) != nullptr; }

const StandardMetricInfo* FindStandardKey(absl::string_view key) {
  for (const auto& m : kStandardMetrics) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

std::string StandardKeyList() {
  std::vector<std::string> keys;
  for (const auto& m : kStandardMetrics) keys.emplace_back(m.key);
  return absl::StrJoin(keys, ", ");
}

bool ApplyRequest(const v1::MetricFields& request, bool keep_type, v1::MetricFields& merged) {
  const SentKeys sent(request);
  v1::MetricFields incoming = request;
  const auto* descriptor = v1::MetricFields::descriptor();
  const auto* reflection = v1::MetricFields::GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (IsIgnoredKey(field->name()) || (keep_type && field->name() == "metrics_type")) continue;
    const bool has = field->is_repeated() ? reflection->FieldSize(request, field) > 0
                                          : reflection->HasField(request, field);
    if (sent.Set(field->name(), has)) {
      reflection->ClearField(&merged, field);
      reflection->SwapFields(&merged, &incoming, {field});
    } else if (sent.Null(field->name())) {
      reflection->ClearField(&merged, field);
    }
  }
  return request.enum_values_size() > 0;
}

absl::Status Validate(const LinkTargets& targets, int64_t workspace_id, const v1::MetricFields& m,
                      bool enum_values_sent, Issues& issues, v1::Metric& out) {
  out.Clear();
  out.set_client_id(workspace_id);
  out.set_is_custom(true);
  out.set_requires_audio(false);  // custom metrics judge the transcript and call data

  if (!m.has_name()) {
    issues.Add("name", "is required");
  } else {
    const absl::string_view name = absl::StripAsciiWhitespace(m.name());
    if (name.empty()) {
      issues.Add("name", "must not be empty");
    } else if (CharLength(name) > kMaxNameLength) {
      issues.Add("name", absl::StrCat("must be at most ", kMaxNameLength, " characters"));
    }
    out.set_name(std::string(name));
  }

  if (m.has_description() && !IsBlank(m.description())) {
    if (CharLength(m.description()) > kMaxDescriptionLength) {
      issues.Add("description",
                 absl::StrCat("must be at most ", kMaxDescriptionLength, " characters"));
    }
    out.set_description(m.description());
  }

  const std::string& type = m.metrics_type();
  if (!m.has_metrics_type()) {
    issues.Add("metrics_type", "is required");
  } else if (type == kStandard) {
    issues.Add("metrics_type", "standard metrics are system-defined and cannot be created");
  } else if (!IsCustomType(type)) {
    issues.Add("metrics_type", absl::StrCat("must be one of ", kCustomEvaluation, ", ",
                                            kPhraseCheck, ", ", kOptionsCheck, ", ", kCodeAsJudge));
  }
  out.set_metrics_type(type);
  const bool deterministic_check = type == kPhraseCheck || type == kOptionsCheck;

  // result_type: boolean unless given; the phrase and options checks only answer yes or no.
  const std::string result_type = m.has_result_type() ? m.result_type() : "boolean";
  bool result_type_ok = false;
  if (!IsResultType(result_type)) {
    issues.Add("result_type", "must be one of boolean, rating, enum, numeric");
  } else if (deterministic_check && result_type != "boolean") {
    issues.Add("result_type", absl::StrCat("must be boolean for ", type, " metrics"));
  } else {
    result_type_ok = true;
  }
  out.set_result_type(result_type);

  // enum_values: the categories of an enum result, compared case-insensitively for
  // distinctness (outcome rules compare text that way).
  std::vector<std::string> enum_values;
  bool enum_ok = true;
  if (result_type_ok && result_type == "enum") {
    if (m.enum_values_size() == 0) {
      issues.Add("enum_values", "is required when result_type is enum");
      enum_ok = false;
    } else if (m.enum_values_size() > kMaxEnumValues) {
      issues.Add("enum_values", absl::StrCat("must have at most ", kMaxEnumValues, " values"));
      enum_ok = false;
    } else {
      std::map<std::string, int> seen;
      for (int i = 0; i < m.enum_values_size(); ++i) {
        const std::string& v = m.enum_values(i);
        const std::string field = absl::StrCat("enum_values[", i, "]");
        if (IsBlank(v)) {
          issues.Add(field, "must not be empty");
          enum_ok = false;
        } else if (CharLength(v) > kMaxEnumValueLength) {
          issues.Add(field, absl::StrCat("must be at most ", kMaxEnumValueLength, " characters"));
          enum_ok = false;
        } else if (auto [it, inserted] = seen.emplace(Fold(v), i); !inserted) {
          issues.Add(field, absl::StrCat("duplicates enum_values[", it->second, "]"));
          enum_ok = false;
        }
      }
    }
    enum_values.assign(m.enum_values().begin(), m.enum_values().end());
    for (const auto& v : enum_values) out.add_enum_values(v);
  } else if (result_type_ok && enum_values_sent) {
    issues.Add("enum_values", "is only allowed when result_type is enum");
  }

  // The fields of the metric's own type; those of other types are not stored.
  if (type == kCustomEvaluation) {
    CheckRequiredText(m.has_llm_instructions(), m.llm_instructions(), "llm_instructions",
                      kMaxInstructionsLength, /*bytes=*/false,
                      "is required for custom_evaluation metrics", issues);
    out.set_llm_instructions(m.llm_instructions());
    if (m.has_judge_samples()) {
      if (m.judge_samples() < 1 || m.judge_samples() > kMaxJudgeSamples) {
        issues.Add("judge_samples", absl::StrCat("must be between 1 and ", kMaxJudgeSamples));
      }
      out.set_judge_samples(m.judge_samples());
    }
  } else if (type == kCodeAsJudge) {
    // Syntax is checked by validate_code, not here: a snippet is stored as written.
    CheckRequiredText(m.has_code_snippet(), m.code_snippet(), "code_snippet", kMaxCodeBytes,
                      /*bytes=*/true, "is required for code_as_judge metrics", issues);
    out.set_code_snippet(m.code_snippet());
  } else if (deterministic_check) {
    const std::string speaker = m.has_speaker() ? m.speaker() : "AI Assistant";
    if (!IsSpeaker(speaker)) issues.Add("speaker", "must be one of AI Assistant, User, any");
    if (type == kPhraseCheck) {
      CheckTextList(m.phrases(), "phrases", 1, kMaxPhraseLength,
                    "is required for specific_text_/_phrase_check metrics", issues);
      *out.mutable_phrases() = m.phrases();
      const std::string match = m.has_match() ? m.match() : "any";
      if (match != "any" && match != "all") issues.Add("match", "must be any or all");
      out.set_match(match);
      out.set_speaker(speaker);
      out.set_case_sensitive(m.case_sensitive());
    } else {
      CheckTextList(m.permitted_options(), "permitted_options", 1, kMaxPhraseLength,
                    "is required for permitted_options_check metrics", issues);
      CheckTextList(m.forbidden_options(), "forbidden_options", 0, kMaxPhraseLength, "", issues);
      *out.mutable_permitted_options() = m.permitted_options();
      *out.mutable_forbidden_options() = m.forbidden_options();
      out.set_speaker(speaker);
    }
  }

  ValidateTrigger(m, *out.mutable_evaluation_trigger(), issues);

  if (m.structured_output_size() > kMaxRules) {
    issues.Add("structured_output", absl::StrCat("must have at most ", kMaxRules, " rules"));
  } else if (result_type_ok && enum_ok) {
    // Rules are judged against the result type; with that type itself wrong they cannot be.
    for (FieldIssue& issue :
         judges::ValidateStructuredOutput(m.structured_output(), result_type, enum_values)) {
      if (!issue.field) issue.field = "structured_output";
      issues.Add(std::move(issue));
    }
  }
  *out.mutable_structured_output() = m.structured_output();

  // agent_ids: agents of this workspace, each listed once, ascending.
  std::map<int64_t, bool> agents;
  for (int i = 0; i < m.agent_ids_size(); ++i) {
    const int64_t id = m.agent_ids(i);
    if (agents.count(id)) continue;
    const bool found = targets.agents == nullptr || targets.agents->contains(id);
    agents[id] = found;
    if (!found) {
      issues.Add(absl::StrCat("agent_ids[", i, "]"),
                 absl::StrCat("no agent ", id, " in workspace ", workspace_id), kAgentNotFound);
    }
  }
  for (const auto& [id, found] : agents) {
    if (found) out.add_agent_ids(id);
  }

  // scenario_ids: scenarios of this workspace, each listed once, ascending.
  std::set<int64_t> scenarios;
  for (int i = 0; i < m.scenario_ids_size(); ++i) {
    const int64_t id = m.scenario_ids(i);
    if (scenarios.count(id)) continue;
    const bool found = targets.scenarios == nullptr || targets.scenarios->contains(id);
    if (!found) {
      issues.Add(absl::StrCat("scenario_ids[", i, "]"),
                 absl::StrCat("no scenario ", id, " in workspace ", workspace_id));
    } else {
      scenarios.insert(id);
    }
  }
  for (int64_t id : scenarios) out.add_scenario_ids(id);

  out.set_mark_as_global(m.mark_as_global());
  out.set_scope(m.mark_as_global() ? "global" : "agent");

  if (m.has_credit_cost()) {
    if (m.credit_cost() < 0 || m.credit_cost() > kMaxCreditCost) {
      issues.Add("credit_cost", absl::StrCat("must be between 0 and ", kMaxCreditCost));
    }
    out.set_credit_cost(m.credit_cost());
  } else {
    out.set_credit_cost(type == kCustomEvaluation ? kLlmMetricCost : kDeterministicMetricCost);
  }
  return absl::OkStatus();
}

}  // namespace calleval::metrics::rules

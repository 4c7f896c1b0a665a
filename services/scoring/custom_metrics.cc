#include "services/scoring/custom_metrics.h"

#include <functional>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/standard_metrics.h"
#include "services/judges/code_context.h"
#include "services/judges/llm_judge.h"
#include "services/judges/metric_values.h"
#include "services/judges/text_judges.h"

namespace calleval::scoring {
namespace {

constexpr absl::string_view kAiSpeaker = "AI Assistant";

std::string DescribeCodeError(const judges::CodeError& error) {
  std::string out = absl::StrCat(error.type, ": ", error.message);
  if (error.line) absl::StrAppend(&out, " (line ", *error.line, ")");
  return out;
}

v1::MetricResult NewResult(const v1::Metric& metric, absl::string_view status) {
  v1::MetricResult r;
  r.set_metric_id(metric.id());
  r.set_name(metric.name());
  r.set_metrics_type(metric.metrics_type());
  r.set_result_type(metric.result_type());
  r.set_status(std::string(status));
  r.mutable_value()->set_null_value(google::protobuf::NULL_VALUE);
  return r;
}

v1::MetricResult Failed(const v1::Metric& metric, absl::string_view error) {
  v1::MetricResult r = NewResult(metric, "failed");
  r.set_error(std::string(error));
  return r;
}

v1::MetricResult NotApplicable(const v1::Metric& metric, absl::string_view why) {
  v1::MetricResult r = NewResult(metric, "not_applicable");
  r.set_explanation(std::string(why));
  return r;
}

std::vector<std::string> ToVector(const google::protobuf::RepeatedPtrField<std::string>& items) {
  return {items.begin(), items.end()};
}

// Whether the metric's trigger fires; an error string when it cannot be decided.
struct TriggerDecision {
  bool fires = true;
  std::string error;
};
// `context` builds the code context on first use (only a code trigger needs it).
TriggerDecision DecideTrigger(const v1::Metric& metric, const calls::AnalysisJob& job,
                              const std::function<const nlohmann::json&()>& context,
                              const Judges& tools) {
  const v1::EvaluationTrigger& trigger = metric.evaluation_trigger();
  const std::string type = trigger.has_type() ? trigger.type() : "always";
  if (type == "phrase") {
    return {judges::AnyPhraseSaid(job.transcript, ToVector(trigger.phrases())), ""};
  }
  if (type == "code") {
    CodeVerdict verdict =
        JudgeCode(tools.sandbox, trigger.code_snippet(), context(), "boolean", {});
    if (!verdict.ok) return {false, absl::StrCat("evaluation trigger: ", verdict.error)};
    return {verdict.value.bool_value(), ""};
  }
  if (type == "llm") {
    if (tools.llm == nullptr) return {false, "llm_unavailable"};
    judges::LlmQuestion question;
    question.name = absl::StrCat(metric.name(), " (when to evaluate)");
    question.instructions = absl::StrCat(
        "Answer true when the following holds for this conversation, false otherwise: ",
        trigger.prompt());
    question.result_type = "boolean";
    judges::LlmJudgement judged = judges::JudgeWithLlm(*tools.llm, question, job.transcript);
    if (!judged.ok) return {false, absl::StrCat("evaluation trigger: ", judged.error)};
    return {judged.value.bool_value(), ""};
  }
  return {true, ""};
}

// A custom_evaluation metric before the judge: its trigger. Returns the result when the metric
// is decided without the judge (no provider, no transcript, the trigger failed or did not fire),
// else fills `question`.
std::optional<v1::MetricResult> PrepareLlmMetric(const v1::Metric& metric,
                                                 const calls::AnalysisJob& job,
                                                 const Judges& tools,
                                                 judges::LlmQuestion* question) {
  if (tools.llm == nullptr) return Failed(metric, "llm_unavailable");
  if (job.transcript.empty()) {
    return NotApplicable(metric, "the call has no transcript to judge");
  }
  // An LLM metric's trigger cannot be a code trigger reading LLM results (they are not in yet),
  // so the context is built without them.
  std::optional<nlohmann::json> context;
  const std::function<const nlohmann::json&()> code_context = [&]() -> const nlohmann::json& {
    if (!context) {
      context = judges::BuildCodeContext(job.call, job.transcript, {}, {}, job.agent);
    }
    return *context;
  };
  TriggerDecision trigger = DecideTrigger(metric, job, code_context, tools);
  if (!trigger.error.empty()) return Failed(metric, trigger.error);
  if (!trigger.fires) return NotApplicable(metric, "the evaluation trigger did not fire");
  question->name = metric.name();
  question->instructions = metric.llm_instructions();
  question->result_type = metric.result_type();
  question->enum_values = ToVector(metric.enum_values());
  question->samples = metric.has_judge_samples() ? metric.judge_samples() : 1;
  return std::nullopt;
}

v1::MetricResult LlmMetricResult(const v1::Metric& metric, const judges::LlmJudgement& judged) {
  if (!judged.ok) return Failed(metric, judged.error);
  v1::MetricResult r = NewResult(metric, "completed");
  *r.mutable_value() = judged.value;
  r.set_explanation(judged.explanation);
  if (judged.agreement) r.set_agreement(*judged.agreement);
  if (auto outcome = judges::ClassifyOutcome(r.value(), metric.structured_output())) {
    *r.mutable_structured_output() = *outcome;
  }
  return r;
}

}  // namespace

CodeVerdict JudgeCode(const judges::PythonSandbox* sandbox, absl::string_view code,
                      const nlohmann::json& context, absl::string_view result_type,
                      const std::vector<std::string>& enum_values) {
  CodeVerdict verdict;
  if (sandbox == nullptr) {
    verdict.error = "the code sandbox is unavailable on this installation";
    return verdict;
  }
  absl::StatusOr<judges::CodeRun> run = sandbox->Run(code, context);
  if (!run.ok()) {
    verdict.error = std::string(run.status().message());
    return verdict;
  }
  verdict.explanation = run->explanation;
  if (run->error) {
    verdict.error = DescribeCodeError(*run->error);
    return verdict;
  }
  if (!run->result_set) {
    verdict.error = "the code never set metric['result']";
    return verdict;
  }
  if (!result_type.empty()) {
    absl::Status typed = judges::CheckResultValue(run->result, result_type, enum_values);
    if (!typed.ok()) {
      verdict.error = std::string(typed.message());
      return verdict;
    }
  }
  verdict.ok = true;
  verdict.value = run->result;
  return verdict;
}

std::vector<v1::MetricResult> JudgeCustomMetrics(
    const calls::AnalysisJob& job, const std::vector<v1::StandardMetricResult>& standard,
    const Judges& tools, absl::string_view no_transcript_reason) {
  std::vector<int64_t> planned;
  for (int64_t id : job.planned_metric_ids) {
    if (FindStandardMetric(id) == nullptr) planned.push_back(id);
  }
  std::vector<v1::MetricResult> results(planned.size());
  auto definition = [&](int64_t id) -> const v1::Metric* {
    auto it =
        absl::c_find_if(job.custom_metrics, [id](const v1::Metric& m) { return m.id() == id; });
    return it == job.custom_metrics.end() ? nullptr : &*it;
  };

  // LLM metrics run before the others, so code judges can read them (docs/api.md §6); the questions
  // of one call are put to the provider together.
  std::vector<size_t> later;
  std::vector<size_t> asked;  // indexes into `results` of the metrics with a question
  std::vector<judges::LlmQuestion> questions;
  for (size_t i = 0; i < planned.size(); ++i) {
    const v1::Metric* metric = definition(planned[i]);
    if (metric == nullptr) {
      results[i].set_metric_id(planned[i]);
      results[i].set_status("failed");
      results[i].mutable_value()->set_null_value(google::protobuf::NULL_VALUE);
      results[i].set_error("the metric was deleted before the call was scored");
    } else if (metric->metrics_type() == "custom_evaluation" && !no_transcript_reason.empty()) {
      results[i] = Failed(*metric, std::string(no_transcript_reason));
    } else if (metric->metrics_type() == "custom_evaluation") {
      judges::LlmQuestion question;
      if (std::optional<v1::MetricResult> decided =
              PrepareLlmMetric(*metric, job, tools, &question)) {
        results[i] = *std::move(decided);
      } else {
        asked.push_back(i);
        questions.push_back(std::move(question));
      }
    } else {
      later.push_back(i);
    }
  }
  if (!questions.empty()) {
    const std::vector<judges::LlmJudgement> judged =
        judges::JudgeAllWithLlm(*tools.llm, questions, job.transcript, tools.llm_batch);
    for (size_t k = 0; k < asked.size(); ++k) {
      results[asked[k]] = LlmMetricResult(*definition(planned[asked[k]]), judged[k]);
    }
  }
  std::vector<v1::MetricResult> llm_results;
  for (size_t i = 0; i < planned.size(); ++i) {
    const v1::Metric* metric = definition(planned[i]);
    if (metric != nullptr && metric->metrics_type() == "custom_evaluation") {
      llm_results.push_back(results[i]);
    }
  }

  // Built once, when the first code metric or code trigger needs it.
  std::optional<nlohmann::json> context;
  const std::function<const nlohmann::json&()> code_context = [&]() -> const nlohmann::json& {
    if (!context) {
      context =
          judges::BuildCodeContext(job.call, job.transcript, standard, llm_results, job.agent);
    }
    return *context;
  };

  for (size_t i : later) {
    const v1::Metric& metric = *definition(planned[i]);
    TriggerDecision trigger = DecideTrigger(metric, job, code_context, tools);
    if (!trigger.error.empty()) {
      results[i] = Failed(metric, trigger.error);
      continue;
    }
    if (!trigger.fires) {
      results[i] = NotApplicable(metric, "the evaluation trigger did not fire");
      continue;
    }
    v1::MetricResult r = NewResult(metric, "completed");
    if (metric.metrics_type() == "specific_text_/_phrase_check" ||
        metric.metrics_type() == "permitted_options_check") {
      if (job.transcript.empty()) {
        results[i] = no_transcript_reason.empty()
                         ? NotApplicable(metric, "the call has no transcript to check")
                         : Failed(metric, std::string(no_transcript_reason));
        continue;
      }
      judges::Verdict verdict;
      if (metric.metrics_type() == "permitted_options_check") {
        judges::OptionsCheck check;
        check.permitted_options = ToVector(metric.permitted_options());
        check.forbidden_options = ToVector(metric.forbidden_options());
        check.speaker = metric.has_speaker() ? metric.speaker() : std::string(kAiSpeaker);
        verdict = judges::JudgeOptions(job.transcript, check);
      } else {
        judges::PhraseCheck check;
        check.phrases = ToVector(metric.phrases());
        check.match_all = metric.match() == "all";
        check.speaker = metric.has_speaker() ? metric.speaker() : std::string(kAiSpeaker);
        check.case_sensitive = metric.case_sensitive();
        verdict = judges::JudgePhrases(job.transcript, check);
      }
      r.mutable_value()->set_bool_value(verdict.value);
      r.set_explanation(verdict.explanation);
    } else if (metric.metrics_type() == "code_as_judge") {
      CodeVerdict verdict = JudgeCode(tools.sandbox, metric.code_snippet(), code_context(),
                                      metric.result_type(), ToVector(metric.enum_values()));
      if (!verdict.ok) {
        r = Failed(metric, verdict.error);
        if (!verdict.explanation.empty()) r.set_explanation(verdict.explanation);
        results[i] = std::move(r);
        continue;
      }
      *r.mutable_value() = verdict.value;
      r.set_explanation(verdict.explanation);
    } else {
      results[i] = Failed(metric, absl::StrCat("unknown metrics_type ", metric.metrics_type()));
      continue;
    }
    if (auto outcome = judges::ClassifyOutcome(r.value(), metric.structured_output())) {
      *r.mutable_structured_output() = *outcome;
    }
    results[i] = std::move(r);
  }
  return results;
}

}  // namespace calleval::scoring

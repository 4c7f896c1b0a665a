#pragma once

// Scores a call's custom metrics (docs/api.md §4, §6): the evaluation trigger, then the judge of
// the metric's type (phrase and options checks, code in the sandbox; custom_evaluation needs the
// LLM provider), the result typed by result_type, and structured_output turned into an
// outcome_classification.

#include <vector>

#include "calleval/v1/calls.pb.h"
#include "services/calls/calls_store.h"
#include "common/llm_client.h"
#include "services/judges/sandbox.h"

namespace calleval::scoring {

// What judging needs besides the job; either may be null (no sandbox: code metrics and code
// triggers fail closed; no LLM provider: LLM metrics and llm triggers fail llm_unavailable).
struct Judges {
  const judges::PythonSandbox* sandbox = nullptr;
  LlmClient* llm = nullptr;
  // Up to this many single-sample LLM questions of one call go in one provider request
  // (--llm-batch-size); 1 asks each on its own.
  int llm_batch = 8;
};

// One result per planned custom metric of `job`, in plan order. `standard` holds every
// standard result the analysis produced (planned or not: a code judge sees them all).
// `no_transcript_reason`, when set, says why a voice call has no transcript (its transcription
// failed): the metrics that judge the transcript end failed with it; code metrics still run.
std::vector<v1::MetricResult> JudgeCustomMetrics(
    const calls::AnalysisJob& job, const std::vector<v1::StandardMetricResult>& standard,
    const Judges& tools, absl::string_view no_transcript_reason = {});

// The result of one code snippet run as a metric of `result_type`: completed with the value,
// or failed with the reason (an exception, a limit, a wrong or missing result). The Metrics
// service's test_code reports the same.
struct CodeVerdict {
  bool ok = false;
  google::protobuf::Value value;
  std::string explanation;
  std::string error;  // when !ok
};
CodeVerdict JudgeCode(const judges::PythonSandbox* sandbox, absl::string_view code,
                      const nlohmann::json& context, absl::string_view result_type,
                      const std::vector<std::string>& enum_values);

}  // namespace calleval::scoring

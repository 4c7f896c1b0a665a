#pragma once

// POST /api/v1/metrics/generate: asks the LLM provider to propose custom_evaluation metrics for
// an agent, from its instructions, opening message and the caller's extra context. The
// proposals are returned unvalidated; the Metrics service validates each like a create.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/metrics.pb.h"
#include "common/llm_client.h"

namespace calleval::metrics {

struct AgentBrief {
  std::string name;
  std::string instructions;
  std::string opening_message;
};

// Up to `count` proposals, none named like `avoid_names` (compared ignoring case). Errors of the
// provider come back as they are (llm_unavailable, …); an answer that cannot be read is
// kUnavailable "llm_bad_response".
absl::StatusOr<std::vector<v1::MetricFields>> ProposeMetrics(
    LlmClient& client, const AgentBrief& agent, int count, absl::string_view additional_context,
    const std::vector<std::string>& avoid_names);

}  // namespace calleval::metrics

#pragma once

// How each routed method of the Agents service runs, over gRPC and at the edge alike
// (common/method_execution.h): point reads inline, the rest on the pool.

#include "common/method_execution.h"

namespace calleval::agents {

inline constexpr MethodExecution kAgentsMethods[] = {
    {"CreateAgent", Execution::kPool},
    {"GetAgent", Execution::kPointRead},
    {"UpdateAgent", Execution::kPool},
    {"DeleteAgent", Execution::kPool},
    {"ListAgents", Execution::kPool},
    {"ListLanguages", Execution::kInline},  // a dozen rows
    {"CreateScenario", Execution::kPool},
    {"GetScenario", Execution::kPointRead},
    {"UpdateScenario", Execution::kPool},
    {"DeleteScenario", Execution::kPool},
    {"ListScenarios", Execution::kPool},
    {"RunScenario", Execution::kPool},
    {"GetRun", Execution::kPointRead},
    {"ListRuns", Execution::kPool},
    {"CreateBatchRun", Execution::kPool},
    {"GetBatchRun", Execution::kPool},  // counts the batch's runs
};

}  // namespace calleval::agents

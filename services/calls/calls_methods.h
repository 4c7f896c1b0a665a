#pragma once

// How each routed method of the Calls service runs, over gRPC and at the edge alike
// (common/method_execution.h): point reads inline, the rest on the pool.

#include "common/method_execution.h"

namespace calleval::calls {

inline constexpr MethodExecution kCallsMethods[] = {
    {"IngestCall", Execution::kPool},
    {"GetCall", Execution::kPointRead},
    {"UpdateCall", Execution::kPool},
    {"ListCalls", Execution::kPool},
    {"DeleteCall", Execution::kPool},
    {"GetAgentStats", Execution::kPool},  // reads hourly totals and unsettled calls
    {"GetScenarioStats", Execution::kPool},
};

}  // namespace calleval::calls

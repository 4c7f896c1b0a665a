#pragma once

// How each routed method of the Accounts service runs, over gRPC and at the edge alike
// (common/method_execution.h).

#include "common/method_execution.h"

namespace calleval::accounts {

inline constexpr MethodExecution kAccountsMethods[] = {
    {"GetCurrentWorkspace", Execution::kPointRead},
};

}  // namespace calleval::accounts

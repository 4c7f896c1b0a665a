#pragma once

// How each routed method of the Metrics service runs, over gRPC and at the edge alike
// (common/method_execution.h): point reads inline, the rest on a pool (GenerateMetrics,
// ValidateCode and TestCode on their own bounded pools, shed when full).

#include "common/method_execution.h"

namespace calleval::metrics {

inline constexpr MethodExecution kMetricsMethods[] = {
    {"ListMetrics", Execution::kPool},
    {"CreateMetric", Execution::kPool},
    {"GetMetric", Execution::kPointRead},
    {"UpdateMetric", Execution::kPool},
    {"DeleteMetric", Execution::kPool},
    {"GenerateMetrics", Execution::kPool},
    {"BulkCreateMetrics", Execution::kPool},
    {"ValidateCode", Execution::kPool},
    {"TestCode", Execution::kPool},
    {"SetAgentStandardMetrics", Execution::kPool},
    {"SetAgentLlmMetrics", Execution::kPool},
    {"ListUsableMetrics", Execution::kPool},  // every custom metric of the workspace
};

}  // namespace calleval::metrics

#pragma once

// The Metrics service's methods: each RPC once, with where it runs and who may call it
// (common/method_table.h). gRPC and the edge both serve this table: point reads inline, the rest
// on a pool; GenerateMetrics, ValidateCode and TestCode on their own bounded pools, shed with 503
// "overloaded" when full, so ingest and reads never wait behind the LLM or the sandbox.

#include "common/method_table.h"
#include "services/metrics/metrics_service.h"

namespace calleval::metrics {

inline constexpr MethodEntry<MetricsService> kMetricsMethods[] = {
    Unary<&MetricsService::ListMetrics>("ListMetrics", Execution::kPool, Access::kWorkspace),
    Unary<&MetricsService::CreateMetric>("CreateMetric", Execution::kPool, Access::kWorkspace),
    Unary<&MetricsService::GetMetric>("GetMetric", Execution::kPointRead, Access::kWorkspace),
    Unary<&MetricsService::UpdateMetric>("UpdateMetric", Execution::kPool, Access::kWorkspace),
    Unary<&MetricsService::DeleteMetric>("DeleteMetric", Execution::kPool, Access::kWorkspace),
    Unary<&MetricsService::GenerateMetrics>("GenerateMetrics", Execution::kPool, Access::kWorkspace)
        .OnPool(&MetricsService::llm_pool),
    Unary<&MetricsService::BulkCreateMetrics>("BulkCreateMetrics", Execution::kPool,
                                              Access::kWorkspace),
    Unary<&MetricsService::ValidateCode>("ValidateCode", Execution::kPool, Access::kWorkspace)
        .OnPool(&MetricsService::sandbox_pool),
    Unary<&MetricsService::TestCode>("TestCode", Execution::kPool, Access::kWorkspace)
        .OnPool(&MetricsService::sandbox_pool),
    Unary<&MetricsService::SetAgentStandardMetrics>("SetAgentStandardMetrics", Execution::kPool,
                                                    Access::kWorkspace),
    Unary<&MetricsService::SetAgentLlmMetrics>("SetAgentLlmMetrics", Execution::kPool,
                                               Access::kWorkspace),
    // Every custom metric of the workspace.
    Unary<&MetricsService::ListUsableMetrics>("ListUsableMetrics", Execution::kPool,
                                              Access::kWorkspace),
    // Internal: asked and told by the agents service in another process.
    Unary<&MetricsService::ExistingMetrics>("ExistingMetrics", Execution::kPool,
                                            Access::kInternal),
    Unary<&MetricsService::AgentDeleted>("AgentDeleted", Execution::kPool, Access::kInternal),
    Unary<&MetricsService::ScenarioDeleted>("ScenarioDeleted", Execution::kPool,
                                            Access::kInternal),
    // Internal: asked by the calls service in another process on every ingest; one statement.
    Unary<&MetricsService::GetIngestCatalog>("GetIngestCatalog", Execution::kPointRead,
                                             Access::kInternal),
    Unary<&MetricsService::GetMetricDefinitions>("GetMetricDefinitions", Execution::kPool,
                                                 Access::kInternal),
};

}  // namespace calleval::metrics

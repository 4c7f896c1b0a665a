#pragma once

// The Calls service's methods: each RPC once, with where it runs and who may call it
// (common/method_table.h). gRPC and the edge both serve this table: point reads inline, the
// rest on the pool; the queue methods are the scoring workers' (internal, gRPC only).

#include "common/method_table.h"
#include "services/calls/calls_service.h"

namespace calleval::calls {

inline constexpr MethodEntry<CallsService> kCallsMethods[] = {
    Unary<&CallsService::IngestCall>("IngestCall", Execution::kPool, Access::kWorkspace),
    Unary<&CallsService::GetCall>("GetCall", Execution::kPointRead, Access::kWorkspace),
    Unary<&CallsService::UpdateCall>("UpdateCall", Execution::kPool, Access::kWorkspace),
    Unary<&CallsService::ListCalls>("ListCalls", Execution::kPool, Access::kWorkspace),
    Unary<&CallsService::DeleteCall>("DeleteCall", Execution::kPool, Access::kWorkspace),
    // Reads hourly totals and unsettled calls.
    Unary<&CallsService::GetAgentStats>("GetAgentStats", Execution::kPool, Access::kWorkspace),
    Unary<&CallsService::GetScenarioStats>("GetScenarioStats", Execution::kPool,
                                           Access::kWorkspace),
    // A point read of one row (up to 120 KB of peaks).
    Unary<&CallsService::GetCallWaveform>("GetCallWaveform", Execution::kPointRead,
                                          Access::kWorkspace),
    Unary<&CallsService::CreateAlertRule>("CreateAlertRule", Execution::kPool,
                                          Access::kWorkspace),
    Unary<&CallsService::ListAlertRules>("ListAlertRules", Execution::kPool, Access::kWorkspace),
    Unary<&CallsService::GetAlertRule>("GetAlertRule", Execution::kPointRead, Access::kWorkspace),
    Unary<&CallsService::DeleteAlertRule>("DeleteAlertRule", Execution::kPool,
                                          Access::kWorkspace),
    Unary<&CallsService::ListAlertDeliveries>("ListAlertDeliveries", Execution::kPool,
                                              Access::kWorkspace),
    Unary<&CallsService::LeaseAnalysis>("LeaseAnalysis", Execution::kPool, Access::kInternal),
    Unary<&CallsService::RecordAnalysis>("RecordAnalysis", Execution::kPool, Access::kInternal),
    Unary<&CallsService::FailAnalysis>("FailAnalysis", Execution::kPool, Access::kInternal),
    Unary<&CallsService::ReleaseAnalysis>("ReleaseAnalysis", Execution::kPool, Access::kInternal),
    Unary<&CallsService::RenewAnalysisLease>("RenewAnalysisLease", Execution::kPool,
                                             Access::kInternal),
    Unary<&CallsService::LeaseTranscription>("LeaseTranscription", Execution::kPool,
                                             Access::kInternal),
    Unary<&CallsService::RecordTranscription>("RecordTranscription", Execution::kPool,
                                              Access::kInternal),
    Unary<&CallsService::FailTranscription>("FailTranscription", Execution::kPool,
                                            Access::kInternal),
    Unary<&CallsService::ReleaseTranscription>("ReleaseTranscription", Execution::kPool,
                                               Access::kInternal),
    Unary<&CallsService::RenewTranscriptionLease>("RenewTranscriptionLease", Execution::kPool,
                                                  Access::kInternal),
    Unary<&CallsService::ReleaseHolderLeases>("ReleaseHolderLeases", Execution::kPool,
                                              Access::kInternal),
    // Internal: a point read for an edge in another process serving a presigned link.
    Unary<&CallsService::GetRecordingLocation>("GetRecordingLocation", Execution::kPointRead,
                                               Access::kInternal),
    // Internal: the runs workers' calls, when the runs role runs in another process.
    Unary<&CallsService::IngestRunCall>("IngestRunCall", Execution::kPool, Access::kInternal),
    Unary<&CallsService::GetWorkspaceCall>("GetWorkspaceCall", Execution::kPool, Access::kInternal),
    // Internal: a batch run's comparison, when the agents role runs in another process.
    Unary<&CallsService::GetCallFigures>("GetCallFigures", Execution::kPool, Access::kInternal),
};

}  // namespace calleval::calls

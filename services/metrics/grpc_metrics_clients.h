#pragma once

// What the agents service asks and tells the metrics service when it runs in another
// process: the Metrics service's internal methods (proto/calleval/v1/metrics.proto), on a
// channel that carries the installation's internal credential (CreateInternalChannel). The
// in-process twins are InProcessMetricDirectory and the MetricsStore itself (a
// DeletionListener); cmd/calleval/server.cc picks one by whether the metrics role runs in the
// process.

#include <grpcpp/channel.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "calleval/v1/metrics.pb.h"
#include "services/agents/deletion_listener.h"
#include "services/agents/metric_directory.h"

namespace calleval::metrics {

// Every call waits at most this long: the questions are single-row reads, the notices
// single deletes, on the metrics role.
inline constexpr absl::Duration kMetricsCallDeadline = absl::Seconds(10);

// For the scenarios store.
std::unique_ptr<agents::MetricDirectory> NewGrpcMetricDirectory(
    std::shared_ptr<grpc::Channel> metrics, absl::Duration deadline = kMetricsCallDeadline);
// For the agents service: tells the metrics service of each committed delete, so the link rows
// go. Chosen over links that are only ever filtered because the rows would otherwise stay
// forever and, on SQLite, where the newest id is handed out again, attach to the next agent
// made. A notice that fails (the metrics role down, the deadline passed) is not retried and
// does not fail the delete: every reader of the links leaves out those to agents and scenarios
// that no longer exist (MetricsStore::DropDeletedLinks), so nothing wrong is answered meanwhile.
// A notice deletes nothing while the id names an agent or scenario again (the metrics store
// asks first), so a late one never takes links a client made since (docs/architecture.md).
std::unique_ptr<agents::DeletionListener> NewGrpcDeletionListener(
    std::shared_ptr<grpc::Channel> metrics, absl::Duration deadline = kMetricsCallDeadline);

// The definitions of those `ids` that exist in the workspace (MetricsStore::Definitions), the
// shape of calls::MetricDefinitions and of the runs workers' metric_definitions.
using MetricDefinitions = std::function<absl::StatusOr<std::vector<v1::Metric>>(
    int64_t workspace_id, const std::vector<int64_t>& ids)>;
// Asks the Metrics service's internal GetMetricDefinitions; no question for no ids.
MetricDefinitions NewGrpcMetricDefinitions(std::shared_ptr<grpc::Channel> metrics,
                                           absl::Duration deadline = kMetricsCallDeadline);

}  // namespace calleval::metrics

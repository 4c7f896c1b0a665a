#pragma once

// The agents service's MetricDirectory answered from the metrics tables of this process's
// database (the metrics role runs here), with the metrics store's own query
// (ExistingCustomMetrics). services/metrics/grpc_metrics_clients.h answers the same question
// over the Metrics service when it runs elsewhere.

#include "common/database.h"
#include "services/agents/metric_directory.h"
#include "services/metrics/metrics_store.h"

namespace calleval::metrics {

class InProcessMetricDirectory final : public agents::MetricDirectory {
 public:
  explicit InProcessMetricDirectory(db::Database* db) : db_(db) {}

  absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingMetrics(
      int64_t workspace_id, absl::Span<const int64_t> ids) override {
    return ExistingCustomMetrics(*db_, workspace_id, ids);
  }

 private:
  db::Database* db_;
};

}  // namespace calleval::metrics

#pragma once

// Metric definitions of a workspace. For now the twelve standard metrics every installation
// has (SPEC §3); custom metrics join them with the metrics work.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "calleval/v1/metrics.pb.h"

namespace calleval::metrics {

class MetricsStore {
 public:
  // The metrics usable in metric_ids, `enabled` false for those in `disabled_metric_ids`.
  absl::StatusOr<v1::ListUsableMetricsResponse> ListUsable(
      int64_t workspace_id, const std::vector<int64_t>& disabled_metric_ids) const;
};

}  // namespace calleval::metrics

#pragma once

// What the agents service asks the metrics service, which owns the metrics table
// (docs/architecture.md, "Who owns which table"): whether the custom metric ids a scenario
// names exist. The scenarios store never reads that table itself. Answered by the metrics
// store of this process (metrics::InProcessMetricDirectory) when the metrics role runs here,
// by the Metrics service's internal ExistingMetrics otherwise (metrics::NewGrpcMetricDirectory).

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace calleval::agents {

class MetricDirectory {
 public:
  virtual ~MetricDirectory() = default;

  // Of `ids`, those that name a custom metric of the workspace; one question for all of them.
  // (Standard metric ids are the same everywhere: callers check those themselves.)
  virtual absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingMetrics(
      int64_t workspace_id, absl::Span<const int64_t> ids) = 0;
};

}  // namespace calleval::agents

#include "services/metrics/metrics_store.h"

#include <algorithm>
#include <string>

#include "common/standard_metrics.h"

namespace calleval::metrics {

absl::StatusOr<v1::ListUsableMetricsResponse> MetricsStore::ListUsable(
    int64_t workspace_id, const std::vector<int64_t>& disabled_metric_ids) const {
  v1::ListUsableMetricsResponse response;
  for (const StandardMetricInfo& m : kStandardMetrics) {
    v1::UsableMetric* row = response.add_data();
    row->set_id(m.id);
    row->set_name(std::string(m.name));
    row->set_metrics_type("standard");
    row->set_standard_metric_key(std::string(m.key));
    row->set_requires_audio(m.requires_audio);
    row->set_enabled(std::find(disabled_metric_ids.begin(), disabled_metric_ids.end(), m.id) ==
                     disabled_metric_ids.end());
  }
  return response;
}

}  // namespace calleval::metrics

#include "services/calls/in_process_run_calls.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace calleval::calls {

v1::CallFigures CallFiguresOf(const v1::Call& call) {
  v1::CallFigures figures;
  figures.set_call_id(call.id());
  figures.set_observation_type(call.observation_type());
  for (const v1::StandardMetricResult& standard : call.standard_metrics()) {
    // The latency metric's score is its average_ms (docs/api.md §3.1).
    if (standard.standard_metric_key() == "latency" && standard.status() == "completed" &&
        standard.has_score()) {
      figures.set_latency_mean_ms(standard.score());
    }
  }
  for (const v1::MetricResult& result : call.metric_results()) {
    if (result.metrics_type() == "standard") continue;
    v1::CallFigures::Metric& metric = *figures.add_metrics();
    metric.set_metric_id(result.metric_id());
    metric.set_name(result.name());
    metric.set_result_type(result.result_type());
    metric.set_status(result.status());
    const google::protobuf::Value& value = result.value();
    if (value.kind_case() == google::protobuf::Value::kNumberValue) {
      metric.set_value(value.number_value());
    } else if (value.kind_case() == google::protobuf::Value::kBoolValue) {
      metric.set_value(value.bool_value() ? 1 : 0);
    }
    if (result.has_structured_output() &&
        !result.structured_output().outcome_classification().empty()) {
      metric.set_outcome(result.structured_output().outcome_classification());
    }
  }
  return figures;
}

absl::StatusOr<v1::Call> InProcessRunCalls::Ingest(
    int64_t workspace_id, const v1::IngestCallRequest& request, const runs::RunCallOrigin& origin,
    const std::optional<runs::RunRecording>& recording) {
  RunOrigin run_origin;
  // 0 names no run: a call the runs did not make (a voice platform's production call,
  // services/agents/platform_events.h) counts in no scenario's stats.
  if (origin.run_id != 0) run_origin.run_id = origin.run_id;
  if (origin.scenario_id != 0) run_origin.scenario_id = origin.scenario_id;
  run_origin.platform_version = origin.platform_version;
  std::optional<StoredRecording> stored;
  if (recording.has_value()) {
    stored = StoredRecording{recording->key, recording->content_type, recording->bytes};
  }
  absl::StatusOr<v1::Call> call =
      store_->Ingest(workspace_id, request, stored ? &*stored : nullptr, run_origin);
  if (call.ok() && on_ingest_) on_ingest_(*call);
  return call;
}

absl::StatusOr<v1::Call> InProcessRunCalls::Get(int64_t workspace_id,
                                                const std::string& id_or_key) {
  return store_->Get(workspace_id, id_or_key);
}

// One read per call: a comparison reads two batches' calls (at most 1,000 runs each) once
// per request, so the reads stay small next to the statistics.
absl::StatusOr<v1::CallFiguresList> InProcessRunCalls::Figures(
    int64_t workspace_id, const std::vector<int64_t>& call_ids) {
  v1::CallFiguresList list;
  for (int64_t id : call_ids) {
    absl::StatusOr<v1::Call> call = store_->Get(workspace_id, absl::StrCat(id));
    if (absl::IsNotFound(call.status())) continue;  // deleted since its run ended
    RETURN_IF_ERROR(call.status());
    *list.add_calls() = CallFiguresOf(*call);
  }
  return list;
}

}  // namespace calleval::calls

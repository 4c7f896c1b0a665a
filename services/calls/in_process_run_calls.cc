#include "services/calls/in_process_run_calls.h"

namespace calleval::calls {

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

}  // namespace calleval::calls

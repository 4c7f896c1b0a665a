#pragma once

// The runs workers' RunCalls answered by the calls store of this process (the calls role runs
// here). The Calls service's internal IngestRunCall and GetWorkspaceCall answer through this
// too, so a run's call is stored the same way whether its worker is here or elsewhere;
// services/calls/grpc_calls_clients.h asks them from another process.

#include <functional>

#include "services/calls/calls_store.h"
#include "services/runs/run_calls.h"

namespace calleval::calls {

// A call's figures as GetCallFigures answers them.
v1::CallFigures CallFiguresOf(const v1::Call& call);

class InProcessRunCalls final : public runs::RunCalls {
 public:
  // `on_ingest`, when set, runs after each stored call (wakes the scoring workers: a run's call
  // is ready for scoring at once, its recording, if any, stored already).
  InProcessRunCalls(CallsStore* store, std::function<void(const v1::Call&)> on_ingest)
      : store_(store), on_ingest_(std::move(on_ingest)) {}

  absl::StatusOr<v1::Call> Ingest(int64_t workspace_id, const v1::IngestCallRequest& request,
                                  const runs::RunCallOrigin& origin,
                                  const std::optional<runs::RunRecording>& recording) override;
  absl::StatusOr<v1::Call> Get(int64_t workspace_id, const std::string& id_or_key) override;
  absl::StatusOr<v1::CallFiguresList> Figures(int64_t workspace_id,
                                              const std::vector<int64_t>& call_ids) override;

 private:
  CallsStore* store_;
  std::function<void(const v1::Call&)> on_ingest_;
};

}  // namespace calleval::calls

#pragma once

// The run queue as the runs workers lease it. The runs store is served by the Agents service,
// which queues the runs (RunScenario, CreateBatchRun), so the workers reach it through this
// interface: over the runs store of this process (StoreRunQueue) when the agents role runs here
// or no address is given, over the Agents service's internal LeaseRun, RenewRunLease,
// SetRunCall, FinishRun, ReleaseRun and ReleaseRunLeasesOf otherwise (agents::NewGrpcRunQueue).
//
// Every call but Lease and ReleaseLeasesOf names the run and the lease's token: a token that
// no longer holds the lease (it expired and another worker took the run) is refused with
// kFailedPrecondition and changes nothing.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "calleval/v1/agents.pb.h"
#include "services/runs/runs_store.h"

namespace calleval::runs {

class RunQueue {
 public:
  virtual ~RunQueue() = default;

  // Oldest queued run whose batch has room, or one whose lease expired; nullopt when none.
  // The token carries `holder` (common/lease_heartbeat.h LeaseToken), for ReleaseLeasesOf.
  virtual absl::StatusOr<std::optional<RunJob>> Lease(absl::Duration lease, int max_attempts,
                                                      absl::string_view holder) = 0;
  // Extends the lease while the run is still working (the workers' heartbeat).
  virtual absl::Status Renew(int64_t run_id, absl::string_view token, absl::Duration lease) = 0;
  // Remembers the call the run's conversation became, so a retried lease does not ingest twice.
  virtual absl::Status SetCall(int64_t run_id, absl::string_view token, int64_t call_id) = 0;
  virtual absl::Status Finish(int64_t run_id, absl::string_view token,
                              const RunOutcome& outcome) = 0;
  // Gives the lease back untried (the worker is stopping): the attempt does not count.
  virtual absl::Status Release(int64_t run_id, absl::string_view token) = 0;
  // Gives back every lease whose token carries `holder` (a restarted runs process, before its
  // workers lease anything); how many.
  virtual absl::StatusOr<int> ReleaseLeasesOf(absl::string_view holder) = 0;
};

// The queue through the runs store of this process.
class StoreRunQueue final : public RunQueue {
 public:
  explicit StoreRunQueue(RunsStore* store) : store_(store) {}

  absl::StatusOr<std::optional<RunJob>> Lease(absl::Duration lease, int max_attempts,
                                              absl::string_view holder) override {
    return store_->Lease(lease, max_attempts, holder);
  }
  absl::Status Renew(int64_t run_id, absl::string_view token, absl::Duration lease) override {
    return store_->Renew(run_id, token, lease);
  }
  absl::Status SetCall(int64_t run_id, absl::string_view token, int64_t call_id) override {
    return store_->SetCall(run_id, token, call_id);
  }
  absl::Status Finish(int64_t run_id, absl::string_view token,
                      const RunOutcome& outcome) override {
    return store_->Finish(run_id, token, outcome);
  }
  absl::Status Release(int64_t run_id, absl::string_view token) override {
    return store_->Release(run_id, token);
  }
  absl::StatusOr<int> ReleaseLeasesOf(absl::string_view holder) override {
    return store_->ReleaseLeasesOf(holder);
  }

 private:
  RunsStore* store_;
};

// Another queue that also says, after each run it finished, which workspace the run was of
// (the calls role's alert rules re-evaluate their pass_rate then, docs/api.md §5.11).
// `on_finished` must not block.
class NotifyingRunQueue final : public RunQueue {
 public:
  NotifyingRunQueue(std::unique_ptr<RunQueue> queue,
                    std::function<void(int64_t workspace_id)> on_finished)
      : queue_(std::move(queue)), on_finished_(std::move(on_finished)) {}

  absl::StatusOr<std::optional<RunJob>> Lease(absl::Duration lease, int max_attempts,
                                              absl::string_view holder) override {
    absl::StatusOr<std::optional<RunJob>> job = queue_->Lease(lease, max_attempts, holder);
    if (job.ok() && job->has_value()) {
      absl::MutexLock lock(&mu_);
      workspaces_[(*job)->run_id] = (*job)->workspace_id;
    }
    return job;
  }
  absl::Status Renew(int64_t run_id, absl::string_view token, absl::Duration lease) override {
    return queue_->Renew(run_id, token, lease);
  }
  absl::Status SetCall(int64_t run_id, absl::string_view token, int64_t call_id) override {
    return queue_->SetCall(run_id, token, call_id);
  }
  absl::Status Finish(int64_t run_id, absl::string_view token,
                      const RunOutcome& outcome) override {
    absl::Status finished = queue_->Finish(run_id, token, outcome);
    std::optional<int64_t> workspace = Forget(run_id);
    if (finished.ok() && workspace.has_value() && on_finished_) on_finished_(*workspace);
    return finished;
  }
  absl::Status Release(int64_t run_id, absl::string_view token) override {
    Forget(run_id);
    return queue_->Release(run_id, token);
  }
  absl::StatusOr<int> ReleaseLeasesOf(absl::string_view holder) override {
    return queue_->ReleaseLeasesOf(holder);
  }

 private:
  std::optional<int64_t> Forget(int64_t run_id) {
    absl::MutexLock lock(&mu_);
    auto it = workspaces_.find(run_id);
    if (it == workspaces_.end()) return std::nullopt;
    const int64_t workspace = it->second;
    workspaces_.erase(it);
    return workspace;
  }

  std::unique_ptr<RunQueue> queue_;
  std::function<void(int64_t)> on_finished_;
  absl::Mutex mu_;
  std::map<int64_t, int64_t> workspaces_ ABSL_GUARDED_BY(mu_);  // leased run -> its workspace
};

// A leased run on the wire (LeaseRun) and back.
inline v1::LeasedRun ToProto(const RunJob& job) {
  v1::LeasedRun out;
  out.set_run_id(job.run_id);
  out.set_token(job.token);
  out.set_attempts(job.attempts);
  out.set_workspace_id(job.workspace_id);
  out.set_scenario_id(job.scenario_id);
  out.set_agent_id(job.agent_id);
  out.set_channel(job.channel);
  if (job.call_id) out.set_call_id(*job.call_id);
  return out;
}

inline RunJob FromProto(const v1::LeasedRun& run) {
  RunJob job;
  job.run_id = run.run_id();
  job.token = run.token();
  job.attempts = run.attempts();
  job.workspace_id = run.workspace_id();
  job.scenario_id = run.scenario_id();
  job.agent_id = run.agent_id();
  job.channel = run.channel();
  if (run.has_call_id()) job.call_id = run.call_id();
  return job;
}

}  // namespace calleval::runs

#pragma once

// Downloads ingested recordings in the background (docs/api.md §2, §8): claims pending jobs from
// the calls store under a lease, fetches each with the guarded libcurl client into the blob
// store of recordings (CallsStore::recordings(): straight into its file when the store is a local
// directory, else through a temporary file in `scratch_dir`), and records the outcome. Transient failures (network, timeouts, 5xx) are retried
// with a growing delay; after the last attempt, or on a permanent failure (refused URL, 4xx,
// size cap), the call ends failed with download_failed and the reason. The lease is short and
// renewed by the pool's heartbeat while the download runs (common/lease_heartbeat.h); a process
// that dies mid-download leaves the lease to expire (or gives it back when it restarts), and the
// job is picked up again.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_fetch.h"
#include "common/lease_heartbeat.h"
#include "common/polling_workers.h"
#include "services/calls/calls_store.h"

namespace calleval::calls {

class RecordingDownloader {
 public:
  struct Options {
    int workers = 2;
    FetchOptions fetch;
    int max_attempts = 3;
    absl::Duration poll_interval = absl::Seconds(1);
    // A download's lease, renewed every third of it while the download runs.
    absl::Duration lease = absl::Seconds(30);
    // This process's lease holder id, carried by the tokens it takes.
    std::string holder;
    // Where a download waits to be put into a remote blob store (removed once it is).
    std::string scratch_dir;
    // Called after a recording is stored (the call is ready for analysis).
    std::function<void(int64_t call_id)> on_stored;
  };

  RecordingDownloader(CallsStore* store, Options options);
  ~RecordingDownloader();  // Stop()

  void Start();
  // Wakes a worker now (after an ingest) instead of at the next poll.
  void Notify();
  // Stops claiming jobs, cancels downloads in progress (their jobs go back to the queue for
  // the next start) and joins the workers.
  void Stop();

 private:
  // Claims and downloads one recording; false when there was none.
  bool WorkOnce();
  void Process(const RecordingJob& job);

  CallsStore* store_;
  Options options_;
  // Renews the leases of the downloads in progress (one thread for the pool).
  std::unique_ptr<LeaseHeartbeat> heartbeat_;
  PollingWorkers workers_;
};

}  // namespace calleval::calls

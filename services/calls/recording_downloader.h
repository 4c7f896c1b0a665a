#pragma once

// Downloads ingested recordings in the background (docs/api.md §2, §8): claims pending jobs from
// the calls store under a lease, fetches each with the guarded libcurl client into the recordings
// directory, and records the outcome. Transient failures (network, timeouts, 5xx) are retried
// with a growing delay; after the last attempt, or on a permanent failure (refused URL, 4xx,
// size cap), the call ends failed with download_failed and the reason. A process that dies
// mid-download leaves the lease to expire, and the job is picked up again.

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_fetch.h"
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
  PollingWorkers workers_;
};

}  // namespace calleval::calls

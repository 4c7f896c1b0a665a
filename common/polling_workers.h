#pragma once

// Threads that work off a durable queue (recording downloads, analyses, transcriptions, runs):
// each thread asks `work_once` for one job; when there was none it sleeps until Notify() or
// the poll interval, so an idle queue costs one query per interval and a new job is taken at
// once. Stop() raises cancel_flag() (for work in progress that can end early), lets the jobs
// in progress return, and joins the threads.

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/telemetry.h"

namespace calleval {

class PollingWorkers {
 public:
  // Does one job when the queue has one and returns true (the thread asks again at once);
  // false when the queue was empty or could not be read (the thread waits).
  using WorkOnce = std::function<bool()>;

  PollingWorkers() = default;
  PollingWorkers(const PollingWorkers&) = delete;
  PollingWorkers& operator=(const PollingWorkers&) = delete;
  ~PollingWorkers() { Stop(); }

  // `pool` names the workers in the operators' metrics (calleval_worker_threads,
  // calleval_worker_busy_seconds_total); empty: not reported.
  void Start(int threads, absl::Duration poll_interval, WorkOnce work_once,
             absl::string_view pool = "");
  // Wakes one waiting thread now instead of at its next poll.
  void Notify();
  void Stop();

  // True once Stop() began; readable without a lock (libcurl callbacks, long loops).
  const std::atomic<bool>* cancel_flag() const { return &cancel_; }
  bool stopping() const { return cancel_.load(); }

 private:
  void Loop();

  absl::Duration poll_interval_;
  WorkOnce work_once_;
  // Set by Start() when the pool is named.
  telemetry::Counter* busy_seconds_ = nullptr;
  telemetry::Gauge* threads_gauge_ = nullptr;
  std::atomic<bool> cancel_{false};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace calleval

#pragma once

// A fixed pool of threads for blocking work (SQLite writes that wait for a group commit,
// downloads), so gRPC's callback threads never block. A pool given a queue bound refuses work
// beyond it (TrySchedule), so a burst of slow work is shed instead of queued without limit.

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace calleval {

class ThreadPool {
 public:
  // `max_queued`: tasks waiting for a thread beyond which TrySchedule refuses; 0 = no bound.
  explicit ThreadPool(int threads, size_t max_queued = 0);
  ~ThreadPool();  // runs what was queued, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Always queues, whatever the bound.
  void Schedule(std::function<void()> task);
  // Queues unless `max_queued` tasks are already waiting; false when refused.
  bool TrySchedule(std::function<void()> task);

 private:
  void Loop();

  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace calleval

#pragma once

// A fixed pool of threads for blocking work (SQLite writes that wait for a group commit,
// downloads), so gRPC's callback threads never block.

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace calleval {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();  // runs what was queued, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace calleval

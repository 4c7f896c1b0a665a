#include "common/thread_pool.h"

namespace calleval {

ThreadPool::ThreadPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

bool ThreadPool::TrySchedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (max_queued_ > 0 && queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void ThreadPool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return !p->queue_.empty() || p->stopping_; },
          this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace calleval

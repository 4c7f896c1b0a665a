#include "common/polling_workers.h"

namespace calleval {

void PollingWorkers::Start(int threads, absl::Duration poll_interval, WorkOnce work_once) {
  poll_interval_ = poll_interval;
  work_once_ = std::move(work_once);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

void PollingWorkers::Notify() {
  absl::MutexLock lock(&mu_);
  ++wakeups_;
}

void PollingWorkers::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cancel_.store(true);
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void PollingWorkers::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (work_once_()) continue;
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || wakeups_ > 0; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), poll_interval_);
    if (wakeups_ > 0) --wakeups_;
  }
}

}  // namespace calleval

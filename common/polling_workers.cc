#include "common/polling_workers.h"

#include <string>

#include "absl/time/clock.h"

namespace calleval {

void PollingWorkers::Start(int threads, absl::Duration poll_interval, WorkOnce work_once,
                           absl::string_view pool) {
  poll_interval_ = poll_interval;
  work_once_ = std::move(work_once);
  if (!pool.empty()) {
    // Utilisation is rate(busy seconds) / threads.
    telemetry::Registry& registry = telemetry::DefaultRegistry();
    busy_seconds_ =
        &registry
             .Counter("calleval_worker_busy_seconds_total",
                      "Time the pool's threads spent on a job (not waiting for one).", {"pool"})
             .WithLabels({std::string(pool)});
    threads_gauge_ = &registry
                          .Gauge("calleval_worker_threads",
                                 "Threads of each worker pool that this process runs.", {"pool"})
                          .WithLabels({std::string(pool)});
    threads_gauge_->Add(threads);
  }
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
  if (threads_gauge_ != nullptr) threads_gauge_->Add(-static_cast<double>(threads_.size()));
  threads_.clear();
}

void PollingWorkers::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const absl::Time start = absl::Now();
    if (work_once_()) {
      if (busy_seconds_ != nullptr)
        busy_seconds_->Increment(absl::ToDoubleSeconds(absl::Now() - start));
      continue;
    }
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || wakeups_ > 0; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), poll_interval_);
    if (wakeups_ > 0) --wakeups_;
  }
}

}  // namespace calleval

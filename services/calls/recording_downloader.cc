#include "services/calls/recording_downloader.h"

#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace calleval::calls {
namespace {

// Longer than the fetch's total timeout, so a live download is never handed out twice.
absl::Duration LeaseFor(const FetchOptions& fetch) {
  return fetch.total_timeout + fetch.connect_timeout + absl::Seconds(30);
}

bool IsTransient(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

RecordingDownloader::RecordingDownloader(CallsStore* store, Options options)
    : store_(store), options_(std::move(options)) {
  options_.fetch.cancel = &cancel_;
}

RecordingDownloader::~RecordingDownloader() { Stop(); }

void RecordingDownloader::Start() {
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { Loop(); });
}

void RecordingDownloader::Notify() {
  absl::MutexLock lock(&mu_);
  ++wakeups_;
}

void RecordingDownloader::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cancel_.store(true);
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void RecordingDownloader::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    auto job = store_->ClaimRecordingJob(LeaseFor(options_.fetch));
    if (!job.ok()) {
      std::cerr << "recording downloader: " << job.status() << "\n";
    } else if (job->has_value()) {
      Process(**job);
      continue;
    }
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || wakeups_ > 0; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), options_.poll_interval);
    if (wakeups_ > 0) --wakeups_;
  }
}

void RecordingDownloader::Process(const RecordingJob& job) {
  const std::string path = store_->RecordingPath(job.call_id);
  absl::StatusOr<FetchResult> result = FetchToFile(job.url, path, options_.fetch);
  absl::Status recorded;
  if (result.ok()) {
    recorded = store_->CompleteRecording(job.call_id, result->content_type, result->bytes);
    if (recorded.ok() && options_.on_stored) options_.on_stored(job.call_id);
    if (!recorded.ok()) {
      // The call was deleted while downloading: drop the file.
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
    return;
  }
  if (result.status().code() == absl::StatusCode::kCancelled) {
    recorded = store_->ReleaseRecording(job.call_id);
  } else if (IsTransient(result.status()) && job.attempts < options_.max_attempts) {
    recorded = store_->RetryRecording(job.call_id, absl::Seconds(5 * job.attempts));
  } else {
    // The fetcher's messages read "recording download failed: <why>".
    recorded = store_->FailRecording(job.call_id, result.status().message());
  }
  if (!recorded.ok()) {
    std::cerr << "recording downloader: call " << job.call_id << ": " << recorded << "\n";
  }
}

}  // namespace calleval::calls

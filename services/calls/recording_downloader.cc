#include "services/calls/recording_downloader.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/log.h"

namespace calleval::calls {
namespace {

bool IsTransient(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

RecordingDownloader::RecordingDownloader(CallsStore* store, Options options)
    : store_(store), options_(std::move(options)) {
  options_.fetch.cancel = workers_.cancel_flag();
}

RecordingDownloader::~RecordingDownloader() { Stop(); }

void RecordingDownloader::Start() {
  if (options_.lease > absl::ZeroDuration()) {
    heartbeat_ = std::make_unique<LeaseHeartbeat>("recording downloader",
                                                  LeaseHeartbeat::IntervalFor(options_.lease));
  }
  workers_.Start(
      options_.workers, options_.poll_interval, [this] { return WorkOnce(); }, "downloads");
}

void RecordingDownloader::Notify() { workers_.Notify(); }

void RecordingDownloader::Stop() {
  workers_.Stop();
  if (heartbeat_) heartbeat_->Stop();
}

bool RecordingDownloader::WorkOnce() {
  auto job = store_->ClaimRecordingJob(options_.lease, options_.holder);
  if (!job.ok()) {
    LogWarn("recording downloader: claiming a job failed", {{"error", job.status()}});
    return false;
  }
  if (!job->has_value()) return false;
  Process(**job);
  return true;
}

void RecordingDownloader::Process(const RecordingJob& job) {
  BlobStore* recordings = store_->recordings();
  const std::string key = CallsStore::RecordingKey(job.call_id);
  // A local store's file is written by the download itself (FetchToFile writes a temporary file
  // and renames it); a remote store's object is put from a download in the scratch dir.
  const std::optional<std::string> local = recordings->LocalPath(key);
  const std::string path =
      local.has_value()
          ? *local
          : absl::StrCat(options_.scratch_dir, "/download-", job.call_id, "-",
                         HexEncode(RandomBytes(8)));
  auto drop_scratch = [&] {
    if (local.has_value()) return;
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  };
  // Renewed until the outcome is recorded.
  std::unique_ptr<LeaseHeartbeat::Held> held;
  if (heartbeat_) {
    const int64_t call_id = job.call_id;
    const std::string token = job.token;
    held = heartbeat_->Hold([this, call_id, token] {
      return store_->RenewRecordingLease(call_id, token, options_.lease);
    });
  }
  absl::StatusOr<FetchResult> result = FetchToFile(job.url, path, options_.fetch);
  absl::Status stored = absl::OkStatus();
  if (result.ok() && !local.has_value()) {
    absl::StatusOr<BlobSource> source = FileBlobSource(path);
    stored = source.ok() ? recordings->Put(key, *source, result->content_type) : source.status();
    drop_scratch();
  }
  if (held && held->lost()) {
    // The lease expired and another downloader claimed the job: its outcome is the one kept.
    LogWarn("recording download: lease lost, result dropped", {{"call_id", job.call_id}});
    drop_scratch();
    return;
  }
  absl::Status recorded;
  if (result.ok() && stored.ok()) {
    recorded = store_->CompleteRecording(job.call_id, result->content_type, result->bytes);
    if (recorded.ok() && options_.on_stored) options_.on_stored(job.call_id);
    if (!recorded.ok()) {
      // The call was deleted while downloading: drop the recording.
      recordings->Delete(key).IgnoreError();
    }
    return;
  }
  if (!stored.ok()) {
    // Downloaded, but the blob store did not take it: tried again like a failed download, and
    // the call ends failed with the store's reason after the last attempt.
    LogWarn("recording download: the blob store did not take the recording",
            {{"call_id", job.call_id}, {"attempt", job.attempts}, {"error", stored}});
    recorded = job.attempts < options_.max_attempts
                   ? store_->RetryRecording(job.call_id, absl::Seconds(5 * job.attempts))
                   : store_->FailRecording(
                         job.call_id, absl::StrCat("the recording could not be stored: ",
                                                   stored.message()));
  } else if (result.status().code() == absl::StatusCode::kCancelled) {
    recorded = store_->ReleaseRecording(job.call_id);
  } else if (IsTransient(result.status()) && job.attempts < options_.max_attempts) {
    LogInfo("recording download failed; it will be retried",
            {{"call_id", job.call_id}, {"attempt", job.attempts}, {"error", result.status()}});
    recorded = store_->RetryRecording(job.call_id, absl::Seconds(5 * job.attempts));
  } else {
    LogWarn("recording download failed; the call ends failed",
            {{"call_id", job.call_id}, {"attempt", job.attempts}, {"error", result.status()}});
    // The fetcher's messages read "recording download failed: <why>".
    recorded = store_->FailRecording(job.call_id, result.status().message());
  }
  if (!recorded.ok()) {
    LogWarn("recording download: recording the outcome failed",
            {{"call_id", job.call_id}, {"error", recorded}});
  }
}

}  // namespace calleval::calls

#pragma once

// A call's recording as a file the decoder can open, for the length of one job. The scoring and
// transcription workers read recordings only through the blob store (common/blob_store.h): a
// store that keeps the object on this machine's disk (the local directory) names its file, which
// is read in place; a remote one (S3) is downloaded into the worker's scratch dir, up to a byte
// cap, and the copy is removed when the job is done.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/blob_store.h"

namespace calleval::scoring {

class LocalRecording {
 public:
  // kNotFound when the store has no object under `key`; kUnavailable when it cannot be reached
  // (worth another attempt); a store's other errors as it gave them.
  static absl::StatusOr<LocalRecording> Fetch(BlobStore& store, const std::string& key,
                                              const std::string& scratch_dir,
                                              int64_t max_bytes);

  LocalRecording(LocalRecording&& other) noexcept;
  LocalRecording& operator=(LocalRecording&&) = delete;
  LocalRecording(const LocalRecording&) = delete;
  ~LocalRecording();

  const std::string& path() const { return path_; }

 private:
  LocalRecording(std::string path, bool owned) : path_(std::move(path)), owned_(owned) {}

  std::string path_;
  bool owned_ = false;  // a downloaded copy, removed with this
};

}  // namespace calleval::scoring

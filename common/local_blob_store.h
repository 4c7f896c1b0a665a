#pragma once

// The embedded blob store: one file per key under a directory.
//
// `<root>/<key>` holds the bytes and `<root>/<key>.content-type` the content type (a sidecar,
// because extended attributes are not on every filesystem and not in every backup tool). A
// put writes both to `.tmp-*` files in the key's directory, fsyncs them, and renames the
// sidecar, then the data, then fsyncs the directory: a reader sees the old object or the new
// one, never a partial file. Between the two renames a reader may pair the old bytes with the
// new content type; recordings are written once under a new key, so that does not arise.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/blob_store.h"

namespace calleval {

class LocalDirBlobStore : public BlobStore {
 public:
  // Creates `root` (and its parents) when missing. `root` must be absolute.
  static absl::StatusOr<std::unique_ptr<LocalDirBlobStore>> Open(const std::string& root);

  absl::Status Put(absl::string_view key, const BlobSource& source,
                   absl::string_view content_type) override;
  absl::StatusOr<BlobInfo> Stat(absl::string_view key) override;
  absl::Status Read(absl::string_view key, int64_t offset, int64_t length,
                    const BlobSink& sink) override;
  absl::Status Delete(absl::string_view key) override;
  std::string Describe() const override;
  std::optional<std::string> LocalPath(absl::string_view key) const override;

 private:
  explicit LocalDirBlobStore(std::string root) : root_(std::move(root)) {}
  absl::Status Error(absl::StatusCode code, absl::string_view op, absl::string_view key,
                     absl::string_view what) const;

  std::string root_;
};

}  // namespace calleval

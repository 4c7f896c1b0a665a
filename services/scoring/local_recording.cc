#include "services/scoring/local_recording.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/errors.h"

namespace calleval::scoring {

absl::StatusOr<LocalRecording> LocalRecording::Fetch(BlobStore& store, const std::string& key,
                                                     const std::string& scratch_dir,
                                                     int64_t max_bytes) {
  if (key.empty()) return absl::NotFoundError("the call has no stored recording");
  if (std::optional<std::string> local = store.LocalPath(key)) {
    std::error_code ec;
    if (!std::filesystem::exists(*local, ec)) {
      return absl::NotFoundError(
          absl::StrCat("the recording ", key, " is missing from ", store.Describe()));
    }
    return LocalRecording(*std::move(local), /*owned=*/false);
  }
  // The job's own name: two workers never share a copy, and a crash leaves at most one file per
  // worker behind, which the next start's scratch dir cleanup removes.
  const std::string path = absl::StrCat(scratch_dir, "/recording-", HexEncode(RandomBytes(8)));
  absl::Status downloaded = store.Download(key, path, max_bytes);
  if (!downloaded.ok()) return downloaded;
  return LocalRecording(path, /*owned=*/true);
}

LocalRecording::LocalRecording(LocalRecording&& other) noexcept
    : path_(std::move(other.path_)), owned_(std::exchange(other.owned_, false)) {}

LocalRecording::~LocalRecording() {
  if (!owned_) return;
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

}  // namespace calleval::scoring

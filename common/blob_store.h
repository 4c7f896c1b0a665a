#pragma once

// Where recordings live: one interface, two implementations.
//
//  * LocalDirBlobStore (common/local_blob_store.h), the embedded default: files under a
//    directory, each put atomic (temporary file, fsync, rename).
//  * S3BlobStore (common/s3_blob_store.h): S3-compatible object storage over libcurl, signed
//    with SigV4 (CURLOPT_AWS_SIGV4), multipart uploads for large objects.
//
// Both stream: Put reads its source in blocks and Read hands the bytes to a callback as they
// arrive, so memory does not grow with the object's size.
//
// Codes say what the caller should do:
//   kNotFound            the key does not exist.
//   kUnavailable         network trouble, a timeout, HTTP 408/429/5xx, an upload cut off:
//                        worth retrying later. Nothing partial is left visible.
//   kPermissionDenied    the store refused the credentials (wrong key or secret, no access).
//   kOutOfRange          Read past the end of the object (see Read).
//   kInvalidArgument     a key or URL that cannot be used.
//   kFailedPrecondition  the store is misconfigured (no such bucket, no credentials) or
//                        answered something this client does not understand.
//   kInternal            a local file could not be read or written.
// Messages name the store and the key: "blob store s3://rec/prod: PUT calls/1.wav: ...".
//
// Both implementations are thread-safe: they hold configuration only, and every call opens
// its own file or libcurl handle.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval {

// The bytes of an object to put, read by position: a multipart upload reads each part's range,
// and libcurl may rewind a body to send it again (CURLOPT_SEEKFUNCTION).
struct BlobSource {
  // Known up front: S3 needs a Content-Length, and the size picks single PUT or multipart.
  int64_t size = 0;
  // Copies up to `max` bytes starting at `offset` into `out`; returns how many (0 only when
  // `offset` is at or past the end). Called from one thread at a time.
  std::function<absl::StatusOr<size_t>(int64_t offset, char* out, size_t max)> read_at;
};

// A file's bytes as a BlobSource. The file is opened now and kept open by the source (and its
// copies), so a rename or unlink after this call does not change what is put.
absl::StatusOr<BlobSource> FileBlobSource(const std::string& path);
// Bytes held in memory (small objects and tests).
BlobSource StringBlobSource(std::string bytes);

// Receives a Read's bytes in order, in blocks of at most a few hundred KiB. A non-OK status
// stops the read and is returned by Read as is.
using BlobSink = std::function<absl::Status(absl::string_view bytes)>;

struct BlobInfo {
  int64_t size = 0;
  // As given to Put; "application/octet-stream" when none was.
  std::string content_type;
};

inline constexpr int64_t kToEnd = -1;

class BlobStore {
 public:
  virtual ~BlobStore() = default;

  // Stores `source` under `key`, replacing what was there. Either the whole object becomes
  // visible or nothing does. `content_type` empty means "application/octet-stream".
  virtual absl::Status Put(absl::string_view key, const BlobSource& source,
                           absl::string_view content_type) = 0;

  virtual absl::StatusOr<BlobInfo> Stat(absl::string_view key) = 0;

  // Streams bytes [offset, offset + length) to `sink`; `length` kToEnd reads to the end. A
  // range running past the end is clamped to it (as HTTP Range is). An `offset` at or past
  // the end is kOutOfRange, except that reading a whole empty object (offset 0, kToEnd)
  // succeeds with no bytes. `length` 0 checks that the key exists and reads nothing.
  virtual absl::Status Read(absl::string_view key, int64_t offset, int64_t length,
                            const BlobSink& sink) = 0;

  // Removes `key`; a key that does not exist is not an error.
  virtual absl::Status Delete(absl::string_view key) = 0;

  // "file:///var/lib/calleval/recordings", "s3://bucket/prefix": for messages and logs,
  // never with credentials.
  virtual std::string Describe() const = 0;
  // Where the object's bytes already are on this machine's disk, for a store that keeps them
  // there (the local directory): a reader opens that file instead of copying it. nullopt for a
  // remote store, or when the key cannot name an object. The file may not exist.
  virtual std::optional<std::string> LocalPath(absl::string_view key) const {
    return std::nullopt;
  }

  // Reads the whole object into `local_path`, written as `local_path + ".part"` and renamed
  // when complete (removed on failure). An object larger than `max_bytes` is refused with
  // kFailedPrecondition before a byte is read: workers decode from a bounded temporary file.
  absl::Status Download(absl::string_view key, const std::string& local_path,
                        int64_t max_bytes = int64_t{2} << 30);
};

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when not empty
};

struct BlobStoreOptions {
  // S3 only. When unset, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN from
  // the environment (a Kubernetes Secret mapped to those variables); without either,
  // OpenBlobStore refuses an s3:// URL.
  std::optional<S3Credentials> credentials;
  // Objects above `multipart_threshold` bytes go up in parts of `part_size` bytes (the last
  // one shorter). S3 wants parts of at least 5 MiB (except the last) and at most 10,000 of
  // them: the part size grows for objects that would need more.
  int64_t multipart_threshold = int64_t{64} << 20;
  int64_t part_size = int64_t{16} << 20;
  absl::Duration connect_timeout = absl::Seconds(10);
  // Each request may take `request_timeout` plus the time its body needs at
  // `min_bytes_per_second`; a transfer slower than that for `stall_timeout` is abandoned.
  absl::Duration request_timeout = absl::Seconds(30);
  int64_t min_bytes_per_second = int64_t{1} << 20;
  absl::Duration stall_timeout = absl::Seconds(30);
  // The most read into memory from one answer (XML bodies: errors, upload ids).
  int64_t max_response_bytes = int64_t{1} << 20;
};

// Opens the store a URL names:
//   /abs/dir or file:///abs/dir          a LocalDirBlobStore (the directory is created)
//   s3://bucket[/prefix][?endpoint=URL&region=NAME]
//                                        an S3BlobStore; region defaults to us-east-1, the
//                                        endpoint to https://s3.<region>.amazonaws.com.
// Keys are put under `prefix/`.
absl::StatusOr<std::unique_ptr<BlobStore>> OpenBlobStore(absl::string_view url,
                                                         const BlobStoreOptions& options = {});

// Whether `key` may name an object: 1 to 1024 bytes of printable ASCII, segments separated
// by single '/', none empty, none "." or "..", none starting with ".tmp-" (the local store's
// temporary files), and no segment ending in ".content-type" (its sidecars); no leading
// '/', no backslash. Both stores apply the same rule, so a key valid on one is valid on both.
absl::Status CheckBlobKey(absl::string_view key);

}  // namespace calleval

#pragma once

// S3-compatible object storage over libcurl.
//
// Requests are signed with libcurl's SigV4 (CURLOPT_AWS_SIGV4 "aws:amz:<region>:s3") and carry
// `x-amz-content-sha256: UNSIGNED-PAYLOAD`: libcurl then signs that value instead of hashing
// the body, which it never holds (bodies stream from CURLOPT_READFUNCTION), and S3 accepts an
// unsigned payload over any transport. libcurl 7.88 does not sort query parameters before
// signing (curl issue #9717), so every query here is written already sorted, and a valueless
// parameter is written "uploads=" as the canonical form has it.
//
// Addressing is path-style always (<endpoint>/<bucket>/<key>): it works on every
// S3-compatible server and on AWS, and bucket names with dots keep a valid TLS name.
//
// Objects up to BlobStoreOptions::multipart_threshold go up in one PUT; larger ones in a
// multipart upload (CreateMultipartUpload, UploadPart per part, CompleteMultipartUpload),
// aborted (AbortMultipartUpload, best effort) when a part or the completion fails, so S3
// keeps no orphaned parts. Nothing is retried here: a failure is kUnavailable and the caller
// retries the whole Put, which is idempotent.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/blob_store.h"

namespace calleval {

struct S3Location {
  std::string endpoint;  // "https://s3.eu-west-1.amazonaws.com", no trailing '/'
  std::string region;
  std::string bucket;
  std::string prefix;  // "" or "a/b" (no leading or trailing '/')
};

class S3BlobStore : public BlobStore {
 public:
  static constexpr int64_t kMinPartSize = int64_t{5} << 20;
  static constexpr int kMaxParts = 10000;

  // Use OpenBlobStore(), which validates the URL and finds the credentials.
  S3BlobStore(S3Location location, S3Credentials credentials, const BlobStoreOptions& options);

  absl::Status Put(absl::string_view key, const BlobSource& source,
                   absl::string_view content_type) override;
  absl::StatusOr<BlobInfo> Stat(absl::string_view key) override;
  absl::Status Read(absl::string_view key, int64_t offset, int64_t length,
                    const BlobSink& sink) override;
  absl::Status Delete(absl::string_view key) override;
  std::string Describe() const override;

  // The part size a multipart upload of `size` bytes uses: the configured one, grown so that
  // no more than kMaxParts parts are needed.
  int64_t PartSizeFor(int64_t size) const;

 private:
  struct Request;
  struct Response;

  absl::StatusOr<Response> Perform(const Request& request) const;
  absl::Status PutSingle(absl::string_view key, const BlobSource& source,
                         absl::string_view content_type);
  absl::Status PutMultipart(absl::string_view key, const BlobSource& source,
                            absl::string_view content_type);
  // The object's URL, with `query` (already sorted) appended.
  std::string ObjectUrl(absl::string_view key, absl::string_view query = "") const;

  S3Location location_;
  S3Credentials credentials_;
  BlobStoreOptions options_;
  std::string sigv4_;  // "aws:amz:<region>:s3"
};

}  // namespace calleval

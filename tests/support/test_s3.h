#pragma once

// A real S3-compatible server for the tests: s3rver from npm (pinned in tools/s3, installed by
// scripts/setup with `npm ci`), started by tools/s3/serve.js on 127.0.0.1 with its files in a
// directory and one bucket. serve.js checks every SigV4 signature (s3rver alone does not), with
// s3rver's account: access key S3RVER, secret S3RVER.
//
// Each TestS3 is one server process, stopped (SIGTERM, then SIGKILL) when the object goes.
// `node` is looked up on PATH.

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace calleval::testing {

class TestS3 {
 public:
  static constexpr const char* kAccessKeyId = "S3RVER";
  static constexpr const char* kSecretAccessKey = "S3RVER";

  // Starts a server keeping its files in `dir` (created if missing) with bucket `bucket`,
  // listening on `port` (0: a free one). Waits until it answers (up to 30 s).
  static absl::StatusOr<std::unique_ptr<TestS3>> Start(const std::string& dir,
                                                       const std::string& bucket = "recordings",
                                                       int port = 0);
  ~TestS3();
  TestS3(const TestS3&) = delete;
  TestS3& operator=(const TestS3&) = delete;

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  const std::string& bucket() const { return bucket_; }
  // "http://127.0.0.1:<port>"
  std::string Endpoint() const;
  // "s3://<bucket>/<prefix>?endpoint=http://127.0.0.1:<port>&region=us-east-1"
  std::string Url(const std::string& prefix = "") const;
  // Stops the server now (the destructor then does nothing).
  void Stop();

 private:
  TestS3(pid_t pid, int port, std::string dir, std::string bucket)
      : pid_(pid), port_(port), dir_(std::move(dir)), bucket_(std::move(bucket)) {}

  pid_t pid_;
  int port_;
  std::string dir_;
  std::string bucket_;
};

}  // namespace calleval::testing

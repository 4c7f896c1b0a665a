#pragma once

// A faithful stand-in for OpenAI's POST /v1/audio/transcriptions on a TestHttpServer, for tests
// of the speech-to-text client: it parses the multipart/form-data body, checks the bearer key,
// the model and the uploaded WAV, and answers in OpenAI's shapes (verbose_json with words and
// segments, json, text; errors as {"error": {"message", "type", "param", "code"}}).
//
//   TestHttpServer server;
//   auto fake = RegisterOpenAiTranscriptionsRoute(&server, {});
//   fake->FailNext({FakeTranscriptionFailure::kRateLimited, "1"});
//   OpenAiTranscriber stt({.base_url = server.url("/v1"), .api_key = fake->api_key()});

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/test_http_server.h"

namespace calleval {

struct FakeTranscribedWord {
  std::string word;
  double start = 0;  // seconds from the start of the uploaded file
  double end = 0;
};

// What the fake "hears" in one uploaded file of `duration_seconds` (request_index counts
// successful transcriptions from 0).
using FakeTranscript =
    std::function<std::vector<FakeTranscribedWord>(double duration_seconds, int request_index)>;

struct FakeTranscriptionFailure {
  enum Kind {
    kRateLimited,   // 429 rate_limit_exceeded, with Retry-After when retry_after is not empty
    kServerError,   // 500 server_error
    kMalformed,     // 200 with a body that is not JSON
    kUnauthorized,  // 401 invalid_api_key, as for a wrong key
  };
  Kind kind = kServerError;
  std::string retry_after;
};

// One request the fake accepted or refused, as parsed from its multipart body.
struct ReceivedTranscription {
  int http_status = 0;  // what the fake answered
  std::string authorization;
  std::string model;
  std::string response_format;
  std::vector<std::string> timestamp_granularities;
  std::string language;
  std::string file_name;
  std::string file_content_type;
  int64_t file_bytes = 0;
  int sample_rate = 0;
  int channels = 0;
  double duration_seconds = 0;  // of the uploaded WAV, from its header and data size
};

struct FakeTranscriptionsOptions {
  std::string path = "/v1/audio/transcriptions";
  std::string api_key = "sk-test-0123456789";
  // Models the fake accepts; verbose_json is refused for any but whisper-1, as OpenAI does.
  std::vector<std::string> models = {"whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe"};
  // Uploads over this are refused with 413, as OpenAI refuses files over 25 MB.
  int64_t max_file_bytes = 26'214'400;
  // Default: "hello world" at 0.5-0.9 s and 1.0-1.6 s of every file (clipped to its length).
  FakeTranscript transcript;
};

class FakeTranscriptions {
 public:
  explicit FakeTranscriptions(FakeTranscriptionsOptions options);

  const std::string& api_key() const { return options_.api_key; }
  // Queues a failure: the next request that passes the key check gets it instead of a
  // transcription (kUnauthorized is answered regardless of the key).
  void FailNext(FakeTranscriptionFailure failure);
  std::vector<ReceivedTranscription> received() const;

  // The route's handler (RegisterOpenAiTranscriptionsRoute installs it).
  TestHttpServer::Response Handle(const TestHttpServer::Request& request);

 private:
  const FakeTranscriptionsOptions options_;
  mutable std::mutex mu_;
  std::deque<FakeTranscriptionFailure> failures_;  // guarded by mu_
  std::vector<ReceivedTranscription> received_;    // guarded by mu_
  int transcriptions_ = 0;                         // guarded by mu_
};

// Registers options.path on `server`. The route keeps the returned object alive.
std::shared_ptr<FakeTranscriptions> RegisterOpenAiTranscriptionsRoute(
    TestHttpServer* server, FakeTranscriptionsOptions options);

}  // namespace calleval

#pragma once

// callevalctl's client of a calleval server's REST API (docs/api.md). Unlike the server's own
// outbound fetches it applies no public-address guard: the operator names the server, which is
// often on localhost or a private network. Every request is bounded by a connect timeout, a
// total timeout and a cap on the answer's size.
//
// Retries (Call): connection errors and timeouts and 503, up to max_attempts in all; 429, up to
// max_rate_limited_attempts. The
// wait before the next attempt is the answer's Retry-After (seconds or an HTTP date, capped at
// max_retry_after), else exponential backoff with full jitter. Other answers are returned as
// they are, for the caller to read (a 409 on ingest is a call already pushed).

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace calleval::ctl {

struct ApiClientOptions {
  std::string base_url;  // "http://127.0.0.1:8080", no trailing slash needed
  std::string api_key;   // sent as Authorization: Bearer; never printed
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration request_timeout = absl::Seconds(60);
  int64_t max_response_bytes = int64_t{64} << 20;
  int max_attempts = 8;
  // A 429 is the server pacing its clients, not a failure: it gets more attempts.
  int max_rate_limited_attempts = 30;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration max_retry_after = absl::Seconds(60);
};

struct ApiResponse {
  long status = 0;
  std::string body;
  std::optional<absl::Duration> retry_after;
  int attempts = 1;  // requests made for this answer (Call's retries included)
};

class ApiClient {
 public:
  explicit ApiClient(ApiClientOptions options);

  // One request, no retry. `target` is the path and query: "/api/public/v1/calls?page=2".
  // Errors: kUnavailable for connection errors and timeouts, kResourceExhausted for an answer
  // over the size cap; their messages name the server without credentials.
  absl::StatusOr<ApiResponse> Send(absl::string_view method, absl::string_view target,
                                   const std::string* body) const;

  // Send with the retries described above. `retried`, when set, counts the retries made.
  absl::StatusOr<ApiResponse> Call(absl::string_view method, absl::string_view target,
                                   const std::string* body,
                                   std::atomic<int64_t>* retried = nullptr) const;

  // Call, then the 2xx answer's body as JSON; any other answer is an error carrying
  // ApiErrorMessage.
  absl::StatusOr<nlohmann::json> GetJson(absl::string_view target) const;
  absl::StatusOr<nlohmann::json> PostJson(absl::string_view target,
                                          const nlohmann::json& body) const;

  const ApiClientOptions& options() const { return options_; }

 private:
  ApiClientOptions options_;
};

// "HTTP 422 validation_failed: call_identifier: must not be empty" from an answer in the shape
// of docs/api.md §1.3 (else the first 200 bytes of its body).
std::string ApiErrorMessage(const ApiResponse& response);

// The `code` of an error body, or empty.
std::string ApiErrorCode(const ApiResponse& response);

// Percent-encoding of a query value (RFC 3986 unreserved characters kept).
std::string QueryEscape(absl::string_view value);

}  // namespace calleval::ctl

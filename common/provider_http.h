#pragma once

// What every client of an OpenAI-compatible provider (chat completions, transcriptions, speech) does
// the same way: which HTTP answers are worth retrying, how long to wait before the next attempt
// (exponential backoff with full jitter, or the server's Retry-After), and the message to quote
// from an error body.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval {

// 408, 409, 429 and 5xx: the same request may succeed later.
bool IsRetryableHttpStatus(long http_status);

// The provider's error message from an error body: {"error": {"message": ...}} (OpenAI),
// {"error": "..."}, {"message": ...} or {"detail": ...} (other compatible servers),
// {"errors": [{"title": ..., "detail": ...}]} (JSON:API, as Telnyx answers), else the body
// itself; shortened to 300 characters. For messages like
// "HTTP 401 from the LLM provider: Incorrect API key provided."
std::string ProviderErrorMessage(absl::string_view body);

// A Retry-After value: delta-seconds ("7", "1.5") or an HTTP date. nullopt when unusable.
std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now);

// The delay before attempt `attempt + 1` (attempt counts from 1): initial * 2^(attempt-1),
// capped at max, with full jitter (uniform in [0, that]) drawn from `unit_random` in [0, 1).
absl::Duration BackoffDelay(int attempt, absl::Duration initial, absl::Duration max,
                            double unit_random);

// One POST to a provider, with the rules above: connect and total timeouts per attempt, an
// answer byte cap, up to `max_attempts` attempts on connection errors, timeouts and retryable
// statuses (backoff with full jitter; a longer Retry-After wins, up to max_backoff), and
// cancellation within about 100 ms. Errors start with `label` and carry `error_code`
// (kFailedPrecondition: the provider refused; kUnavailable: unreachable or still failing;
// kCancelled with code `cancelled_code`).
// One part of a multipart/form-data body (an upload).
struct MultipartPart {
  std::string name;
  std::string data;
  std::string filename;      // set for a file part
  std::string content_type;  // of a file part
};

struct ProviderPost {
  std::string url;
  // The HTTP method; empty is POST. Another (DELETE) is sent with the same headers and body.
  std::string method;
  std::vector<std::string> headers;  // "Name: value"
  std::string content_type = "application/json";
  std::string body;
  // When not empty, sent as multipart/form-data instead of `body`.
  std::vector<MultipartPart> multipart;
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration request_timeout = absl::Seconds(60);
  int64_t max_response_bytes = int64_t{16} << 20;
  int max_attempts = 3;
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
  const std::atomic<bool>* cancel = nullptr;
  std::string label;  // "text-to-speech failed: "
  std::string error_code;
  std::string bad_response_code;  // an answer over max_response_bytes
  std::string cancelled_code;
  std::atomic<int>* requests = nullptr;  // counts the HTTP requests made, when set
  // When set, receives the HTTP status of the last answer (0 when none came), so a caller can
  // tell a refusal it expects (404 for a call already over) from the others.
  long* http_status = nullptr;
  // The provider label of the operators' metrics ("stt", "tts"); empty: not reported.
  std::string metrics_provider;
};

// One HTTP request to a provider, for the operators' metrics (calleval_provider_requests_total
// and calleval_provider_request_duration_seconds): `provider` is "llm", "stt" or "tts".
// The outcome of a request: "ok", "cancelled", "unreachable" (no answer), "too_large",
// "retryable_error" (IsRetryableHttpStatus) or "refused" (any other status).
std::string_view ProviderOutcome(bool reached, bool cancelled, bool too_large, long http_status);
void ObserveProviderRequest(std::string_view provider, std::string_view outcome,
                            absl::Duration latency);

// The URL without credentials or query (either may hold secrets), for messages.
std::string ShownUrl(absl::string_view url);
// The body of the 2xx answer.
absl::StatusOr<std::string> PostToProvider(const ProviderPost& post);

}  // namespace calleval

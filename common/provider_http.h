#pragma once

// What every client of an OpenAI-compatible provider (chat completions, transcriptions) does
// the same way: which HTTP answers are worth retrying, how long to wait before the next attempt
// (exponential backoff with full jitter, or the server's Retry-After), and the message to quote
// from an error body.

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval {

// 408, 409, 429 and 5xx: the same request may succeed later.
bool IsRetryableHttpStatus(long http_status);

// The provider's error message from an error body: {"error": {"message": ...}} (OpenAI),
// {"error": "..."}, {"message": ...} or {"detail": ...} (other compatible servers), else the
// body itself; shortened to 300 characters. For messages like
// "HTTP 401 from the LLM provider: Incorrect API key provided."
std::string ProviderErrorMessage(absl::string_view body);

// A Retry-After value: delta-seconds ("7", "1.5") or an HTTP date. nullopt when unusable.
std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now);

// The delay before attempt `attempt + 1` (attempt counts from 1): initial * 2^(attempt-1),
// capped at max, with full jitter (uniform in [0, that]) drawn from `unit_random` in [0, 1).
absl::Duration BackoffDelay(int attempt, absl::Duration initial, absl::Duration max,
                            double unit_random);

}  // namespace calleval

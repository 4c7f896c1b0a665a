#pragma once

// The LLM provider of docs/api.md §7: any OpenAI-compatible chat-completions endpoint
// (POST {base_url}/chat/completions), spoken over libcurl.
//
// Every request is bounded: a connect timeout, a timeout for the whole exchange, a cap on the
// answer's size, and a cap on how many requests this process has in flight at once (callers
// beyond it wait their turn, so a burst of scored calls cannot open hundreds of connections
// or blow through the provider's rate limit). Transient failures (connection errors, timeouts,
// HTTP 408, 409, 429 and 5xx) are retried with exponential backoff and full jitter; a
// Retry-After header (seconds or an HTTP date) replaces the computed delay when it is longer,
// up to max_backoff.
//
// The provider URL is operator configuration, so the URL guard of docs/api.md §8 does not apply
// (a local model server on 127.0.0.1 is a normal setup).
//
// Errors carry an ErrorInfo code (all kUnavailable but the last: to an API user, a provider
// that refuses the installation's key or model is as unavailable as one that is down):
//   llm_error         the provider could not be reached, kept failing, or refused the request
//                     (401, 403, 400, 404 ..., not retried), with the provider's own message.
//   llm_bad_response  the answer was not a chat completion (not JSON, no
//                     choices, no message content, over the size cap).
//   llm_cancelled     kCancelled: Shutdown() was called.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval {

struct LlmConfig {
  std::string base_url;  // "https://api.openai.com/v1"; "/chat/completions" is appended
  std::string api_key;   // sent as "Authorization: Bearer ..." when not empty
  std::string model;     // "gpt-4o-mini"; empty lets the server pick its default
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration request_timeout = absl::Seconds(120);  // one attempt, start to last byte
  int max_attempts = 4;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  int max_in_flight = 8;
  int64_t max_response_bytes = int64_t{4} << 20;
};

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  // Asks for response_format {"type": "json_object"}: the model must answer one JSON object.
  bool json_object = true;
  // Overrides LlmConfig::model for this request (an internal agent's own `model`).
  std::string model;
  double temperature = 0;
  std::optional<int> max_tokens;
};

struct ChatResponse {
  std::string content;  // the first choice's message content
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int attempts = 0;  // HTTP requests it took (1 when the first succeeded)
};

class LlmClient {
 public:
  virtual ~LlmClient() = default;
  // Blocks until the provider answers, the attempts run out, or Shutdown().
  virtual absl::StatusOr<ChatResponse> Complete(const ChatRequest& request) = 0;
  // Makes every pending and future Complete() end promptly with llm_cancelled, so a stopping
  // server does not wait out a provider's slow answers or backoff delays.
  virtual void Shutdown() {}
};

std::unique_ptr<LlmClient> NewOpenAiCompatibleClient(LlmConfig config);

// --- Pieces of the client, exposed for tests ---

// The request body: {"model", "messages", "temperature", "response_format", "max_tokens"}.
std::string ChatRequestJson(const ChatRequest& request, absl::string_view model);
// Reads choices[0].message.content and usage from a chat completion.
absl::StatusOr<ChatResponse> ParseChatCompletion(absl::string_view body);

}  // namespace calleval

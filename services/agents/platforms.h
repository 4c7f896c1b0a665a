#pragma once

// The REST APIs of the voice platforms an external agent lives on (docs/api.md §5, "External
// agents"): what the service reads of a Vapi assistant or a Retell agent (its instructions,
// opening message and language), and the Vapi web call a run talks over. The base URLs are the
// operator's (--vapi-api-url, --retell-api-url), never workspace input, so these requests are
// not put through the public-address guard; each is bounded in time and size.
//
// Errors say who must act, with the platform's own message:
//   kUnauthenticated     the platform refused the API key (HTTP 401/403)
//   kNotFound            no such assistant / agent / LLM (HTTP 404)
//   kResourceExhausted   the account is out of credit (HTTP 402)
//   kFailedPrecondition  any other refusal (HTTP 400, 422...)
//   kUnavailable         unreachable, timed out, over its rate (HTTP 429), HTTP 5xx, or an
//                        answer that is not the platform's shape
// Callers map them onto their own errors: these codes are never answered as they are.

#include <atomic>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace calleval::agents {

// What an external agent's fields are pulled from.
struct PlatformAgent {
  std::string instructions;  // the system prompt; empty when the platform has none
  std::string opening_mode;  // agent_speaks_first | user_speaks_first
  std::string opening_text;  // empty when the agent opens with a generated line or waits
  std::string language;      // the platform's code ("en", "en-US"); empty when it has none
};

struct PlatformRequestOptions {
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration request_timeout = absl::Seconds(15);
  const std::atomic<bool>* cancel = nullptr;
};

// GET {api_url}/assistant/{assistant_id} with the Bearer key: model.messages' system content
// (or model.systemPrompt), firstMessage and firstMessageMode, transcriber.language.
absl::StatusOr<PlatformAgent> PullVapiAssistant(const std::string& api_url,
                                                const std::string& api_key,
                                                const std::string& assistant_id,
                                                const PlatformRequestOptions& options = {});

// GET {api_url}/get-agent/{agent_id}, then its response engine's LLM,
// GET {api_url}/get-retell-llm/{llm_id}: general_prompt, begin_message and start_speaker, and
// the agent's language.
absl::StatusOr<PlatformAgent> PullRetellAgent(const std::string& api_url,
                                              const std::string& api_key,
                                              const std::string& agent_id,
                                              const PlatformRequestOptions& options = {});

// A Vapi call over its websocket transport: the caller's side connects to `websocket_url`
// and streams raw PCM16 at `sample_rate` both ways.
struct VapiWebsocketCall {
  std::string call_id;
  std::string websocket_url;  // transport.websocketCallUrl, as the platform answered it
};
inline constexpr int kVapiSampleRate = 16000;

// POST {api_url}/call with {"assistantId", "transport": {"provider": "vapi.websocket",
// "audioFormat": {"format": "pcm_s16le", "container": "raw", "sampleRate": 16000}}}. Not
// retried: a retry could start a second call.
absl::StatusOr<VapiWebsocketCall> CreateVapiWebsocketCall(
    const std::string& api_url, const std::string& api_key, const std::string& assistant_id,
    const PlatformRequestOptions& options = {});

// Retell's agent_version in one of its call objects (the answers of create-web-call and
// create-phone-call, the `call` of its webhooks): the version of the agent that takes the call,
// as text ("7"). None when the object has none, or one that is not a whole number (Retell's are
// integers; a request may name one as a string of digits, which is read too).
std::optional<std::string> RetellAgentVersion(const nlohmann::json& call);

// A Retell web call: its id, the access token that joins its LiveKit room, and the version of
// the agent that takes it.
struct RetellWebCall {
  std::string call_id;
  std::string access_token;
  std::optional<std::string> agent_version;
};

// POST {api_url}/v2/create-web-call with {"agent_id"}. Not retried: a retry could start a second
// call.
absl::StatusOr<RetellWebCall> CreateRetellWebCall(const std::string& api_url,
                                                  const std::string& api_key,
                                                  const std::string& agent_id,
                                                  const PlatformRequestOptions& options = {});

// A phone call Retell places: its id and the version of the agent that makes it.
struct RetellPhoneCall {
  std::string call_id;
  std::optional<std::string> agent_version;
};

// POST {api_url}/v2/create-phone-call with {"from_number", "to_number", "override_agent_id"}:
// Retell's agent `agent_id` calls `to_number` from `from_number` (a number the Retell account
// owns). Not retried: a retry could place a second call.
absl::StatusOr<RetellPhoneCall> CreateRetellPhoneCall(const std::string& api_url,
                                                      const std::string& api_key,
                                                      const std::string& from_number,
                                                      const std::string& to_number,
                                                      const std::string& agent_id,
                                                      const PlatformRequestOptions& options = {});

// The platform's message from an error body: Vapi's {"message": "..." | [...], "error"},
// Retell's {"message"} or {"error_message"}; shortened. For tests and the callers' messages.
std::string PlatformErrorMessage(absl::string_view body);

}  // namespace calleval::agents

#include "services/agents/platforms.h"

#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/provider_http.h"
#include "nlohmann/json.hpp"

namespace calleval::agents {
namespace {

using ::nlohmann::json;

constexpr size_t kMaxQuoted = 300;
constexpr int64_t kMaxAnswerBytes = int64_t{4} << 20;

// An id in a URL path: everything but the unreserved characters percent-encoded, so an id
// cannot climb out of its path segment ("../") or add a query.
std::string PathSegment(absl::string_view id) {
  std::string out;
  for (unsigned char c : id) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::StrFormat("%02X", c));
    }
  }
  if (out == "." || out == "..") return absl::StrCat("%2E", out.substr(1));
  return out;
}

std::string Base(absl::string_view api_url) { return std::string(absl::StripSuffix(api_url, "/")); }

std::string StringAt(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// One request to a platform; the answer's JSON object. `what` names it in messages
// ("GET /assistant/asst_1").
absl::StatusOr<json> Request(absl::string_view platform, const std::string& method,
                             const std::string& url, const std::string& api_key,
                             const std::string& body, absl::string_view what,
                             const PlatformRequestOptions& options) {
  if (api_key.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("no ", platform, " API key"));
  }
  for (unsigned char c : api_key) {
    // A key is sent in a header: a line break in it would add headers of the sender's choosing.
    if (c < 0x20 || c == 0x7F) {
      return absl::UnauthenticatedError(
          absl::StrCat("the ", platform, " API key holds control characters"));
    }
  }
  ProviderPost request;
  request.method = method;
  request.url = url;
  request.body = body;
  request.headers = {absl::StrCat("Authorization: Bearer ", api_key), "Accept: application/json"};
  request.connect_timeout = options.connect_timeout;
  request.request_timeout = options.request_timeout;
  request.max_response_bytes = kMaxAnswerBytes;
  // Once: a user waits on the pull, and a repeated POST /call could start a second call.
  request.max_attempts = 1;
  request.cancel = options.cancel;
  request.label = absl::StrCat(platform, " ", what, " failed: ");
  request.error_code = "platform_unavailable";
  long http_status = 0;
  std::string error_body;
  request.http_status = &http_status;
  request.error_body = &error_body;
  absl::StatusOr<std::string> answer = PostToProvider(request);
  if (!answer.ok()) {
    if (answer.status().code() == absl::StatusCode::kCancelled) return answer.status();
    if (http_status < 400) {  // no answer: unreachable, timed out, too large
      return absl::UnavailableError(answer.status().message());
    }
    const std::string message = absl::StrCat(platform, " answered HTTP ", http_status, " to ", what,
                                             ": ", PlatformErrorMessage(error_body));
    if (http_status == 401 || http_status == 403) return absl::UnauthenticatedError(message);
    if (http_status == 404) return absl::NotFoundError(message);
    // Out of credit: the account's owner must act. Over the rate: later is enough.
    if (http_status == 402) return absl::ResourceExhaustedError(message);
    if (http_status == 429 || http_status >= 500) return absl::UnavailableError(message);
    return absl::FailedPreconditionError(message);
  }
  json parsed = json::parse(*answer, nullptr, false);
  if (!parsed.is_object()) {
    return absl::UnavailableError(
        absl::StrCat(platform, " answered ", what, " with something that is not a JSON object"));
  }
  return parsed;
}

std::string LanguageOf(const json& transcriber) { return StringAt(transcriber, "language"); }

}  // namespace

std::optional<std::string> RetellAgentVersion(const json& call) {
  if (!call.is_object()) return std::nullopt;
  auto it = call.find("agent_version");
  if (it == call.end()) return std::nullopt;
  if (it->is_number_unsigned()) return absl::StrCat(it->get<uint64_t>());
  if (it->is_number_integer()) {
    const int64_t version = it->get<int64_t>();
    if (version < 0) return std::nullopt;
    return absl::StrCat(version);
  }
  if (it->is_string()) {
    const std::string text = it->get<std::string>();
    // Digits only and short: the version is shown and compared, never free text.
    if (text.empty() || text.size() > 20) return std::nullopt;
    for (char c : text) {
      if (c < '0' || c > '9') return std::nullopt;
    }
    return text;
  }
  // A float, even a whole one, is not how Retell writes a version.
  return std::nullopt;
}

std::string PlatformErrorMessage(absl::string_view body) {
  std::string message;
  json parsed = json::parse(body.begin(), body.end(), nullptr, false);
  if (parsed.is_object()) {
    auto it = parsed.find("message");
    if (it != parsed.end() && it->is_string()) {
      message = it->get<std::string>();
    } else if (it != parsed.end() && it->is_array()) {
      // Vapi's validation errors: one message per problem.
      std::vector<std::string> parts;
      for (const json& m : *it) {
        if (m.is_string()) parts.push_back(m.get<std::string>());
      }
      message = absl::StrJoin(parts, "; ");
    }
    if (message.empty()) message = StringAt(parsed, "error_message");
    if (message.empty()) message = StringAt(parsed, "error");
  }
  if (message.empty()) message = std::string(absl::StripAsciiWhitespace(body));
  if (message.empty()) return "(no message)";
  if (message.size() > kMaxQuoted) message = absl::StrCat(message.substr(0, kMaxQuoted), "...");
  return message;
}

absl::StatusOr<PlatformAgent> PullVapiAssistant(const std::string& api_url,
                                                const std::string& api_key,
                                                const std::string& assistant_id,
                                                const PlatformRequestOptions& options) {
  const std::string path = absl::StrCat("/assistant/", PathSegment(assistant_id));
  absl::StatusOr<json> assistant =
      Request("Vapi", "GET", Base(api_url) + path, api_key, "", "GET " + path, options);
  if (!assistant.ok()) return assistant.status();
  PlatformAgent out;
  const json model = assistant->value("model", json::object());
  std::vector<std::string> system;
  if (model.is_object() && model.contains("messages") && model["messages"].is_array()) {
    for (const json& m : model["messages"]) {
      if (StringAt(m, "role") == "system" && !StringAt(m, "content").empty()) {
        system.push_back(StringAt(m, "content"));
      }
    }
  }
  out.instructions =
      system.empty() ? StringAt(model, "systemPrompt") : absl::StrJoin(system, "\n\n");
  // Vapi: without a first message the assistant waits for the user, whatever the mode says;
  // "assistant-speaks-first-with-model-generated-message" opens with a line of its model's.
  const std::string mode = StringAt(*assistant, "firstMessageMode");
  out.opening_text = StringAt(*assistant, "firstMessage");
  const bool generated = mode == "assistant-speaks-first-with-model-generated-message";
  out.opening_mode = mode == "assistant-waits-for-user" || (out.opening_text.empty() && !generated)
                         ? "user_speaks_first"
                         : "agent_speaks_first";
  if (out.opening_mode == "user_speaks_first" || generated) out.opening_text.clear();
  out.language = LanguageOf(assistant->value("transcriber", json::object()));
  return out;
}

absl::StatusOr<PlatformAgent> PullRetellAgent(const std::string& api_url,
                                              const std::string& api_key,
                                              const std::string& agent_id,
                                              const PlatformRequestOptions& options) {
  const std::string agent_path = absl::StrCat("/get-agent/", PathSegment(agent_id));
  absl::StatusOr<json> agent = Request("Retell", "GET", Base(api_url) + agent_path, api_key, "",
                                       "GET " + agent_path, options);
  if (!agent.ok()) return agent.status();
  PlatformAgent out;
  out.language = StringAt(*agent, "language");
  out.opening_mode = "agent_speaks_first";
  const json engine = agent->value("response_engine", json::object());
  // Only a Retell LLM response engine holds a prompt the service can read; a custom LLM or a
  // conversation flow keeps it elsewhere.
  if (StringAt(engine, "type") != "retell-llm" || StringAt(engine, "llm_id").empty()) return out;
  const std::string llm_path =
      absl::StrCat("/get-retell-llm/", PathSegment(StringAt(engine, "llm_id")));
  absl::StatusOr<json> llm =
      Request("Retell", "GET", Base(api_url) + llm_path, api_key, "", "GET " + llm_path, options);
  if (!llm.ok()) return llm.status();
  out.instructions = StringAt(*llm, "general_prompt");
  out.opening_text = StringAt(*llm, "begin_message");
  if (StringAt(*llm, "start_speaker") == "user") {
    out.opening_mode = "user_speaks_first";
    out.opening_text.clear();
  }
  return out;
}

absl::StatusOr<VapiWebsocketCall> CreateVapiWebsocketCall(const std::string& api_url,
                                                          const std::string& api_key,
                                                          const std::string& assistant_id,
                                                          const PlatformRequestOptions& options) {
  const json body = {
      {"assistantId", assistant_id},
      {"transport",
       {{"provider", "vapi.websocket"},
        {"audioFormat",
         {{"format", "pcm_s16le"}, {"container", "raw"}, {"sampleRate", kVapiSampleRate}}}}}};
  absl::StatusOr<json> call =
      Request("Vapi", "POST", Base(api_url) + "/call", api_key, body.dump(), "POST /call", options);
  if (!call.ok()) return call.status();
  VapiWebsocketCall out;
  out.call_id = StringAt(*call, "id");
  out.websocket_url = StringAt(call->value("transport", json::object()), "websocketCallUrl");
  if (out.websocket_url.empty()) {
    return absl::UnavailableError(
        "Vapi answered POST /call without transport.websocketCallUrl: the call has no websocket "
        "to talk over");
  }
  return out;
}

absl::StatusOr<RetellWebCall> CreateRetellWebCall(const std::string& api_url,
                                                  const std::string& api_key,
                                                  const std::string& agent_id,
                                                  const PlatformRequestOptions& options) {
  const json body = {{"agent_id", agent_id}};
  absl::StatusOr<json> call = Request("Retell", "POST", Base(api_url) + "/v2/create-web-call",
                                      api_key, body.dump(), "POST /v2/create-web-call", options);
  if (!call.ok()) return call.status();
  RetellWebCall out{StringAt(*call, "call_id"), StringAt(*call, "access_token"),
                    RetellAgentVersion(*call)};
  if (out.call_id.empty() || out.access_token.empty()) {
    return absl::UnavailableError(
        "Retell answered POST /v2/create-web-call without a call_id and an access_token");
  }
  return out;
}

absl::StatusOr<RetellPhoneCall> CreateRetellPhoneCall(const std::string& api_url,
                                                      const std::string& api_key,
                                                      const std::string& from_number,
                                                      const std::string& to_number,
                                                      const std::string& agent_id,
                                                      const PlatformRequestOptions& options) {
  const json body = {
      {"from_number", from_number}, {"to_number", to_number}, {"override_agent_id", agent_id}};
  absl::StatusOr<json> call = Request("Retell", "POST", Base(api_url) + "/v2/create-phone-call",
                                      api_key, body.dump(), "POST /v2/create-phone-call", options);
  if (!call.ok()) return call.status();
  RetellPhoneCall out{StringAt(*call, "call_id"), RetellAgentVersion(*call)};
  if (out.call_id.empty()) {
    return absl::UnavailableError("Retell answered POST /v2/create-phone-call without a call_id");
  }
  return out;
}

}  // namespace calleval::agents

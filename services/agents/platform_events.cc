#include "services/agents/platform_events.h"

#include <grpcpp/channel.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "common/client_context.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/agents/platforms.h"

namespace calleval::agents {
namespace {

using nlohmann::json;

constexpr char kAiRole[] = "AI Assistant";
constexpr char kUserRole[] = "User";

absl::StatusOr<json> ParseObject(absl::string_view body) {
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return HttpError(400, "malformed_json", "the request body must be a JSON object");
  }
  return doc;
}

// The member `key` of `object` when it is an object; null otherwise.
const json* Member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string StringOf(const json& object, const char* key) {
  const json* value = Member(object, key);
  return value != nullptr && value->is_string() ? value->get<std::string>() : std::string();
}

std::optional<double> NumberOf(const json& object, const char* key) {
  const json* value = Member(object, key);
  if (value == nullptr || !value->is_number()) return std::nullopt;
  const double number = value->get<double>();
  if (!std::isfinite(number)) return std::nullopt;
  return number;
}

// A platform's time (Unix milliseconds) as the call's RFC 3339 timestamp.
std::string TimestampOfMillis(double millis) {
  return FormatTimestamp(absl::FromUnixMillis(static_cast<int64_t>(millis)));
}

// Seconds as the call's whole duration_seconds; nothing for a negative or absent one.
void SetDuration(std::optional<double> seconds, v1::IngestCallRequest* call) {
  if (seconds && *seconds >= 0) call->set_duration_seconds(std::llround(*seconds));
}

void SetMetadata(absl::string_view platform, const std::string& ended_reason,
                 std::optional<double> cost, v1::IngestCallRequest* call) {
  auto& fields = *call->mutable_metadata()->mutable_fields();
  fields["platform"].set_string_value(std::string(platform));
  if (ended_reason.empty()) {
    fields["ended_reason"].set_null_value(google::protobuf::NULL_VALUE);
  } else {
    fields["ended_reason"].set_string_value(ended_reason);
  }
  if (cost) {
    fields["cost"].set_number_value(*cost);
  } else {
    fields["cost"].set_null_value(google::protobuf::NULL_VALUE);
  }
}

// A turn whose times are kept only when they make sense together (ingest refuses a turn that
// ends before it starts, and the platforms' figures are rounded independently).
void AddTurn(const char* role, const std::string& content, std::optional<double> start,
             std::optional<double> end, v1::IngestCallRequest* call) {
  v1::Turn* turn = call->add_transcript();
  turn->set_role(role);
  turn->set_content(content);
  if (start && *start >= 0) {
    turn->set_start_time(*start);
    if (end && *end >= *start) turn->set_end_time(*end);
  }
}

// The recording the call is scored from: the stereo one when the platform made it (each party
// on a channel of its own), else the mixed one.
void SetRecording(const std::string& stereo, const std::string& mono, v1::IngestCallRequest* call) {
  const std::string& url = !stereo.empty() ? stereo : mono;
  if (!url.empty()) {
    call->set_recording_url(url);
    call->set_observation_type("voice");
  } else {
    call->set_observation_type("text");
  }
}

absl::Status MissingField(absl::string_view field) {
  return FieldError(field, "is required");
}

// A header's value, or empty.
std::string HeaderOf(const std::map<std::string, std::string>& headers, const char* name) {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : std::string(absl::StripAsciiWhitespace(it->second));
}

// A signature given in hexadecimal, in either case, against the HMAC we compute.
bool HexSignatureMatches(absl::string_view given, absl::string_view key, absl::string_view data) {
  std::string lowered = absl::AsciiStrToLower(given);
  return ConstantTimeEquals(lowered, HexEncode(HmacSha256(key, data)));
}

// Whether a timestamp in seconds or milliseconds since the epoch is within the tolerance.
bool FreshTimestamp(absl::string_view text, absl::Time now) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) return false;
  // Seconds until the year 5138, milliseconds after 1973: the two never overlap today.
  const absl::Time at =
      value >= 100000000000 ? absl::FromUnixMillis(value) : absl::FromUnixSeconds(value);
  return absl::AbsDuration(now - at) <= kPlatformSignatureTolerance;
}

}  // namespace

absl::StatusOr<PlatformEvent> ParseVapiEvent(absl::string_view body) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  const json* message = Member(doc, "message");
  if (message == nullptr || !message->is_object()) return MissingField("message");
  PlatformEvent event;
  event.type = StringOf(*message, "type");
  if (event.type != "end-of-call-report") return event;
  event.makes_call = true;

  const json* call = Member(*message, "call");
  const json empty = json::object();
  const json& call_object = call != nullptr && call->is_object() ? *call : empty;
  event.platform_call_id = StringOf(call_object, "id");
  if (event.platform_call_id.empty()) return MissingField("message.call.id");
  event.assistant_id = StringOf(call_object, "assistantId");
  if (event.assistant_id.empty()) {
    const json* assistant = Member(*message, "assistant");
    if (assistant != nullptr) event.assistant_id = StringOf(*assistant, "id");
  }
  if (event.assistant_id.empty()) return MissingField("message.call.assistantId");

  v1::IngestCallRequest& out = event.call;
  out.set_call_identifier(absl::StrCat("vapi-", event.platform_call_id));
  // The artifact holds the recording and the messages; older reports put them on the message.
  const json* artifact = Member(*message, "artifact");
  const json& source = artifact != nullptr && artifact->is_object() ? *artifact : *message;
  std::string stereo = StringOf(source, "stereoRecordingUrl");
  std::string mono = StringOf(source, "recordingUrl");
  if (stereo.empty()) stereo = StringOf(*message, "stereoRecordingUrl");
  if (mono.empty()) mono = StringOf(*message, "recordingUrl");
  SetRecording(stereo, mono, &out);

  const json* messages = Member(source, "messages");
  if (messages == nullptr) messages = Member(*message, "messages");
  if (messages != nullptr && messages->is_array()) {
    for (const json& m : *messages) {
      const std::string role = StringOf(m, "role");
      const char* mapped = nullptr;
      if (role == "bot" || role == "assistant") mapped = kAiRole;
      if (role == "user") mapped = kUserRole;
      // System prompts and tool traffic are not spoken turns.
      if (mapped == nullptr) continue;
      std::string content = StringOf(m, "message");
      if (content.empty()) content = StringOf(m, "content");
      std::optional<double> start = NumberOf(m, "secondsFromStart");
      std::optional<double> end;
      if (start) {
        if (std::optional<double> duration_ms = NumberOf(m, "duration")) {
          end = *start + *duration_ms / 1000.0;
        } else if (std::optional<double> time = NumberOf(m, "time")) {
          if (std::optional<double> end_time = NumberOf(m, "endTime")) {
            end = *start + (*end_time - *time) / 1000.0;
          }
        }
      }
      AddTurn(mapped, content, start, end, &out);
    }
  }

  const std::string ended_reason = StringOf(*message, "endedReason");
  if (!ended_reason.empty()) out.set_call_end_reason(ended_reason);
  std::optional<double> cost = NumberOf(*message, "cost");
  if (!cost) cost = NumberOf(call_object, "cost");
  SetMetadata("vapi", ended_reason, cost, &out);

  std::string started = StringOf(*message, "startedAt");
  if (started.empty()) started = StringOf(call_object, "startedAt");
  if (!started.empty()) out.set_call_timestamp(started);
  std::optional<double> duration = NumberOf(*message, "durationSeconds");
  if (!duration) {
    if (std::optional<double> ms = NumberOf(*message, "durationMs")) duration = *ms / 1000.0;
  }
  SetDuration(duration, &out);
  const std::string type = StringOf(call_object, "type");
  if (type == "inboundPhoneCall") out.set_call_direction("inbound");
  if (type == "outboundPhoneCall") out.set_call_direction("outbound");
  const json* customer = Member(*message, "customer");
  if (customer == nullptr) customer = Member(call_object, "customer");
  if (customer != nullptr) {
    const std::string number = StringOf(*customer, "number");
    if (!number.empty()) out.set_customer_number(number);
  }
  return event;
}

absl::StatusOr<PlatformEvent> ParseRetellEvent(absl::string_view body) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  PlatformEvent event;
  event.type = StringOf(doc, "event");
  if (event.type != "call_analyzed") return event;
  event.makes_call = true;
  const json* call = Member(doc, "call");
  if (call == nullptr || !call->is_object()) return MissingField("call");
  event.platform_call_id = StringOf(*call, "call_id");
  if (event.platform_call_id.empty()) return MissingField("call.call_id");
  event.assistant_id = StringOf(*call, "agent_id");
  if (event.assistant_id.empty()) return MissingField("call.agent_id");

  event.platform_version = RetellAgentVersion(*call);

  v1::IngestCallRequest& out = event.call;
  out.set_call_identifier(absl::StrCat("retell-", event.platform_call_id));
  SetRecording(StringOf(*call, "recording_multi_channel_url"), StringOf(*call, "recording_url"),
               &out);
  const json* turns = Member(*call, "transcript_object");
  if (turns != nullptr && turns->is_array()) {
    for (const json& t : *turns) {
      const std::string role = StringOf(t, "role");
      const char* mapped = nullptr;
      if (role == "agent") mapped = kAiRole;
      if (role == "user") mapped = kUserRole;
      if (mapped == nullptr) continue;
      // A turn's times are its first word's start and its last word's end, in seconds.
      std::optional<double> start;
      std::optional<double> end;
      const json* words = Member(t, "words");
      if (words != nullptr && words->is_array() && !words->empty()) {
        start = NumberOf(words->front(), "start");
        end = NumberOf(words->back(), "end");
      }
      AddTurn(mapped, StringOf(t, "content"), start, end, &out);
    }
  }

  const std::string ended_reason = StringOf(*call, "disconnection_reason");
  if (!ended_reason.empty()) out.set_call_end_reason(ended_reason);
  // Retell counts cents; the metadata says dollars, as Vapi's cost does.
  std::optional<double> cost;
  if (const json* call_cost = Member(*call, "call_cost")) {
    if (std::optional<double> cents = NumberOf(*call_cost, "combined_cost")) cost = *cents / 100.0;
  }
  SetMetadata("retell", ended_reason, cost, &out);

  std::optional<double> start_ms = NumberOf(*call, "start_timestamp");
  std::optional<double> end_ms = NumberOf(*call, "end_timestamp");
  if (start_ms && *start_ms > 0) out.set_call_timestamp(TimestampOfMillis(*start_ms));
  std::optional<double> duration_ms = NumberOf(*call, "duration_ms");
  if (!duration_ms && start_ms && end_ms) duration_ms = *end_ms - *start_ms;
  if (duration_ms) SetDuration(*duration_ms / 1000.0, &out);
  const std::string direction = StringOf(*call, "direction");
  if (direction == "inbound" || direction == "outbound") {
    out.set_call_direction(direction);
    // The customer is whoever the agent did not dial from.
    const std::string number =
        StringOf(*call, direction == "inbound" ? "from_number" : "to_number");
    if (!number.empty()) out.set_customer_number(number);
  }
  return event;
}

bool VerifyVapiRequest(const std::map<std::string, std::string>& headers, absl::string_view body,
                       absl::string_view secret, absl::Time now) {
  if (secret.empty()) return false;
  const std::string given_secret = HeaderOf(headers, "x-vapi-secret");
  if (!given_secret.empty()) return ConstantTimeEquals(given_secret, secret);
  const std::string authorization = HeaderOf(headers, "authorization");
  if (!authorization.empty()) {
    constexpr absl::string_view kBearer = "bearer ";
    if (authorization.size() <= kBearer.size() ||
        !absl::StartsWithIgnoreCase(authorization, kBearer)) {
      return false;
    }
    return ConstantTimeEquals(
        absl::StripAsciiWhitespace(absl::string_view(authorization).substr(kBearer.size())),
        secret);
  }
  std::string signature = HeaderOf(headers, "x-vapi-signature");
  if (signature.empty()) signature = HeaderOf(headers, "x-signature");
  if (signature.empty()) return false;
  absl::string_view hex = signature;
  absl::ConsumePrefix(&hex, "sha256=");
  const std::string timestamp = HeaderOf(headers, "x-timestamp");
  if (timestamp.empty()) return HexSignatureMatches(hex, secret, body);
  if (!FreshTimestamp(timestamp, now)) return false;
  return HexSignatureMatches(hex, secret, absl::StrCat(timestamp, ".", body));
}

bool VerifyRetellSignature(absl::string_view signature, absl::string_view body,
                           absl::string_view api_key, absl::Time now) {
  if (api_key.empty()) return false;
  signature = absl::StripAsciiWhitespace(signature);
  if (!absl::ConsumePrefix(&signature, "v=")) return false;
  const size_t comma = signature.find(",d=");
  if (comma == absl::string_view::npos) return false;
  const absl::string_view millis = signature.substr(0, comma);
  const absl::string_view digest = signature.substr(comma + 3);
  int64_t at = 0;
  if (millis.empty() || !absl::SimpleAtoi(millis, &at) || at < 0) return false;
  if (absl::AbsDuration(now - absl::FromUnixMillis(at)) > kPlatformSignatureTolerance) {
    return false;
  }
  // The signed text is the body followed by the timestamp as sent, digits only.
  for (char c : millis) {
    if (c < '0' || c > '9') return false;
  }
  return HexSignatureMatches(digest, api_key, absl::StrCat(body, millis));
}

absl::StatusOr<v1::PlatformEventResponse> PlatformEventHandler::Handle(
    const v1::PlatformEventRequest& request) {
  const std::string& provider = request.provider();
  if (provider != "vapi" && provider != "retell") {
    return MakeError(absl::StatusCode::kNotFound, "unknown_provider",
                     absl::StrCat("no events for provider \"", provider,
                                  "\"; events come from: vapi, retell"));
  }
  const bool vapi = provider == "vapi";
  ASSIGN_OR_RETURN(PlatformEvent event,
                   vapi ? ParseVapiEvent(request.body()) : ParseRetellEvent(request.body()));
  v1::PlatformEventResponse response;
  // Only the end-of-call event makes a call; the platforms send others to the same URL.
  if (!event.makes_call) {
    response.set_outcome("ignored");
    return response;
  }
  ASSIGN_OR_RETURN(std::vector<AgentsStore::AssistantAgent> agents,
                   agents_->FindByAssistant(vapi ? "external_vapi" : "external_retell",
                                            event.assistant_id));
  if (agents.empty()) {
    LogInfo("platform event for an assistant no agent names: ignored",
            {{"provider", provider}, {"assistant_id", event.assistant_id}});
    response.set_outcome("ignored");
    return response;
  }
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers()) headers[name] = value;
  const absl::Time now = now_();
  bool stored = false;
  bool verified = false;
  for (const AgentsStore::AssistantAgent& agent : agents) {
    absl::StatusOr<IntegrationSettings> settings =
        integrations_->GetWithSecrets(agent.workspace_id, provider);
    if (absl::IsNotFound(settings.status())) continue;  // nothing to verify it with
    if (!settings.ok()) return settings.status();
    const json& secrets = settings->secrets;
    const char* key = vapi ? "webhook_secret" : "api_key";
    auto secret = secrets.find(key);
    if (secret == secrets.end() || !secret->is_string()) continue;
    const std::string secret_text = secret->get<std::string>();
    const bool ok = vapi ? VerifyVapiRequest(headers, request.body(), secret_text, now)
                         : VerifyRetellSignature(HeaderOf(headers, "x-retell-signature"),
                                                 request.body(), secret_text, now);
    if (!ok) continue;
    verified = true;
    v1::IngestCallRequest call = event.call;
    call.set_agent_id(agent.agent_id);
    absl::StatusOr<v1::Call> made = sink_(agent.workspace_id, call, event.platform_version);
    if (absl::IsAlreadyExists(made.status())) continue;  // a redelivery: stored the first time
    if (!made.ok()) return made.status();
    stored = true;
    response.add_call_ids(made->id());
  }
  if (!verified) {
    return MakeError(absl::StatusCode::kUnauthenticated, "invalid_signature",
                     absl::StrCat("the ", provider,
                                  " event is not signed with the secret of the workspace whose "
                                  "agent it names"));
  }
  response.set_outcome(stored ? "stored" : "duplicate");
  return response;
}

namespace {

class GrpcPlatformEvents final : public PlatformEvents {
 public:
  GrpcPlatformEvents(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(v1::Agents::NewStub(std::move(channel))), deadline_(deadline) {}

  absl::StatusOr<v1::PlatformEventResponse> Handle(
      const v1::PlatformEventRequest& request) override {
    v1::PlatformEventResponse reply;
    RETURN_IF_ERROR(FromGrpcStatus(
        stub_->HandlePlatformEvent(ContextWithin(deadline_).get(), request, &reply)));
    return reply;
  }

 private:
  std::unique_ptr<v1::Agents::Stub> stub_;
  absl::Duration deadline_;
};

}  // namespace

std::unique_ptr<PlatformEvents> NewGrpcPlatformEvents(std::shared_ptr<grpc::Channel> agents,
                                                      absl::Duration deadline) {
  return std::make_unique<GrpcPlatformEvents>(std::move(agents), deadline);
}

}  // namespace calleval::agents

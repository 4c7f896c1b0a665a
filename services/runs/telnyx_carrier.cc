#include "services/runs/telnyx_carrier.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/provider_http.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/runs/media_events.h"

namespace calleval::runs {
namespace {

constexpr absl::string_view kErrorCode = "carrier_error";

// A call id as one path segment: Telnyx's ids ("v3:abc-_D") pass as they are, anything else is
// percent-encoded so an id can never reach another path.
std::string PathSegment(absl::string_view id) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : id) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == ':') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

int64_t ClampSeconds(absl::Duration d, int64_t low, int64_t high) {
  return std::clamp<int64_t>(absl::ToInt64Seconds(d), low, high);
}

bool Ed25519Verify(absl::string_view public_key, absl::string_view signature,
                   absl::string_view message) {
  EVP_PKEY* key = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(public_key.data()),
      public_key.size());
  if (key == nullptr) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, key) == 1 &&
            EVP_DigestVerify(
                ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  return ok;
}

// call.hangup's hangup_cause (normal_clearing, user_busy, timeout, no_answer, call_rejected,
// time_limit, originator_cancel, not_found, unspecified, ...).
CarrierEvent::Progress HangupProgress(const std::string& cause) {
  if (cause == "user_busy" || cause == "call_rejected") return CarrierEvent::kBusy;
  if (cause == "timeout" || cause == "no_answer") return CarrierEvent::kNoAnswer;
  if (cause == "normal_clearing" || cause == "time_limit" || cause == "originator_cancel") {
    return CarrierEvent::kCompleted;
  }
  return CarrierEvent::kFailed;
}

class TelnyxCarrierClient : public CarrierClient {
 public:
  TelnyxCarrierClient(CarrierAccount account, std::string public_key, std::string api_url)
      : account_(std::move(account)),
        public_key_(std::move(public_key)),
        api_url_(std::move(api_url)) {}

  absl::StatusOr<std::string> PlaceCall(const OutboundCall& call) override {
    nlohmann::json body = {
        {"connection_id", account_.account_id},
        {"to", call.to},
        {"from", call.from},
        {"stream_url", call.media_url},
        // The inbound track of an outbound call is the dialed party: the agent's voice.
        {"stream_track", "inbound_track"},
        {"stream_bidirectional_mode", "rtp"},
        {"stream_bidirectional_codec", "PCMU"},
        {"webhook_url", call.events_url},
        {"webhook_url_method", "POST"},
        // Telnyx's documented ranges: 5..600 s of ringing, 30..14400 s of call.
        {"timeout_secs", ClampSeconds(call.ring_timeout, 5, 600)},
        {"time_limit_secs", ClampSeconds(call.time_limit, 30, 14400)},
    };
    if (call.detect_machine) body["answering_machine_detection"] = "detect";
    ProviderPost post = Post(absl::StrCat(api_url_, "/v2/calls"), "Telnyx call failed: ");
    post.body = body.dump();
    // Never retried: a second POST after a lost answer would dial the agent twice.
    post.max_attempts = 1;
    ASSIGN_OR_RETURN(std::string answer, PostToProvider(post));
    nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, false);
    std::string id =
        JsonString(parsed.is_object() ? parsed.value("data", nlohmann::json()) : nlohmann::json(),
                    "call_control_id");
    if (id.empty()) {
      return MakeError(absl::StatusCode::kUnavailable, kErrorCode,
                       "Telnyx call failed: the answer has no data.call_control_id");
    }
    return id;
  }

  absl::Status Hangup(const std::string& call_id) override {
    if (call_id.empty()) return absl::InvalidArgumentError("no call to hang up");
    ProviderPost post =
        Post(absl::StrCat(api_url_, "/v2/calls/", PathSegment(call_id), "/actions/hangup"),
             "Telnyx hangup failed: ");
    post.body = "{}";
    long status = 0;
    post.http_status = &status;
    absl::StatusOr<std::string> answer = PostToProvider(post);
    // 404 (unknown call) and 422 (Telnyx's 90018 "Call has already ended"): nothing is left to
    // hang up, which is what was asked.
    if (!answer.ok() && (status == 404 || status == 422)) return absl::OkStatus();
    return answer.status();
  }

  absl::StatusOr<std::vector<CarrierEvent>> ReadWebhook(const CarrierWebhook& hook,
                                                        absl::Time now) override {
    auto header = [&](const char* name) {
      auto it = hook.headers.find(name);
      return it == hook.headers.end() ? std::string() : it->second;
    };
    RETURN_IF_ERROR(VerifyTelnyxSignature(public_key_, header("telnyx-timestamp"),
                                          header("telnyx-signature-ed25519"), hook.body, now));
    return ParseTelnyxWebhook(hook.body);
  }

  std::string AnswerDocument(const OutboundCall&) override { return ""; }

  // Telnyx answers an incoming call by command, not by the webhook's answer.
  std::string IncomingCallAnswer(const std::string&) override { return ""; }

  absl::Status AnswerIncoming(const std::string& call_id, const std::string& media_url,
                              const std::string& events_url) override {
    if (call_id.empty()) return absl::InvalidArgumentError("no call to answer");
    const nlohmann::json body = {
        {"stream_url", media_url},
        // The inbound track of an incoming call is the caller: the agent's voice.
        {"stream_track", "inbound_track"},
        {"stream_bidirectional_mode", "rtp"},
        {"stream_bidirectional_codec", "PCMU"},
        // The call's later events (its hangup) come to the line, like a dialled call's.
        {"webhook_url", events_url},
        {"webhook_url_method", "POST"},
    };
    ProviderPost post =
        Post(absl::StrCat(api_url_, "/v2/calls/", PathSegment(call_id), "/actions/answer"),
             "Telnyx answer failed: ");
    post.body = body.dump();
    // Once: the call rings meanwhile, and a lost answer is better reported than repeated.
    post.max_attempts = 1;
    return PostToProvider(post).status();
  }

 private:
  ProviderPost Post(std::string url, std::string label) const {
    ProviderPost post;
    post.url = std::move(url);
    post.headers = {absl::StrCat("Authorization: Bearer ", account_.secret),
                    "Accept: application/json"};
    post.connect_timeout = absl::Seconds(10);
    post.request_timeout = absl::Seconds(20);
    post.max_response_bytes = int64_t{1} << 20;
    post.label = std::move(label);
    post.error_code = std::string(kErrorCode);
    return post;
  }

  const CarrierAccount account_;
  const std::string public_key_;  // base64, as the Telnyx portal shows it
  const std::string api_url_;
};

class TelnyxMediaDialect : public MediaDialect {
 public:
  absl::StatusOr<MediaEvent> Parse(absl::string_view message) override {
    nlohmann::json j = nlohmann::json::parse(message, nullptr, false);
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) {
      return absl::InvalidArgumentError("not a Telnyx media streaming event: no \"event\"");
    }
    MediaEvent out;
    out.event = j["event"].get<std::string>();
    if (out.event == "connected") {
      out.kind = MediaEvent::kConnected;
    } else if (out.event == "start") {
      out.kind = MediaEvent::kStart;
      out.stream_id = JsonString(j, "stream_id");
      out.call_id = JsonString(j.value("start", nlohmann::json::object()), "call_control_id");
    } else if (out.event == "media") {
      ASSIGN_OR_RETURN(out.mulaw, MediaPayload(j, "Telnyx"));
      out.kind = MediaEvent::kMedia;
    } else if (out.event == "mark") {
      out.kind = MediaEvent::kMark;
      out.mark = JsonString(j.value("mark", nlohmann::json::object()), "name");
    } else if (out.event == "stop") {
      out.kind = MediaEvent::kStop;
    }
    return out;
  }

  // Telnyx takes the application's messages without a stream id: the websocket is the stream.
  std::string Media(absl::string_view, absl::string_view mulaw) override {
    return nlohmann::json{{"event", "media"}, {"media", {{"payload", Base64Encode(mulaw)}}}}.dump();
  }
  std::string Mark(absl::string_view, absl::string_view name) override {
    return nlohmann::json{{"event", "mark"}, {"mark", {{"name", std::string(name)}}}}.dump();
  }
  std::string Clear(absl::string_view) override {
    return nlohmann::json{{"event", "clear"}}.dump();
  }
};

}  // namespace

absl::Status VerifyTelnyxSignature(absl::string_view public_key_b64, absl::string_view timestamp,
                                   absl::string_view signature_b64, absl::string_view body,
                                   absl::Time now) {
  if (timestamp.empty() || signature_b64.empty()) {
    return UnauthenticatedError(
        "the Telnyx webhook has no telnyx-timestamp or telnyx-signature-ed25519 header");
  }
  int64_t seconds = 0;
  if (!std::all_of(timestamp.begin(), timestamp.end(), absl::ascii_isdigit) ||
      timestamp.size() > 12 || !absl::SimpleAtoi(timestamp, &seconds)) {
    return UnauthenticatedError("the Telnyx webhook's telnyx-timestamp is not a Unix time");
  }
  if (absl::AbsDuration(now - absl::FromUnixSeconds(seconds)) > kTelnyxWebhookTolerance) {
    return UnauthenticatedError(
        "the Telnyx webhook's telnyx-timestamp is more than 5 minutes from now (a replay?)");
  }
  std::optional<std::string> key = Base64Decode(public_key_b64);
  if (!key || key->size() != 32) {
    return UnauthenticatedError("the Telnyx public key is not a base64 Ed25519 key");
  }
  std::optional<std::string> signature = Base64Decode(signature_b64);
  if (!signature || signature->size() != 64) {
    return UnauthenticatedError("the Telnyx webhook's signature is not a base64 Ed25519 signature");
  }
  if (!Ed25519Verify(*key, *signature, absl::StrCat(timestamp, "|", body))) {
    return UnauthenticatedError("the Telnyx webhook's signature does not verify");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CarrierEvent>> ParseTelnyxWebhook(absl::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  const nlohmann::json data = j.is_object() ? j.value("data", nlohmann::json()) : nlohmann::json();
  const std::string type = JsonString(data, "event_type");
  if (type.empty()) {
    return absl::InvalidArgumentError("not a Telnyx webhook: no data.event_type");
  }
  const nlohmann::json payload = data.value("payload", nlohmann::json::object());
  CarrierEvent event;
  event.call_id = JsonString(payload, "call_control_id");
  event.detail = type;
  if (type == "call.initiated") {
    event.progress = CarrierEvent::kRinging;
  } else if (type == "call.answered") {
    event.progress = CarrierEvent::kAnswered;
  } else if (type == "call.hangup") {
    const std::string cause = JsonString(payload, "hangup_cause");
    event.progress = HangupProgress(cause);
    event.hangup_by_callee = JsonString(payload, "hangup_source") == "callee";
    event.detail = cause.empty() ? "unspecified" : cause;
  } else if (type == "call.machine.detection.ended" ||
             type == "call.machine.premium.detection.ended") {
    // detect: human | machine | not_sure; premium: human_residence | human_business | machine |
    // silence | fax_detected | not_sure. Only a machine changes the run.
    const std::string result = JsonString(payload, "result");
    event.progress = result == "machine" ? CarrierEvent::kMachine : CarrierEvent::kOther;
    event.detail = result;
  }
  return std::vector<CarrierEvent>{std::move(event)};
}

absl::StatusOr<std::unique_ptr<CarrierClient>> NewTelnyxCarrierClient(const CarrierAccount& account,
                                                                      const std::string& api_url) {
  if (account.secret.empty() || account.account_id.empty()) {
    return MakeError(absl::StatusCode::kFailedPrecondition, kErrorCode,
                     "the Telnyx integration needs an api_key and a connection_id");
  }
  std::optional<std::string> key = Base64Decode(account.public_key);
  if (!key || key->size() != 32) {
    return MakeError(absl::StatusCode::kFailedPrecondition, kErrorCode,
                     "the Telnyx integration needs its public_key (the base64 Ed25519 key that "
                     "verifies Telnyx's webhooks)");
  }
  return std::unique_ptr<CarrierClient>(std::make_unique<TelnyxCarrierClient>(
      account, account.public_key, std::string(absl::StripSuffix(api_url, "/"))));
}

std::unique_ptr<MediaDialect> NewTelnyxMediaDialect() {
  return std::make_unique<TelnyxMediaDialect>();
}

}  // namespace calleval::runs

#include "services/runs/carrier.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/runs/plivo_carrier.h"
#include "services/runs/telnyx_carrier.h"
#include "services/runs/twilio_carrier.h"

namespace calleval::runs {
namespace {

std::string JsonText(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::StatusOr<IncomingCall> CheckedIncoming(IncomingCall call, absl::string_view what) {
  if (call.from.empty() || call.to.empty() || call.call_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an incoming call: the ", what, " is missing From, To or the call's id"));
  }
  return call;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CarrierClient>> NewCarrierClient(const CarrierAccount& account,
                                                                const std::string& api_url) {
  if (account.carrier == "twilio") return NewTwilioCarrierClient(account, api_url);
  if (account.carrier == "telnyx") return NewTelnyxCarrierClient(account, api_url);
  if (account.carrier == "plivo") return NewPlivoCarrierClient(account, api_url);
  return absl::InvalidArgumentError(
      absl::StrCat("the telephony carrier \"", account.carrier, "\" is not supported"));
}

absl::StatusOr<IncomingCall> ReadIncomingCall(absl::string_view carrier,
                                              const CarrierWebhook& hook) {
  IncomingCall call;
  if (carrier == "twilio" || carrier == "plivo") {
    if (!absl::StartsWithIgnoreCase(hook.content_type, "application/x-www-form-urlencoded")) {
      return absl::InvalidArgumentError(
          "an incoming-call webhook is application/x-www-form-urlencoded");
    }
    for (const auto& [name, value] : ParseForm(hook.body)) {
      if (name == "From") call.from = value;
      if (name == "To") call.to = value;
      if (name == (carrier == "twilio" ? "CallSid" : "CallUUID")) call.call_id = value;
    }
    return CheckedIncoming(std::move(call), "form");
  }
  if (carrier == "telnyx") {
    nlohmann::json j = nlohmann::json::parse(hook.body, nullptr, false);
    const nlohmann::json data =
        j.is_object() ? j.value("data", nlohmann::json()) : nlohmann::json();
    if (JsonText(data, "event_type").empty()) {
      return absl::InvalidArgumentError("not a Telnyx webhook: no data.event_type");
    }
    const nlohmann::json payload = data.value("payload", nlohmann::json::object());
    if (JsonText(data, "event_type") != "call.initiated" ||
        JsonText(payload, "direction") != "incoming") {
      return absl::NotFoundError("not the start of an incoming call");
    }
    call.from = JsonText(payload, "from");
    call.to = JsonText(payload, "to");
    call.call_id = JsonText(payload, "call_control_id");
    return CheckedIncoming(std::move(call), "event");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the telephony carrier \"", carrier, "\" is not supported"));
}

std::string IncomingCallRejection(absl::string_view carrier) {
  if (carrier == "twilio") return "<Response><Reject reason=\"busy\"/></Response>";
  if (carrier == "plivo") {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
           "<Response><Hangup reason=\"busy\"/></Response>";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<MediaDialect>> NewMediaDialect(absl::string_view carrier) {
  if (carrier == "twilio") return NewTwilioMediaDialect();
  if (carrier == "telnyx") return NewTelnyxMediaDialect();
  if (carrier == "plivo") return NewPlivoMediaDialect();
  return absl::InvalidArgumentError(
      absl::StrCat("the telephony carrier \"", carrier, "\" is not supported"));
}

}  // namespace calleval::runs

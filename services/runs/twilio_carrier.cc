#include "services/runs/twilio_carrier.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/provider_http.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/runs/media_events.h"

namespace calleval::runs {
namespace {

using ::nlohmann::json;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string FormDecode(absl::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] == '%' && i + 2 < in.size() && HexValue(in[i + 1]) >= 0 &&
               HexValue(in[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(in[i + 1]) * 16 + HexValue(in[i + 2]));
      i += 2;
    } else {
      out += in[i];
    }
  }
  return out;
}

std::string FormEscape(absl::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : in) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '_' || c == '.' || c == '*') {
      out += c;
    } else if (c == ' ') {
      out += '+';
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    }
  }
  return out;
}

std::string XmlAttribute(absl::string_view in) {
  return absl::StrReplaceAll(
      in, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}, {"'", "&apos;"}});
}

std::string HmacSha1(absl::string_view key, absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha1(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string Seconds(absl::Duration d) {
  return absl::StrCat(std::max<int64_t>(1, absl::ToInt64Seconds(d)));
}

class TwilioCarrierClient : public CarrierClient {
 public:
  TwilioCarrierClient(CarrierAccount account, std::string api_url)
      : account_(std::move(account)), api_url_(std::move(api_url)) {
    while (!api_url_.empty() && api_url_.back() == '/') api_url_.pop_back();
  }

  absl::StatusOr<std::string> PlaceCall(const OutboundCall& call) override {
    FormFields form = {{"To", call.to},
                       {"From", call.from},
                       {"Twiml", TwilioStreamTwiml(call.media_url)},
                       {"StatusCallback", call.events_url},
                       {"StatusCallbackMethod", "POST"}};
    for (const char* event : {"initiated", "ringing", "answered", "completed"}) {
      form.emplace_back("StatusCallbackEvent", event);
    }
    form.emplace_back("Timeout", Seconds(call.ring_timeout));
    form.emplace_back("TimeLimit", Seconds(call.time_limit));
    if (call.detect_machine) {
      form.emplace_back("MachineDetection", "Enable");
      form.emplace_back("AsyncAmd", "true");
      form.emplace_back("AsyncAmdStatusCallback", call.events_url);
      form.emplace_back("AsyncAmdStatusCallbackMethod", "POST");
    }
    // One attempt: a retried POST could place the call twice.
    absl::StatusOr<std::string> body = Post("Calls.json", form, /*attempts=*/1);
    if (!body.ok()) return body.status();
    json answer = json::parse(*body, nullptr, false);
    if (!answer.is_object() || !answer.contains("sid") || !answer["sid"].is_string()) {
      return MakeError(absl::StatusCode::kUnavailable, "carrier_error",
                       "Twilio answered the call request without a call sid");
    }
    return answer["sid"].get<std::string>();
  }

  absl::Status Hangup(const std::string& call_id) override {
    // Idempotent: asked again on a failure to reach Twilio.
    return Post(absl::StrCat("Calls/", FormEscape(call_id), ".json"), {{"Status", "completed"}},
                /*attempts=*/3)
        .status();
  }

  absl::StatusOr<std::vector<CarrierEvent>> ReadWebhook(const CarrierWebhook& hook,
                                                        absl::Time) override {
    auto it = hook.headers.find("x-twilio-signature");
    if (it == hook.headers.end() || it->second.empty()) {
      return absl::UnauthenticatedError("the webhook has no X-Twilio-Signature");
    }
    FormFields fields = ParseForm(hook.body);
    const std::string expected = TwilioSignature(account_.secret, hook.url, fields);
    if (!ConstantTimeEquals(expected, it->second)) {
      return absl::UnauthenticatedError("the webhook's X-Twilio-Signature does not match");
    }
    return TwilioEvents(fields);
  }

  std::string AnswerDocument(const OutboundCall&) override { return ""; }

  // The incoming-call webhook's TwiML answer connects the call to the stream, as the outbound
  // call's Twiml parameter does.
  std::string IncomingCallAnswer(const std::string& media_url) override {
    return TwilioStreamTwiml(media_url);
  }
  absl::Status AnswerIncoming(const std::string&, const std::string&, const std::string&) override {
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::string> Post(absl::string_view resource, const FormFields& form,
                                   int attempts) {
    ProviderPost post;
    post.url = absl::StrCat(api_url_, "/2010-04-01/Accounts/", FormEscape(account_.account_id), "/",
                            resource);
    post.headers.push_back(absl::StrCat("Authorization: Basic ",
                                        Base64Encode(account_.account_id + ":" + account_.secret)));
    post.content_type = "application/x-www-form-urlencoded";
    post.body = EncodeForm(form);
    post.connect_timeout = absl::Seconds(5);
    post.request_timeout = absl::Seconds(15);
    post.max_response_bytes = int64_t{1} << 20;
    post.max_attempts = attempts;
    post.initial_backoff = absl::Milliseconds(500);
    post.max_backoff = absl::Seconds(4);
    post.label = "Twilio: ";
    post.error_code = "carrier_error";
    post.bad_response_code = "carrier_error";
    post.cancelled_code = "cancelled";
    return PostToProvider(post);
  }

  const CarrierAccount account_;
  std::string api_url_;
};

class TwilioMediaDialect : public MediaDialect {
 public:
  absl::StatusOr<MediaEvent> Parse(absl::string_view message) override {
    json j = json::parse(message, nullptr, false);
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) {
      return absl::InvalidArgumentError("not a Twilio Media Streams event: no \"event\"");
    }
    MediaEvent out;
    out.event = j["event"].get<std::string>();
    if (out.event == "connected") {
      out.kind = MediaEvent::kConnected;
    } else if (out.event == "start") {
      const json& start = j.value("start", json::object());
      if (!start.is_object()) return absl::InvalidArgumentError("start event without start");
      out.kind = MediaEvent::kStart;
      out.stream_id = start.value("streamSid", j.value("streamSid", ""));
      out.call_id = start.value("callSid", "");
      if (out.stream_id.empty()) return absl::InvalidArgumentError("start event without streamSid");
    } else if (out.event == "media") {
      ASSIGN_OR_RETURN(out.mulaw, MediaPayload(j, "Twilio"));
      out.kind = MediaEvent::kMedia;
    } else if (out.event == "mark") {
      out.kind = MediaEvent::kMark;
      const json& mark = j.value("mark", json::object());
      if (mark.is_object() && mark.contains("name") && mark["name"].is_string()) {
        out.mark = mark["name"].get<std::string>();
      }
    } else if (out.event == "stop") {
      out.kind = MediaEvent::kStop;
    }
    return out;
  }

  std::string Media(absl::string_view stream_id, absl::string_view mulaw) override {
    return json{{"event", "media"},
                {"streamSid", std::string(stream_id)},
                {"media", {{"payload", Base64Encode(mulaw)}}}}
        .dump();
  }

  std::string Mark(absl::string_view stream_id, absl::string_view name) override {
    return json{{"event", "mark"},
                {"streamSid", std::string(stream_id)},
                {"mark", {{"name", std::string(name)}}}}
        .dump();
  }

  std::string Clear(absl::string_view stream_id) override {
    return json{{"event", "clear"}, {"streamSid", std::string(stream_id)}}.dump();
  }
};

}  // namespace

FormFields ParseForm(absl::string_view body) {
  FormFields out;
  for (absl::string_view pair : absl::StrSplit(body, '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    if (eq == absl::string_view::npos) {
      out.emplace_back(FormDecode(pair), "");
    } else {
      out.emplace_back(FormDecode(pair.substr(0, eq)), FormDecode(pair.substr(eq + 1)));
    }
  }
  return out;
}

std::string EncodeForm(const FormFields& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out += '&';
    absl::StrAppend(&out, FormEscape(name), "=", FormEscape(value));
  }
  return out;
}

std::string TwilioSignature(absl::string_view auth_token, absl::string_view url,
                            FormFields params) {
  std::sort(params.begin(), params.end());
  std::string data(url);
  for (const auto& [name, value] : params) absl::StrAppend(&data, name, value);
  return Base64Encode(HmacSha1(auth_token, data));
}

std::string TwilioStreamTwiml(absl::string_view media_url) {
  return absl::StrCat("<Response><Connect><Stream url=\"", XmlAttribute(media_url),
                      "\"/></Connect></Response>");
}

std::vector<CarrierEvent> TwilioEvents(const FormFields& fields) {
  std::string sid, status, answered_by;
  for (const auto& [name, value] : fields) {
    if (name == "CallSid") sid = value;
    if (name == "CallStatus") status = value;
    if (name == "AnsweredBy") answered_by = value;
  }
  std::vector<CarrierEvent> events;
  if (!status.empty()) {
    CarrierEvent event;
    event.call_id = sid;
    event.detail = status;
    if (status == "ringing") {
      event.progress = CarrierEvent::kRinging;
    } else if (status == "in-progress" || status == "answered") {
      event.progress = CarrierEvent::kAnswered;
    } else if (status == "completed") {
      event.progress = CarrierEvent::kCompleted;
    } else if (status == "busy") {
      event.progress = CarrierEvent::kBusy;
    } else if (status == "no-answer") {
      event.progress = CarrierEvent::kNoAnswer;
    } else if (status == "failed" || status == "canceled") {
      event.progress = CarrierEvent::kFailed;
    }
    events.push_back(std::move(event));
  }
  // The asynchronous answering-machine detection's own callback.
  if (absl::StartsWith(answered_by, "machine") || answered_by == "fax") {
    CarrierEvent event;
    event.progress = CarrierEvent::kMachine;
    event.call_id = sid;
    event.detail = absl::StrCat("answered by ", answered_by);
    events.push_back(std::move(event));
  }
  return events;
}

std::unique_ptr<CarrierClient> NewTwilioCarrierClient(const CarrierAccount& account,
                                                      const std::string& api_url) {
  return std::make_unique<TwilioCarrierClient>(account, api_url);
}

std::unique_ptr<MediaDialect> NewTwilioMediaDialect() {
  return std::make_unique<TwilioMediaDialect>();
}

}  // namespace calleval::runs

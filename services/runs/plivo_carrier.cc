#include "services/runs/plivo_carrier.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
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

// A signed webhook's nonce is remembered this long, and at most this many of them per client
// (one client holds one call, which gets a handful of webhooks): longer than any line lives,
// so a replay comes after the line's URL has expired if it comes after the nonce is forgotten.
constexpr absl::Duration kNonceMemory = absl::Hours(6);
constexpr size_t kMaxNonces = 1024;

std::string Param(const std::multimap<std::string, std::string>& params, const char* name) {
  auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::string> FormDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      const int hi = HexValue(text[i + 1]), lo = HexValue(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// Plivo's ids are UUIDs; anything else is percent-encoded so an id stays one path segment.
std::string PathSegment(absl::string_view id) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : id) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The values of each name, sorted, in name order (what both of Plivo's SDKs sort).
std::map<std::string, std::vector<std::string>> Grouped(
    const std::multimap<std::string, std::string>& params) {
  std::map<std::string, std::vector<std::string>> grouped;
  for (const auto& [k, v] : params) grouped[k].push_back(v);
  for (auto& [k, values] : grouped) std::sort(values.begin(), values.end());
  return grouped;
}

std::string SortedQuery(const std::multimap<std::string, std::string>& params) {
  std::vector<std::string> parts;
  for (const auto& [k, values] : Grouped(params)) {
    for (const std::string& v : values) parts.push_back(absl::StrCat(k, "=", v));
  }
  return absl::StrJoin(parts, "&");
}

class PlivoCarrierClient : public CarrierClient {
 public:
  PlivoCarrierClient(CarrierAccount account, std::string api_url)
      : account_(std::move(account)), api_url_(std::move(api_url)) {}

  absl::StatusOr<std::string> PlaceCall(const OutboundCall& call) override {
    nlohmann::json body = {
        {"from", call.from},
        {"to", call.to},
        {"answer_url", call.answer_url},
        {"answer_method", "POST"},
        {"ring_url", call.events_url},
        {"ring_method", "POST"},
        {"hangup_url", call.events_url},
        {"hangup_method", "POST"},
        {"ring_timeout", std::max<int64_t>(1, absl::ToInt64Seconds(call.ring_timeout))},
        {"time_limit", std::max<int64_t>(1, absl::ToInt64Seconds(call.time_limit))},
    };
    if (call.detect_machine) {
      // Asynchronous detection: the call connects at once and the result comes as a callback.
      body["machine_detection"] = "true";
      body["machine_detection_url"] = call.events_url;
      body["machine_detection_method"] = "POST";
    }
    ProviderPost post = Request("POST", AccountUrl("/Call/"), "Plivo call failed: ");
    post.body = body.dump();
    // Never retried: a second POST after a lost answer would dial the agent twice.
    post.max_attempts = 1;
    ASSIGN_OR_RETURN(std::string answer, PostToProvider(post));
    // {"message": "call fired", "request_uuid": "...", "api_id": "..."}; a list for bulk calls.
    nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, false);
    std::string id;
    if (parsed.is_object() && parsed.contains("request_uuid")) {
      const nlohmann::json& uuid = parsed["request_uuid"];
      if (uuid.is_string()) id = uuid.get<std::string>();
      if (uuid.is_array() && !uuid.empty() && uuid.front().is_string()) {
        id = uuid.front().get<std::string>();
      }
    }
    if (id.empty()) {
      return MakeError(absl::StatusCode::kUnavailable, kErrorCode,
                       "Plivo call failed: the answer has no request_uuid");
    }
    return id;
  }

  absl::Status Hangup(const std::string& call_id) override {
    if (call_id.empty()) return absl::InvalidArgumentError("no call to hang up");
    std::string call_uuid;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = call_uuids_.find(call_id);
      if (it != call_uuids_.end()) call_uuid = it->second;
    }
    long status = 0;
    if (!call_uuid.empty()) {
      absl::Status hung = Delete(absl::StrCat("/Call/", PathSegment(call_uuid), "/"), &status);
      // 404: the call is already over, which is what was asked.
      return status == 404 ? absl::OkStatus() : hung;
    }
    // No webhook named the call yet: cancel the request (a call still ringing), then try the id
    // as a CallUUID in case the caller has one.
    absl::Status cancelled = Delete(absl::StrCat("/Request/", PathSegment(call_id), "/"), &status);
    if (status != 404) return cancelled;
    absl::Status hung = Delete(absl::StrCat("/Call/", PathSegment(call_id), "/"), &status);
    return status == 404 ? absl::OkStatus() : hung;
  }

  absl::StatusOr<std::vector<CarrierEvent>> ReadWebhook(const CarrierWebhook& hook,
                                                        absl::Time now) override {
    auto header = [&](const char* name) {
      auto it = hook.headers.find(name);
      return it == hook.headers.end() ? std::string() : it->second;
    };
    std::multimap<std::string, std::string> params;
    const std::string method = hook.method.empty() ? "POST" : hook.method;
    if (method == "POST" && !hook.body.empty()) {
      if (!absl::StartsWithIgnoreCase(hook.content_type, "application/x-www-form-urlencoded")) {
        return absl::InvalidArgumentError("a Plivo callback is application/x-www-form-urlencoded");
      }
      absl::StatusOr<std::multimap<std::string, std::string>> form = ParseFormParams(hook.body);
      if (!form.ok()) return UnauthenticatedError("the Plivo callback's body is not a form");
      params = *std::move(form);
    }
    const std::string nonce = header("x-plivo-signature-v3-nonce");
    RETURN_IF_ERROR(VerifyPlivoSignature(account_.secret, method, hook.url, params, nonce,
                                         header("x-plivo-signature-v3")));
    // Plivo signs no timestamp, only the URL, the parameters and a fresh nonce: a webhook
    // captured on the way could be posted again for as long as its URL lives. Only a nonce that
    // verified is remembered, so a forgery cannot use one up before Plivo does.
    RETURN_IF_ERROR(FirstUse(nonce, now));
    if (method == "GET") {
      const size_t q = hook.url.find('?');
      if (q != std::string::npos) {
        absl::StatusOr<std::multimap<std::string, std::string>> query =
            ParseFormParams(absl::string_view(hook.url).substr(q + 1));
        if (query.ok()) params = *std::move(query);
      }
    }
    const std::string request_uuid = RequestUuid(params);
    const std::string call_uuid = Param(params, "CallUUID");
    if (!request_uuid.empty() && !call_uuid.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      call_uuids_[request_uuid] = call_uuid;
    }
    return ReadPlivoCallback(params);
  }

  std::string AnswerDocument(const OutboundCall& call) override {
    return StreamDocument(call.media_url);
  }

  // An incoming call is answered like an outbound one: Plivo fetches the number's answer URL
  // (the incoming-call webhook) and streams the call as the document says.
  std::string IncomingCallAnswer(const std::string& media_url) override {
    return StreamDocument(media_url);
  }
  absl::Status AnswerIncoming(const std::string&, const std::string&, const std::string&) override {
    return absl::OkStatus();
  }

  static std::string StreamDocument(const std::string& media_url) {
    const std::string url = absl::StrReplaceAll(
        media_url, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
    // keepCallAlive: the call lives as long as the stream (the stream is the whole call).
    return absl::StrCat(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Stream bidirectional=\"true\" "
        "keepCallAlive=\"true\" contentType=\"audio/x-mulaw;rate=8000\">",
        url, "</Stream></Response>");
  }

  static std::string RequestUuid(const std::multimap<std::string, std::string>& params) {
    std::string id = Param(params, "RequestUUID");
    return id.empty() ? Param(params, "ALegRequestUUID") : id;
  }

 private:
  std::string AccountUrl(absl::string_view tail) const {
    return absl::StrCat(api_url_, "/v1/Account/", PathSegment(account_.account_id), tail);
  }

  ProviderPost Request(std::string method, std::string url, std::string label) const {
    ProviderPost post;
    post.method = std::move(method);
    post.url = std::move(url);
    post.headers = {
        absl::StrCat("Authorization: Basic ",
                     Base64Encode(absl::StrCat(account_.account_id, ":", account_.secret))),
        "Accept: application/json"};
    post.connect_timeout = absl::Seconds(10);
    post.request_timeout = absl::Seconds(20);
    post.max_response_bytes = int64_t{1} << 20;
    post.label = std::move(label);
    post.error_code = std::string(kErrorCode);
    return post;
  }

  // kUnauthenticated when `nonce` was seen (within kNonceMemory of `now`); remembers it.
  absl::Status FirstUse(const std::string& nonce, absl::Time now) {
    std::lock_guard<std::mutex> lock(mu_);
    while (!nonce_order_.empty() &&
           (nonces_.size() >= kMaxNonces || now - nonce_order_.front().first > kNonceMemory)) {
      nonces_.erase(nonce_order_.front().second);
      nonce_order_.pop_front();
    }
    if (!nonces_.insert(nonce).second) {
      return UnauthenticatedError(
          "the Plivo callback's nonce was used before: a replayed webhook is refused");
    }
    nonce_order_.emplace_back(now, nonce);
    return absl::OkStatus();
  }

  absl::Status Delete(absl::string_view tail, long* status) {
    ProviderPost post = Request("DELETE", AccountUrl(tail), "Plivo hangup failed: ");
    post.http_status = status;
    *status = 0;
    return PostToProvider(post).status();
  }

  const CarrierAccount account_;
  const std::string api_url_;
  std::mutex mu_;
  std::map<std::string, std::string> call_uuids_;  // RequestUUID -> CallUUID, guarded by mu_
  // The nonces of the webhooks taken, and when, oldest first; guarded by mu_.
  std::set<std::string> nonces_;
  std::deque<std::pair<absl::Time, std::string>> nonce_order_;
};

class PlivoMediaDialect : public MediaDialect {
 public:
  absl::StatusOr<MediaEvent> Parse(absl::string_view message) override {
    nlohmann::json j = nlohmann::json::parse(message, nullptr, false);
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) {
      return absl::InvalidArgumentError("not a Plivo audio stream event: no \"event\"");
    }
    MediaEvent out;
    out.event = j["event"].get<std::string>();
    if (out.event == "start") {
      const nlohmann::json start = j.value("start", nlohmann::json::object());
      out.kind = MediaEvent::kStart;
      out.stream_id = JsonString(start, "streamId");
      if (out.stream_id.empty()) out.stream_id = JsonString(j, "streamId");
      out.call_id = JsonString(start, "callId");
    } else if (out.event == "media") {
      ASSIGN_OR_RETURN(out.mulaw, MediaPayload(j, "Plivo"));
      out.kind = MediaEvent::kMedia;
    } else if (out.event == "playedStream") {
      // The answer to a checkpoint: everything sent before it has played.
      out.kind = MediaEvent::kMark;
      out.mark = JsonString(j, "name");
    } else if (out.event == "stop") {
      out.kind = MediaEvent::kStop;
    }
    return out;
  }

  std::string Media(absl::string_view, absl::string_view mulaw) override {
    return nlohmann::json{{"event", "playAudio"},
                          {"media",
                           {{"contentType", "audio/x-mulaw"},
                            {"sampleRate", 8000},
                            {"payload", Base64Encode(mulaw)}}}}
        .dump();
  }
  std::string Mark(absl::string_view stream_id, absl::string_view name) override {
    return nlohmann::json{
        {"event", "checkpoint"}, {"streamId", std::string(stream_id)}, {"name", std::string(name)}}
        .dump();
  }
  std::string Clear(absl::string_view stream_id) override {
    return nlohmann::json{{"event", "clearAudio"}, {"streamId", std::string(stream_id)}}.dump();
  }
};

}  // namespace

absl::StatusOr<std::multimap<std::string, std::string>> ParseFormParams(absl::string_view form) {
  std::multimap<std::string, std::string> params;
  for (absl::string_view pair : absl::StrSplit(form, '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    std::optional<std::string> name = FormDecode(pair.substr(0, eq));
    std::optional<std::string> value =
        eq == absl::string_view::npos ? std::string() : FormDecode(pair.substr(eq + 1));
    if (!name || !value) {
      return absl::InvalidArgumentError("a form parameter has a malformed %-escape");
    }
    params.emplace(*std::move(name), *std::move(value));
  }
  return params;
}

std::string PlivoSignatureV3Base(absl::string_view method, absl::string_view url,
                                 const std::multimap<std::string, std::string>& params) {
  url = url.substr(0, url.find('#'));
  const size_t q = url.find('?');
  const absl::string_view base = url.substr(0, q);
  std::multimap<std::string, std::string> query;
  if (q != absl::string_view::npos) {
    // A malformed query signs as if it had no parameters (it cannot match then).
    query = ParseFormParams(url.substr(q + 1)).value_or(query);
  }
  if (method == "GET") {
    query.insert(params.begin(), params.end());
    const std::string sorted = SortedQuery(query);
    return sorted.empty() ? std::string(base) : absl::StrCat(base, "?", sorted);
  }
  const std::string sorted = SortedQuery(query);
  std::string out(base);
  if (!sorted.empty() || !params.empty()) absl::StrAppend(&out, "?", sorted);
  if (!sorted.empty() && !params.empty()) out += '.';
  for (const auto& [k, values] : Grouped(params)) {
    for (const std::string& v : values) absl::StrAppend(&out, k, v);
  }
  return out;
}

std::string PlivoSignatureV3(absl::string_view auth_token, absl::string_view base,
                             absl::string_view nonce) {
  return Base64Encode(HmacSha256(auth_token, absl::StrCat(base, ".", nonce)));
}

absl::Status VerifyPlivoSignature(absl::string_view auth_token, absl::string_view method,
                                  absl::string_view url,
                                  const std::multimap<std::string, std::string>& params,
                                  absl::string_view nonce, absl::string_view signatures) {
  if (nonce.empty() || signatures.empty()) {
    return UnauthenticatedError(
        "the Plivo callback has no X-Plivo-Signature-V3 or X-Plivo-Signature-V3-Nonce header");
  }
  const std::string expected =
      PlivoSignatureV3(auth_token, PlivoSignatureV3Base(method, url, params), nonce);
  bool matched = false;
  for (absl::string_view candidate : absl::StrSplit(signatures, ',')) {
    candidate = absl::StripAsciiWhitespace(candidate);
    // Every candidate is compared, so the time taken does not say which one matched.
    if (candidate.size() == expected.size() && ConstantTimeEquals(candidate, expected)) {
      matched = true;
    }
  }
  if (!matched) return UnauthenticatedError("the Plivo callback's signature does not verify");
  return absl::OkStatus();
}

std::vector<CarrierEvent> ReadPlivoCallback(const std::multimap<std::string, std::string>& params) {
  CarrierEvent event;
  event.call_id = PlivoCarrierClient::RequestUuid(params);
  if (event.call_id.empty()) event.call_id = Param(params, "CallUUID");
  const std::string machine = absl::AsciiStrToLower(Param(params, "Machine"));
  const std::string status = absl::AsciiStrToLower(Param(params, "CallStatus"));
  if (!machine.empty()) {
    // The asynchronous machine detection callback: Machine is "true" or "false".
    event.progress = machine == "true" ? CarrierEvent::kMachine : CarrierEvent::kOther;
    event.detail = machine == "true" ? "machine" : "human";
  } else if (status == "ringing") {
    event.progress = CarrierEvent::kRinging;
  } else if (status == "in-progress") {
    event.progress = CarrierEvent::kAnswered;
  } else if (status == "completed") {
    event.progress = CarrierEvent::kCompleted;
    // Plivo names the dialed party (the agent) "Callee", lately "Call recipient".
    const std::string source = absl::AsciiStrToLower(Param(params, "HangupSource"));
    event.hangup_by_callee = source == "callee" || source == "call recipient";
  } else if (status == "busy") {
    event.progress = CarrierEvent::kBusy;
  } else if (status == "no-answer" || status == "timeout") {
    event.progress = CarrierEvent::kNoAnswer;
  } else if (status == "failed" || status == "cancel") {
    event.progress = CarrierEvent::kFailed;
  }
  if (event.detail.empty()) {
    const std::string cause = Param(params, "HangupCauseName");
    event.detail = cause.empty() ? status : absl::StrCat(status, " (", cause, ")");
  }
  return {std::move(event)};
}

absl::StatusOr<std::unique_ptr<CarrierClient>> NewPlivoCarrierClient(const CarrierAccount& account,
                                                                     const std::string& api_url) {
  if (account.account_id.empty() || account.secret.empty()) {
    return MakeError(absl::StatusCode::kFailedPrecondition, kErrorCode,
                     "the Plivo integration needs an auth_id and an auth_token");
  }
  return std::unique_ptr<CarrierClient>(
      std::make_unique<PlivoCarrierClient>(account, std::string(absl::StripSuffix(api_url, "/"))));
}

std::unique_ptr<MediaDialect> NewPlivoMediaDialect() {
  return std::make_unique<PlivoMediaDialect>();
}

}  // namespace calleval::runs

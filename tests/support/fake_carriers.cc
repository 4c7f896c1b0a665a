#include "tests/support/fake_carriers.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crypto.h"
#include "common/provider_http.h"
#include "services/runs/plivo_carrier.h"

namespace calleval {
namespace {

TestHttpServer::Response JsonResponse(int status, const nlohmann::json& body) {
  TestHttpServer::Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = body.dump();
  return r;
}

std::string Uuid() {
  const std::string hex = HexEncode(RandomBytes(16));
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20));
}

std::string FormEncode(const std::multimap<std::string, std::string>& params) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  auto encode = [](const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
      if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
        out += static_cast<char>(c);
      } else if (c == ' ') {
        out += '+';
      } else {
        out += '%';
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    return out;
  };
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    absl::StrAppend(&out, encode(k), "=", encode(v));
  }
  return out;
}

// POSTs a webhook to the service and returns its answer (any status), or the error when it
// could not be reached.
absl::StatusOr<WebhookAnswer> Deliver(ProviderPost post) {
  long status = 0;
  post.http_status = &status;
  post.max_attempts = 1;
  post.connect_timeout = absl::Seconds(5);
  post.request_timeout = absl::Seconds(30);
  post.label = "webhook: ";
  absl::StatusOr<std::string> body = PostToProvider(post);
  if (status == 0) return body.status();
  WebhookAnswer answer;
  answer.status = static_cast<int>(status);
  if (body.ok()) answer.body = *std::move(body);
  return answer;
}

}  // namespace

Ed25519TestKey::Ed25519TestKey() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  if (ctx == nullptr || EVP_PKEY_keygen_init(ctx) != 1 || EVP_PKEY_keygen(ctx, &key_) != 1) {
    std::abort();
  }
  EVP_PKEY_CTX_free(ctx);
}

Ed25519TestKey::~Ed25519TestKey() { EVP_PKEY_free(key_); }

std::string Ed25519TestKey::PublicKeyBase64() const {
  unsigned char raw[32];
  size_t n = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(key_, raw, &n) != 1) std::abort();
  return Base64Encode(std::string(reinterpret_cast<char*>(raw), n));
}

std::string Ed25519TestKey::Sign(const std::string& message) const {
  unsigned char signature[64];
  size_t n = sizeof signature;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr || EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key_) != 1 ||
      EVP_DigestSign(ctx, signature, &n, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1) {
    std::abort();
  }
  EVP_MD_CTX_free(ctx);
  return Base64Encode(std::string(reinterpret_cast<char*>(signature), n));
}

// Telnyx.

FakeTelnyx::FakeTelnyx(std::string api_key, std::string connection_id)
    : api_key_(std::move(api_key)), connection_id_(std::move(connection_id)) {
  http_.Handle("/v2/calls", [this](const TestHttpServer::Request& r) { return HandleDial(r); });
  http_.HandlePrefix("/v2/calls/",
                     [this](const TestHttpServer::Request& r) { return HandleAction(r); });
}

std::vector<FakeTelnyx::Dial> FakeTelnyx::dials() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dials_;
}

std::vector<std::string> FakeTelnyx::hangups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hangups_;
}

void FakeTelnyx::RefuseDials(int status, std::string title, std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_status_ = status;
  refuse_title_ = std::move(title);
  refuse_detail_ = std::move(detail);
}

namespace {

TestHttpServer::Response TelnyxError(int status, const std::string& code, const std::string& title,
                                     const std::string& detail) {
  return JsonResponse(status,
                      {{"errors", {{{"code", code}, {"title", title}, {"detail", detail}}}}});
}

}  // namespace

TestHttpServer::Response FakeTelnyx::HandleDial(const TestHttpServer::Request& request) {
  if (request.method != "POST") return TelnyxError(405, "10005", "Method not allowed", "");
  if (request.Header("authorization") != absl::StrCat("Bearer ", api_key_)) {
    return TelnyxError(401, "10009", "Authentication failed",
                       "Could not understand the provided credentials.");
  }
  nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
  if (!body.is_object()) return TelnyxError(400, "10015", "Bad Request", "invalid JSON");
  for (const char* field : {"connection_id", "to", "from"}) {
    if (!body.contains(field) || !body[field].is_string()) {
      return TelnyxError(422, "10004", "Missing required parameter",
                         absl::StrCat("The '", field, "' parameter is required."));
    }
  }
  if (body["connection_id"] != connection_id_) {
    return TelnyxError(422, "10010", "Invalid connection_id", "The connection does not exist.");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (refuse_status_ != 0) {
    return TelnyxError(refuse_status_, "10000", refuse_title_, refuse_detail_);
  }
  Dial dial;
  dial.call_control_id = absl::StrCat("v3:fake-", dials_.size() + 1, "-", Uuid());
  dial.body = body;
  dials_.push_back(dial);
  return JsonResponse(200, {{"data",
                             {{"call_control_id", dial.call_control_id},
                              {"call_leg_id", Uuid()},
                              {"call_session_id", Uuid()},
                              {"is_alive", false},
                              {"record_type", "call"}}}});
}

TestHttpServer::Response FakeTelnyx::HandleAction(const TestHttpServer::Request& request) {
  absl::string_view rest = absl::StripPrefix(request.path, "/v2/calls/");
  if (request.method != "POST" || !absl::ConsumeSuffix(&rest, "/actions/hangup")) {
    return TelnyxError(404, "10005", "Resource not found", "");
  }
  if (request.Header("authorization") != absl::StrCat("Bearer ", api_key_)) {
    return TelnyxError(401, "10009", "Authentication failed",
                       "Could not understand the provided credentials.");
  }
  const std::string id(rest);
  std::lock_guard<std::mutex> lock(mu_);
  bool known = false;
  for (const Dial& d : dials_) known = known || d.call_control_id == id;
  if (!known) return TelnyxError(404, "10005", "Resource not found", "Call not found.");
  for (const std::string& h : hangups_) {
    if (h == id) {
      return TelnyxError(422, "90018", "Call has already ended",
                         "This call is no longer active and can't receive commands.");
    }
  }
  hangups_.push_back(id);
  return JsonResponse(200, {{"data", {{"result", "ok"}}}});
}

absl::StatusOr<WebhookAnswer> FakeTelnyx::SendWebhook(const std::string& call_control_id,
                                                      const std::string& type,
                                                      nlohmann::json payload, absl::Time when) {
  std::string url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Dial& d : dials_) {
      if (d.call_control_id == call_control_id) url = d.body.value("webhook_url", "");
    }
  }
  if (url.empty()) return absl::NotFoundError(absl::StrCat("no dial ", call_control_id));
  if (!payload.is_object()) payload = nlohmann::json::object();
  payload["call_control_id"] = call_control_id;
  payload["connection_id"] = connection_id_;
  const std::string body =
      nlohmann::json{
          {"data",
           {{"event_type", type},
            {"id", Uuid()},
            {"occurred_at", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", when, absl::UTCTimeZone())},
            {"payload", payload},
            {"record_type", "event"}}},
          {"meta", {{"attempt", 1}, {"delivered_to", url}}}}
          .dump();
  const std::string timestamp = absl::StrCat(absl::ToUnixSeconds(when));
  ProviderPost post;
  post.url = url;
  post.body = body;
  post.headers = {
      absl::StrCat("telnyx-timestamp: ", timestamp),
      absl::StrCat("telnyx-signature-ed25519: ", key_.Sign(absl::StrCat(timestamp, "|", body)))};
  return Deliver(std::move(post));
}

// Plivo.

FakePlivo::FakePlivo(std::string auth_id, std::string auth_token)
    : auth_id_(std::move(auth_id)), auth_token_(std::move(auth_token)) {
  http_.HandlePrefix(absl::StrCat("/v1/Account/", auth_id_, "/"),
                     [this](const TestHttpServer::Request& r) { return Handle(r); });
}

std::vector<FakePlivo::Call> FakePlivo::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::vector<std::string> FakePlivo::deletes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deletes_;
}

void FakePlivo::RefuseCalls(int status, std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_status_ = status;
  refuse_error_ = std::move(error);
}

TestHttpServer::Response FakePlivo::Handle(const TestHttpServer::Request& request) {
  auto error = [](int status, const std::string& message) {
    return JsonResponse(status, {{"api_id", Uuid()}, {"error", message}});
  };
  if (request.Header("authorization") !=
      absl::StrCat("Basic ", Base64Encode(absl::StrCat(auth_id_, ":", auth_token_)))) {
    return error(401, "Authentication credentials invalid.");
  }
  absl::string_view rest =
      absl::StripPrefix(request.path, absl::StrCat("/v1/Account/", auth_id_, "/"));
  std::lock_guard<std::mutex> lock(mu_);
  if (rest == "Call/" && request.method == "POST") {
    nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
    if (!body.is_object()) return error(400, "invalid JSON");
    for (const char* field : {"from", "to", "answer_url"}) {
      if (!body.contains(field) || !body[field].is_string()) {
        return error(400, absl::StrCat(field, " parameter is required"));
      }
    }
    if (refuse_status_ != 0) return error(refuse_status_, refuse_error_);
    Call call;
    call.request_uuid = Uuid();
    call.call_uuid = Uuid();
    call.body = body;
    calls_.push_back(call);
    return JsonResponse(
        201, {{"api_id", Uuid()}, {"message", "call fired"}, {"request_uuid", call.request_uuid}});
  }
  if (request.method == "DELETE") {
    deletes_.push_back(request.target);
    for (const Call& c : calls_) {
      if (rest == absl::StrCat("Call/", c.call_uuid, "/") ||
          rest == absl::StrCat("Request/", c.request_uuid, "/")) {
        TestHttpServer::Response r;
        r.status = 204;
        return r;
      }
    }
    return error(404, "not found");
  }
  return error(405, "method not allowed");
}

absl::StatusOr<WebhookAnswer> FakePlivo::Callback(const std::string& request_uuid,
                                                  const std::string& url_field,
                                                  std::multimap<std::string, std::string> params,
                                                  const std::string& token) {
  std::string url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Call& c : calls_) {
      if (c.request_uuid != request_uuid) continue;
      url = c.body.value(url_field, "");
      params.emplace("CallUUID", c.call_uuid);
      params.emplace("RequestUUID", c.request_uuid);
      params.emplace("From", c.body.value("from", ""));
      params.emplace("To", c.body.value("to", ""));
      params.emplace("Direction", "outbound");
    }
  }
  if (url.empty()) {
    return absl::NotFoundError(absl::StrCat("no call ", request_uuid, " with a ", url_field));
  }
  const std::string nonce =
      absl::StrCat(std::strtoull(HexEncode(RandomBytes(8)).c_str(), nullptr, 16));
  const std::string signature = runs::PlivoSignatureV3(
      token.empty() ? auth_token_ : token, runs::PlivoSignatureV3Base("POST", url, params), nonce);
  ProviderPost post;
  post.url = url;
  post.content_type = "application/x-www-form-urlencoded";
  post.body = FormEncode(params);
  post.headers = {absl::StrCat("X-Plivo-Signature-V3: ", signature),
                  absl::StrCat("X-Plivo-Signature-V3-Nonce: ", nonce)};
  return Deliver(std::move(post));
}

}  // namespace calleval

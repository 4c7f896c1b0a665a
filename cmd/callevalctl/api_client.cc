#include "cmd/callevalctl/api_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/provider_http.h"

namespace calleval::ctl {
namespace {

struct Exchange {
  int64_t max_bytes = 0;
  std::string body;
  bool over_cap = false;
  std::string retry_after;
};

size_t CollectBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t n = size * nmemb;
  if (static_cast<int64_t>(exchange->body.size() + n) > exchange->max_bytes) {
    exchange->over_cap = true;
    return 0;
  }
  exchange->body.append(data, n);
  return n;
}

size_t CollectRetryAfter(char* data, size_t size, size_t nmemb, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  absl::string_view line(data, size * nmemb);
  if (absl::StartsWith(line, "HTTP/")) exchange->retry_after.clear();
  constexpr absl::string_view kName = "retry-after:";
  if (line.size() > kName.size() && absl::EqualsIgnoreCase(line.substr(0, kName.size()), kName)) {
    exchange->retry_after = std::string(absl::StripAsciiWhitespace(line.substr(kName.size())));
  }
  return size * nmemb;
}

bool Retryable(long status) { return status == 429 || status == 503; }

double UnitRandom() {
  thread_local std::minstd_rand random(std::random_device{}());
  return std::uniform_real_distribution<double>(0.0, 1.0)(random);
}

}  // namespace

ApiClient::ApiClient(ApiClientOptions options) : options_(std::move(options)) {
  while (absl::EndsWith(options_.base_url, "/")) options_.base_url.pop_back();
  static std::once_flag curl_init;
  std::call_once(curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

absl::StatusOr<ApiResponse> ApiClient::Send(absl::string_view method, absl::string_view target,
                                            const std::string* body) const {
  const std::string url = absl::StrCat(options_.base_url, target);
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), &curl_easy_cleanup);
  if (curl == nullptr) return absl::InternalError("libcurl could not start");
  CURL* c = curl.get();
  curl_slist* headers = nullptr;
  const std::string authorization = absl::StrCat("Authorization: Bearer ", options_.api_key);
  headers = curl_slist_append(headers, authorization.c_str());
  headers = curl_slist_append(headers, "Accept: application/json");
  if (body != nullptr) headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:");
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers,
                                                                          &curl_slist_free_all);
  Exchange exchange;
  exchange.max_bytes = options_.max_response_bytes;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  const std::string method_text(method);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  // The operator's server, reached directly: a proxy from the environment would see the key.
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, header_list.get());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method_text.c_str());
  if (body != nullptr) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  } else if (method == "GET") {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(c, CURLOPT_USERAGENT, "callevalctl/1");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.request_timeout)));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &CollectBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &exchange);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &CollectRetryAfter);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &exchange);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);
  const CURLcode result = curl_easy_perform(c);
  const std::string shown = ShownUrl(url);
  if (exchange.over_cap) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the answer of ", method, " ", shown, " exceeds ", options_.max_response_bytes, " bytes"));
  }
  if (result != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach ", shown, " (",
                     error_buffer[0] != 0 ? error_buffer : curl_easy_strerror(result), ")"));
  }
  ApiResponse response;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(exchange.body);
  response.retry_after = ParseRetryAfter(exchange.retry_after, absl::Now());
  return response;
}

absl::StatusOr<ApiResponse> ApiClient::Call(absl::string_view method, absl::string_view target,
                                            const std::string* body,
                                            std::atomic<int64_t>* retried) const {
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<ApiResponse> response = Send(method, target, body);
    const bool retry = response.ok() ? Retryable(response->status)
                                     : absl::IsUnavailable(response.status());
    const int attempts = response.ok() && response->status == 429
                             ? std::max(1, options_.max_rate_limited_attempts)
                             : std::max(1, options_.max_attempts);
    if (!retry || attempt >= attempts) {
      if (response.ok()) response->attempts = attempt;
      return response;
    }
    absl::Duration delay =
        BackoffDelay(attempt, options_.initial_backoff, options_.max_backoff, UnitRandom());
    if (response.ok() && response->retry_after.has_value()) {
      // The server's word, plus up to a tenth more so that workers told the same second do
      // not all come back at once.
      delay = std::min(*response->retry_after, options_.max_retry_after);
      delay += delay * (0.1 * UnitRandom());
    }
    if (retried != nullptr) retried->fetch_add(1);
    absl::SleepFor(delay);
  }
}

absl::StatusOr<nlohmann::json> ApiClient::GetJson(absl::string_view target) const {
  auto response = Call("GET", target, nullptr);
  if (!response.ok()) return response.status();
  if (response->status < 200 || response->status >= 300) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", target, ": ", ApiErrorMessage(*response)));
  }
  nlohmann::json parsed = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::DataLossError(absl::StrCat("GET ", target, ": the answer is not JSON"));
  }
  return parsed;
}

absl::StatusOr<nlohmann::json> ApiClient::PostJson(absl::string_view target,
                                                   const nlohmann::json& body) const {
  const std::string text = body.dump();
  auto response = Call("POST", target, &text);
  if (!response.ok()) return response.status();
  if (response->status < 200 || response->status >= 300) {
    return absl::FailedPreconditionError(
        absl::StrCat("POST ", target, ": ", ApiErrorMessage(*response)));
  }
  nlohmann::json parsed = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::DataLossError(absl::StrCat("POST ", target, ": the answer is not JSON"));
  }
  return parsed;
}

std::string ApiErrorCode(const ApiResponse& response) {
  const nlohmann::json parsed =
      nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("error") || !parsed["error"].is_object()) return "";
  const nlohmann::json& error = parsed["error"];
  return error.contains("code") && error["code"].is_string() ? error["code"].get<std::string>()
                                                             : "";
}

std::string ApiErrorMessage(const ApiResponse& response) {
  std::string out = absl::StrCat("HTTP ", response.status);
  const nlohmann::json parsed =
      nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("error") || !parsed["error"].is_object()) {
    std::string excerpt = response.body.substr(0, 200);
    for (char& ch : excerpt) {
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    }
    if (!excerpt.empty()) absl::StrAppend(&out, ": ", excerpt);
    return out;
  }
  const nlohmann::json& error = parsed["error"];
  if (error.contains("code") && error["code"].is_string()) {
    absl::StrAppend(&out, " ", error["code"].get<std::string>());
  }
  std::vector<std::string> details;
  if (error.contains("details") && error["details"].is_array()) {
    for (const nlohmann::json& detail : error["details"]) {
      if (!detail.is_object() || !detail.contains("issue") || !detail["issue"].is_string()) {
        continue;
      }
      const std::string issue = detail["issue"].get<std::string>();
      details.push_back(detail.contains("field") && detail["field"].is_string()
                            ? absl::StrCat(detail["field"].get<std::string>(), ": ", issue)
                            : issue);
    }
  }
  if (!details.empty()) {
    absl::StrAppend(&out, ": ", absl::StrJoin(details, "; "));
  } else if (error.contains("message") && error["message"].is_string()) {
    absl::StrAppend(&out, ": ", error["message"].get<std::string>());
  }
  return out;
}

std::string QueryEscape(absl::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : value) {
    if (absl::ascii_isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  return out;
}

}  // namespace calleval::ctl

#include "common/provider_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/errors.h"
#include "common/telemetry.h"
#include "nlohmann/json.hpp"

namespace calleval {
namespace {

constexpr size_t kMaxQuotedError = 300;

std::string StringField(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

bool IsRetryableHttpStatus(long http_status) {
  return http_status == 408 || http_status == 409 || http_status == 429 || http_status >= 500;
}

std::string ProviderErrorMessage(absl::string_view body) {
  std::string message;
  nlohmann::json parsed = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (parsed.is_object()) {
    auto error = parsed.find("error");
    if (error != parsed.end() && error->is_object()) {
      message = StringField(*error, "message");
    } else if (error != parsed.end() && error->is_string()) {
      message = error->get<std::string>();
    }
    // Other compatible servers: {"message": ...} or FastAPI's {"detail": ...}.
    if (message.empty()) message = StringField(parsed, "message");
    if (message.empty()) message = StringField(parsed, "detail");
    // JSON:API: the first error's title and detail ("Authentication failed: Could not ...").
    auto errors = parsed.find("errors");
    if (message.empty() && errors != parsed.end() && errors->is_array() && !errors->empty() &&
        errors->front().is_object()) {
      const std::string title = StringField(errors->front(), "title");
      const std::string detail = StringField(errors->front(), "detail");
      message = title.empty() || detail.empty() ? title + detail : absl::StrCat(title, ": ", detail);
    }
  }
  if (message.empty()) message = std::string(absl::StripAsciiWhitespace(body));
  if (message.empty()) return "(no message)";
  if (message.size() > kMaxQuotedError) {
    message.resize(kMaxQuotedError);
    message += "...";
  }
  return message;
}

std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now) {
  value = absl::StripAsciiWhitespace(value);
  if (value.empty()) return std::nullopt;
  double seconds = 0;
  if (absl::SimpleAtod(value, &seconds)) {
    if (!(seconds >= 0) || !std::isfinite(seconds)) return std::nullopt;
    return absl::Seconds(std::min(seconds, 86400.0));
  }
  absl::Time when;
  std::string error;
  if (absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", std::string(value), absl::UTCTimeZone(),
                      &when, &error)) {
    return std::max(absl::ZeroDuration(), when - now);
  }
  return std::nullopt;
}

absl::Duration BackoffDelay(int attempt, absl::Duration initial, absl::Duration max,
                            double unit_random) {
  absl::Duration ceiling = initial;
  for (int i = 1; i < attempt && ceiling < max; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, max);
  return ceiling * std::clamp(unit_random, 0.0, 1.0);
}

}  // namespace calleval

namespace calleval {
namespace {

struct PostExchange {
  int64_t max_bytes = 0;
  std::string body;
  bool over_cap = false;
  std::string retry_after;
  const std::atomic<bool>* cancel = nullptr;
};

size_t CollectBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* exchange = static_cast<PostExchange*>(user);
  const size_t n = size * nmemb;
  if (static_cast<int64_t>(exchange->body.size() + n) > exchange->max_bytes) {
    exchange->over_cap = true;
    return 0;
  }
  exchange->body.append(data, n);
  return n;
}

size_t CollectRetryAfter(char* data, size_t size, size_t nmemb, void* user) {
  auto* exchange = static_cast<PostExchange*>(user);
  absl::string_view line(data, size * nmemb);
  if (absl::StartsWith(line, "HTTP/")) exchange->retry_after.clear();
  constexpr absl::string_view kName = "retry-after:";
  if (line.size() > kName.size() && absl::EqualsIgnoreCase(line.substr(0, kName.size()), kName)) {
    exchange->retry_after = std::string(absl::StripAsciiWhitespace(line.substr(kName.size())));
  }
  return size * nmemb;
}

int StopWhenCancelled(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* exchange = static_cast<PostExchange*>(user);
  return exchange->cancel != nullptr && exchange->cancel->load() ? 1 : 0;
}

}  // namespace

std::string ShownUrl(absl::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme != absl::string_view::npos) {
    const size_t host = scheme + 3;
    const size_t path = url.find('/', host);
    const size_t at = url.substr(0, path).rfind('@');
    if (at != absl::string_view::npos && at > host) {
      return ShownUrl(absl::StrCat(url.substr(0, host), url.substr(at + 1)));
    }
  }
  return std::string(url.substr(0, url.find('?')));
}

absl::StatusOr<std::string> PostToProvider(const ProviderPost& post) {
  static std::once_flag curl_init;
  std::call_once(curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  auto cancelled = [&] {
    return MakeError(absl::StatusCode::kCancelled, post.cancelled_code,
                     absl::StrCat(post.label, "cancelled"));
  };
  auto is_cancelled = [&] { return post.cancel != nullptr && post.cancel->load(); };
  const int attempts = std::max(1, post.max_attempts);
  std::minstd_rand random(std::random_device{}());
  std::string last_error;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (is_cancelled()) return cancelled();
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), &curl_easy_cleanup);
    if (curl == nullptr) {
      return MakeError(absl::StatusCode::kInternal, post.error_code,
                       absl::StrCat(post.label, "libcurl could not start"));
    }
    CURL* c = curl.get();
    curl_slist* headers = nullptr;
    const std::string content_type = absl::StrCat("Content-Type: ", post.content_type);
    if (post.multipart.empty()) headers = curl_slist_append(headers, content_type.c_str());
    // No "Expect: 100-continue": it costs a round trip (or a one-second stall with servers that
    // ignore it) before every upload.
    headers = curl_slist_append(headers, "Expect:");
    for (const std::string& h : post.headers) headers = curl_slist_append(headers, h.c_str());
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers,
                                                                            &curl_slist_free_all);
    PostExchange exchange;
    exchange.max_bytes = post.max_response_bytes;
    exchange.cancel = post.cancel;
    char error_buffer[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c, CURLOPT_URL, post.url.c_str());
    if (!post.method.empty() && post.method != "POST") {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, post.method.c_str());
    }
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, header_list.get());
    std::unique_ptr<curl_mime, decltype(&curl_mime_free)> mime(nullptr, &curl_mime_free);
    if (post.multipart.empty()) {
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, post.body.data());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(post.body.size()));
    } else {
      mime.reset(curl_mime_init(c));
      for (const MultipartPart& p : post.multipart) {
        curl_mimepart* part = curl_mime_addpart(mime.get());
        curl_mime_name(part, p.name.c_str());
        if (!p.filename.empty()) curl_mime_filename(part, p.filename.c_str());
        if (!p.content_type.empty()) curl_mime_type(part, p.content_type.c_str());
        curl_mime_data(part, p.data.data(), p.data.size());
      }
      curl_easy_setopt(c, CURLOPT_MIMEPOST, mime.get());
    }
    curl_easy_setopt(c, CURLOPT_USERAGENT, "calleval/1");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(post.connect_timeout)));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(post.request_timeout)));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &CollectBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &exchange);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &CollectRetryAfter);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &exchange);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &StopWhenCancelled);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &exchange);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);
    if (post.requests != nullptr) post.requests->fetch_add(1);
    const absl::Time sent = absl::Now();
    const CURLcode result = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (post.http_status != nullptr) *post.http_status = status;
    if (!post.metrics_provider.empty()) {
      ObserveProviderRequest(
          post.metrics_provider,
          ProviderOutcome(result == CURLE_OK,
                          result == CURLE_ABORTED_BY_CALLBACK && !exchange.over_cap,
                          exchange.over_cap, status),
          absl::Now() - sent);
    }
    if (result == CURLE_ABORTED_BY_CALLBACK) return cancelled();
    const std::string shown = ShownUrl(post.url);
    if (exchange.over_cap) {
      return MakeError(
          absl::StatusCode::kUnavailable,
          post.bad_response_code.empty() ? post.error_code : post.bad_response_code,
          absl::StrCat(post.label, "the answer from ", shown, " exceeds ",
                       post.max_response_bytes, " bytes"));
    }
    absl::Duration delay = absl::ZeroDuration();
    if (result != CURLE_OK) {
      last_error = absl::StrCat(post.label, "cannot reach ", shown, " (",
                                error_buffer[0] != 0 ? error_buffer : curl_easy_strerror(result),
                                ")");
    } else if (status >= 200 && status < 300) {
      return std::move(exchange.body);
    } else {
      const std::string message = absl::StrCat(post.label, "HTTP ", status, " from ", shown, ": ",
                                               ProviderErrorMessage(exchange.body));
      if (!IsRetryableHttpStatus(status)) {
        return MakeError(absl::StatusCode::kFailedPrecondition, post.error_code, message);
      }
      last_error = message;
      if (auto asked = ParseRetryAfter(exchange.retry_after, absl::Now())) delay = *asked;
    }
    if (attempt == attempts) break;
    const absl::Duration backoff =
        BackoffDelay(attempt, post.initial_backoff, post.max_backoff,
                     std::uniform_real_distribution<double>(0.0, 1.0)(random));
    delay = std::min(std::max(delay, backoff), post.max_backoff);
    const absl::Time until = absl::Now() + delay;
    while (absl::Now() < until) {
      if (is_cancelled()) return cancelled();
      absl::SleepFor(std::min(until - absl::Now(), absl::Milliseconds(100)));
    }
  }
  if (attempts > 1) absl::StrAppend(&last_error, " (after ", attempts, " attempts)");
  return MakeError(absl::StatusCode::kUnavailable, post.error_code, last_error);
}

std::string_view ProviderOutcome(bool reached, bool cancelled, bool too_large, long http_status) {
  if (cancelled) return "cancelled";
  if (too_large) return "too_large";
  if (!reached) return "unreachable";
  if (http_status >= 200 && http_status < 300) return "ok";
  return IsRetryableHttpStatus(http_status) ? "retryable_error" : "refused";
}

void ObserveProviderRequest(std::string_view provider, std::string_view outcome,
                            absl::Duration latency) {
  static telemetry::CounterFamily& requests = telemetry::DefaultRegistry().Counter(
      "calleval_provider_requests_total",
      "HTTP requests to the LLM, speech-to-text and text-to-speech providers (each retry is "
      "one), by outcome.",
      {"provider", "outcome"});
  static telemetry::HistogramFamily& durations = telemetry::DefaultRegistry().Histogram(
      "calleval_provider_request_duration_seconds",
      "Time of one HTTP request to a provider, by provider.", {"provider"});
  requests.WithLabels({std::string(provider), std::string(outcome)}).Increment();
  durations.WithLabels({std::string(provider)}).ObserveDuration(latency);
}

}  // namespace calleval

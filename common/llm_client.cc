#include "common/llm_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/errors.h"
#include "common/provider_http.h"
#include "nlohmann/json.hpp"

namespace calleval {
namespace {

absl::Status BadResponse(absl::string_view why) {
  return MakeError(absl::StatusCode::kUnavailable, "llm_bad_response",
                   absl::StrCat("the LLM provider's answer is unusable: ", why));
}

// One HTTP exchange's outcome.
struct Exchange {
  CURLcode curl = CURLE_OK;
  long http_status = 0;
  std::string body;
  std::string retry_after;
  bool too_large = false;
  std::string curl_error;
};

struct TransferState {
  Exchange* exchange;
  int64_t max_bytes;
  const std::atomic<bool>* stopping;
};

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* state = static_cast<TransferState*>(user);
  const size_t bytes = size * n;
  if (static_cast<int64_t>(state->exchange->body.size() + bytes) > state->max_bytes) {
    state->exchange->too_large = true;
    return 0;  // aborts the transfer with CURLE_WRITE_ERROR
  }
  state->exchange->body.append(data, bytes);
  return bytes;
}

size_t ReadHeader(char* data, size_t size, size_t n, void* user) {
  auto* state = static_cast<TransferState*>(user);
  absl::string_view line(data, size * n);
  constexpr absl::string_view kName = "retry-after:";
  if (line.size() > kName.size() &&
      absl::EqualsIgnoreCase(line.substr(0, kName.size()), kName)) {
    state->exchange->retry_after =
        std::string(absl::StripAsciiWhitespace(line.substr(kName.size())));
  }
  return size * n;
}

int CheckStopping(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<TransferState*>(user)->stopping->load() ? 1 : 0;
}

class OpenAiCompatibleClient : public LlmClient {
 public:
  explicit OpenAiCompatibleClient(LlmConfig config)
      : config_(std::move(config)),
        url_(absl::StrCat(absl::StripSuffix(config_.base_url, "/"), "/chat/completions")),
        random_(std::random_device{}()) {}

  ~OpenAiCompatibleClient() override { Shutdown(); }

  absl::StatusOr<ChatResponse> Complete(const ChatRequest& request) override {
    const std::string body =
        ChatRequestJson(request, request.model.empty() ? config_.model : request.model);
    if (!AcquireSlot()) return Cancelled();
    absl::StatusOr<ChatResponse> result = CompleteWithRetries(body);
    ReleaseSlot();
    return result;
  }

  void Shutdown() override {
    absl::MutexLock lock(&mu_);
    stopping_.store(true);
  }

 private:
  static absl::Status Cancelled() {
    return MakeError(absl::StatusCode::kCancelled, "llm_cancelled",
                     "the LLM request was cancelled: the server is stopping");
  }

  // The in-flight cap: a counting semaphore that also wakes on Shutdown().
  bool AcquireSlot() {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_.load() || in_flight_ < std::max(1, config_.max_in_flight);
    };
    mu_.Await(absl::Condition(&ready));
    if (stopping_.load()) return false;
    ++in_flight_;
    return true;
  }
  void ReleaseSlot() {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  // Sleeps for `delay` unless Shutdown() comes first (then returns false).
  bool SleepUnlessStopping(absl::Duration delay) {
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_.load(); };
    return !mu_.AwaitWithTimeout(absl::Condition(&stopping), delay);
  }

  double UnitRandom() {
    absl::MutexLock lock(&random_mu_);
    return std::uniform_real_distribution<double>(0.0, 1.0)(random_);
  }

  absl::StatusOr<ChatResponse> CompleteWithRetries(const std::string& body) {
    const int attempts = std::max(1, config_.max_attempts);
    absl::Status last;
    for (int attempt = 1; attempt <= attempts; ++attempt) {
      if (stopping_.load()) return Cancelled();
      const absl::Time sent = absl::Now();
      Exchange exchange = Post(body);
      ObserveProviderRequest(
          "llm",
          ProviderOutcome(exchange.curl == CURLE_OK,
                          exchange.curl == CURLE_ABORTED_BY_CALLBACK && !exchange.too_large,
                          exchange.too_large, exchange.http_status),
          absl::Now() - sent);
      if (stopping_.load()) return Cancelled();
      absl::Duration delay = BackoffDelay(attempt, config_.initial_backoff,
                                          config_.max_backoff, UnitRandom());
      if (exchange.too_large) {
        return BadResponse(absl::StrCat("over ", config_.max_response_bytes, " bytes"));
      }
      if (exchange.curl != CURLE_OK) {
        last = MakeError(absl::StatusCode::kUnavailable, "llm_error",
                         absl::StrCat("the LLM provider could not be reached (", url_,
                                      "): ", exchange.curl_error));
      } else if (exchange.http_status >= 200 && exchange.http_status < 300) {
        absl::StatusOr<ChatResponse> parsed = ParseChatCompletion(exchange.body);
        if (parsed.ok()) parsed->attempts = attempt;
        return parsed;
      } else {
        const std::string message =
            absl::StrCat("HTTP ", exchange.http_status, " from the LLM provider: ",
                         ProviderErrorMessage(exchange.body));
        if (!IsRetryableHttpStatus(exchange.http_status)) {
          return MakeError(absl::StatusCode::kUnavailable, "llm_error", message);
        }
        last = MakeError(absl::StatusCode::kUnavailable, "llm_error", message);
        if (std::optional<absl::Duration> asked =
                ParseRetryAfter(exchange.retry_after, absl::Now())) {
          delay = std::min(std::max(delay, *asked), config_.max_backoff);
        }
      }
      if (attempt < attempts && !SleepUnlessStopping(delay)) return Cancelled();
    }
    return MakeError(absl::StatusCode::kUnavailable, "llm_error",
                     absl::StrCat(last.message(), " (after ", attempts, " attempts)"));
  }

  Exchange Post(const std::string& body) {
    Exchange exchange;
    TransferState state{&exchange, config_.max_response_bytes, &stopping_};
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(),
                                                             &curl_easy_cleanup);
    if (!curl) {
      exchange.curl = CURLE_FAILED_INIT;
      exchange.curl_error = "libcurl could not start";
      return exchange;
    }
    CURL* c = curl.get();
    char error_buffer[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Accept: application/json");
    std::string authorization;
    if (!config_.api_key.empty()) {
      authorization = absl::StrCat("Authorization: Bearer ", config_.api_key);
      headers = curl_slist_append(headers, authorization.c_str());
    }
    curl_easy_setopt(c, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(c, CURLOPT_USERAGENT, "calleval/1");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(config_.connect_timeout)));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(config_.request_timeout)));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &WriteBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &state);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &ReadHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &state);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &CheckStopping);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &state);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);
    exchange.curl = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &exchange.http_status);
    curl_slist_free_all(headers);
    if (exchange.curl != CURLE_OK) {
      exchange.curl_error =
          error_buffer[0] != 0 ? error_buffer : curl_easy_strerror(exchange.curl);
    }
    return exchange;
  }

  const LlmConfig config_;
  const std::string url_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex random_mu_;
  std::mt19937_64 random_ ABSL_GUARDED_BY(random_mu_);
};

}  // namespace

std::string ChatRequestJson(const ChatRequest& request, absl::string_view model) {
  nlohmann::json body = nlohmann::json::object();
  if (!model.empty()) body["model"] = std::string(model);
  nlohmann::json messages = nlohmann::json::array();
  for (const ChatMessage& m : request.messages) {
    messages.push_back({{"role", m.role}, {"content", m.content}});
  }
  body["messages"] = std::move(messages);
  body["temperature"] = request.temperature;
  if (request.json_object) body["response_format"] = {{"type", "json_object"}};
  if (request.max_tokens) body["max_tokens"] = *request.max_tokens;
  // Invalid UTF-8 in a transcript must not make the whole request unserializable.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<ChatResponse> ParseChatCompletion(absl::string_view body) {
  nlohmann::json answer = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (!answer.is_object()) return BadResponse("not a JSON object");
  auto choices = answer.find("choices");
  if (choices == answer.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object()) {
    return BadResponse("no \"choices\"");
  }
  const nlohmann::json& choice = (*choices)[0];
  auto message = choice.find("message");
  if (message == choice.end() || !message->is_object()) return BadResponse("no \"message\"");
  auto content = message->find("content");
  if (content == message->end() || !content->is_string()) {
    // A refusal comes back with content null and a "refusal" text.
    auto refusal = message->find("refusal");
    if (refusal != message->end() && refusal->is_string()) {
      return BadResponse(absl::StrCat("the model refused: ", refusal->get<std::string>()));
    }
    return BadResponse("the message has no text content");
  }
  ChatResponse out;
  out.content = content->get<std::string>();
  auto usage = answer.find("usage");
  if (usage != answer.end() && usage->is_object()) {
    out.prompt_tokens = usage->value("prompt_tokens", int64_t{0});
    out.completion_tokens = usage->value("completion_tokens", int64_t{0});
  }
  return out;
}

std::unique_ptr<LlmClient> NewOpenAiCompatibleClient(LlmConfig config) {
  return std::make_unique<OpenAiCompatibleClient>(std::move(config));
}

}  // namespace calleval

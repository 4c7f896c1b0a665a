#include "common/provider_http.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

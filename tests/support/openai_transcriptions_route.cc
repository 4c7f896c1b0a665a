#include "tests/support/openai_transcriptions_route.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace calleval {
namespace {

struct Part {
  std::string name;
  std::optional<std::string> filename;
  std::string content_type;
  std::string body;
};

// The value of `key` in a header like `form-data; name="file"; filename="a.wav"`.
std::optional<std::string> HeaderParameter(absl::string_view header, absl::string_view key) {
  for (absl::string_view piece : absl::StrSplit(header, ';')) {
    piece = absl::StripAsciiWhitespace(piece);
    if (!absl::ConsumePrefix(&piece, key) || !absl::ConsumePrefix(&piece, "=")) continue;
    if (piece.size() >= 2 && piece.front() == '"' && piece.back() == '"') {
      piece = piece.substr(1, piece.size() - 2);
    }
    return std::string(piece);
  }
  return std::nullopt;
}

// RFC 7578 multipart/form-data. nullopt when the body is not well formed.
std::optional<std::vector<Part>> ParseMultipart(absl::string_view content_type,
                                                absl::string_view body) {
  if (!absl::StartsWithIgnoreCase(content_type, "multipart/form-data")) return std::nullopt;
  std::optional<std::string> boundary = HeaderParameter(content_type, "boundary");
  if (!boundary || boundary->empty()) return std::nullopt;
  const std::string delimiter = absl::StrCat("--", *boundary);
  size_t at = body.find(delimiter);
  if (at == absl::string_view::npos) return std::nullopt;
  std::vector<Part> parts;
  while (true) {
    at += delimiter.size();
    if (body.substr(at, 2) == "--") return parts;  // closing delimiter
    if (body.substr(at, 2) != "\r\n") return std::nullopt;
    at += 2;
    const size_t headers_end = body.find("\r\n\r\n", at);
    if (headers_end == absl::string_view::npos) return std::nullopt;
    Part part;
    for (absl::string_view line :
         absl::StrSplit(body.substr(at, headers_end - at), "\r\n", absl::SkipEmpty())) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) return std::nullopt;
      absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
      absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (absl::EqualsIgnoreCase(name, "content-disposition")) {
        part.name = HeaderParameter(value, "name").value_or("");
        part.filename = HeaderParameter(value, "filename");
      } else if (absl::EqualsIgnoreCase(name, "content-type")) {
        part.content_type = std::string(value);
      }
    }
    const size_t data = headers_end + 4;
    const size_t next = body.find(absl::StrCat("\r\n", delimiter), data);
    if (next == absl::string_view::npos) return std::nullopt;
    part.body = std::string(body.substr(data, next - data));
    parts.push_back(std::move(part));
    at = next + 2;
  }
}

uint32_t Le(absl::string_view bytes, size_t at, int width) {
  uint32_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

// Reads a PCM WAV header into `received`. False when the file is not a WAV OpenAI would accept.
bool InspectWav(absl::string_view wav, ReceivedTranscription* received) {
  if (wav.size() < 12 || wav.substr(0, 4) != "RIFF" || wav.substr(8, 4) != "WAVE") return false;
  size_t at = 12;
  int bits = 0;
  while (at + 8 <= wav.size()) {
    absl::string_view id = wav.substr(at, 4);
    const uint32_t size = Le(wav, at + 4, 4);
    const size_t data = at + 8;
    if (id == "fmt " && size >= 16 && data + 16 <= wav.size()) {
      received->channels = static_cast<int>(Le(wav, data + 2, 2));
      received->sample_rate = static_cast<int>(Le(wav, data + 4, 4));
      bits = static_cast<int>(Le(wav, data + 14, 2));
    } else if (id == "data") {
      if (received->sample_rate <= 0 || received->channels <= 0 || bits <= 0) return false;
      const size_t bytes = std::min<size_t>(size, wav.size() - data);
      received->duration_seconds = static_cast<double>(bytes) /
                                   (received->sample_rate * received->channels * (bits / 8));
      return true;
    }
    at = data + size + (size & 1);
  }
  return false;
}

TestHttpServer::Response Json(int status, const nlohmann::json& body) {
  TestHttpServer::Response response;
  response.status = status;
  response.content_type = "application/json";
  response.body = body.dump();
  return response;
}

// OpenAI's error body.
TestHttpServer::Response Error(int status, absl::string_view message, absl::string_view type,
                               std::optional<std::string> param,
                               std::optional<std::string> code) {
  nlohmann::json error = {{"message", std::string(message)}, {"type", std::string(type)}};
  error["param"] = param ? nlohmann::json(*param) : nlohmann::json(nullptr);
  error["code"] = code ? nlohmann::json(*code) : nlohmann::json(nullptr);
  return Json(status, {{"error", error}});
}

std::vector<FakeTranscribedWord> DefaultTranscript(double duration, int) {
  std::vector<FakeTranscribedWord> words = {{"hello", 0.5, 0.9}, {"world", 1.0, 1.6}};
  std::vector<FakeTranscribedWord> kept;
  for (FakeTranscribedWord& w : words) {
    if (w.start < duration) kept.push_back({w.word, w.start, std::min(w.end, duration)});
  }
  return kept;
}

// Whisper's rounding: times in verbose_json have two decimals.
double Centi(double seconds) { return static_cast<double>(static_cast<int64_t>(seconds * 100 + 0.5)) / 100; }

}  // namespace

FakeTranscriptions::FakeTranscriptions(FakeTranscriptionsOptions options)
    : options_(std::move(options)) {}

void FakeTranscriptions::FailNext(FakeTranscriptionFailure failure) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.push_back(std::move(failure));
}

std::vector<ReceivedTranscription> FakeTranscriptions::received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return received_;
}

TestHttpServer::Response FakeTranscriptions::Handle(const TestHttpServer::Request& request) {
  ReceivedTranscription received;
  received.authorization = request.Header("authorization");
  auto answer = [&](TestHttpServer::Response response) {
    received.http_status = response.status;
    std::lock_guard<std::mutex> lock(mu_);
    received_.push_back(received);
    return response;
  };

  if (request.method != "POST") {
    return answer(Error(405, absl::StrCat("Invalid method for URL (", request.method, " ",
                                          request.path, ")"),
                        "invalid_request_error", std::nullopt, std::nullopt));
  }
  const std::string expected = absl::StrCat("Bearer ", options_.api_key);
  if (received.authorization.empty()) {
    return answer(Error(401,
                        "You didn't provide an API key. You need to provide your API key in an "
                        "Authorization header using Bearer auth (i.e. Authorization: Bearer "
                        "YOUR_KEY), or as the password field (with blank username) if you're "
                        "accessing the API from your browser and are prompted for a username and "
                        "password. You can obtain an API key from "
                        "https://platform.openai.com/account/api-keys.",
                        "invalid_request_error", std::nullopt, std::nullopt));
  }
  std::optional<FakeTranscriptionFailure> failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failures_.empty()) {
      failure = failures_.front();
      failures_.pop_front();
    }
  }
  if (received.authorization != expected ||
      (failure && failure->kind == FakeTranscriptionFailure::kUnauthorized)) {
    absl::string_view key = absl::StripPrefix(received.authorization, "Bearer ");
    std::string shown = key.size() > 8 ? absl::StrCat(key.substr(0, 3), "*****",
                                                      key.substr(key.size() - 4))
                                       : "*****";
    return answer(Error(401,
                        absl::StrCat("Incorrect API key provided: ", shown,
                                     ". You can find your API key at "
                                     "https://platform.openai.com/account/api-keys."),
                        "invalid_request_error", std::nullopt, "invalid_api_key"));
  }

  std::optional<std::vector<Part>> parts =
      ParseMultipart(request.Header("content-type"), request.body);
  if (!parts) {
    return answer(Error(400,
                        "Could not parse multipart form. Please check your request and try "
                        "again.",
                        "invalid_request_error", std::nullopt, std::nullopt));
  }
  const Part* file = nullptr;
  for (const Part& part : *parts) {
    if (part.name == "file" && part.filename.has_value()) {
      file = &part;
    } else if (part.name == "model") {
      received.model = part.body;
    } else if (part.name == "response_format") {
      received.response_format = part.body;
    } else if (part.name == "timestamp_granularities[]") {
      received.timestamp_granularities.push_back(part.body);
    } else if (part.name == "language") {
      received.language = part.body;
    }
  }
  if (file != nullptr) {
    received.file_name = *file->filename;
    received.file_content_type = file->content_type;
    received.file_bytes = static_cast<int64_t>(file->body.size());
  }
  if (received.model.empty()) {
    return answer(Error(400, "you must provide a model parameter", "invalid_request_error",
                        std::nullopt, std::nullopt));
  }
  if (std::find(options_.models.begin(), options_.models.end(), received.model) ==
      options_.models.end()) {
    return answer(Error(404,
                        absl::StrCat("The model `", received.model,
                                     "` does not exist or you do not have access to it."),
                        "invalid_request_error", std::nullopt, "model_not_found"));
  }
  if (file == nullptr) {
    return answer(Error(400, "1 validation error for Request\nbody -> file\n  field required",
                        "invalid_request_error", std::nullopt, std::nullopt));
  }
  if (received.file_bytes > options_.max_file_bytes) {
    return answer(Error(413,
                        absl::StrCat("Maximum content size limit (", options_.max_file_bytes,
                                     ") exceeded (", received.file_bytes, " bytes read)"),
                        "server_error", std::nullopt, std::nullopt));
  }
  if (!InspectWav(file->body, &received)) {
    return answer(Error(400,
                        "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'mp4', "
                        "'mpeg', 'mpga', 'oga', 'ogg', 'wav', 'webm']",
                        "invalid_request_error", std::nullopt, std::nullopt));
  }
  const std::string format =
      received.response_format.empty() ? "json" : received.response_format;
  if (format != "json" && format != "text" && format != "verbose_json") {
    return answer(Error(400, absl::StrCat("Invalid response_format: ", format),
                        "invalid_request_error", "response_format", std::nullopt));
  }
  if (format == "verbose_json" && received.model != "whisper-1") {
    return answer(Error(400,
                        absl::StrCat("response_format 'verbose_json' is not compatible with "
                                     "model '",
                                     received.model, "'. Use 'json' or 'text' instead."),
                        "invalid_request_error", "response_format",
                        "unsupported_value"));
  }

  if (failure) {
    switch (failure->kind) {
      case FakeTranscriptionFailure::kRateLimited: {
        TestHttpServer::Response response =
            Error(429,
                  "Rate limit reached for whisper-1 in organization org-test on requests per "
                  "min (RPM): Limit 50, Used 50, Requested 1. Please try again in 1.2s.",
                  "requests", "requests", "rate_limit_exceeded");
        if (!failure->retry_after.empty()) {
          response.headers.emplace_back("Retry-After", failure->retry_after);
        }
        return answer(std::move(response));
      }
      case FakeTranscriptionFailure::kServerError:
        return answer(Error(500,
                            "The server had an error while processing your request. Sorry "
                            "about that!",
                            "server_error", std::nullopt, std::nullopt));
      case FakeTranscriptionFailure::kMalformed: {
        TestHttpServer::Response response;
        response.content_type = "application/json";
        response.body = R"({"task": "transcribe", "text": "hel)";
        return answer(std::move(response));
      }
      case FakeTranscriptionFailure::kUnauthorized:
        break;  // answered above
    }
  }

  int index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    index = transcriptions_++;
  }
  const std::vector<FakeTranscribedWord> words =
      options_.transcript ? options_.transcript(received.duration_seconds, index)
                          : DefaultTranscript(received.duration_seconds, index);
  std::vector<std::string> texts;
  for (const FakeTranscribedWord& w : words) texts.push_back(w.word);
  const std::string text = absl::StrJoin(texts, " ");

  if (format == "text") {
    TestHttpServer::Response response;
    response.content_type = "text/plain; charset=utf-8";
    response.body = absl::StrCat(text, "\n");
    return answer(std::move(response));
  }
  if (format == "json") {
    return answer(Json(200, {{"text", text}, {"usage", {{"type", "duration"},
                                                          {"seconds", static_cast<int64_t>(
                                                              received.duration_seconds + 0.999)}}}}));
  }
  // verbose_json: segments unless only word timestamps were asked for, words when asked for.
  const auto& granularities = received.timestamp_granularities;
  const bool want_words =
      std::find(granularities.begin(), granularities.end(), "word") != granularities.end();
  const bool want_segments =
      granularities.empty() ||
      std::find(granularities.begin(), granularities.end(), "segment") != granularities.end();
  nlohmann::json body = {{"task", "transcribe"},
                         {"language", "english"},
                         {"duration", Centi(received.duration_seconds)},
                         {"text", text}};
  if (want_words) {
    nlohmann::json list = nlohmann::json::array();
    for (const FakeTranscribedWord& w : words) {
      list.push_back({{"word", w.word}, {"start", Centi(w.start)}, {"end", Centi(w.end)}});
    }
    body["words"] = std::move(list);
  }
  if (want_segments) {
    nlohmann::json list = nlohmann::json::array();
    if (!words.empty()) {
      list.push_back({{"id", 0},
                      {"seek", 0},
                      {"start", Centi(words.front().start)},
                      {"end", Centi(words.back().end)},
                      {"text", absl::StrCat(" ", text)},
                      {"tokens", nlohmann::json::array({50364, 2425, 1002, 50464})},
                      {"temperature", 0.0},
                      {"avg_logprob", -0.25},
                      {"compression_ratio", 0.8},
                      {"no_speech_prob", 0.01}});
    }
    body["segments"] = std::move(list);
  }
  body["usage"] = {{"type", "duration"},
                   {"seconds", static_cast<int64_t>(received.duration_seconds + 0.999)}};
  return answer(Json(200, body));
}

std::shared_ptr<FakeTranscriptions> RegisterOpenAiTranscriptionsRoute(
    TestHttpServer* server, FakeTranscriptionsOptions options) {
  const std::string path = options.path;
  auto fake = std::make_shared<FakeTranscriptions>(std::move(options));
  server->Handle(path, [fake](const TestHttpServer::Request& request) {
    return fake->Handle(request);
  });
  return fake;
}

}  // namespace calleval

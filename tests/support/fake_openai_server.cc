#include "tests/support/fake_openai_server.h"

#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace calleval {
namespace {

TestHttpServer::Response JsonResponse(int status, std::string body) {
  TestHttpServer::Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

TestHttpServer::Response InvalidRequest(absl::string_view message) {
  return JsonResponse(400, OpenAiErrorBody(message, "invalid_request_error", ""));
}

int64_t RoughTokens(absl::string_view text) { return static_cast<int64_t>(text.size() / 4 + 1); }

}  // namespace

std::string OpenAiErrorBody(absl::string_view message, absl::string_view type,
                            absl::string_view code) {
  nlohmann::json error = {{"message", std::string(message)},
                          {"type", std::string(type)},
                          {"param", nullptr},
                          {"code", nullptr}};
  if (!code.empty()) error["code"] = std::string(code);
  return nlohmann::json{{"error", error}}.dump();
}

FakeOpenAiServer::FakeOpenAiServer(std::string api_key) : api_key_(std::move(api_key)) {
  http_.Handle("/v1/chat/completions",
               [this](const TestHttpServer::Request& request) { return Chat(request); });
}

void FakeOpenAiServer::Enqueue(Reply reply) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(reply));
}

void FakeOpenAiServer::EnqueueError(int status, std::string retry_after) {
  Reply reply;
  reply.status = status;
  reply.retry_after = std::move(retry_after);
  Enqueue(std::move(reply));
}

void FakeOpenAiServer::AnswerWhen(std::string text_in_prompt, std::string content) {
  AnswerInTurn(std::move(text_in_prompt), {std::move(content)});
}

void FakeOpenAiServer::AnswerInTurn(std::string text_in_prompt,
                                    std::vector<std::string> contents) {
  std::vector<Reply> replies;
  for (std::string& content : contents) {
    Reply reply;
    reply.content = std::move(content);
    replies.push_back(std::move(reply));
  }
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back(Rule{std::move(text_in_prompt), std::move(replies), 0});
}

void FakeOpenAiServer::ReplyWhen(std::string text_in_prompt, Reply reply) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back(Rule{std::move(text_in_prompt), {std::move(reply)}, 0});
}

void FakeOpenAiServer::SetDefault(std::string content) {
  std::lock_guard<std::mutex> lock(mu_);
  default_content_ = std::move(content);
  has_default_ = true;
}

std::vector<nlohmann::json> FakeOpenAiServer::chat_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

TestHttpServer::Response FakeOpenAiServer::Chat(const TestHttpServer::Request& request) {
  if (request.method != "POST") {
    return JsonResponse(405, OpenAiErrorBody("Method not allowed", "invalid_request_error", ""));
  }
  if (request.Header("authorization") != absl::StrCat("Bearer ", api_key_)) {
    return JsonResponse(401, OpenAiErrorBody("Incorrect API key provided.",
                                             "invalid_request_error", "invalid_api_key"));
  }
  nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
  if (!body.is_object()) {
    return InvalidRequest(
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
        "using your HTTP library correctly.)");
  }
  if (!body.contains("model") || !body["model"].is_string()) {
    return InvalidRequest("you must provide a model parameter");
  }
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return InvalidRequest("'messages' must be a non-empty array");
  }
  std::string all_text;
  for (const auto& m : body["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
        !m.contains("content") || !m["content"].is_string()) {
      return InvalidRequest("each message needs a string 'role' and a string 'content'");
    }
    const std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant" && role != "developer") {
      return InvalidRequest(absl::StrCat("Invalid value: '", role, "'. Supported values are: "
                                         "'system', 'assistant', 'user', and 'developer'."));
    }
    absl::StrAppend(&all_text, m["content"].get<std::string>(), "\n");
  }
  if (body.contains("response_format") && body["response_format"].is_object() &&
      body["response_format"].value("type", "") == "json_object" &&
      !absl::StrContains(absl::AsciiStrToLower(all_text), "json")) {
    return InvalidRequest(
        "'messages' must contain the word 'json' in some form, to use 'response_format' of "
        "type 'json_object'.");
  }

  Reply reply;
  bool found = false;
  int id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(body);
    id = next_id_++;
    if (!queue_.empty()) {
      reply = std::move(queue_.front());
      queue_.pop_front();
      found = true;
    }
    for (size_t i = 0; !found && i < rules_.size(); ++i) {
      Rule& rule = rules_[i];
      if (!rule.replies.empty() && absl::StrContains(all_text, rule.text)) {
        reply = rule.replies[rule.next++ % rule.replies.size()];
        found = true;
      }
    }
    if (!found && has_default_) {
      reply.content = default_content_;
      found = true;
    }
  }
  if (!found) {
    return JsonResponse(500, OpenAiErrorBody("the test scripted no answer for this request",
                                             "server_error", ""));
  }
  TestHttpServer::Response response;
  response.delay = reply.delay;
  response.content_type = "application/json";
  response.status = reply.status;
  if (!reply.retry_after.empty()) response.headers.emplace_back("Retry-After", reply.retry_after);
  if (!reply.raw_body.empty()) {
    response.body = reply.raw_body;
  } else if (reply.status == 429) {
    response.body = OpenAiErrorBody("Rate limit reached for requests", "requests",
                                    "rate_limit_exceeded");
  } else if (reply.status != 200) {
    response.body = OpenAiErrorBody("The server had an error while processing your request.",
                                    "server_error", "");
  } else {
    const int64_t prompt_tokens = RoughTokens(all_text);
    const int64_t completion_tokens = RoughTokens(reply.content);
    nlohmann::json completion = {
        {"id", absl::StrCat("chatcmpl-test", id)},
        {"object", "chat.completion"},
        {"created", 1763800000},
        {"model", body["model"]},
        {"choices",
         {{{"index", 0},
           {"message", {{"role", "assistant"}, {"content", reply.content}, {"refusal", nullptr}}},
           {"logprobs", nullptr},
           {"finish_reason", "stop"}}}},
        {"usage",
         {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}}},
        {"system_fingerprint", "fp_calleval_test"}};
    response.body = completion.dump();
  }
  return response;
}

}  // namespace calleval

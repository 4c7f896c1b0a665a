#pragma once

// A local stand-in for an OpenAI-compatible provider, for tests only: a real HTTP server on
// 127.0.0.1 speaking the provider's wire protocol for POST /v1/chat/completions.
//
// It checks requests the way the real API does (Bearer key, a JSON body with "model" and
// "messages", roles and string contents, and the rule that response_format json_object needs
// the word "json" in the messages) and answers in the real shapes: chat.completion objects with
// choices and usage, errors as {"error": {"message", "type", "param", "code"}}.
//
// What the model says is scripted: queued replies are served first, in order (a reply can be
// an HTTP error with Retry-After, a delay, or a raw malformed body); then the first rule whose
// text appears in the request's messages; then the default answer, if any; else HTTP 500.
//
//   FakeOpenAiServer llm;
//   llm.AnswerWhen("polite", R"({"result": true, "explanation": "greeted"})");
//   config.llm_base_url = llm.base_url();   // http://127.0.0.1:PORT/v1
//   config.llm_api_key = llm.api_key();

#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_http_server.h"

namespace calleval {

class FakeOpenAiServer {
 public:
  struct Reply {
    int status = 200;
    std::string content;   // the assistant message content (status 200)
    std::string raw_body;  // when set, sent as is instead of a completion or error body
    std::string retry_after;
    absl::Duration delay = absl::ZeroDuration();
  };

  explicit FakeOpenAiServer(std::string api_key = "sk-test-key");

  std::string base_url() const { return http_.url("/v1"); }
  const std::string& api_key() const { return api_key_; }
  TestHttpServer& http() { return http_; }

  void Enqueue(Reply reply);
  void EnqueueContent(std::string content) {
    Reply reply;
    reply.content = std::move(content);
    Enqueue(std::move(reply));
  }
  void EnqueueError(int status, std::string retry_after = "");
  void AnswerWhen(std::string text_in_prompt, std::string content);
  // Like AnswerWhen, but each matching request gets the next of `contents`, round and round
  // (a judge that varies between samples, or a malformed answer followed by a good one).
  void AnswerInTurn(std::string text_in_prompt, std::vector<std::string> contents);
  // Every matching request gets this reply (an error status, a delay, a raw body).
  void ReplyWhen(std::string text_in_prompt, Reply reply);
  void SetDefault(std::string content);

  // Bodies of every chat request that passed validation, in arrival order.
  std::vector<nlohmann::json> chat_requests() const;
  // Every request to /v1/chat/completions, valid or not.
  int chat_calls() const { return http_.hits("/v1/chat/completions"); }

 private:
  TestHttpServer::Response Chat(const TestHttpServer::Request& request);

  const std::string api_key_;
  mutable std::mutex mu_;
  std::deque<Reply> queue_;
  struct Rule {
    std::string text;
    std::vector<Reply> replies;
    size_t next = 0;
  };
  std::vector<Rule> rules_;
  std::string default_content_;
  bool has_default_ = false;
  std::vector<nlohmann::json> requests_;
  int next_id_ = 1;
  // Last: stopped (threads joined) before the state above is destroyed.
  TestHttpServer http_;
};

// The OpenAI error body.
std::string OpenAiErrorBody(absl::string_view message, absl::string_view type,
                            absl::string_view code);

}  // namespace calleval

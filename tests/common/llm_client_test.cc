// The LLM provider client against a real local server speaking the OpenAI chat-completions
// protocol (tests/support/fake_openai_server.h): request shape, answers, retries with
// Retry-After, give-up and non-retryable errors, timeouts, malformed answers, the size cap,
// the in-flight cap and shutdown.

#include "common/llm_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/errors.h"
#include "common/provider_http.h"
#include "tests/support/fake_openai_server.h"

namespace calleval {
namespace {

using ::testing::HasSubstr;

ChatRequest JsonQuestion() {
  ChatRequest request;
  request.messages = {{"system", "Answer in JSON."}, {"user", "Is the sky blue?"}};
  return request;
}

LlmConfig FastConfig(const FakeOpenAiServer& server) {
  LlmConfig config;
  config.base_url = server.base_url();
  config.api_key = server.api_key();
  config.model = "gpt-test";
  config.initial_backoff = absl::Milliseconds(1);
  config.max_backoff = absl::Seconds(5);
  config.request_timeout = absl::Seconds(10);
  return config;
}

std::string Code(const absl::Status& status) { return ErrorInfoOf(status).code(); }

TEST(LlmClientTest, SendsTheOpenAiRequestAndReadsTheAnswer) {
  FakeOpenAiServer server;
  server.EnqueueContent(R"({"result": true})");
  auto client = NewOpenAiCompatibleClient(FastConfig(server));
  ChatRequest request = JsonQuestion();
  request.max_tokens = 50;
  absl::StatusOr<ChatResponse> response = client->Complete(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->content, R"({"result": true})");
  EXPECT_EQ(response->attempts, 1);
  EXPECT_GT(response->prompt_tokens, 0);
  EXPECT_GT(response->completion_tokens, 0);

  ASSERT_EQ(server.chat_requests().size(), 1u);
  const nlohmann::json sent = server.chat_requests()[0];
  EXPECT_EQ(sent["model"], "gpt-test");
  EXPECT_EQ(sent["temperature"], 0.0);
  EXPECT_EQ(sent["max_tokens"], 50);
  EXPECT_EQ(sent["response_format"]["type"], "json_object");
  ASSERT_EQ(sent["messages"].size(), 2u);
  EXPECT_EQ(sent["messages"][1]["role"], "user");
  EXPECT_EQ(sent["messages"][1]["content"], "Is the sky blue?");
}

TEST(LlmClientTest, RetriesA429AfterTheDelayItAsksFor) {
  FakeOpenAiServer server;
  server.EnqueueError(429, "1");
  server.EnqueueContent("{}");
  auto client = NewOpenAiCompatibleClient(FastConfig(server));
  const absl::Time start = absl::Now();
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->attempts, 2);
  // Retry-After: 1 is honoured although the computed backoff is about a millisecond.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(950));
  EXPECT_EQ(server.chat_calls(), 2);
}

TEST(LlmClientTest, RetriesServerErrorsThenGivesUp) {
  FakeOpenAiServer server;
  for (int i = 0; i < 5; ++i) server.EnqueueError(500);
  LlmConfig config = FastConfig(server);
  config.max_attempts = 3;
  auto client = NewOpenAiCompatibleClient(config);
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Code(response.status()), "llm_error");
  EXPECT_THAT(response.status().message(), HasSubstr("HTTP 500"));
  EXPECT_THAT(response.status().message(), HasSubstr("after 3 attempts"));
  EXPECT_EQ(server.chat_calls(), 3);
}

TEST(LlmClientTest, ServerErrorThenSuccess) {
  FakeOpenAiServer server;
  server.EnqueueError(503);
  server.EnqueueError(502);
  server.EnqueueContent(R"({"ok": 1})");
  auto client = NewOpenAiCompatibleClient(FastConfig(server));
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->attempts, 3);
}

TEST(LlmClientTest, AWrongKeyIsNotRetriedAndQuotesTheProvider) {
  FakeOpenAiServer server;
  LlmConfig config = FastConfig(server);
  config.api_key = "sk-wrong";
  auto client = NewOpenAiCompatibleClient(config);
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Code(response.status()), "llm_error");
  EXPECT_THAT(response.status().message(), HasSubstr("HTTP 401"));
  EXPECT_THAT(response.status().message(), HasSubstr("Incorrect API key provided."));
  EXPECT_EQ(server.chat_calls(), 1);
}

TEST(LlmClientTest, JsonModeWithoutTheWordJsonIsRejectedLikeTheRealApi) {
  FakeOpenAiServer server;
  server.SetDefault("{}");
  auto client = NewOpenAiCompatibleClient(FastConfig(server));
  ChatRequest request;
  request.messages = {{"user", "Is the sky blue?"}};
  absl::StatusOr<ChatResponse> response = client->Complete(request);
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(response.status().message(), HasSubstr("HTTP 400"));
  EXPECT_THAT(response.status().message(), HasSubstr("must contain the word 'json'"));
  request.json_object = false;
  EXPECT_TRUE(client->Complete(request).ok());
  EXPECT_FALSE(server.chat_requests().back().contains("response_format"));
}

TEST(LlmClientTest, ASlowProviderTimesOutAndIsRetried) {
  FakeOpenAiServer server;
  FakeOpenAiServer::Reply slow;
  slow.content = "{}";
  slow.delay = absl::Seconds(3);
  server.Enqueue(slow);
  server.EnqueueContent(R"({"fast": true})");
  LlmConfig config = FastConfig(server);
  config.request_timeout = absl::Milliseconds(300);
  auto client = NewOpenAiCompatibleClient(config);
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->content, R"({"fast": true})");
  EXPECT_EQ(response->attempts, 2);
}

TEST(LlmClientTest, TimeoutsOnEveryAttemptEndUnavailable) {
  FakeOpenAiServer server;
  FakeOpenAiServer::Reply slow;
  slow.content = "{}";
  slow.delay = absl::Seconds(3);
  server.Enqueue(slow);
  server.Enqueue(slow);
  LlmConfig config = FastConfig(server);
  config.request_timeout = absl::Milliseconds(200);
  config.max_attempts = 2;
  auto client = NewOpenAiCompatibleClient(config);
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(Code(response.status()), "llm_error");
  EXPECT_THAT(response.status().message(), HasSubstr("could not be reached"));
}

TEST(LlmClientTest, MalformedAnswersAreBadResponses) {
  struct Case {
    std::string body;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"this is not json", "not a JSON object"},
      {R"({"choices": []})", "no \"choices\""},
      {R"({"choices": [{"message": "hi"}]})", "no \"message\""},
      {R"({"choices": [{"message": {"role": "assistant", "content": 42}}]})", "no text content"},
      {R"({"choices": [{"message": {"content": null, "refusal": "I can't"}}]})", "refused"},
  };
  for (const Case& c : cases) {
    FakeOpenAiServer server;
    FakeOpenAiServer::Reply reply;
    reply.raw_body = c.body;
    server.Enqueue(reply);
    auto client = NewOpenAiCompatibleClient(FastConfig(server));
    absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
    ASSERT_FALSE(response.ok()) << c.body;
    EXPECT_EQ(Code(response.status()), "llm_bad_response") << c.body;
    EXPECT_THAT(response.status().message(), HasSubstr(c.says)) << c.body;
    EXPECT_EQ(server.chat_calls(), 1) << "a malformed answer is not retried at HTTP level";
  }
}

TEST(LlmClientTest, AnAnswerOverTheSizeCapIsRefused) {
  FakeOpenAiServer server;
  server.EnqueueContent(std::string(100000, 'x'));
  LlmConfig config = FastConfig(server);
  config.max_response_bytes = 10000;
  auto client = NewOpenAiCompatibleClient(config);
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(Code(response.status()), "llm_bad_response");
  EXPECT_THAT(response.status().message(), HasSubstr("over 10000 bytes"));
}

TEST(LlmClientTest, NoServerListeningIsUnavailable) {
  int port = 0;
  {
    FakeOpenAiServer gone;
    port = gone.http().port();
  }
  LlmConfig config;
  config.base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
  config.max_attempts = 2;
  config.initial_backoff = absl::Milliseconds(1);
  auto client = NewOpenAiCompatibleClient(config);
  absl::StatusOr<ChatResponse> response = client->Complete(JsonQuestion());
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Code(response.status()), "llm_error");
}

TEST(LlmClientTest, AtMostMaxInFlightRequestsAtOnce) {
  TestHttpServer server;
  std::atomic<int> active{0};
  std::atomic<int> peak{0};
  server.Handle("/v1/chat/completions", [&](const TestHttpServer::Request&) {
    const int now = ++active;
    int seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    --active;
    TestHttpServer::Response r;
    r.content_type = "application/json";
    r.body = R"({"choices": [{"message": {"role": "assistant", "content": "{}"}}]})";
    return r;
  });
  LlmConfig config;
  config.base_url = server.url("/v1");
  config.max_in_flight = 2;
  auto client = NewOpenAiCompatibleClient(config);
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    callers.emplace_back([&] {
      if (client->Complete(JsonQuestion()).ok()) ++ok;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(peak.load(), 2);
}

TEST(LlmClientTest, ShutdownEndsAWaitingRequest) {
  FakeOpenAiServer server;
  server.EnqueueError(429, "30");
  server.EnqueueContent("{}");
  auto client = NewOpenAiCompatibleClient(FastConfig(server));
  absl::StatusOr<ChatResponse> response;
  const absl::Time start = absl::Now();
  std::thread caller([&] { response = client->Complete(JsonQuestion()); });
  absl::SleepFor(absl::Milliseconds(300));
  client->Shutdown();
  caller.join();
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(Code(response.status()), "llm_cancelled");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(RetryAfterTest, SecondsAndHttpDates) {
  const absl::Time now = absl::FromUnixSeconds(1763800000);  // Sat, 22 Nov 2025 08:26:40 GMT
  EXPECT_EQ(ParseRetryAfter("7", now), absl::Seconds(7));
  EXPECT_EQ(ParseRetryAfter(" 1.5 ", now), absl::Milliseconds(1500));
  EXPECT_EQ(ParseRetryAfter("Sat, 22 Nov 2025 08:26:50 GMT", now), absl::Seconds(10));
  EXPECT_EQ(ParseRetryAfter("Sat, 22 Nov 2025 08:00:00 GMT", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("soon", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("-3", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("nan", now), std::nullopt);
}

TEST(BackoffTest, ExponentialWithFullJitterAndACap) {
  const absl::Duration initial = absl::Milliseconds(500);
  const absl::Duration max = absl::Seconds(4);
  EXPECT_EQ(BackoffDelay(1, initial, max, 0.999999), initial * 0.999999);
  EXPECT_EQ(BackoffDelay(2, initial, max, 0.5), absl::Milliseconds(500));
  EXPECT_EQ(BackoffDelay(3, initial, max, 0.5), absl::Seconds(1));
  EXPECT_EQ(BackoffDelay(10, initial, max, 0.5), absl::Seconds(2));
  EXPECT_EQ(BackoffDelay(60, initial, max, 1.0), max);
  EXPECT_EQ(BackoffDelay(3, initial, max, 0.0), absl::ZeroDuration());
}

TEST(ProviderErrorMessageTest, QuotesTheMessageOrTheBody) {
  EXPECT_EQ(ProviderErrorMessage(R"({"error": {"message": "Invalid model", "type": "x"}})"),
            "Invalid model");
  EXPECT_EQ(ProviderErrorMessage(R"({"error": "overloaded"})"), "overloaded");
  EXPECT_EQ(ProviderErrorMessage(R"({"detail": "Not Found"})"), "Not Found");
  EXPECT_EQ(ProviderErrorMessage(R"({"message": "busy"})"), "busy");
  EXPECT_EQ(ProviderErrorMessage(
                R"({"errors": [{"code": "10009", "title": "Authentication failed",)"
                R"( "detail": "Could not understand the provided credentials."}]})"),
            "Authentication failed: Could not understand the provided credentials.");
  EXPECT_EQ(ProviderErrorMessage(R"({"errors": [{"title": "Call has already ended"}]})"),
            "Call has already ended");
  EXPECT_EQ(ProviderErrorMessage("  Bad Gateway \n"), "Bad Gateway");
  EXPECT_EQ(ProviderErrorMessage(""), "(no message)");
  EXPECT_EQ(ProviderErrorMessage(std::string(1000, 'x')).size(), 303u);
}

}  // namespace
}  // namespace calleval

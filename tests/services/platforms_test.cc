// The voice platforms' REST clients (services/agents/platforms.h) against local Vapi and Retell
// APIs, the language mapping of pulled agents, and the rule for the websocket URL a Vapi call
// answers (services/runs/platform_run.h).

#include "services/agents/platforms.h"

#include <gtest/gtest.h>

#include "services/agents/platform_pull.h"
#include "services/runs/platform_run.h"
#include "tests/support/fake_retell_server.h"
#include "tests/support/fake_vapi_server.h"

namespace calleval::agents {
namespace {

using ::nlohmann::json;

class PlatformsTest : public ::testing::Test {
 protected:
  PlatformsTest() : vapi_("vapi-key", [](runs::WebSocketConnection&) {}), retell_("retell-key") {}

  FakeVapiServer vapi_;
  FakeRetellServer retell_;
};

TEST_F(PlatformsTest, VapiAssistantsOpeningsAndPrompts) {
  vapi_.AddAssistant("speaks", json{{"firstMessage", "Hi!"},
                                    {"model",
                                     {{"messages",
                                       {{{"role", "system"}, {"content", "Part one."}},
                                        {{"role", "assistant"}, {"content", "not a prompt"}},
                                        {{"role", "system"}, {"content", "Part two."}}}}}},
                                    {"transcriber", {{"language", "en-GB"}}}});
  absl::StatusOr<PlatformAgent> speaks = PullVapiAssistant(vapi_.base_url(), "vapi-key", "speaks");
  ASSERT_TRUE(speaks.ok()) << speaks.status();
  EXPECT_EQ(speaks->instructions, "Part one.\n\nPart two.");
  EXPECT_EQ(speaks->opening_mode, "agent_speaks_first");  // Vapi's default mode
  EXPECT_EQ(speaks->opening_text, "Hi!");
  EXPECT_EQ(speaks->language, "en-GB");

  vapi_.AddAssistant("waits", json{{"firstMessage", "Hi!"},
                                   {"firstMessageMode", "assistant-waits-for-user"},
                                   {"model", {{"systemPrompt", "Old-style prompt."}}}});
  absl::StatusOr<PlatformAgent> waits = PullVapiAssistant(vapi_.base_url(), "vapi-key", "waits");
  ASSERT_TRUE(waits.ok()) << waits.status();
  EXPECT_EQ(waits->instructions, "Old-style prompt.");
  EXPECT_EQ(waits->opening_mode, "user_speaks_first");
  EXPECT_EQ(waits->opening_text, "");
  EXPECT_EQ(waits->language, "");

  // No first message: Vapi's assistant waits for the user.
  vapi_.AddAssistant("silent", json::object());
  EXPECT_EQ(PullVapiAssistant(vapi_.base_url(), "vapi-key", "silent")->opening_mode,
            "user_speaks_first");
  vapi_.AddAssistant(
      "generated", json{{"firstMessageMode", "assistant-speaks-first-with-model-generated-message"},
                        {"firstMessage", "ignored"}});
  absl::StatusOr<PlatformAgent> generated =
      PullVapiAssistant(vapi_.base_url(), "vapi-key", "generated");
  EXPECT_EQ(generated->opening_mode, "agent_speaks_first");
  EXPECT_EQ(generated->opening_text, "");
}

TEST_F(PlatformsTest, VapiRefusalsSayWhoMustAct) {
  vapi_.AddAssistant("a", json::object());
  absl::Status bad_key = PullVapiAssistant(vapi_.base_url(), "nope", "a").status();
  EXPECT_EQ(bad_key.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(bad_key.message().find("HTTP 401"), absl::string_view::npos) << bad_key;
  EXPECT_NE(bad_key.message().find("Invalid Key"), absl::string_view::npos) << bad_key;
  absl::Status unknown = PullVapiAssistant(vapi_.base_url(), "vapi-key", "b").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("Couldn't Get Assistant"), absl::string_view::npos) << unknown;
  // An id cannot leave its path segment.
  EXPECT_EQ(PullVapiAssistant(vapi_.base_url(), "vapi-key", "../call").status().code(),
            absl::StatusCode::kNotFound);
  // A key that would add header lines is not sent.
  EXPECT_EQ(PullVapiAssistant(vapi_.base_url(), "k\r\nX-Evil: 1", "a").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(vapi_.refused_keys(), 1);
  // Nobody listening: unavailable.
  EXPECT_EQ(PullVapiAssistant("http://127.0.0.1:9", "vapi-key", "a").status().code(),
            absl::StatusCode::kUnavailable);

  vapi_.FailCalls(402, "Your org is out of credits.");
  absl::Status broke = CreateVapiWebsocketCall(vapi_.base_url(), "vapi-key", "a").status();
  EXPECT_EQ(broke.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(broke.message().find("out of credits"), absl::string_view::npos) << broke;
  vapi_.FailCalls(429, "Too many calls.");
  EXPECT_EQ(CreateVapiWebsocketCall(vapi_.base_url(), "vapi-key", "a").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(PlatformsTest, VapiCallAnswersItsWebsocket) {
  vapi_.AddAssistant("a", json::object());
  absl::StatusOr<VapiWebsocketCall> call =
      CreateVapiWebsocketCall(vapi_.base_url() + "/", "vapi-key", "a");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_FALSE(call->call_id.empty());
  EXPECT_EQ(call->websocket_url.rfind("ws://127.0.0.1:", 0), 0u) << call->websocket_url;
  ASSERT_EQ(vapi_.calls().size(), 1u);
  EXPECT_EQ(vapi_.calls()[0]["transport"]["audioFormat"]["sampleRate"], 16000);
  EXPECT_TRUE(runs::CheckPlatformWebsocketUrl(call->websocket_url, vapi_.base_url()).ok());
}

TEST_F(PlatformsTest, RetellAgentAndItsLlm) {
  retell_.AddAgent("agent_1", json{{"language", "fr-FR"}}, "llm_1",
                   json{{"general_prompt", "Tu prends les rendez-vous."},
                        {"begin_message", "Bonjour !"},
                        {"start_speaker", "user"}});
  absl::StatusOr<PlatformAgent> agent =
      PullRetellAgent(retell_.base_url(), "retell-key", "agent_1");
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ(agent->instructions, "Tu prends les rendez-vous.");
  EXPECT_EQ(agent->opening_mode, "user_speaks_first");
  EXPECT_EQ(agent->opening_text, "");
  EXPECT_EQ(agent->language, "fr-FR");
  absl::Status bad_key = PullRetellAgent(retell_.base_url(), "x", "agent_1").status();
  EXPECT_EQ(bad_key.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(bad_key.message().find("Invalid API Key"), absl::string_view::npos) << bad_key;
  EXPECT_EQ(PullRetellAgent(retell_.base_url(), "retell-key", "agent_2").status().code(),
            absl::StatusCode::kNotFound);
}

// A Retell agent that calls out: create-phone-call asks Retell to place its call; Retell's
// refusals keep their meaning and message.
TEST_F(PlatformsTest, RetellPlacesTheAgentsPhoneCall) {
  retell_.AddAgent("agent_1", json::object(), "llm_1", json::object());
  std::vector<std::pair<std::string, std::string>> placed;
  retell_.PlaceCallsWith(
      [&placed](const std::string& from, const std::string& to) { placed.emplace_back(from, to); });
  retell_.SetAgentVersion("agent_1", 4);
  absl::StatusOr<RetellPhoneCall> call = CreateRetellPhoneCall(
      retell_.base_url(), "retell-key", "+14155550123", "+14155552671", "agent_1");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->call_id.rfind("call_", 0), 0u) << call->call_id;
  // The version of the agent placing the call, as Retell answers it.
  EXPECT_EQ(call->agent_version, "4");
  retell_.JoinCalls();
  ASSERT_EQ(retell_.phone_calls().size(), 1u);
  EXPECT_EQ(retell_.phone_calls()[0], (json{{"from_number", "+14155550123"},
                                            {"to_number", "+14155552671"},
                                            {"override_agent_id", "agent_1"}}));
  EXPECT_EQ(placed,
            (std::vector<std::pair<std::string, std::string>>{{"+14155550123", "+14155552671"}}));

  absl::Status bad_key =
      CreateRetellPhoneCall(retell_.base_url(), "x", "+14155550123", "+14155552671", "agent_1")
          .status();
  EXPECT_EQ(bad_key.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(bad_key.message().find("Invalid API Key"), absl::string_view::npos) << bad_key;
  EXPECT_EQ(CreateRetellPhoneCall(retell_.base_url(), "retell-key", "+14155550123", "+14155552671",
                                  "agent_2")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(CreateRetellPhoneCall(retell_.base_url(), "retell-key", "4155550123", "+14155552671",
                                  "agent_1")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(retell_.phone_calls().size(), 1u);
}

// Retell's agent_version: an integer in its call objects (text "7" on the run and the call).
TEST(RetellAgentVersionTest, WholeNumbersOnly) {
  EXPECT_EQ(RetellAgentVersion(json{{"agent_version", 7}}), "7");
  EXPECT_EQ(RetellAgentVersion(json{{"agent_version", 0}}), "0");
  EXPECT_EQ(RetellAgentVersion(json::parse(R"({"agent_version": 9007199254740993})")),
            "9007199254740993");
  // A request may name a version as a string of digits; read the same way.
  EXPECT_EQ(RetellAgentVersion(json{{"agent_version", "12"}}), "12");
  for (const char* absent :
       {R"({})", R"({"agent_version": null})", R"({"agent_version": -1})",
        R"({"agent_version": 1.5})", R"({"agent_version": "v2"})", R"({"agent_version": ""})",
        R"({"agent_version": [1]})", R"({"agent_version": "123456789012345678901"})", R"([1])"}) {
    EXPECT_EQ(RetellAgentVersion(json::parse(absent)), std::nullopt) << absent;
  }
}

TEST(PlatformErrorMessageTest, PlatformShapes) {
  EXPECT_EQ(PlatformErrorMessage(R"({"message":"Not here.","error":"Not Found","statusCode":404})"),
            "Not here.");
  EXPECT_EQ(
      PlatformErrorMessage(R"({"message":["a must be x","b must be y"],"error":"Bad Request"})"),
      "a must be x; b must be y");
  EXPECT_EQ(PlatformErrorMessage(R"({"error_message":"nope"})"), "nope");
  EXPECT_EQ(PlatformErrorMessage("upstream timeout"), "upstream timeout");
  EXPECT_EQ(PlatformErrorMessage(""), "(no message)");
}

TEST(LanguageIdForTest, CodesAndBareLanguages) {
  v1::ListLanguagesResponse languages;
  for (auto [id, code] : std::vector<std::pair<int, std::string>>{
           {1, "en-US"}, {2, "en-GB"}, {3, "es-ES"}, {6, "de-DE"}}) {
    v1::Language* l = languages.add_data();
    l->set_id(id);
    l->set_code(code);
  }
  EXPECT_EQ(LanguageIdFor("en-GB", languages), 2);
  EXPECT_EQ(LanguageIdFor("EN_gb", languages), 2);
  EXPECT_EQ(LanguageIdFor("en", languages), 1);
  EXPECT_EQ(LanguageIdFor("de", languages), 6);
  EXPECT_EQ(LanguageIdFor("es-MX", languages), std::nullopt);
  EXPECT_EQ(LanguageIdFor("multi", languages), std::nullopt);
  EXPECT_EQ(LanguageIdFor("", languages), std::nullopt);
}

TEST(CheckPlatformWebsocketUrlTest, OnlyThePlatformsHost) {
  EXPECT_TRUE(
      runs::CheckPlatformWebsocketUrl("wss://api.vapi.ai/7420/transport", "https://api.vapi.ai")
          .ok());
  EXPECT_FALSE(runs::CheckPlatformWebsocketUrl("wss://evil.example.com/7420/transport",
                                               "https://api.vapi.ai")
                   .ok());
  EXPECT_FALSE(
      runs::CheckPlatformWebsocketUrl("ws://api.vapi.ai/7420/transport", "https://api.vapi.ai")
          .ok());
  EXPECT_FALSE(
      runs::CheckPlatformWebsocketUrl("https://api.vapi.ai/7420/transport", "https://api.vapi.ai")
          .ok());
  EXPECT_FALSE(runs::CheckPlatformWebsocketUrl("wss://10.0.0.1/x", "https://api.vapi.ai").ok());
}

}  // namespace
}  // namespace calleval::agents

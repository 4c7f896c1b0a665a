#include "services/runs/text_channel.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace calleval::runs {
namespace {

constexpr absl::string_view kAgentRole = "AI Assistant";
constexpr absl::string_view kUserRole = "User";

// One side's next message and whether that side ends the conversation with it.
struct Utterance {
  std::string message;
  bool ends = false;
};

// Reads {"message": "...", "<end_key>": bool}. A model that answers plain text instead is
// taken at its word: the whole answer is the message.
Utterance ParseUtterance(const std::string& content, const char* end_key) {
  nlohmann::json j = nlohmann::json::parse(content, nullptr, false);
  if (!j.is_object() || !j.contains("message") || !j["message"].is_string()) {
    return {content, false};
  }
  Utterance u{j["message"].get<std::string>(), false};
  if (auto it = j.find(end_key); it != j.end() && it->is_boolean()) u.ends = it->get<bool>();
  return u;
}

// The conversation so far as chat messages from one side's point of view: its own lines are
// "assistant", the other side's "user".
std::vector<ChatMessage> History(const std::vector<v1::Turn>& transcript,
                                 absl::string_view own_role, std::string system) {
  std::vector<ChatMessage> messages = {{"system", std::move(system)}};
  for (const v1::Turn& turn : transcript) {
    messages.push_back({turn.role() == own_role ? "assistant" : "user", turn.content()});
  }
  return messages;
}

v1::Turn MakeTurn(absl::string_view role, std::string content) {
  v1::Turn t;
  t.set_role(std::string(role));
  t.set_content(std::move(content));
  return t;
}

}  // namespace

std::string AgentSystemPrompt(const TextAgent& agent) {
  return absl::StrCat(
      "You are the agent described by the instructions below, in a text conversation with a "
      "caller. Stay in your role, answer as the agent would, one message at a time.\n\n"
      "Instructions:\n",
      agent.instructions,
      "\n\nAnswer with a JSON object: {\"message\": \"<your next message>\", \"end_call\": "
      "<true when the conversation is over and you end it, else false>}.");
}

std::string CallerSystemPrompt(const TextCaller& caller) {
  return absl::StrCat(
      "You play a caller contacting an organization's agent by text, to test that agent. "
      "Stay in character; write one short message at a time, as a real caller would.\n\n"
      "Persona: ",
      caller.persona.empty() ? "an ordinary customer" : caller.persona, "\nGoal: ", caller.goal,
      "\n\nAnswer with a JSON object: {\"message\": \"<your next message, or empty>\", "
      "\"goal_reached\": <true once your goal is achieved, or clearly cannot be, and you are "
      "ending the conversation, else false>}.");
}

absl::StatusOr<CallerMessage> NextCallerMessage(LlmClient& llm, const TextCaller& caller,
                                                const std::vector<v1::Turn>& transcript) {
  ChatRequest request;
  request.messages = History(transcript, kUserRole, CallerSystemPrompt(caller));
  if (transcript.empty()) {
    request.messages.push_back({"user", "(You are connected. Say your first message.)"});
  }
  ASSIGN_OR_RETURN(ChatResponse response, llm.Complete(request));
  Utterance said = ParseUtterance(response.content, "goal_reached");
  return CallerMessage{std::move(said.message), said.ends};
}

absl::StatusOr<Conversation> RunTextConversation(LlmClient& llm, const TextAgent& agent,
                                                 const TextCaller& caller,
                                                 const ConversationLimits& limits) {
  Conversation out;
  const absl::Time deadline = absl::Now() + limits.max_duration;
  const std::string agent_prompt = AgentSystemPrompt(agent);

  auto agent_says = [&]() -> absl::StatusOr<Utterance> {
    ChatRequest request;
    request.model = agent.model;
    request.messages = History(out.transcript, kAgentRole, agent_prompt);
    if (out.transcript.empty()) {
      request.messages.push_back({"user", "(The caller is connected. Open the conversation.)"});
    }
    ASSIGN_OR_RETURN(ChatResponse response, llm.Complete(request));
    return ParseUtterance(response.content, "end_call");
  };

  if (agent.opening_mode != "user_speaks_first") {
    if (!agent.opening_text.empty()) {
      out.transcript.push_back(MakeTurn(kAgentRole, agent.opening_text));
    } else {
      ASSIGN_OR_RETURN(Utterance opening, agent_says());
      out.transcript.push_back(MakeTurn(kAgentRole, opening.message));
      if (opening.ends) {
        out.end_reason = "agent_ended";
        return out;
      }
    }
  }
  size_t script_line = 0;
  for (int turn = 0;; ++turn) {
    if (turn >= limits.max_turns) {
      out.end_reason = "max_turns";
      return out;
    }
    if (absl::Now() >= deadline) {
      out.end_reason = "max_duration";
      return out;
    }
    // The caller.
    bool caller_done = false;
    if (!caller.script.empty()) {
      if (script_line >= caller.script.size()) {
        out.end_reason = "script_finished";
        return out;
      }
      out.transcript.push_back(MakeTurn(kUserRole, caller.script[script_line++]));
    } else {
      ASSIGN_OR_RETURN(CallerMessage said, NextCallerMessage(llm, caller, out.transcript));
      if (!said.message.empty()) out.transcript.push_back(MakeTurn(kUserRole, said.message));
      caller_done = said.goal_reached;
    }
    if (caller_done) {
      out.end_reason = "goal_reached";
      return out;
    }
    // The agent answers.
    ASSIGN_OR_RETURN(Utterance answer, agent_says());
    out.transcript.push_back(MakeTurn(kAgentRole, answer.message));
    if (answer.ends) {
      out.end_reason = "agent_ended";
      return out;
    }
  }
}

}  // namespace calleval::runs

#pragma once

// The text channel (docs/api.md §5): a conversation between the scenario's simulated caller and an
// internal agent, both played through the LLM provider. The agent speaks from its
// instructions, opening message and model; the caller says the scenario's caller_script line
// by line when it has one, else is played from its persona and goal. The conversation ends when
// the caller's goal is reached (or its script runs out), after max_turns caller messages, when
// the agent ends it, or when the time cap passes.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.pb.h"
#include "common/llm_client.h"

namespace calleval::runs {

struct TextAgent {
  std::string instructions;
  std::string opening_mode = "agent_speaks_first";  // or user_speaks_first
  std::string opening_text;  // said as is when the agent speaks first; empty: the LLM opens
  std::string model;         // empty: the provider's configured model
};

struct TextCaller {
  std::vector<std::string> script;  // when not empty, said exactly, in order
  std::string persona;
  std::string goal;
};

struct ConversationLimits {
  int max_turns = 20;  // caller messages
  absl::Duration max_duration = absl::Minutes(10);
};

struct Conversation {
  std::vector<v1::Turn> transcript;  // roles "AI Assistant" and "User"
  // goal_reached | script_finished | max_turns | agent_ended | max_duration
  std::string end_reason;
};

// The LLM-played caller's next message given the conversation so far (roles "AI Assistant"
// and "User"), and whether the caller ends the conversation with it (goal reached). Shared by
// the text and the websocket channels.
struct CallerMessage {
  std::string message;  // may be empty when the caller only ends the conversation
  bool goal_reached = false;
};
absl::StatusOr<CallerMessage> NextCallerMessage(LlmClient& llm, const TextCaller& caller,
                                                const std::vector<v1::Turn>& transcript);

// Fails (with the provider's error) only when a needed LLM answer cannot be had.
absl::StatusOr<Conversation> RunTextConversation(LlmClient& llm, const TextAgent& agent,
                                                 const TextCaller& caller,
                                                 const ConversationLimits& limits);

// The prompts, exposed for tests: the system message of each side.
std::string AgentSystemPrompt(const TextAgent& agent);
std::string CallerSystemPrompt(const TextCaller& caller);

}  // namespace calleval::runs

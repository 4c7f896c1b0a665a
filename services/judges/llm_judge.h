#pragma once

// LLM as judge (docs/api.md §4, §7): the prompt that puts a metric's question to an
// OpenAI-compatible chat model over a call's transcript, the parsing and coercion of its JSON
// answer by result_type (one retry on a malformed answer), and sampling the judge several times to
// report the majority or mean with an agreement figure.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/calls.pb.h"
#include "common/llm_client.h"
#include "google/protobuf/struct.pb.h"

namespace calleval::judges {

// One question to the judge.
struct LlmQuestion {
  std::string name;          // the metric's name
  std::string instructions;  // what to judge
  std::string result_type;   // boolean | rating | enum | numeric
  std::vector<std::string> enum_values;
  int samples = 1;  // 1–5: how many times the judge is asked
};

struct LlmJudgement {
  bool ok = false;
  google::protobuf::Value value;  // typed by result_type (enum values in their defined spelling)
  std::string explanation;
  // With samples > 1: the share of samples that agree with the reported value (booleans and
  // enums: the majority; ratings: equal to the rounded mean; numbers: within 10% of the mean).
  std::optional<double> agreement;
  std::string error;  // when !ok: llm_unavailable, or what went wrong
};

// Asks the judge (`samples` times) and aggregates.
LlmJudgement JudgeWithLlm(LlmClient& client, const LlmQuestion& question,
                          const std::vector<v1::Turn>& transcript);

// Judges several questions on one transcript in as few requests as the provider allows: the
// single-sample questions go up to `max_batch` per request (one transcript read, one answer
// {"results": {"m1": {"result", "explanation"}, ...}}); any question the batch answer leaves
// out or answers unusably, and every question with samples > 1, is asked on its own with
// JudgeWithLlm. A provider error on a batch request fails the questions of that batch (the
// client already retried). max_batch <= 1 asks every question on its own. Results are in the
// order of `questions`.
std::vector<LlmJudgement> JudgeAllWithLlm(LlmClient& client,
                                          const std::vector<LlmQuestion>& questions,
                                          const std::vector<v1::Turn>& transcript,
                                          int max_batch);

// The chat messages of one batch of questions, keyed "m1", "m2", ... in order.
std::vector<ChatMessage> BatchPrompt(const std::vector<const LlmQuestion*>& questions,
                                     const std::vector<v1::Turn>& transcript);

// The transcript as the judge reads it: one numbered line per turn, tool calls with their name
// and arguments, tool results with their result. Bounded: past `max_chars` the middle of the
// conversation is cut and the cut is said.
std::string RenderTranscript(const std::vector<v1::Turn>& transcript, size_t max_chars = 200000);

// The chat messages of one question.
std::vector<ChatMessage> JudgePrompt(const LlmQuestion& question,
                                     const std::vector<v1::Turn>& transcript);

struct ParsedAnswer {
  google::protobuf::Value value;
  std::string explanation;
};
// Reads {"result": …, "explanation": …} from the model's answer (a JSON object, possibly inside
// a ```json fence) and coerces the result: booleans also from "yes"/"no"/"true"/"false"/
// "pass"/"fail"; ratings and numbers also from numeric text (ratings must be 1–5); enums
// matched ignoring case and surrounding space. kInvalidArgument saying what was wrong.
absl::StatusOr<ParsedAnswer> ParseAnswer(absl::string_view content, const LlmQuestion& question);

}  // namespace calleval::judges

#pragma once

// POST /api/v1/calls/{id}/scenario (docs/api.md §5.10): a scenario that replays a scored call.
// Pure functions over the call as the calls service answers it: the caller's lines with the
// workspace's personal data masked, the metrics the call failed, and the persona the LLM
// provider writes from those lines. The Agents service stores the scenario.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/calls.pb.h"
#include "common/llm_client.h"
#include "google/protobuf/struct.pb.h"

namespace calleval::agents {

// What a workspace masks in a replay (its `privacy` integration settings, docs/api.md §5.8).
// Each kind is replaced by a marker: [phone], [email], [card], and [<key>] for the value of a
// listed metadata key wherever the caller said it.
struct MaskOptions {
  bool phone_numbers = true;
  bool emails = true;
  bool card_numbers = true;
  std::vector<std::string> metadata_keys;
};

// The privacy settings' fields as stored (IntegrationSettings::fields); absent keys keep the
// defaults above.
MaskOptions MaskOptionsFrom(const google::protobuf::Struct& fields);

// True when `digits` (only 0-9) passes the Luhn check that card numbers carry.
bool LuhnValid(absl::string_view digits);

// `text` with email addresses, card numbers (13 to 19 digits, spaces or dashes between them,
// Luhn-valid) and phone numbers (7 to 15 digits, with +, spaces, dashes, dots or parentheses
// between them) replaced as `options` asks, then each listed metadata value.
std::string MaskText(absl::string_view text, const MaskOptions& options,
                     const google::protobuf::Struct& metadata = {});

// The caller's turns (role "User"), in order, masked; empty turns are skipped.
std::vector<std::string> CallerLines(const v1::Call& call, const MaskOptions& options);

// The call's scored results that failed: completed with a structured outcome that is neither
// meets_expectations nor exceeds_expectations (a run of the scenario passes only when each
// of them does, docs/api.md §5). In the order of the call's results, without duplicates.
std::vector<int64_t> FailingMetricIds(const v1::Call& call);

struct WrittenPersona {
  std::string persona;
  std::string goal;
};

// Asks the LLM provider for a persona and a goal that reproduce the caller's intent from
// `caller_lines` (masked already). Provider errors come back as they are; an answer without
// both is kUnavailable llm_bad_response.
absl::StatusOr<WrittenPersona> WritePersona(LlmClient& client,
                                            const std::vector<std::string>& caller_lines);

}  // namespace calleval::agents

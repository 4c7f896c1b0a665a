#pragma once

// Agents (the systems under test) and the languages they speak (seed "Agent", docs/api.md §5).
//
// Every function takes the workspace the request already resolved; an agent of another
// workspace is reported as not found. Validation collects every field problem of a request
// into one 422 "validation_failed" error so a client can fix them all at once.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "calleval/v1/agents.pb.h"
#include "common/database.h"
#include "common/url_guard.h"
#include "services/agents/web_channel.h"

namespace calleval::agents {

// Limits of the agent fields that neither the seed nor docs/api.md §5 fixes.
inline constexpr int kMaxNameLength = 255;  // name, model, voice, assistant_id
inline constexpr int kMaxInstructionsLength = 100000;
inline constexpr int kMaxOpeningTextLength = 10000;
inline constexpr int kMaxOpeningDelayMs = 60000;
inline constexpr int kDefaultMaxCallDurationSeconds = 600;
inline constexpr int kMaxCallDurationSeconds = 7200;
inline constexpr int kMinSilenceThresholdMs = 500;
inline constexpr int kMaxSilenceThresholdMs = 60000;
inline constexpr int kDefaultPerPage = 25;
inline constexpr int kMaxPerPage = 100;

// Country calling code -> telephony carrier of docs/api.md §5's default table.
std::map<int, std::string> DefaultCarriers();

class AgentsStore {
 public:
  struct Options {
    // Carrier for a phone number's country calling code; codes not listed use
    // `default_carrier`.
    std::map<int, std::string> carriers = DefaultCarriers();
    std::string default_carrier = "telnyx";
    // Web channel URLs must be public (docs/api.md §8); the operator's allow-list applies.
    UrlGuardOptions url_guard;
    // 32 bytes, kept outside the database (<data-dir>/credentials-key by default): web channel
    // credentials are sealed with it (AES-256-GCM). Empty: agents cannot hold credentials.
    std::string credentials_key;
  };

  explicit AgentsStore(db::Database* db) : AgentsStore(db, Options()) {}
  AgentsStore(db::Database* db, Options options);

  // Validates and stores a new agent (201 at the edge).
  absl::StatusOr<v1::Agent> Create(int64_t workspace_id, const v1::AgentFields& fields);
  absl::StatusOr<v1::Agent> Get(int64_t workspace_id, int64_t id);
  // The agent as its calls see it (Agents/GetCallAgent): NOT_FOUND when the workspace has no
  // such agent.
  absl::StatusOr<v1::CallAgent> GetCallAgent(int64_t workspace_id, int64_t id);
  // PATCH: keys in `patch.set_fields` (or set on the message) change, keys in
  // `patch.null_fields` are cleared (nullable fields) or reset to their default; the merged
  // agent is validated as on create.
  absl::StatusOr<v1::Agent> Update(int64_t workspace_id, int64_t id, const v1::AgentFields& patch);
  absl::Status Delete(int64_t workspace_id, int64_t id);
  // Newest first; page is 1-based, per_page 1..100 (else 422).
  absl::StatusOr<v1::ListAgentsResponse> List(int64_t workspace_id, int page, int per_page);
  absl::StatusOr<v1::ListLanguagesResponse> ListLanguages();

  // For call ingest: OK when `agent_id` names an agent of the workspace, otherwise 422
  // "agent_not_found" with a detail on field agent_id.
  absl::Status CheckAgentInWorkspace(int64_t workspace_id, int64_t agent_id);
  // Of `ids`, those that name an agent of the workspace (for services that link to agents).
  absl::StatusOr<absl::flat_hash_set<int64_t>> Existing(int64_t workspace_id,
                                                        absl::Span<const int64_t> ids);

  // Whether the agent has a phone number; 404 when it is not an agent of the workspace.
  absl::StatusOr<bool> HasPhoneNumber(int64_t workspace_id, int64_t agent_id);

  // For the metric toggles: in one write transaction, drops the entries of the agent's
  // disabled_metric_ids for which `replaced(id)` is true, adds `ids`, and stores the list
  // deduplicated and sorted (updated_at changes). `check`, when given, runs inside the same
  // transaction once the agent is found, and its error aborts the change (e.g. a metric id that
  // is not in the workspace). Returns the new list; 404 when the agent is not in the workspace.
  absl::StatusOr<std::vector<int64_t>> ReplaceDisabledMetrics(
      int64_t workspace_id, int64_t agent_id, const std::function<bool(int64_t)>& replaced,
      const std::vector<int64_t>& ids,
      const std::function<absl::Status(db::Connection&)>& check = nullptr);

  // For a voice platform's webhook (services/agents/platform_events.h): per workspace, the
  // oldest agent whose agent_source is `source` and whose assistant_id is `assistant_id`, by
  // workspace id, at most `limit` of them.
  struct AssistantAgent {
    int64_t workspace_id = 0;
    int64_t agent_id = 0;
  };
  absl::StatusOr<std::vector<AssistantAgent>> FindByAssistant(absl::string_view source,
                                                              absl::string_view assistant_id,
                                                              int limit = 16);

  // The carrier for a country calling code.
  const std::string& CarrierFor(int country_code) const;

  // The agent's web channel with its credentials in the clear, for the runner that dials it;
  // nullopt for a phone-only agent.
  absl::StatusOr<std::optional<WebChannel>> GetWebChannel(int64_t workspace_id, int64_t agent_id);

 private:
  db::Database* db_;
  Options options_;
};

}  // namespace calleval::agents

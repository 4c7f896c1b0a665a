#pragma once

// An external agent's instructions, opening message and language come from the platform it
// lives on (docs/api.md §5, "External agents"): pulled into the create or PATCH request before
// the agents store validates it, so the agent is stored with them. Pulled when an agent is
// created as external_vapi / external_retell, when a PATCH makes it external or sends
// assistant_id (the same id again pulls afresh: that is the refresh on demand), and only when
// an API key is at hand: the agent's web_channel.platform_api_key, else the workspace's
// integration settings for the platform (api_key). Without a key the agent is stored as sent
// and a run pulls at its start.
//
// The platform's errors, by who must act:
//   the key refused (401/403)          422 platform_refused on the key's field
//   no such assistant / agent (404)    422 platform_refused on assistant_id
//   out of credit (402), other 4xx     422 platform_refused
//   unreachable, 5xx, rate limit (429) 503 platform_unavailable (try again later)

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "calleval/v1/agents.pb.h"
#include "services/agents/agents_store.h"
#include "services/agents/integrations_store.h"
#include "services/agents/platforms.h"

namespace calleval::agents {

struct PlatformApiUrls {
  std::string vapi;
  std::string retell;
};

class PlatformPull {
 public:
  // `integrations` may be null (then only an agent's own key is used).
  PlatformPull(PlatformApiUrls urls, AgentsStore* store, IntegrationsStore* integrations)
      : urls_(std::move(urls)), store_(store), integrations_(integrations) {}

  // Fills `fields` (a create's body) from the platform when it asks for an external agent.
  absl::Status IntoCreate(int64_t workspace_id, v1::AgentFields& fields) const;
  // Fills `fields` (a PATCH of agent `agent_id`) when it makes the agent external or sends
  // assistant_id. NotFound and validation problems are left to the store's update.
  absl::Status IntoUpdate(int64_t workspace_id, int64_t agent_id, v1::AgentFields& fields) const;

 private:
  // `web_key`: the agent's own platform_api_key, empty when it has none.
  absl::Status Pull(int64_t workspace_id, const std::string& source,
                    const std::string& assistant_id, const std::string& web_key,
                    v1::AgentFields& fields) const;

  PlatformApiUrls urls_;
  AgentsStore* store_;
  IntegrationsStore* integrations_;
};

// The id of the languages table's entry for a platform's language code: the code itself
// ("en-US", any case, "_" for "-"), else the first entry of a bare language ("en" -> en-US).
std::optional<int64_t> LanguageIdFor(const std::string& code,
                                     const v1::ListLanguagesResponse& languages);

}  // namespace calleval::agents

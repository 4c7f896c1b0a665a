#pragma once

// A workspace's integration settings (docs/api.md §5.8): the credentials and numbers
// with which the service reaches each telephony carrier and voice platform. Pure functions over
// the stored form; the integrations store keeps the SQL and seals the secrets
// (common/crypto.h), as the agents store does for a web channel's credentials.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"
#include "nlohmann/json.hpp"
#include "services/agents/agent_rules.h"

namespace calleval::agents {

// The providers, in the order a listing shows them.
// `privacy` is no provider: it holds what a replay masks (POST /api/v1/calls/{id}/scenario).
inline constexpr absl::string_view kIntegrationProviders[] = {
    "twilio", "telnyx", "plivo", "vapi", "retell", "livekit", "privacy"};

// At most this many caller numbers per provider.
inline constexpr int kMaxCallerNumbers = 100;

struct IntegrationSettings {
  std::string provider;
  // Every key but the secrets.
  nlohmann::json fields = nlohmann::json::object();
  // The secrets (auth_token, api_key, ...), in the clear only between unsealing and sealing.
  nlohmann::json secrets = nlohmann::json::object();
  // Which secrets are stored (read from the row without unsealing them).
  std::vector<std::string> secrets_set;
  std::string created_at;
  std::string updated_at;
};

// NOT_FOUND `unknown_provider` naming the providers when `provider` is none of them.
absl::Status CheckProvider(absl::string_view provider);

// The provider's secret keys, in the order answers list them.
std::vector<std::string> SecretKeys(absl::string_view provider);

// Applies a PUT (`replace`: the body is the whole settings) or a PATCH (keys merge one by one;
// a key sent as null is removed) to `settings`. Unknown keys are ignored (docs/api.md §1); a
// known key of the wrong type is an issue for it.
void ApplyIntegration(const google::protobuf::Struct& body, bool replace,
                      IntegrationSettings* settings, rules::Issues& issues);

// Checks the merged settings and normalizes them: the provider's required keys are present,
// values fit their form (Twilio account SIDs, a Telnyx public key of 32 bytes in base64,
// LiveKit's server URL), caller numbers are valid E.164 (normalized, duplicates dropped).
void ValidateIntegration(IntegrationSettings* settings, rules::Issues& issues);

// The answer's settings: the stored fields and "<secret>_set": true|false for each of the
// provider's secrets. Never a secret's value.
google::protobuf::Struct IntegrationResponse(const IntegrationSettings& settings);

}  // namespace calleval::agents

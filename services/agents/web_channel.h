#pragma once

// An agent's web channel (seed "Web channel", docs/api.md §5): how the service reaches the agent
// over the web. Pure functions over the stored form; the agents store persists it, the fields in
// one column and the credentials sealed in another (common/crypto.h).

#include <string>
#include <vector>

#include "common/errors.h"
#include "common/url_guard.h"
#include "google/protobuf/struct.pb.h"
#include "nlohmann/json.hpp"

namespace calleval::agents {

inline constexpr int kMaxWebChannelUrlLength = 2048;
inline constexpr int kMaxCredentialLength = 4096;

struct WebChannel {
  // Every key but the credentials, "transport" included.
  nlohmann::json fields = nlohmann::json::object();
  // The write-only keys (auth_token, room_api_key, room_api_secret, platform_api_key).
  nlohmann::json credentials = nlohmann::json::object();
};

// The credential keys of a transport (empty for an unknown one).
std::vector<std::string> CredentialKeys(const std::string& transport);

// PATCH semantics (seed rule 1): the request's keys merge into `channel` one by one; a key sent
// as null is removed. Only strings are kept for known keys; a known key with another type is
// reported in `issues` as web_channel.<key>. Unknown keys are ignored (docs/api.md §1).
void MergeWebChannel(const google::protobuf::Struct& patch, WebChannel* channel,
                     std::vector<FieldIssue>* issues);

// Checks the merged channel and normalizes it: the transport is required and known; keys of
// other transports are dropped; defaults are filled in (protocol twilio_media_streams,
// room_management rubric); websocket needs websocket_url (ws/wss), client room mode needs
// bot_runner_url (http/https); every URL must be public as written (docs/api.md §8, `guard`'s
// allow-list applies).
void ValidateWebChannel(WebChannel* channel, const UrlGuardOptions& guard,
                        std::vector<FieldIssue>* issues);

// The response form: the fields of the active transport and, for each of its credentials,
// "<name>_set": true|false. Never a credential's value.
google::protobuf::Struct WebChannelResponse(const WebChannel& channel);

}  // namespace calleval::agents

#include "services/agents/web_channel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace calleval::agents {
namespace {

constexpr const char* kTransports[] = {"websocket", "livekit", "daily", "vapi", "retell"};
constexpr size_t kMaxAgentNameLength = 128;

// The non-credential keys each transport uses, "transport" aside.
std::vector<std::string> FieldKeys(const std::string& transport) {
  if (transport == "websocket") return {"websocket_url", "protocol"};
  if (transport == "livekit" || transport == "daily") {
    return {"room_management", "room_server_url", "bot_runner_url", "agent_name"};
  }
  return {};
}

bool Contains(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

bool IsKnownKey(const std::string& key) {
  if (key == "transport") return true;
  for (const char* t : kTransports) {
    if (Contains(FieldKeys(t), key) || Contains(CredentialKeys(t), key)) return true;
  }
  return false;
}

void CheckUrl(const WebChannel& channel, const std::string& key,
              const std::vector<std::string>& schemes, const UrlGuardOptions& guard,
              std::vector<FieldIssue>* issues) {
  const std::string field = "web_channel." + key;
  const std::string url = channel.fields.value(key, "");
  if (url.size() > kMaxWebChannelUrlLength) {
    issues->push_back({field, absl::StrCat("must be at most ", kMaxWebChannelUrlLength,
                                           " characters")});
    return;
  }
  UrlGuardOptions options = guard;
  options.allowed_schemes = schemes;
  absl::Status checked = CheckUrlLiteral(url, options, field);
  if (checked.ok()) return;
  // The guard's own detail says what is wrong (scheme, loopback, private address, ...).
  const v1::ErrorInfo info = ErrorInfoOf(checked);
  std::string issue(checked.message());
  if (info.details_size() > 0) issue = info.details(0).issue();
  issues->push_back({field, issue});
}

}  // namespace

std::vector<std::string> CredentialKeys(const std::string& transport) {
  if (transport == "websocket") return {"auth_token"};
  if (transport == "livekit" || transport == "daily") return {"room_api_key", "room_api_secret"};
  if (transport == "vapi" || transport == "retell") return {"platform_api_key"};
  return {};
}

void MergeWebChannel(const google::protobuf::Struct& patch, WebChannel* channel,
                     std::vector<FieldIssue>* issues) {
  for (const auto& [key, value] : patch.fields()) {
    if (!IsKnownKey(key)) continue;
    bool credential = false;
    for (const char* t : kTransports) credential |= Contains(CredentialKeys(t), key);
    nlohmann::json& target = credential ? channel->credentials : channel->fields;
    if (value.has_null_value()) {
      target.erase(key);
    } else if (value.has_string_value()) {
      target[key] = value.string_value();
    } else {
      issues->push_back({"web_channel." + key, "must be a string"});
    }
  }
}

void ValidateWebChannel(WebChannel* channel, const UrlGuardOptions& guard,
                        std::vector<FieldIssue>* issues) {
  const std::string transport = channel->fields.value("transport", "");
  if (transport.empty()) {
    issues->push_back({"web_channel.transport",
                       "is required: one of websocket, livekit, daily, vapi, retell"});
    return;
  }
  if (std::none_of(std::begin(kTransports), std::end(kTransports),
                   [&](const char* t) { return transport == t; })) {
    issues->push_back({"web_channel.transport",
                       "must be one of websocket, livekit, daily, vapi, retell"});
    return;
  }
  // Only the active transport's keys are kept, so a switch of transport leaves nothing stale.
  const std::vector<std::string> keys = FieldKeys(transport);
  const std::vector<std::string> credentials = CredentialKeys(transport);
  nlohmann::json fields = {{"transport", transport}};
  for (const std::string& key : keys) {
    if (channel->fields.contains(key)) fields[key] = channel->fields[key];
  }
  nlohmann::json kept = nlohmann::json::object();
  for (const std::string& key : credentials) {
    if (!channel->credentials.contains(key)) continue;
    const std::string value = channel->credentials[key];
    if (value.empty()) continue;  // an empty credential is no credential
    if (value.size() > kMaxCredentialLength) {
      issues->push_back({"web_channel." + key,
                         absl::StrCat("must be at most ", kMaxCredentialLength, " characters")});
    }
    kept[key] = value;
  }
  channel->fields = std::move(fields);
  channel->credentials = std::move(kept);
  nlohmann::json& f = channel->fields;

  if (transport == "websocket") {
    if (!f.contains("websocket_url") || f["websocket_url"].get<std::string>().empty()) {
      issues->push_back({"web_channel.websocket_url", "is required for the websocket transport"});
    } else {
      CheckUrl(*channel, "websocket_url", {"ws", "wss"}, guard, issues);
    }
    const std::string protocol = f.value("protocol", "twilio_media_streams");
    if (protocol != "twilio_media_streams" && protocol != "pcm16") {
      issues->push_back({"web_channel.protocol", "must be twilio_media_streams or pcm16"});
    }
    f["protocol"] = protocol;
  } else if (transport == "livekit" || transport == "daily") {
    const std::string mode = f.value("room_management", "rubric");
    if (mode != "rubric" && mode != "client") {
      issues->push_back({"web_channel.room_management", "must be rubric or client"});
    }
    f["room_management"] = mode;
    // rubric: the LiveKit agent to dispatch into the room by name (a worker registered with
    // that agent_name); without it LiveKit's automatic dispatch applies.
    if (f.contains("agent_name")) {
      const std::string name = f["agent_name"].get<std::string>();
      if (name.empty()) {
        f.erase("agent_name");
      } else if (name.size() > kMaxAgentNameLength ||
                 std::any_of(name.begin(), name.end(), [](char c) {
                   return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                 })) {
        issues->push_back(
            {"web_channel.agent_name", absl::StrCat("must be at most ", kMaxAgentNameLength,
                                                    " characters, without control characters")});
      }
    }
    if (mode == "client") {
      f.erase("room_server_url");
      f.erase("agent_name");
      channel->credentials = nlohmann::json::object();
      if (!f.contains("bot_runner_url") || f["bot_runner_url"].get<std::string>().empty()) {
        issues->push_back({"web_channel.bot_runner_url", "is required when room_management is client"});
      } else {
        CheckUrl(*channel, "bot_runner_url", {"http", "https"}, guard, issues);
      }
    } else {
      f.erase("bot_runner_url");
      if (f.contains("room_server_url")) {
        CheckUrl(*channel, "room_server_url", {"http", "https", "ws", "wss"}, guard, issues);
      }
    }
  }
}

google::protobuf::Struct WebChannelResponse(const WebChannel& channel) {
  google::protobuf::Struct out;
  auto& fields = *out.mutable_fields();
  for (const auto& [key, value] : channel.fields.items()) {
    if (value.is_string()) fields[key].set_string_value(value.get<std::string>());
  }
  const std::string transport = channel.fields.value("transport", "");
  for (const std::string& key : CredentialKeys(transport)) {
    fields[key + "_set"].set_bool_value(channel.credentials.contains(key));
  }
  return out;
}

}  // namespace calleval::agents

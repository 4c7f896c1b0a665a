#include "services/runs/livekit_api.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/provider_http.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace calleval::runs {
namespace {

constexpr absl::string_view kApiErrorCode = "livekit_api_failed";
constexpr absl::string_view kBotRunnerErrorCode = "bot_runner_bad_answer";

nlohmann::json VideoGrantJson(const LiveKitVideoGrant& grant) {
  nlohmann::json video = nlohmann::json::object();
  if (grant.room_join) video["roomJoin"] = true;
  if (!grant.room.empty()) video["room"] = grant.room;
  if (grant.room_create) video["roomCreate"] = true;
  if (grant.room_admin) video["roomAdmin"] = true;
  if (grant.room_list) video["roomList"] = true;
  if (grant.can_publish) video["canPublish"] = *grant.can_publish;
  if (grant.can_subscribe) video["canSubscribe"] = *grant.can_subscribe;
  if (grant.can_publish_data) video["canPublishData"] = *grant.can_publish_data;
  return video;
}

std::string StringMember(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

absl::Status BotRunnerError(absl::string_view why) {
  return MakeError(absl::StatusCode::kFailedPrecondition, kBotRunnerErrorCode,
                   absl::StrCat("the bot runner's answer is unusable: ", why));
}

}  // namespace

absl::StatusOr<std::string> MintLiveKitToken(const LiveKitToken& token, absl::Time now) {
  if (token.api_key.empty() || token.api_secret.empty()) {
    return absl::InvalidArgumentError("a LiveKit token needs an API key and secret");
  }
  const int64_t issued = absl::ToUnixSeconds(now);
  nlohmann::json claims = {
      {"iss", token.api_key},
      {"nbf", issued},
      {"iat", issued},
      {"exp", issued + absl::ToInt64Seconds(token.ttl)},
      {"video", VideoGrantJson(token.video)},
  };
  if (!token.identity.empty()) claims["sub"] = token.identity;
  if (!token.name.empty()) claims["name"] = token.name;
  if (!token.metadata.empty()) claims["metadata"] = token.metadata;
  if (!token.room_agents.empty()) {
    // roomConfig is LiveKit's RoomConfiguration in protobuf's JSON form (camelCase names).
    nlohmann::json agents = nlohmann::json::array();
    for (const LiveKitRoomAgent& agent : token.room_agents) {
      nlohmann::json entry = {{"agentName", agent.agent_name}};
      if (!agent.metadata.empty()) entry["metadata"] = agent.metadata;
      agents.push_back(std::move(entry));
    }
    claims["roomConfig"] = {{"agents", std::move(agents)}};
  }
  const std::string signing_input =
      absl::StrCat(Base64Url(R"({"alg":"HS256","typ":"JWT"})"), ".", Base64Url(claims.dump()));
  return absl::StrCat(signing_input, ".", Base64Url(HmacSha256(token.api_secret, signing_input)));
}

LiveKitToken CallerToken(std::string api_key, std::string api_secret, std::string room,
                         std::string identity) {
  LiveKitToken token;
  token.api_key = std::move(api_key);
  token.api_secret = std::move(api_secret);
  token.identity = std::move(identity);
  token.name = "calleval caller";
  token.video.room_join = true;
  token.video.room = std::move(room);
  token.video.can_publish = true;
  token.video.can_subscribe = true;
  token.video.can_publish_data = true;
  return token;
}

std::string LiveKitApiBase(absl::string_view room_url) {
  std::string base(room_url);
  if (absl::StartsWithIgnoreCase(base, "wss://")) {
    base = absl::StrCat("https://", base.substr(6));
  } else if (absl::StartsWithIgnoreCase(base, "ws://")) {
    base = absl::StrCat("http://", base.substr(5));
  }
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base;
}

absl::StatusOr<std::string> LiveKitServerApi::Call(absl::string_view service,
                                                   absl::string_view method,
                                                   const std::string& body,
                                                   const LiveKitVideoGrant& grant,
                                                   int max_attempts) {
  LiveKitToken token;
  token.api_key = options_.api_key;
  token.api_secret = options_.api_secret;
  token.video = grant;
  // Minted per request: a run outlives no token, and a short one limits what a leak is worth.
  token.ttl = absl::Minutes(5);
  ASSIGN_OR_RETURN(std::string jwt, MintLiveKitToken(token));
  ProviderPost post;
  post.url = absl::StrCat(LiveKitApiBase(options_.url), "/twirp/livekit.", service, "/", method);
  post.headers = {absl::StrCat("Authorization: Bearer ", jwt)};
  post.body = body;
  post.connect_timeout = options_.connect_timeout;
  post.request_timeout = options_.request_timeout;
  post.max_response_bytes = options_.max_response_bytes;
  post.max_attempts = max_attempts;
  post.initial_backoff = absl::Milliseconds(250);
  post.max_backoff = absl::Seconds(2);
  post.label = absl::StrCat("LiveKit ", method, " failed: ");
  post.error_code = std::string(kApiErrorCode);
  post.guard = options_.guard;
  post.guard_field = options_.field;
  return PostToProvider(post);
}

absl::StatusOr<LiveKitRoom> LiveKitServerApi::CreateRoom(
    const std::string& name, absl::Duration empty_timeout, int max_participants,
    const std::vector<LiveKitRoomAgent>& agents) {
  nlohmann::json body = {
      {"name", name},
      {"empty_timeout", absl::ToInt64Seconds(empty_timeout)},
      {"max_participants", max_participants},
  };
  if (!agents.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const LiveKitRoomAgent& agent : agents) {
      list.push_back({{"agent_name", agent.agent_name}, {"metadata", agent.metadata}});
    }
    body["agents"] = std::move(list);
  }
  LiveKitVideoGrant grant;
  grant.room_create = true;
  // CreateRoom answers an existing room as it is, so a retry after a lost answer is harmless.
  ASSIGN_OR_RETURN(std::string answer, Call("RoomService", "CreateRoom", body.dump(), grant, 2));
  nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, false);
  LiveKitRoom room;
  if (parsed.is_object()) {
    room.sid = StringMember(parsed, "sid");
    room.name = StringMember(parsed, "name");
  }
  if (room.name.empty()) {
    return MakeError(absl::StatusCode::kUnavailable, kApiErrorCode,
                     "LiveKit CreateRoom failed: the answer names no room");
  }
  return room;
}

absl::Status LiveKitServerApi::DeleteRoom(const std::string& name) {
  LiveKitVideoGrant grant;
  grant.room_create = true;
  return Call("RoomService", "DeleteRoom", nlohmann::json{{"room", name}}.dump(), grant, 2)
      .status();
}

absl::StatusOr<std::string> LiveKitServerApi::CreateDispatch(const std::string& room,
                                                             const std::string& agent_name,
                                                             const std::string& metadata) {
  LiveKitVideoGrant grant;
  grant.room_admin = true;
  grant.room = room;
  nlohmann::json body = {{"agent_name", agent_name}, {"room", room}, {"metadata", metadata}};
  // Never retried: a second dispatch after a lost answer would send a second agent.
  ASSIGN_OR_RETURN(std::string answer,
                   Call("AgentDispatchService", "CreateDispatch", body.dump(), grant, 1));
  nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, false);
  const std::string id = parsed.is_object() ? StringMember(parsed, "id") : std::string();
  if (id.empty()) {
    return MakeError(absl::StatusCode::kUnavailable, kApiErrorCode,
                     "LiveKit CreateDispatch failed: the answer has no dispatch id");
  }
  return id;
}

absl::StatusOr<LiveKitRoomAccess> ParseBotRunnerAnswer(absl::string_view body) {
  nlohmann::json parsed = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (!parsed.is_object()) return BotRunnerError("not a JSON object");
  LiveKitRoomAccess access;
  for (const char* key : {"url", "room_url", "serverUrl"}) {
    access.url = StringMember(parsed, key);
    if (!access.url.empty()) break;
  }
  for (const char* key : {"token", "participantToken"}) {
    access.token = StringMember(parsed, key);
    if (!access.token.empty()) break;
  }
  if (access.url.empty()) return BotRunnerError("no url, room_url or serverUrl");
  if (access.token.empty()) return BotRunnerError("no token or participantToken");
  bool scheme_ok = false;
  for (const char* scheme : {"ws://", "wss://", "http://", "https://"}) {
    scheme_ok = scheme_ok || absl::StartsWithIgnoreCase(access.url, scheme);
  }
  if (!scheme_ok) return BotRunnerError("the room URL is not ws(s):// or http(s)://");
  return access;
}

absl::StatusOr<LiveKitRoomAccess> RequestBotRunnerRoom(const BotRunnerRequest& request) {
  ProviderPost post;
  post.url = request.url;
  post.headers = request.headers;
  post.body = request.body;
  post.connect_timeout = request.connect_timeout;
  post.request_timeout = request.request_timeout;
  post.max_response_bytes = request.max_response_bytes;
  post.max_attempts = 1;
  post.label = "the bot runner failed: ";
  post.error_code = "bot_runner_failed";
  post.guard = request.guard;
  post.guard_field = "web_channel.bot_runner_url";
  ASSIGN_OR_RETURN(std::string answer, PostToProvider(post));
  return ParseBotRunnerAnswer(answer);
}

}  // namespace calleval::runs

#pragma once

// LiveKit's access tokens and server API, for the room caller's two room modes:
//
//  - `rubric`: the service holds the room's API key and secret. It creates the room
//    (RoomService/CreateRoom), dispatches the agent when the agent names one
//    (AgentDispatchService/CreateDispatch; otherwise LiveKit's automatic dispatch sends every
//    unnamed agent worker to a new room), mints the caller's join token, and deletes the room
//    after the run (RoomService/DeleteRoom).
//  - `client`: the service POSTs to the agent's bot_runner_url and joins the room the answer
//    names (ParseBotRunnerAnswer).
//
// Tokens are HS256 JWTs with LiveKit's claims: iss = API key, sub = identity, nbf/exp, and the
// `video` grant. The server API is Twirp over HTTP: POST {host}/twirp/livekit.<Service>/<Method>
// with a JSON body and `Authorization: Bearer <token>`; errors answer {"code": ..., "msg": ...},
// whose msg the errors quote. Every request is bounded and, for URLs an agent supplied, guarded
// by the outbound-URL rule (LiveKitApiOptions::guard).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/url_guard.h"

namespace calleval::runs {

// The `video` grant (LiveKit's VideoGrant); only the members set are written.
struct LiveKitVideoGrant {
  bool room_join = false;
  std::string room;
  bool room_create = false;
  bool room_admin = false;
  bool room_list = false;
  std::optional<bool> can_publish;
  std::optional<bool> can_subscribe;
  std::optional<bool> can_publish_data;
};

// An agent to dispatch into the room when the token's holder creates it (roomConfig.agents).
struct LiveKitRoomAgent {
  std::string agent_name;
  std::string metadata;
};

struct LiveKitToken {
  std::string api_key;
  std::string api_secret;
  std::string identity;  // sub; empty for server API tokens
  std::string name;      // the participant's display name
  std::string metadata;
  LiveKitVideoGrant video;
  std::vector<LiveKitRoomAgent> room_agents;
  absl::Duration ttl = absl::Minutes(10);
};

// The signed token (header.payload.signature). kInvalidArgument without a key or secret.
absl::StatusOr<std::string> MintLiveKitToken(const LiveKitToken& token,
                                             absl::Time now = absl::Now());

// A participant's token for joining `room` as the simulated caller: publish, subscribe and data.
LiveKitToken CallerToken(std::string api_key, std::string api_secret, std::string room,
                         std::string identity);

// The http(s) base of the server API for a room URL given as ws(s):// or http(s)://.
std::string LiveKitApiBase(absl::string_view room_url);

struct LiveKitApiOptions {
  std::string url;  // the LiveKit server (ws(s):// or http(s)://)
  std::string api_key;
  std::string api_secret;
  // The outbound-URL rule for the server's URL; nullptr: an operator-configured URL, not
  // checked.
  const UrlGuardOptions* guard = nullptr;
  std::string field = "web_channel.room_server_url";  // names the URL in guard errors
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration request_timeout = absl::Seconds(15);
  int64_t max_response_bytes = int64_t{1} << 20;
};

struct LiveKitRoom {
  std::string sid;
  std::string name;
};

// RoomService and AgentDispatchService. Errors: kFailedPrecondition (code "livekit_api_failed")
// when the server refuses (401 unauthenticated, 404, ...), kUnavailable when it cannot be
// reached or keeps failing; messages quote Twirp's msg.
class LiveKitServerApi {
 public:
  explicit LiveKitServerApi(LiveKitApiOptions options) : options_(std::move(options)) {}

  // An existing room of that name is returned as it is (LiveKit's semantics).
  absl::StatusOr<LiveKitRoom> CreateRoom(const std::string& name, absl::Duration empty_timeout,
                                         int max_participants,
                                         const std::vector<LiveKitRoomAgent>& agents = {});
  absl::Status DeleteRoom(const std::string& name);
  // The dispatch's id.
  absl::StatusOr<std::string> CreateDispatch(const std::string& room, const std::string& agent_name,
                                             const std::string& metadata);

 private:
  absl::StatusOr<std::string> Call(absl::string_view service, absl::string_view method,
                                   const std::string& body, const LiveKitVideoGrant& grant,
                                   int max_attempts);

  LiveKitApiOptions options_;
};

// Where the caller joins, from a bot runner or a platform.
struct LiveKitRoomAccess {
  std::string url;  // the room server, as given
  std::string token;
};

// A bot runner's answer: {"url", "token"}, {"room_url", "token"}, or LiveKit's token-server
// shape {"serverUrl", "participantToken"}. kFailedPrecondition (code "bot_runner_bad_answer")
// when it is not JSON, lacks either member, or the URL is not ws(s)/http(s).
absl::StatusOr<LiveKitRoomAccess> ParseBotRunnerAnswer(absl::string_view body);

struct BotRunnerRequest {
  std::string url;  // the agent's bot_runner_url
  std::string body = "{}";
  std::vector<std::string> headers;  // "Authorization: Bearer ..." when the agent has one
  const UrlGuardOptions* guard = nullptr;
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration request_timeout = absl::Seconds(20);
  int64_t max_response_bytes = int64_t{64} << 10;
};

// POSTs once (a bot runner starts a bot per request: never retried) and parses the answer.
absl::StatusOr<LiveKitRoomAccess> RequestBotRunnerRoom(const BotRunnerRequest& request);

}  // namespace calleval::runs

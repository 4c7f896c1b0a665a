#pragma once

// A web run of an external agent (docs/api.md §5, "External agents"): the service drives the
// conversation as the caller of an agent that lives on Vapi or Retell.
//
// external_vapi over `web`: at the run's start the assistant is pulled afresh
// (GET /assistant/{assistant_id}: whether it speaks first), a call is created with Vapi's
// websocket transport (POST /call, raw PCM16 at 16 kHz), and the run talks over the call's
// transport.websocketCallUrl as it would over a pcm16 websocket agent: recorded, ingested and
// scored the same way. Vapi's JSON control messages on that socket are ignored; the call ends
// when the caller's script or goal is done (the service sends Vapi's {"type":"hangup"} control
// message, then closes the socket) or Vapi closes it (end_reason agent_ended). The ingested
// call's metadata names the platform and its call id (platform, platform_call_id). The websocket
// URL comes from the platform's answer, so it must be on the host of the operator's --vapi-api-url
// (wss:// when that is https://) and passes the public-address guard like any agent URL.
//
// external_retell over `web`: the agent is pulled as a Vapi assistant is, a web call is created
// (POST /v2/create-web-call), and the run joins the call's LiveKit room with its access token.
//
// Retell versions its agents and says which version takes each call (agent_version, an integer,
// in the call object it answers): the run records it as the platform_version of the run and of
// its call (docs/api.md §5.10). Vapi's API has no version of an assistant: none is recorded.
//
// The API key: the agent's web_channel.platform_api_key wins over the workspace's integration
// settings (api_key of provider vapi / retell). The platform's refusals (bad key, unknown
// assistant, out of credit) end the run failed with the platform's message.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "calleval/v1/agents.pb.h"
#include "services/agents/platforms.h"
#include "services/agents/web_channel.h"
#include "services/runs/carrier.h"
#include "services/runs/run_agents.h"

namespace calleval::runs {

// What the run dials: the agent as the run plays it (its opening message as pulled at the
// start), and a websocket channel (pcm16) to the platform's call.
struct PlatformWebCall {
  v1::Agent agent;
  agents::WebChannel channel;
  std::string platform;  // vapi
  std::string platform_call_id;
  // What the caller sends on the websocket to end the call before it closes the socket.
  std::string hangup_message;
  // A call in a LiveKit room (Retell's web calls), joined instead of a websocket: the room's
  // server and the call's access token.
  std::string room_url;
  std::string room_token;
  // The platform's version of the agent taking the call (Retell's agent_version); none for Vapi.
  std::optional<std::string> platform_version;
};

// The error an agents role that could not answer gives (not the run's fault): the run is given
// back and tried again.
inline constexpr absl::StatusCode kPlatformRunRetry = absl::StatusCode::kAborted;

// Starts the platform's side of a web run of `agent` (external_vapi or external_retell).
// kPlatformRunRetry when the agents role could not be asked for the key; kCancelled when
// `cancel` turned true; any other error ends the run failed with its message.
absl::StatusOr<PlatformWebCall> StartPlatformWebCall(RunAgents& agents, int64_t workspace_id,
                                                     const v1::Agent& agent,
                                                     const ProviderApiUrls& urls,
                                                     const std::atomic<bool>* cancel);

// Asks Retell to have the external_retell `agent` call `number` (one of the workspace's, which
// a phone run awaits the call on) from the agent's phone_number: POST /v2/create-phone-call with
// the agent's assistant_id as override_agent_id and the API key as for a web run. Errors as
// StartPlatformWebCall's (the platform's refusal with its message). Retell's call: its id and the
// version of the agent that places it.
absl::StatusOr<agents::RetellPhoneCall> RequestRetellCall(RunAgents& agents, int64_t workspace_id,
                                                          const v1::Agent& agent,
                                                          const ProviderApiUrls& urls,
                                                          const std::string& number,
                                                          const std::atomic<bool>* cancel);

// Whether `websocket_url` (from the platform's answer) may be dialled for a platform whose API
// is at `api_url`: ws(s) on the same host, and never ws:// when the API is https://.
absl::Status CheckPlatformWebsocketUrl(const std::string& websocket_url,
                                       const std::string& api_url);

}  // namespace calleval::runs

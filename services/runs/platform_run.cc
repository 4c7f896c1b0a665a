#include "services/runs/platform_run.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/url_guard.h"
#include "services/agents/agent_rules.h"
#include "services/agents/platforms.h"

namespace calleval::runs {
namespace {

// The agent's own key, else the workspace's; empty when neither is set.
absl::StatusOr<std::string> ApiKey(RunAgents& agents, int64_t workspace_id, const v1::Agent& agent,
                                   const std::string& provider) {
  if (agent.has_web_channel()) {
    absl::StatusOr<std::optional<agents::WebChannel>> channel =
        agents.GetWebChannel(workspace_id, agent.id());
    if (!channel.ok()) {
      return absl::Status(kPlatformRunRetry, absl::StrCat("the agent's web channel could not be "
                                                          "read: ",
                                                          channel.status().message()));
    }
    if (channel->has_value()) {
      const std::string key = (*channel)->credentials.value("platform_api_key", "");
      if (!key.empty()) return key;
    }
  }
  absl::StatusOr<std::optional<agents::IntegrationSettings>> settings =
      agents.GetIntegration(workspace_id, provider);
  if (!settings.ok()) {
    return absl::Status(kPlatformRunRetry, absl::StrCat("the workspace's ", provider,
                                                        " integration settings could not be read: ",
                                                        settings.status().message()));
  }
  if (!settings->has_value()) return std::string();
  return (*settings)->secrets.value("api_key", "");
}

// A platform's refusal or failure as the run's error.
absl::Status PlatformFailure(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kCancelled) return status;
  std::string why;
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      why = "the platform refused the API key";
      break;
    case absl::StatusCode::kNotFound:
      why = "the platform has no such assistant for this key (assistant_id)";
      break;
    case absl::StatusCode::kResourceExhausted:
      why = "the platform account is out of credit";
      break;
    case absl::StatusCode::kUnavailable:
      why = "the platform could not be reached or is over its rate";
      break;
    default:
      why = "the platform refused the request";
  }
  return absl::FailedPreconditionError(absl::StrCat(why, ": ", status.message()));
}

}  // namespace

absl::Status CheckPlatformWebsocketUrl(const std::string& websocket_url,
                                       const std::string& api_url) {
  UrlGuardOptions ws_options;
  ws_options.allowed_schemes = {"ws", "wss"};
  absl::StatusOr<ParsedUrl> ws = ParseUrl(websocket_url, ws_options, "websocketCallUrl");
  absl::StatusOr<ParsedUrl> api = ParseUrl(api_url, UrlGuardOptions(), "vapi_api_url");
  if (!api.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the operator's Vapi API URL is not usable: ", api.status().message()));
  }
  if (!ws.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Vapi answered a call websocket URL that is not a ws(s) URL: ", ws.status().message()));
  }
  if (absl::AsciiStrToLower(ws->host) != absl::AsciiStrToLower(api->host)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Vapi answered a call websocket on host ", ws->host,
                     ", which is not the host of the Vapi API (", api->host,
                     "): the service dials only the platform's own host"));
  }
  if (api->scheme == "https" && ws->scheme != "wss") {
    return absl::FailedPreconditionError(
        "Vapi answered a call websocket URL without TLS (ws://) for an https:// API");
  }
  return absl::OkStatus();
}

absl::StatusOr<PlatformWebCall> StartPlatformWebCall(RunAgents& agents, int64_t workspace_id,
                                                     const v1::Agent& agent,
                                                     const ProviderApiUrls& urls,
                                                     const std::atomic<bool>* cancel) {
  if (agent.agent_source() == agents::rules::kExternalRetell) {
    absl::StatusOr<std::string> key = ApiKey(agents, workspace_id, agent, "retell");
    if (!key.ok()) return key.status();
    if (key->empty()) {
      return absl::FailedPreconditionError(
          "no Retell API key: set the agent's web_channel.platform_api_key or the workspace's "
          "retell integration settings (api_key)");
    }
    agents::PlatformRequestOptions options;
    options.cancel = cancel;
    // Pulled afresh, as a Vapi assistant is: who speaks first decides when the caller starts.
    absl::StatusOr<agents::PlatformAgent> pulled =
        agents::PullRetellAgent(urls.retell, *key, agent.assistant_id(), options);
    if (!pulled.ok()) return PlatformFailure(pulled.status());
    absl::StatusOr<agents::RetellWebCall> call =
        agents::CreateRetellWebCall(urls.retell, *key, agent.assistant_id(), options);
    if (!call.ok()) return PlatformFailure(call.status());
    LogInfo("run: Retell web call created",
            {{"agent_id", agent.id()}, {"retell_call_id", call->call_id}});
    PlatformWebCall out;
    out.agent = agent;
    out.agent.mutable_opening_message()->set_mode(pulled->opening_mode);
    if (!pulled->instructions.empty()) out.agent.set_instructions(pulled->instructions);
    out.platform = "retell";
    out.platform_call_id = call->call_id;
    // A Retell web call is a LiveKit room: the caller joins it with the call's token.
    out.room_url = urls.retell_room;
    out.room_token = call->access_token;
    out.platform_version = call->agent_version;
    out.channel.fields = {{"transport", "livekit"}, {"room_management", "client"}};
    return out;
  }
  if (agent.agent_source() != agents::rules::kExternalVapi) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent_source ", agent.agent_source(), " is not hosted on a platform"));
  }
  absl::StatusOr<std::string> key = ApiKey(agents, workspace_id, agent, "vapi");
  if (!key.ok()) return key.status();
  if (key->empty()) {
    return absl::FailedPreconditionError(
        "no Vapi API key: set the agent's web_channel.platform_api_key or the workspace's vapi "
        "integration settings (api_key)");
  }
  agents::PlatformRequestOptions options;
  options.cancel = cancel;
  // Pulled afresh: the assistant may have changed on the platform since the agent was stored,
  // and who speaks first decides when the caller starts.
  absl::StatusOr<agents::PlatformAgent> pulled =
      agents::PullVapiAssistant(urls.vapi, *key, agent.assistant_id(), options);
  if (!pulled.ok()) return PlatformFailure(pulled.status());
  absl::StatusOr<agents::VapiWebsocketCall> call =
      agents::CreateVapiWebsocketCall(urls.vapi, *key, agent.assistant_id(), options);
  if (!call.ok()) return PlatformFailure(call.status());
  if (absl::Status checked = CheckPlatformWebsocketUrl(call->websocket_url, urls.vapi);
      !checked.ok()) {
    return checked;
  }
  LogInfo("run: Vapi call created", {{"agent_id", agent.id()}, {"vapi_call_id", call->call_id}});

  PlatformWebCall out;
  out.agent = agent;
  out.agent.mutable_opening_message()->set_mode(pulled->opening_mode);
  if (!pulled->instructions.empty()) out.agent.set_instructions(pulled->instructions);
  out.platform = "vapi";
  out.platform_call_id = call->call_id;
  // How Vapi documents ending a websocket-transport call gracefully: this control message,
  // then the close.
  out.hangup_message = R"({"type":"hangup"})";
  out.channel.fields = {
      {"transport", "websocket"}, {"protocol", "pcm16"}, {"websocket_url", call->websocket_url}};
  return out;
}

absl::StatusOr<agents::RetellPhoneCall> RequestRetellCall(RunAgents& agents, int64_t workspace_id,
                                                          const v1::Agent& agent,
                                                          const ProviderApiUrls& urls,
                                                          const std::string& number,
                                                          const std::atomic<bool>* cancel) {
  absl::StatusOr<std::string> key = ApiKey(agents, workspace_id, agent, "retell");
  if (!key.ok()) return key.status();
  if (key->empty()) {
    return absl::FailedPreconditionError(
        "no Retell API key to have the agent call: set the agent's web_channel.platform_api_key "
        "or the workspace's retell integration settings (api_key)");
  }
  agents::PlatformRequestOptions options;
  options.cancel = cancel;
  absl::StatusOr<agents::RetellPhoneCall> call = agents::CreateRetellPhoneCall(
      urls.retell, *key, agent.phone_number(), number, agent.assistant_id(), options);
  if (!call.ok()) return PlatformFailure(call.status());
  LogInfo("run: Retell asked to call",
          {{"agent_id", agent.id()}, {"retell_call_id", call->call_id}, {"to", number}});
  return call;
}

}  // namespace calleval::runs

// The voice platforms' webhooks (docs/api.md §5.9): who handles them in this process.
//
// The agents role does: it holds what verifies an event (the workspace's integration secrets)
// and what finds its workspace (the agent with the event's assistant_id), so no secret crosses a
// process. It stores the call through the calls service as any other client of calls does, on
// the calls role's internal IngestRunCall (with no run) when calls runs elsewhere. An edge
// without the agents role hands each event to the agents role's internal HandlePlatformEvent.

#include <memory>
#include <optional>

#include "cmd/calleval/server_state.h"
#include "common/internal_credential.h"
#include "common/log.h"
#include "services/agents/platform_events.h"

namespace calleval {

absl::Status WirePlatformEvents(ServerState* s) {
  const ServerConfig& config = s->config;
  const bool agents_remote = AskedOverGrpc(config, "agents", config.agents_addr);
  const bool handles_here = HasRole(config, "agents") || (HasRole(config, "edge") && !agents_remote);
  if (handles_here && s->agents_store && s->integrations_store) {
    if (AskedOverGrpc(config, "calls", config.calls_addr)) {
      s->event_calls =
          calls::NewGrpcRunCalls(CreateInternalChannel(config.calls_addr, s->internal_credential));
    } else if (s->calls_store) {
      // Woken as an ingest through the public route wakes them: the downloader fetches the
      // recording in the background, so the platform's request is answered without waiting.
      ServerState* const state = s;
      s->event_calls = std::make_unique<calls::InProcessRunCalls>(
          s->calls_store.get(), [state](const v1::Call& call) {
            if (call.has_recording_url()) {
              if (state->downloader) state->downloader->Notify();
            } else if (state->scoring_workers) {
              state->scoring_workers->Notify();
            }
          });
    }
    if (s->event_calls == nullptr) {
      // Nothing to store the calls with: the events answer 503 here rather than failing the
      // start of a process that may never receive one.
      LogWarn("the voice platforms' events cannot be stored without the calls role: give "
              "--calls-addr");
      return absl::OkStatus();
    }
    runs::RunCalls* calls = s->event_calls.get();
    s->platform_events = std::make_unique<agents::PlatformEventHandler>(
        s->agents_store.get(), s->integrations_store.get(),
        [calls](int64_t workspace_id, const v1::IngestCallRequest& call,
                const std::optional<std::string>& platform_version) {
          // No run made it: the origin names none (Calls/IngestRunCall's run_id 0), only the
          // platform's version of the agent.
          return calls->Ingest(workspace_id, call, runs::RunCallOrigin{0, 0, platform_version},
                               std::nullopt);
        });
    if (s->agents_service) s->agents_service->set_platform_events(s->platform_events.get());
  } else if (HasRole(config, "edge")) {
    const std::string& target = config.agents_addr.empty() ? config.grpc_addr : config.agents_addr;
    s->platform_events = agents::NewGrpcPlatformEvents(
        CreateInternalChannel(target, s->internal_credential), agents::kAgentsCallDeadline);
  }
  return absl::OkStatus();
}

}  // namespace calleval

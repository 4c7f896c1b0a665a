#pragma once

// Production calls streamed in from the voice platforms (docs/api.md §5.9): Vapi's
// `end-of-call-report` and Retell's `call_analyzed` webhooks, verified with the secret of the
// workspace whose agent they name and stored as that agent's calls.
//
// The agents role handles them because it owns both what verifies an event (the workspace's
// integration settings, whose secrets never leave it) and what finds its workspace (the agent
// whose assistant_id the event names); the calls service receives an ordinary ingest of a call
// and knows nothing of the platforms. The edge hands the body over raw: the signatures cover its
// exact bytes.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "services/agents/agents_store.h"
#include "services/agents/integrations_store.h"

namespace grpc {
class Channel;
}

namespace calleval::agents {

// A Retell signature, or a Vapi HMAC signature that carries a timestamp, is refused when its
// time is further than this from ours (either way), as Retell's own SDK does.
inline constexpr absl::Duration kPlatformSignatureTolerance = absl::Minutes(5);

// What a platform's event says once read.
struct PlatformEvent {
  std::string type;  // the platform's name for it ("end-of-call-report", "call_analyzed", ...)
  // Whether the event is one that makes a call; the rest are acknowledged and ignored.
  bool makes_call = false;
  std::string assistant_id;
  std::string platform_call_id;
  // The call as ingested, but for agent_id.
  v1::IngestCallRequest call;
  // The platform's version of the agent that took the call (Retell's `call.agent_version`);
  // none from Vapi, whose assistants have no version.
  std::optional<std::string> platform_version;
};

// Reads a Vapi server message (`{"message": {"type": ...}}`). 400 `malformed_json` when the body
// is not a JSON object; 422 `validation_failed` when an end-of-call report lacks its call id or
// assistant id.
absl::StatusOr<PlatformEvent> ParseVapiEvent(absl::string_view body);
// Reads a Retell webhook (`{"event": ..., "call": {...}}`), likewise.
absl::StatusOr<PlatformEvent> ParseRetellEvent(absl::string_view body);

// Whether a Vapi request carries `secret` (the workspace's vapi `webhook_secret`): as
// `x-vapi-secret`, as `authorization: Bearer`, or as an HMAC-SHA256 signature in hexadecimal
// (optionally prefixed `sha256=`) in `x-vapi-signature` or `x-signature`, over the body, or over
// `<timestamp>.<body>` when `x-timestamp` is present (Vapi's HMAC credential by default; the
// timestamp within kPlatformSignatureTolerance, in seconds or milliseconds). `headers`' names
// are lower-case.
bool VerifyVapiRequest(const std::map<std::string, std::string>& headers, absl::string_view body,
                       absl::string_view secret, absl::Time now);
// Whether `signature` (`x-retell-signature`: `v=<unix ms>,d=<hex HMAC-SHA256(api_key, body +
// ms)>`) signs `body` with the workspace's Retell `api_key`, within the tolerance.
bool VerifyRetellSignature(absl::string_view signature, absl::string_view body,
                           absl::string_view api_key, absl::Time now);

// Handles one event: answers what became of it, or the error the edge answers (401
// `invalid_signature`, 400, 422, 503).
class PlatformEvents {
 public:
  virtual ~PlatformEvents() = default;
  virtual absl::StatusOr<v1::PlatformEventResponse> Handle(
      const v1::PlatformEventRequest& request) = 0;
};

// Stores a verified event's call in a workspace, through the calls service (its store in this
// process, its internal IngestRunCall method otherwise), with the platform's version of the
// agent (the call's platform_version). ALREADY_EXISTS when the workspace has a call with that
// call_identifier.
using PlatformCallSink =
    std::function<absl::StatusOr<v1::Call>(int64_t workspace_id, const v1::IngestCallRequest& call,
                                           const std::optional<std::string>& platform_version)>;

// The handler itself, over this process's agents and integrations stores.
class PlatformEventHandler final : public PlatformEvents {
 public:
  PlatformEventHandler(AgentsStore* agents, IntegrationsStore* integrations, PlatformCallSink sink,
                       std::function<absl::Time()> now = [] { return absl::Now(); })
      : agents_(agents),
        integrations_(integrations),
        sink_(std::move(sink)),
        now_(std::move(now)) {}

  // The event's agents are those whose agent_source is the platform's and whose assistant_id
  // the event names, one per workspace (the oldest). Each workspace whose secret verifies the
  // request gets the call; when some such agent exists and no workspace verifies it, 401.
  // An assistant no agent names: "ignored", nothing stored (a platform retries a 4xx, and
  // nothing it could resend would change the answer).
  absl::StatusOr<v1::PlatformEventResponse> Handle(
      const v1::PlatformEventRequest& request) override;

 private:
  AgentsStore* agents_;
  IntegrationsStore* integrations_;
  PlatformCallSink sink_;
  std::function<absl::Time()> now_;
};

// Agents/HandlePlatformEvent, for an edge in another process.
std::unique_ptr<PlatformEvents> NewGrpcPlatformEvents(std::shared_ptr<grpc::Channel> agents,
                                                      absl::Duration deadline);

}  // namespace calleval::agents

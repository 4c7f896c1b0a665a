#pragma once

// Telnyx as the phone channel's carrier (carrier.h), over Call Control v2
// (https://developers.telnyx.com/api-reference/call-commands):
//   - PlaceCall: `POST {api}/v2/calls` (Bearer api_key) dialing the agent from the workspace's
//     number with a bidirectional RTP media stream (PCMU) to the service's media websocket,
//     status webhooks to the run's events URL and, when asked, answering-machine detection;
//     the call id is Telnyx's call_control_id.
//   - Hangup: `POST {api}/v2/calls/{call_control_id}/actions/hangup`.
//   - ReadWebhook: Telnyx signs every webhook with Ed25519 over `<telnyx-timestamp>|<body>`
//     (header telnyx-signature-ed25519, base64); the account's public key verifies it, and a
//     timestamp more than 5 minutes from now is refused as a replay.
//   - The media dialect: Telnyx media streaming JSON (connected, start, media, mark, stop from
//     Telnyx; media, mark and clear from the application).

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "services/runs/carrier.h"

namespace calleval::runs {

// How far a webhook's telnyx-timestamp may be from now (either way), as Telnyx's SDKs allow.
inline constexpr absl::Duration kTelnyxWebhookTolerance = absl::Minutes(5);

// Checks a Telnyx webhook signature: `signature_b64` (64 bytes) over `timestamp|body` under
// `public_key_b64` (the 32-byte Ed25519 key from the Telnyx portal). kUnauthenticated when a
// header is missing or malformed, the timestamp is outside the tolerance at `now`, or the
// signature does not verify.
absl::Status VerifyTelnyxSignature(absl::string_view public_key_b64, absl::string_view timestamp,
                                   absl::string_view signature_b64, absl::string_view body,
                                   absl::Time now);

// Maps one Telnyx Call Control webhook body ({"data": {"event_type", "payload"}}) to the run's
// events; kInvalidArgument when it is not one. An event the run does not act on is kOther.
absl::StatusOr<std::vector<CarrierEvent>> ParseTelnyxWebhook(absl::string_view body);

// The client over Telnyx's API at `api_url` (https://api.telnyx.com or a test server).
// `account.secret` is the API key, `account.account_id` the Call Control connection_id and
// `account.public_key` the webhook signing key; kFailedPrecondition when one is missing or the
// key is not a base64 Ed25519 public key.
absl::StatusOr<std::unique_ptr<CarrierClient>> NewTelnyxCarrierClient(const CarrierAccount& account,
                                                                      const std::string& api_url);

// Telnyx's media streaming dialect.
std::unique_ptr<MediaDialect> NewTelnyxMediaDialect();

}  // namespace calleval::runs

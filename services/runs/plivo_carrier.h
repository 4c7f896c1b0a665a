#pragma once

// Plivo as the phone channel's carrier (carrier.h), over Plivo's Voice API
// (https://www.plivo.com/docs/voice/api/call/):
//   - PlaceCall: `POST {api}/v1/Account/{auth_id}/Call/` (basic auth) dialing the agent; Plivo
//     fetches the answer URL when the agent picks up and gets the AnswerDocument, a bidirectional
//     <Stream> to the service's media websocket. Ringing, hangup and answering-machine results
//     come to the events URL. The call id is Plivo's request_uuid (the only id the API answers
//     with; the webhooks carry it as RequestUUID next to the call's CallUUID).
//   - Hangup: `DELETE {api}/v1/Account/{auth_id}/Call/{call_uuid}/` once a webhook named the
//     CallUUID, else `DELETE .../Request/{request_uuid}/` (cancels a call not yet answered).
//   - ReadWebhook: Plivo's signature V3 (X-Plivo-Signature-V3, X-Plivo-Signature-V3-Nonce),
//     HMAC-SHA256 under the auth token, computed as Plivo's SDKs compute it
//     (PlivoSignatureV3Base below); Plivo sends no timestamp, so the scheme is not timed, but
//     each nonce is taken once: a webhook whose nonce the client has seen is refused as a
//     replay (nonces are remembered for 6 hours, at most 1024 per client).
//   - The media dialect: Plivo audio streams (start, media, playedStream from Plivo; playAudio,
//     checkpoint and clearAudio from the application).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/runs/carrier.h"

namespace calleval::runs {

// application/x-www-form-urlencoded decoding: every value of every name, '+' as a space and
// %XX decoded (what Plivo and Twilio post); kInvalidArgument for a malformed escape.
absl::StatusOr<std::multimap<std::string, std::string>> ParseFormParams(absl::string_view form);

// The string Plivo's signature V3 signs, before "." + nonce, for a callback to `url` with the
// form parameters `params` (method "POST" or "GET"): for POST, the URL without its query, then
// "?" and the URL's query parameters sorted as "k=v&k=v" (then "." when there are some), then
// every posted parameter sorted by name (values of one name sorted) as "namevalue" concatenated;
// "?" only when there is a query or a parameter. For GET, the URL's and the given parameters
// together as a sorted query.
std::string PlivoSignatureV3Base(absl::string_view method, absl::string_view url,
                                 const std::multimap<std::string, std::string>& params);

// base64(HMAC-SHA256(auth_token, base + "." + nonce)).
std::string PlivoSignatureV3(absl::string_view auth_token, absl::string_view base,
                             absl::string_view nonce);

// Checks a Plivo webhook: `signatures` is the X-Plivo-Signature-V3 header (one signature or
// several comma-separated, e.g. while a token is rotated). kUnauthenticated when headers are
// missing or no signature matches.
absl::Status VerifyPlivoSignature(absl::string_view auth_token, absl::string_view method,
                                  absl::string_view url,
                                  const std::multimap<std::string, std::string>& params,
                                  absl::string_view nonce, absl::string_view signatures);

// Maps one Plivo callback (ring, answer, hangup or machine detection parameters) to the run's
// events. Each event's call_id is the RequestUUID when the callback carries one, else the
// CallUUID.
std::vector<CarrierEvent> ReadPlivoCallback(const std::multimap<std::string, std::string>& params);

// The client over Plivo's API at `api_url` (https://api.plivo.com or a test server).
// `account.account_id` is the auth_id and `account.secret` the auth_token; kFailedPrecondition
// when either is missing.
absl::StatusOr<std::unique_ptr<CarrierClient>> NewPlivoCarrierClient(const CarrierAccount& account,
                                                                     const std::string& api_url);

// Plivo's audio stream dialect.
std::unique_ptr<MediaDialect> NewPlivoMediaDialect();

}  // namespace calleval::runs

#pragma once

// The phone channel's view of a telephony carrier (docs/channels.md): place an outbound call whose
// answered leg the carrier streams to the service's public media websocket, hang it up, read the
// carrier's signed webhooks, and speak the carrier's media dialect on that websocket. One
// implementation per carrier (Twilio, Telnyx, Plivo), each over the carrier's documented REST
// API; the runs worker knows only this interface.
//
// Every carrier-facing URL lives under `<public-base-url>/media/<carrier>/`, so one ingress rule
// reaches it:
//   /media/<carrier>/<token>            the media websocket (the token is single-use, expiring)
//   /media/<carrier>/<token>/events     the call's status webhooks (signed by the carrier)
//   /media/<carrier>/<token>/answer     the answer document, for carriers that fetch one (Plivo)
//   /media/<carrier>/incoming           the carrier's incoming-call webhook, one fixed URL per
//                                       carrier for the workspace's numbers (an agent calling in;
//                                       tokens are 43 base64url characters, so never "incoming")

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval::runs {

// Where each provider's REST API is: operator flags (--twilio-api-url ...), never workspace
// input, so a workspace cannot aim the service at an address of its choosing. Tests point
// them at local servers.
struct ProviderApiUrls {
  std::string twilio = "https://api.twilio.com";
  std::string telnyx = "https://api.telnyx.com";
  std::string plivo = "https://api.plivo.com";
  std::string vapi = "https://api.vapi.ai";
  std::string retell = "https://api.retellai.com";
  // Where Retell's web calls are: one LiveKit server for every account (Retell's web client SDK
  // joins this URL with the call's access token).
  std::string retell_room = "wss://retell-ai-4ihahnq7.livekit.cloud";
};

// A workspace's account at one carrier, from its integration settings (an agent's own
// credentials win over these where it has them).
struct CarrierAccount {
  std::string carrier;     // twilio | telnyx | plivo
  std::string account_id;  // Twilio account_sid, Plivo auth_id, Telnyx connection_id
  std::string secret;      // Twilio auth_token, Plivo auth_token, Telnyx api_key
  std::string public_key;  // Telnyx: the webhook signing key (base64 Ed25519), else empty
  std::vector<std::string> caller_numbers;  // E.164
};

// An outbound call to place.
struct OutboundCall {
  std::string from;        // E.164, one of the account's caller numbers
  std::string to;          // E.164, the agent's number
  std::string media_url;   // wss://<public>/media/<carrier>/<token>
  std::string events_url;  // https://<public>/media/<carrier>/<token>/events
  std::string answer_url;  // https://<public>/media/<carrier>/<token>/answer
  absl::Duration ring_timeout = absl::Seconds(30);
  // The carrier ends the call after this (the service hangs up at it too).
  absl::Duration time_limit = absl::Minutes(10);
  bool detect_machine = true;  // answering-machine detection, where the carrier offers it
};

// An incoming call as the carrier's incoming-call webhook announces it: read before the
// signature is checked (the numbers say which line, hence which account, verifies it).
struct IncomingCall {
  std::string from;     // E.164, the caller (the agent's number)
  std::string to;       // E.164, the workspace's number it dialled
  std::string call_id;  // the carrier's id of the call (Twilio CallSid, Plivo CallUUID, Telnyx
                        // call_control_id), for hanging it up and (Telnyx) answering it
};

// What a webhook says about the call.
struct CarrierEvent {
  enum Progress {
    kRinging,
    kAnswered,   // a person (or the agent) picked up
    kMachine,    // answering-machine detection heard a machine: the run ends `voicemail`
    kCompleted,  // the call ended after it was answered (who hung up is in `hangup_by_callee`)
    kBusy,
    kNoAnswer,
    kFailed,     // the carrier could not place it (`detail` says why)
    kOther,      // an event the run does not act on
  };
  Progress progress = kOther;
  std::string call_id;  // the carrier's id of the call
  bool hangup_by_callee = false;  // kCompleted: the agent hung up (when the carrier says so)
  std::string detail;   // the carrier's own status or cause, for the run's messages
};

// A webhook as the service received it.
struct CarrierWebhook {
  std::string url;     // the full public URL the carrier called (what Twilio and Plivo sign)
  std::string method;  // POST
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string content_type;
  std::string body;    // the raw bytes, as signed
};

class CarrierClient {
 public:
  virtual ~CarrierClient() = default;

  // Places the call; the carrier's call id. kFailedPrecondition when the carrier refused it
  // (bad credentials, a number it will not dial) with the carrier's message, kUnavailable when
  // it could not be reached.
  virtual absl::StatusOr<std::string> PlaceCall(const OutboundCall& call) = 0;
  // Ends the call (at max_call_duration_seconds, or when the caller's script is done).
  virtual absl::Status Hangup(const std::string& call_id) = 0;
  // Verifies the webhook's signature with the account's secret or public key (kUnauthenticated
  // when it is missing, wrong or, where the scheme is timed, stale at `now`) and reads it.
  virtual absl::StatusOr<std::vector<CarrierEvent>> ReadWebhook(const CarrierWebhook& hook,
                                                                absl::Time now) = 0;
  // The answer document for carriers that fetch one when the call is answered (Plivo XML with
  // a bidirectional <Stream> to `call.media_url`); empty for the others.
  virtual std::string AnswerDocument(const OutboundCall& call) = 0;

  // An incoming call the service takes (the agent calling in): what the incoming-call webhook
  // is answered with to stream the call to `media_url` (Twilio TwiML <Connect><Stream>, Plivo
  // XML with a bidirectional <Stream>); empty for carriers answered by a command instead.
  virtual std::string IncomingCallAnswer(const std::string& media_url) = 0;
  // Answers the incoming call `call_id` by command, streaming it to `media_url` and sending its
  // webhooks to `events_url` (Telnyx Call Control `actions/answer`); nothing to do for carriers
  // whose webhook answer does it. Errors as PlaceCall's.
  virtual absl::Status AnswerIncoming(const std::string& call_id, const std::string& media_url,
                                      const std::string& events_url) = 0;
};

// Reads the incoming-call webhook of `carrier` without checking its signature (the caller
// checks it next, with the account of the line the numbers name): Twilio's and Plivo's form
// fields From, To and CallSid / CallUUID; Telnyx's `call.initiated` event whose direction is
// `incoming`. kInvalidArgument for a body that is not one; kNotFound for a Telnyx event that is
// not an incoming call's start (Telnyx posts every event of the number's calls to this URL).
absl::StatusOr<IncomingCall> ReadIncomingCall(absl::string_view carrier,
                                              const CarrierWebhook& hook);
// The answer to an incoming call that no run waits for: Twilio `<Reject reason="busy"/>`, Plivo
// `<Hangup reason="busy"/>`; empty for Telnyx (a 200 that does nothing: the unanswered call
// rings out).
std::string IncomingCallRejection(absl::string_view carrier);

// One message on the media websocket, read from the carrier. The service is the application
// side of the carrier's stream: the agent's voice arrives as kMedia, the caller's is sent back.
struct MediaEvent {
  enum Kind { kConnected, kStart, kMedia, kMark, kStop, kOther };
  Kind kind = kOther;
  std::string mulaw;      // kMedia: 8 kHz G.711 mu-law bytes
  std::string mark;       // kMark: the name of a mark the service sent, now played
  std::string stream_id;  // kStart: the stream's id, used in what the service sends
  std::string call_id;    // kStart: the carrier's call id, when the dialect carries it
  std::string event;      // the event name as sent
};

// A carrier's media dialect (Twilio and Telnyx JSON media events; Plivo's playAudio).
class MediaDialect {
 public:
  virtual ~MediaDialect() = default;
  // An error for what is not an event of the dialect.
  virtual absl::StatusOr<MediaEvent> Parse(absl::string_view message) = 0;
  // The caller's audio to play into the call: one 20 ms frame of 8 kHz mu-law. `stream_id`
  // is the one kStart named.
  virtual std::string Media(absl::string_view stream_id, absl::string_view mulaw) = 0;
  // Asks to be told (kMark) once everything sent before it has played.
  virtual std::string Mark(absl::string_view stream_id, absl::string_view name) = 0;
  // Drops the audio sent but not yet played (barge-in).
  virtual std::string Clear(absl::string_view stream_id) = 0;
};

// The client and dialect of `account.carrier` (twilio, telnyx, plivo); InvalidArgument for
// another. `api_url` is the carrier's entry of ProviderApiUrls.
absl::StatusOr<std::unique_ptr<CarrierClient>> NewCarrierClient(const CarrierAccount& account,
                                                                 const std::string& api_url);
absl::StatusOr<std::unique_ptr<MediaDialect>> NewMediaDialect(absl::string_view carrier);

}  // namespace calleval::runs

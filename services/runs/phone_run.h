#pragma once

// The phone channel's call (docs/channels.md): the service asks the agent's carrier to dial the
// agent from one of the workspace's numbers, follows the call's signed webhooks on a pending
// phone line (services/runs/phone_lines.h), and once the carrier streams the answered call to
// the line's media websocket plays the caller there (the voice session, as the application's
// side of the carrier's media dialect). The service hangs up when the caller is done, at the
// call's time limit, or on voicemail.
//
// An agent that calls in (docs/channels.md, "The agent calls in"): the run opens an inbound
// line awaiting the agent's call on one of the workspace's numbers instead of dialling, answers
// it when it comes (the carrier's incoming-call webhook, services/runs/phone_lines.h) and holds
// the same conversation on its stream.

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/runs/carrier.h"
#include "services/runs/phone_lines.h"
#include "services/runs/speech_synthesizer.h"
#include "services/runs/voice_session.h"

namespace calleval::runs {

struct PhoneCallOptions {
  CarrierAccount account;  // with at least one caller number
  std::string api_url;     // the carrier's entry of ProviderApiUrls
  std::string to;          // the agent's number (the one it calls from, when it calls in)
  PhoneLines* lines = nullptr;
  // How long the agent's phone may ring; the media stream must start within this after the
  // call was placed (with kMediaGrace more for the carrier to connect it).
  absl::Duration ring_timeout = absl::Seconds(30);
  // The caller; `dialect` and `line_ended` are set here. Its max_duration is the call's time
  // limit: the service hangs up at it.
  VoiceSessionOptions session;
  SpeechSynthesizer* voice = nullptr;
  const std::atomic<bool>* cancel = nullptr;

  // The agent calls in: the run awaits its call from `to` on one of the account's caller
  // numbers (PhoneLines::OpenInbound) for up to `call_in_timeout`, and ends no_answer when none
  // comes.
  bool agent_calls_in = false;
  absl::Duration call_in_timeout = absl::Minutes(2);
  // With agent_calls_in: asked once the line awaits the call, with the number awaited, to have
  // the agent call it (a platform's API, e.g. Retell's create-phone-call); unset, the agent's
  // team makes it call. Its error is the run's (returned as it is: no call was held).
  std::function<absl::Status(const std::string& number)> request_call;
};

struct PhoneCallResult {
  // completed (the caller's script or goal is done: the service hung up), agent_hangup,
  // max_duration, busy, no_answer, voicemail, carrier_error.
  std::string end_reason;
  // Why a call that never became a conversation ended, in the carrier's words.
  std::string detail;
  std::string call_id;         // the carrier's
  std::string awaited_number;  // the agent called in: the workspace's number it was awaited on
  // Both sides, when the answered call was streamed (not for busy, no_answer, carrier_error).
  std::optional<VoiceRecording> recording;
};

// Places (or, when the agent calls in, awaits and answers) and holds the call. Errors only for what
// is not the call's doing (kCancelled when `cancel` became true: the call is hung up first); a call
// that could not be placed or did not connect is a result with its end_reason.
absl::StatusOr<PhoneCallResult> HoldPhoneCall(const PhoneCallOptions& options);

}  // namespace calleval::runs

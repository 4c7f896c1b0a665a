#include "services/runs/phone_run.h"

#include <unistd.h>

#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "services/runs/websocket_client.h"

namespace calleval::runs {
namespace {

// Beyond the ring timeout, how long the carrier may take to report the call's end or open the
// media stream before the run gives up on it.
constexpr absl::Duration kMediaGrace = absl::Seconds(15);
constexpr absl::Duration kUpgradeTimeout = absl::Seconds(10);

// The end reason of a call that ended before its media stream started.
std::optional<std::string> EndBeforeMedia(const CarrierEvent& event, bool answered) {
  switch (event.progress) {
    case CarrierEvent::kBusy:
      return "busy";
    case CarrierEvent::kNoAnswer:
      return "no_answer";
    case CarrierEvent::kMachine:
      return "voicemail";
    case CarrierEvent::kFailed:
      return "carrier_error";
    case CarrierEvent::kCompleted:
      return answered ? "agent_hangup" : "no_answer";
    default:
      return std::nullopt;
  }
}

// Hangs the call up (logging a failure: the carrier ends it at its time limit anyway).
void HangUp(CarrierClient& client, const std::string& call_id) {
  if (call_id.empty()) return;
  if (absl::Status s = client.Hangup(call_id); !s.ok()) {
    LogWarn("phone run: hanging up failed", {{"call_id", call_id}, {"error", s}});
  }
}

// The conversation on the carrier's media stream, once the carrier opened it: the same for a
// call the service dialled and one the agent made.
absl::StatusOr<PhoneCallResult> HoldConversation(const PhoneCallOptions& options,
                                                 CarrierClient& client, MediaDialect& dialect,
                                                 PhoneLine& line, MediaHandoff media,
                                                 PhoneCallResult result) {
  absl::StatusOr<std::unique_ptr<WebSocketConnection>> ws =
      WebSocketConnection::AcceptUpgrade(media.fd, std::move(media.received), kUpgradeTimeout);
  if (!ws.ok()) {
    HangUp(client, result.call_id);
    result.end_reason = "carrier_error";
    result.detail = absl::StrCat("the carrier's media stream failed: ", ws.status().message());
    return result;
  }

  // During the conversation the webhooks still arrive (answering-machine detection runs
  // beside the stream, and the call may end outside it): a watcher ends the session on them.
  std::mutex ended_mu;
  std::string ended;  // guarded by ended_mu
  std::atomic<bool> session_done{false};
  std::thread watcher([&] {
    while (!session_done.load()) {
      PhoneLine::Arrived arrived = line.Wait(absl::Milliseconds(50));
      for (const CarrierEvent& event : arrived.events) {
        std::string reason;
        if (event.progress == CarrierEvent::kMachine) reason = "voicemail";
        if (event.progress == CarrierEvent::kCompleted) reason = "agent_hangup";
        if (event.progress == CarrierEvent::kFailed) reason = "carrier_error";
        if (reason.empty()) continue;
        std::lock_guard<std::mutex> lock(ended_mu);
        if (ended.empty()) {
          ended = reason;
          result.detail = event.detail;
        }
      }
      if (arrived.media) ::close(arrived.media->fd);  // never: the token is single-use
    }
  });
  VoiceSessionOptions session = options.session;
  session.dialect = &dialect;
  session.line_ended = [&] {
    std::lock_guard<std::mutex> lock(ended_mu);
    return ended;
  };
  absl::StatusOr<VoiceRecording> recording = RunVoiceSession(**ws, *options.voice, session);
  session_done = true;
  watcher.join();
  if (result.call_id.empty() && recording.ok()) result.call_id = recording->call_id;
  if (!recording.ok()) {
    HangUp(client, result.call_id);
    return recording.status();
  }
  const std::string& how = recording->end_reason;
  if (how == "agent_ended" || how == "agent_hangup") {
    result.end_reason = "agent_hangup";
  } else if (how == "max_duration" || how == "voicemail" || how == "carrier_error") {
    result.end_reason = how;
  } else {
    result.end_reason = "completed";  // script_finished, goal_reached, max_turns
  }
  // The service's own hangup ends the call whichever side placed it (Twilio, Telnyx and Plivo
  // hang up an incoming leg by its id as they do a dialled one).
  if (result.end_reason != "agent_hangup") HangUp(client, result.call_id);
  result.recording = *std::move(recording);
  return result;
}

// Awaits the agent's call on an inbound line, answers it and holds the conversation.
absl::StatusOr<PhoneCallResult> TakeIncomingCall(const PhoneCallOptions& options,
                                                 CarrierClient& client, MediaDialect& dialect,
                                                 PhoneLine& line) {
  PhoneCallResult result;
  result.awaited_number = line.awaited_number();
  if (options.request_call) RETURN_IF_ERROR(options.request_call(result.awaited_number));
  absl::Time give_up = absl::Now() + options.call_in_timeout;
  bool taken = false;
  std::optional<MediaHandoff> media;
  while (!media) {
    if (options.cancel != nullptr && options.cancel->load()) {
      HangUp(client, result.call_id);
      return absl::CancelledError("the phone run was cancelled: the service is stopping");
    }
    if (absl::Now() >= give_up) {
      HangUp(client, result.call_id);
      result.end_reason = taken ? "carrier_error" : "no_answer";
      result.detail =
          taken ? "the carrier never streamed the agent's call"
                : absl::StrCat("the agent did not call ", result.awaited_number, " within ",
                               absl::ToInt64Seconds(options.call_in_timeout), " s");
      return result;
    }
    PhoneLine::Arrived arrived = line.Wait(absl::Milliseconds(100));
    for (const CarrierEvent& event : arrived.events) {
      if (!taken && event.progress == CarrierEvent::kAnswered && !event.call_id.empty()) {
        // The incoming call matched this line (PhoneLines::Incoming); carriers answered by
        // command are answered here, off the edge's thread.
        taken = true;
        result.call_id = event.call_id;
        give_up = absl::Now() + kMediaGrace;
        absl::Status answered =
            client.AnswerIncoming(result.call_id, line.media_url(), line.events_url());
        if (!answered.ok()) {
          HangUp(client, result.call_id);
          if (arrived.media) ::close(arrived.media->fd);
          result.end_reason = "carrier_error";
          result.detail =
              absl::StrCat("the agent's call could not be answered: ", answered.message());
          return result;
        }
        continue;
      }
      // Before the stream the call may still end (the agent gave up ringing).
      if (taken &&
          (event.progress == CarrierEvent::kCompleted || event.progress == CarrierEvent::kFailed)) {
        if (arrived.media) ::close(arrived.media->fd);
        result.end_reason =
            event.progress == CarrierEvent::kCompleted ? "agent_hangup" : "carrier_error";
        result.detail = event.detail;
        return result;
      }
    }
    media = std::move(arrived.media);
  }
  return HoldConversation(options, client, dialect, line, *std::move(media), std::move(result));
}

}  // namespace

absl::StatusOr<PhoneCallResult> HoldPhoneCall(const PhoneCallOptions& options) {
  PhoneCallResult result;
  if (options.account.caller_numbers.empty()) {
    return absl::FailedPreconditionError(
        options.agent_calls_in ? "the carrier account has no number for the agent to call"
                               : "the carrier account has no caller number to call from");
  }
  absl::StatusOr<std::unique_ptr<CarrierClient>> made =
      NewCarrierClient(options.account, options.api_url);
  if (!made.ok()) return made.status();
  std::shared_ptr<CarrierClient> client = *std::move(made);
  absl::StatusOr<std::unique_ptr<MediaDialect>> dialect = NewMediaDialect(options.account.carrier);
  if (!dialect.ok()) return dialect.status();

  const absl::Duration limit = options.session.max_duration;
  WebhookReader read = [client](const CarrierWebhook& hook) {
    return client->ReadWebhook(hook, absl::Now());
  };
  if (options.agent_calls_in) {
    std::unique_ptr<PhoneLine> line = options.lines->OpenInbound(
        options.account.carrier, std::move(read), limit + options.call_in_timeout + kMediaGrace,
        options.to, options.account.caller_numbers);
    line->set_answer_document(client->IncomingCallAnswer(line->media_url()));
    return TakeIncomingCall(options, *client, **dialect, *line);
  }
  std::unique_ptr<PhoneLine> line = options.lines->Open(options.account.carrier, std::move(read),
                                                        limit + options.ring_timeout + kMediaGrace);
  OutboundCall call;
  call.from = options.account.caller_numbers.front();
  call.to = options.to;
  call.media_url = line->media_url();
  call.events_url = line->events_url();
  call.answer_url = line->answer_url();
  call.ring_timeout = options.ring_timeout;
  call.time_limit = limit;
  line->set_answer_document(client->AnswerDocument(call));

  absl::StatusOr<std::string> placed = client->PlaceCall(call);
  if (!placed.ok()) {
    result.end_reason = "carrier_error";
    result.detail = absl::StrCat("the call could not be placed: ", placed.status().message());
    return result;
  }
  result.call_id = *placed;

  // Ringing: until the carrier streams the call, or says it ended.
  const absl::Time give_up = absl::Now() + options.ring_timeout + kMediaGrace;
  bool answered = false;
  std::optional<MediaHandoff> media;
  while (!media) {
    if (options.cancel != nullptr && options.cancel->load()) {
      HangUp(*client, result.call_id);
      return absl::CancelledError("the phone run was cancelled: the service is stopping");
    }
    if (absl::Now() >= give_up) {
      HangUp(*client, result.call_id);
      result.end_reason = answered ? "carrier_error" : "no_answer";
      result.detail = answered ? "the carrier never streamed the answered call"
                               : "the call was not answered in time";
      return result;
    }
    PhoneLine::Arrived arrived = line->Wait(absl::Milliseconds(100));
    for (const CarrierEvent& event : arrived.events) {
      if (event.progress == CarrierEvent::kAnswered) answered = true;
      if (std::optional<std::string> end = EndBeforeMedia(event, answered)) {
        if (*end == "voicemail") HangUp(*client, result.call_id);
        if (arrived.media) ::close(arrived.media->fd);
        result.end_reason = *end;
        result.detail = event.detail;
        return result;
      }
    }
    media = std::move(arrived.media);
  }
  return HoldConversation(options, *client, **dialect, *line, *std::move(media), std::move(result));
}

}  // namespace calleval::runs

#include "services/runs/phone_run.h"

#include <unistd.h>

#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
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

}  // namespace

absl::StatusOr<PhoneCallResult> HoldPhoneCall(const PhoneCallOptions& options) {
  PhoneCallResult result;
  if (options.account.caller_numbers.empty()) {
    return absl::FailedPreconditionError("the carrier account has no caller number to call from");
  }
  absl::StatusOr<std::unique_ptr<CarrierClient>> made =
      NewCarrierClient(options.account, options.api_url);
  if (!made.ok()) return made.status();
  std::shared_ptr<CarrierClient> client = *std::move(made);
  absl::StatusOr<std::unique_ptr<MediaDialect>> dialect = NewMediaDialect(options.account.carrier);
  if (!dialect.ok()) return dialect.status();

  const absl::Duration limit = options.session.max_duration;
  std::unique_ptr<PhoneLine> line = options.lines->Open(
      options.account.carrier,
      [client](const CarrierWebhook& hook) { return client->ReadWebhook(hook, absl::Now()); },
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
  auto hang_up = [&] {
    if (absl::Status s = client->Hangup(result.call_id); !s.ok()) {
      LogWarn("phone run: hanging up failed", {{"call_id", result.call_id}, {"error", s}});
    }
  };

  // Ringing: until the carrier streams the call, or says it ended.
  const absl::Time give_up = absl::Now() + options.ring_timeout + kMediaGrace;
  bool answered = false;
  std::optional<MediaHandoff> media;
  while (!media) {
    if (options.cancel != nullptr && options.cancel->load()) {
      hang_up();
      return absl::CancelledError("the phone run was cancelled: the service is stopping");
    }
    if (absl::Now() >= give_up) {
      hang_up();
      result.end_reason = answered ? "carrier_error" : "no_answer";
      result.detail = answered ? "the carrier never streamed the answered call"
                               : "the call was not answered in time";
      return result;
    }
    PhoneLine::Arrived arrived = line->Wait(absl::Milliseconds(100));
    for (const CarrierEvent& event : arrived.events) {
      if (event.progress == CarrierEvent::kAnswered) answered = true;
      if (std::optional<std::string> end = EndBeforeMedia(event, answered)) {
        if (*end == "voicemail") hang_up();
        if (arrived.media) ::close(arrived.media->fd);
        result.end_reason = *end;
        result.detail = event.detail;
        return result;
      }
    }
    media = std::move(arrived.media);
  }

  absl::StatusOr<std::unique_ptr<WebSocketConnection>> ws =
      WebSocketConnection::AcceptUpgrade(media->fd, std::move(media->received), kUpgradeTimeout);
  if (!ws.ok()) {
    hang_up();
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
      PhoneLine::Arrived arrived = line->Wait(absl::Milliseconds(50));
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
  session.dialect = dialect->get();
  session.line_ended = [&] {
    std::lock_guard<std::mutex> lock(ended_mu);
    return ended;
  };
  absl::StatusOr<VoiceRecording> recording = RunVoiceSession(**ws, *options.voice, session);
  session_done = true;
  watcher.join();
  if (!recording.ok()) {
    hang_up();
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
  if (result.end_reason != "agent_hangup") hang_up();
  if (result.call_id.empty()) result.call_id = recording->call_id;
  result.recording = *std::move(recording);
  return result;
}

}  // namespace calleval::runs

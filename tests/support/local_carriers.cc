#include "tests/support/local_carriers.h"

#include "absl/strings/str_cat.h"

namespace calleval {

LocalCarriers::LocalCarriers(absl::Duration agent_delay)
    : twilio_(
          std::make_unique<FakeTwilioServer>(kTwilioAccountSid, kTwilioAuthToken, agent_delay)) {
  telnyx_.PlayCalls(agent_delay);
  plivo_.PlayCalls(agent_delay);
}

std::string LocalCarriers::ApiUrl(const std::string& carrier) const {
  if (carrier == "telnyx") return telnyx_.url();
  if (carrier == "plivo") return plivo_.url();
  return twilio_->api_url();
}

std::string LocalCarriers::Number(const std::string& carrier, int n) {
  if (carrier == "twilio") return absl::StrCat("+1415555010", n);
  if (carrier == "plivo") return absl::StrCat("+91987654320", n);
  return absl::StrCat("+3361234560", n);
}

nlohmann::json LocalCarriers::Settings(const std::string& carrier) const {
  if (carrier == "telnyx") {
    return {{"api_key", telnyx_.api_key()},
            {"connection_id", telnyx_.connection_id()},
            {"public_key", telnyx_.public_key()},
            {"caller_numbers", {kWorkspaceNumber}}};
  }
  if (carrier == "plivo") {
    return {{"auth_id", plivo_.auth_id()},
            {"auth_token", plivo_.auth_token()},
            {"caller_numbers", {kWorkspaceNumber}}};
  }
  return {{"account_sid", kTwilioAccountSid},
          {"auth_token", kTwilioAuthToken},
          {"caller_numbers", {kWorkspaceNumber}}};
}

void LocalCarriers::SetIncomingUrl(const std::string& carrier, const std::string& url) {
  if (carrier == "telnyx") return telnyx_.SetIncomingUrl(url);
  if (carrier == "plivo") return plivo_.SetIncomingUrl(url);
  twilio_->SetIncomingUrl(url);
}

void LocalCarriers::SetLine(const std::string& carrier, const std::string& to, FakeLine line) {
  if (carrier == "telnyx") return telnyx_.SetLine(to, line);
  if (carrier == "plivo") return plivo_.SetLine(to, line);
  const FakeTwilioServer::Pickup pickup[] = {
      FakeTwilioServer::Pickup::kAgent, FakeTwilioServer::Pickup::kBusy,
      FakeTwilioServer::Pickup::kNoAnswer, FakeTwilioServer::Pickup::kMachine};
  twilio_->SetLine(to, {pickup[line.pickup], line.hang_up_after_answers, line.interrupt_after_ms});
}

std::vector<PlayedCall> LocalCarriers::Calls(const std::string& carrier) {
  if (carrier == "telnyx") return telnyx_.played();
  if (carrier == "plivo") return plivo_.played();
  std::vector<PlayedCall> out;
  for (const FakeTwilioServer::Call& c : twilio_->calls()) {
    PlayedCall call;
    call.id = c.sid;
    call.to = c.to;
    call.from = c.from;
    call.media_url = c.media_url;
    call.webhooks_sent = c.callbacks_sent;
    call.media_connected = c.media_connected;
    call.answers = c.answers;
    call.marks_played = c.marks_echoed;
    call.clears = c.clears;
    call.talked_over_after_clear = c.talked_over_after_clear;
    call.hung_up_by_service = c.hung_up_by_service;
    call.stop_sent = c.stop_sent;
    call.error = c.error;
    out.push_back(call);
  }
  return out;
}

PlayedCall LocalCarriers::CallTo(const std::string& carrier, const std::string& to) {
  for (const PlayedCall& call : Calls(carrier)) {
    if (call.to == to) return call;
  }
  return {};
}

PlayedCall LocalCarriers::CallFrom(const std::string& carrier, const std::string& from) {
  PlayedCall last;
  for (const PlayedCall& call : Calls(carrier)) {
    if (call.from == from) last = call;
  }
  return last;
}

bool LocalCarriers::WaitForEnd(const std::string& carrier, const std::string& to,
                               absl::Duration timeout) {
  if (carrier == "telnyx") return telnyx_.WaitForEnd(to, timeout);
  if (carrier == "plivo") return plivo_.WaitForEnd(to, timeout);
  return twilio_->WaitForEnd(to, timeout);
}

int LocalCarriers::PostForgedHangup(const std::string& carrier, const std::string& to) {
  if (carrier == "twilio") return twilio_->PostCallback(to, "completed", "forged-token");
  const std::string id = CallTo(carrier, to).id;
  absl::StatusOr<WebhookAnswer> answer;
  if (carrier == "telnyx") {
    Ed25519TestKey forger;
    answer = telnyx_.SendWebhook(id, "call.hangup",
                                 {{"hangup_cause", "normal_clearing"}, {"hangup_source", "callee"}},
                                 absl::Now(), &forger);
  } else {
    answer =
        plivo_.Callback(id, "hangup_url", {{"CallStatus", "completed"}, {"HangupSource", "Callee"}},
                        "forged-token");
  }
  return answer.ok() ? answer->status : 0;
}

}  // namespace calleval

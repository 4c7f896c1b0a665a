#pragma once

// A local Twilio for tests: the Programmable Voice REST API a phone run calls, and the phone
// network behind it. `POST /2010-04-01/Accounts/{AccountSid}/Calls.json` checks the basic
// auth and the form as Twilio documents them, reads the <Stream> URL from the TwiML, answers
// 201 with the call's sid and then plays the call on a thread of its own, chosen by the `To`
// number: it sends the status callbacks (form-encoded, signed with X-Twilio-Signature as Twilio
// signs them) and, once the call is answered, connects to the media websocket as Twilio does
// (`connected`, `start` with callSid and streamSid, then 20 ms mu-law `media` paced in real
// time), echoes `mark`s once the audio before them has played, honours `clear`, and sends
// `stop` when the call ends. `POST .../Calls/{Sid}.json` with Status=completed hangs up.
//
// The agent can call in too (DialIn): Twilio then POSTs the signed incoming-call webhook to the
// voice URL set on the dialled number (SetIncomingUrl) and does what the TwiML answer says: a
// <Connect><Stream> is streamed to the agent exactly as an answered outbound call is; anything
// else (<Reject>) ends the call there.
//
// The agent on the line is the test agent of fake_phone_agent.h, shared with the local Telnyx
// and Plivo: it greets, then answers each time the caller stops speaking, exactly `agent_delay`
// after the end of the caller's last loud frame (by the time it arrived, as a bot's voice
// activity detector hears it).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "tests/support/test_http_server.h"

namespace calleval {

class FakeTwilioServer {
 public:
  enum class Pickup { kAgent, kBusy, kNoAnswer, kMachine };
  struct Line {
    Pickup pickup = Pickup::kAgent;
    int hang_up_after_answers = 0;  // > 0: the agent hangs up after this many answers
    // > 0: the agent talks over the caller's first line this long into it (interrupts on cue).
    int interrupt_after_ms = 0;
  };

  // What happened on one call.
  struct Call {
    std::string sid;
    std::string to, from;
    std::string media_url;
    std::string status_callback;
    int ring_timeout_seconds = 0;  // the form's Timeout
    std::vector<std::string> callbacks_sent;  // "<CallStatus or AnsweredBy>=<HTTP status>"
    bool media_connected = false;
    int answers = 0;
    int marks_echoed = 0;
    int clears = 0;
    int talked_over_after_clear = 0;  // as PlayedCall's (fake_carriers.h)
    bool hung_up_by_service = false;
    bool stop_sent = false;
    std::string error;  // what the fake refused, if anything
    // When each of the service's media frames arrived (frames read by one Poll share its
    // time), for the pacing benchmark's jitter (bench/phone_runs_bench).
    std::vector<std::chrono::steady_clock::time_point> media_arrivals;
  };

  FakeTwilioServer(std::string account_sid, std::string auth_token,
                   absl::Duration agent_delay = absl::Seconds(1));
  ~FakeTwilioServer();

  // The API base URL (--twilio-api-url).
  std::string api_url() const { return http_.url(""); }
  // How the agent at `to` picks up; unknown numbers pick up with the agent.
  void SetLine(const std::string& to, Line line);

  std::vector<Call> calls();
  // The workspace's numbers' voice URL (what the team pastes into the number's settings).
  void SetIncomingUrl(std::string url);
  // The agent at `from` calls `to`: the incoming-call webhook, signed with `auth_token` (the
  // account's when empty); once it is answered with a <Connect><Stream> the call is played on
  // a thread (the agent's line is SetLine(from)). The service's answer.
  struct Answer {
    int status = 0;  // 0: the service could not be reached
    std::string body;
  };
  Answer DialIn(const std::string& from, const std::string& to, const std::string& auth_token = "");

  // Waits until the call to (or, for a call the agent made, from) `to` has ended (its thread is
  // done); false after `timeout`.
  bool WaitForEnd(const std::string& to, absl::Duration timeout);

  // Posts a status callback for the call to `to` signed with `auth_token` (a forgery when it is
  // not the account's); the HTTP status the service answered.
  int PostCallback(const std::string& to, const std::string& status, const std::string& auth_token);
  // Opens the call's media websocket again, as a replay would: the HTTP status of the upgrade's
  // answer (101 when it was accepted).
  int ReconnectMedia(const std::string& to);

 private:
  struct Active;
  TestHttpServer::Response CreateCall(const TestHttpServer::Request& request);
  TestHttpServer::Response UpdateCall(const TestHttpServer::Request& request);
  void PlayCall(std::shared_ptr<Active> call);
  // Returns the HTTP status (0 when unreachable).
  int SendCallback(Active& call, const std::string& url,
                   const std::vector<std::pair<std::string, std::string>>& fields,
                   const std::string& token);
  // POSTs a form signed with `token`; the answer.
  Answer PostSigned(const std::string& url,
                    const std::vector<std::pair<std::string, std::string>>& fields,
                    const std::string& token);
  void Stream(Active& call);

  const std::string account_sid_, auth_token_;
  const absl::Duration agent_delay_;
  TestHttpServer http_;
  std::mutex mu_;
  std::condition_variable ended_;
  std::map<std::string, Line> lines_;           // guarded by mu_
  std::string incoming_url_;                    // guarded by mu_
  std::vector<std::shared_ptr<Active>> calls_;  // guarded by mu_
  std::vector<std::thread> threads_;            // guarded by mu_
  std::atomic<bool> stopping_{false};
};

}  // namespace calleval

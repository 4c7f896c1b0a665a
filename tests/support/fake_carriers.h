#pragma once

// Local stand-ins for Telnyx's and Plivo's voice APIs, for tests only: real HTTP servers on
// 127.0.0.1 that take the calls the service places the way the real APIs document them (their
// authentication, paths and bodies), answer in the real shapes (errors included), and send the
// call's webhooks, signed as the carrier signs them, to the URLs the service gave when it dialed.
// Once PlayCalls() is called they also play each call they take, on a thread of its own, as the
// phone network would (the line at the dialed number says how the agent picks up): the ringing
// and end webhooks, and for an answered call the media stream to the service's websocket
// (Telnyx dials the dial's stream_url; Plivo fetches the answer_url and opens the answer
// document's <Stream>), in the carrier's media dialect, bridged to the test agent of
// fake_phone_agent.h. Without PlayCalls() a test sends the webhooks itself.
//
// The agent can call in too (DialIn): the carrier sends its signed incoming-call webhook to the
// URL set on the workspace's numbers (SetIncomingUrl) and, once the service takes the call
// (Telnyx: the answer command on its REST API; Plivo: an answer document with a bidirectional
// <Stream>), plays it to the test agent like an answered outbound call.
//
//   FakeTelnyx telnyx;
//   account.secret = telnyx.api_key(); account.public_key = telnyx.public_key(); ...
//   client = NewTelnyxCarrierClient(account, telnyx.url());
//   id = client->PlaceCall(call);
//   telnyx.SendWebhook(*id, "call.answered", {});   // POSTed to call.events_url, signed

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_http_server.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace calleval {

// An Ed25519 key pair made with OpenSSL (what Telnyx signs its webhooks with).
class Ed25519TestKey {
 public:
  Ed25519TestKey();
  ~Ed25519TestKey();
  Ed25519TestKey(const Ed25519TestKey&) = delete;
  Ed25519TestKey& operator=(const Ed25519TestKey&) = delete;

  // The raw 32-byte public key in base64, as the Telnyx portal shows it.
  std::string PublicKeyBase64() const;
  // The base64 signature of `message`.
  std::string Sign(const std::string& message) const;

 private:
  EVP_PKEY* key_ = nullptr;
};

// How the agent at a number picks up when a fake carrier plays its calls.
struct FakeLine {
  enum Pickup { kAgent, kBusy, kNoAnswer, kMachine };
  Pickup pickup = kAgent;
  int hang_up_after_answers = 0;  // > 0: the agent hangs up after this many answers
  // > 0: the agent talks over the caller's first line this long into it (interrupts on cue).
  int interrupt_after_ms = 0;
};

// What happened on a call a fake carrier played.
struct PlayedCall {
  std::string id;  // Telnyx's call_control_id, Plivo's request_uuid (CallUUID when incoming)
  std::string to;
  std::string from;       // set for a call the agent made (DialIn)
  std::string media_url;  // the service's media websocket the carrier opened
  std::vector<std::string> webhooks_sent;  // "<event or status>=<HTTP status>"
  bool media_connected = false;
  int answers = 0;
  int marks_played = 0;
  int clears = 0;
  // Loud caller frames that arrived after a clear while the agent was still talking over the
  // caller (zero when the caller yielded).
  int talked_over_after_clear = 0;
  bool hung_up_by_service = false;  // through the carrier's API
  bool stop_sent = false;           // the carrier ended the stream (the agent hung up)
  bool done = false;
  std::string error;  // what went wrong on the carrier's side, if anything
};

// The calls one fake carrier plays, and their threads.
class FakeCallBook {
 public:
  struct Entry {
    PlayedCall log;  // guarded by the book's mu_
    FakeLine line;
    std::atomic<bool> hangup{false};
  };
  FakeCallBook() = default;
  ~FakeCallBook() { Stop(); }

  void Enable(absl::Duration agent_delay);
  bool enabled();
  absl::Duration agent_delay();
  void SetLine(const std::string& to, FakeLine line);
  // Records a new call and plays it with `play` on a thread. `from`: a call the agent at
  // `from` made (its line is SetLine(from)).
  void Play(const std::string& id, const std::string& to,
            std::function<void(std::shared_ptr<Entry>)> play, const std::string& from = "");
  // The service hung the call `id` up through the API.
  void HangUp(const std::string& id);
  // Changes a call's log under the lock.
  void Note(Entry& entry, const std::function<void(PlayedCall&)>& change);
  std::vector<PlayedCall> calls();
  // The call to (or, for a call the agent made, from) `to`.
  bool WaitForEnd(const std::string& to, absl::Duration timeout);
  // Hangs every call up and waits for their threads.
  void Stop();

 private:
  std::mutex mu_;
  std::condition_variable ended_;
  bool enabled_ = false;                         // guarded by mu_
  absl::Duration agent_delay_;                   // guarded by mu_
  std::map<std::string, FakeLine> lines_;        // guarded by mu_
  std::vector<std::shared_ptr<Entry>> entries_;  // guarded by mu_
  std::vector<std::thread> threads_;             // guarded by mu_
};

// The service's answer to a webhook.
struct WebhookAnswer {
  int status = 0;
  std::string body;
};

class FakeTelnyx {
 public:
  struct Dial {
    std::string call_control_id;
    nlohmann::json body;  // the POST /v2/calls body as sent
  };

  explicit FakeTelnyx(std::string api_key = "KEYtelnyx_test_0123456789",
                      std::string connection_id = "1494404757140276705");

  std::string url() const { return http_.url(""); }  // the API base (--telnyx-api-url)
  const std::string& api_key() const { return api_key_; }
  const std::string& connection_id() const { return connection_id_; }
  std::string public_key() const { return key_.PublicKeyBase64(); }
  TestHttpServer& http() { return http_; }

  std::vector<Dial> dials() const;
  std::vector<std::string> hangups() const;  // call_control_ids, in order
  // The next dials are refused with `status` and Telnyx's error body.
  void RefuseDials(int status, std::string title, std::string detail);

  // POSTs {"data": {"event_type": type, "payload": payload + call_control_id, ...}} to the
  // dial's webhook_url with telnyx-timestamp `when` and its Ed25519 signature (by `signer`
  // instead of the account's key, when set: a forgery).
  absl::StatusOr<WebhookAnswer> SendWebhook(const std::string& call_control_id,
                                            const std::string& type, nlohmann::json payload,
                                            absl::Time when = absl::Now(),
                                            const Ed25519TestKey* signer = nullptr);

  // From now on every dial is played (see above), the agent answering `agent_delay` after the
  // caller stops speaking.
  void PlayCalls(absl::Duration agent_delay) { book_.Enable(agent_delay); }
  void SetLine(const std::string& to, FakeLine line) { book_.SetLine(to, line); }
  std::vector<PlayedCall> played() { return book_.calls(); }
  bool WaitForEnd(const std::string& to, absl::Duration timeout) {
    return book_.WaitForEnd(to, timeout);
  }

  // The connection's webhook URL, where the workspace's numbers' calls are announced.
  void SetIncomingUrl(std::string url);
  // The agent at `from` calls `to`: a `call.initiated` event (direction incoming) POSTed to the
  // incoming URL, signed (by `signer` when set: a forgery). The call's id is put in `id`. The
  // call is played once the service answers it (POST /v2/calls/{id}/actions/answer).
  absl::StatusOr<WebhookAnswer> DialIn(const std::string& from, const std::string& to,
                                       std::string* id = nullptr,
                                       const Ed25519TestKey* signer = nullptr);
  // The answer commands received (their bodies), by call_control_id.
  std::map<std::string, nlohmann::json> answers() const;

 private:
  struct Incoming {
    std::string from, to;
    bool answered = false;
  };
  TestHttpServer::Response HandleDial(const TestHttpServer::Request& request);
  TestHttpServer::Response HandleAction(const TestHttpServer::Request& request);
  TestHttpServer::Response Answer(const std::string& id, const TestHttpServer::Request& request);
  // `incoming`: a call the agent made, answered: no ringing, straight to the stream.
  void PlayCall(std::shared_ptr<FakeCallBook::Entry> call, nlohmann::json dial,
                bool incoming = false);
  absl::StatusOr<WebhookAnswer> Post(const std::string& url, const std::string& type,
                                     nlohmann::json payload, absl::Time when,
                                     const Ed25519TestKey* signer);

  const std::string api_key_, connection_id_;
  Ed25519TestKey key_;
  mutable std::mutex mu_;
  std::vector<Dial> dials_;                   // guarded by mu_
  std::vector<std::string> hangups_;          // guarded by mu_
  int refuse_status_ = 0;                     // guarded by mu_
  std::string refuse_title_, refuse_detail_;  // guarded by mu_
  std::string incoming_url_;                  // guarded by mu_
  std::map<std::string, Incoming> incoming_;  // by call_control_id; guarded by mu_
  std::map<std::string, nlohmann::json> answers_;  // guarded by mu_
  FakeCallBook book_;    // before http_ goes: its threads use the state above
  TestHttpServer http_;  // last: stopped first, while the state its handlers use is alive
};

class FakePlivo {
 public:
  struct Call {
    std::string request_uuid;
    std::string call_uuid;  // the id the callbacks carry as CallUUID
    nlohmann::json body;    // the POST .../Call/ body as sent
  };

  explicit FakePlivo(std::string auth_id = "MAFAKEPLIVOAUTHID000",
                     std::string auth_token = "plivo_test_token_0123456789");

  std::string url() const { return http_.url(""); }  // the API base (--plivo-api-url)
  const std::string& auth_id() const { return auth_id_; }
  const std::string& auth_token() const { return auth_token_; }
  TestHttpServer& http() { return http_; }

  std::vector<Call> calls() const;
  // The targets DELETEd (".../Call/{uuid}/", ".../Request/{uuid}/"), in order.
  std::vector<std::string> deletes() const;
  void RefuseCalls(int status, std::string error);

  // POSTs `params` (with CallUUID, RequestUUID, From, To and Direction added) form-encoded to
  // the call's `url_field` ("answer_url", "ring_url", "hangup_url", "machine_detection_url"),
  // signed with signature V3 under the auth token (`token` instead, when set: a forgery).
  absl::StatusOr<WebhookAnswer> Callback(const std::string& request_uuid,
                                         const std::string& url_field,
                                         std::multimap<std::string, std::string> params,
                                         const std::string& token = "");

  // As FakeTelnyx's.
  void PlayCalls(absl::Duration agent_delay) { book_.Enable(agent_delay); }
  void SetLine(const std::string& to, FakeLine line) { book_.SetLine(to, line); }
  std::vector<PlayedCall> played() { return book_.calls(); }
  bool WaitForEnd(const std::string& to, absl::Duration timeout) {
    return book_.WaitForEnd(to, timeout);
  }

  // The answer URL of the application the workspace's numbers use.
  void SetIncomingUrl(std::string url);
  // The agent at `from` calls `to`: Plivo fetches the answer URL (a signed POST with the call's
  // parameters, Direction inbound, the numbers without their '+' as Plivo writes them), signed
  // with `token` when set (a forgery). An answer with a bidirectional <Stream> is played.
  absl::StatusOr<WebhookAnswer> DialIn(const std::string& from, const std::string& to,
                                       const std::string& token = "");

 private:
  TestHttpServer::Response Handle(const TestHttpServer::Request& request);
  void PlayCall(std::shared_ptr<FakeCallBook::Entry> call);
  // Streams the answered call to the agent at `url` (from the answer document).
  void StreamCall(std::shared_ptr<FakeCallBook::Entry> call, const std::string& url, bool incoming);

  const std::string auth_id_, auth_token_;
  mutable std::mutex mu_;
  std::vector<Call> calls_;           // guarded by mu_
  std::vector<std::string> deletes_;  // guarded by mu_
  int refuse_status_ = 0;             // guarded by mu_
  std::string refuse_error_;          // guarded by mu_
  std::string incoming_url_;          // guarded by mu_
  FakeCallBook book_;    // before http_ goes: its threads use the state above
  TestHttpServer http_;  // last: stopped first, while the state its handlers use is alive
};

}  // namespace calleval

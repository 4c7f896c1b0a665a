#pragma once

// The phone lines pending in a runs process (docs/channels.md): a phone run opens a line before
// it places its call and gets a token, 32 random bytes in base64url, that names the line in
// every URL the carrier calls (services/runs/carrier.h), followed by the route to its holder
// when the lines are served apart from the public edge (services/runs/line_route.h):
//   <public-base-url>/media/<carrier>/<token>          the media websocket, single-use
//   <public-base-url>/media/<carrier>/<token>/events   the call's signed status webhooks
//   <public-base-url>/media/<carrier>/<token>/answer   the answer document (Plivo fetches one)
// The edge of the same process, or without one the process's media listener (to which other
// processes' edges relay), serves those paths (cmd/calleval wires it) and hands what arrives to
// the waiting run. The registry knows no HTTP: the server asks it what to answer.
//
// A run whose agent calls in (docs/channels.md, "The agent calls in") opens an inbound line
// instead: it awaits a call from the agent's number to one of the workspace's numbers, which
// comes to the carrier's fixed incoming-call webhook, <public-base-url>/media/<carrier>/incoming
// (a token is 43 base64url characters, so it is never "incoming"). The numbers the webhook
// names, unverified, pick the line; the line's account then checks the signature.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "services/runs/carrier.h"

namespace calleval::runs {

// Verifies and reads a webhook of the line's call (CarrierClient::ReadWebhook).
using WebhookReader =
    std::function<absl::StatusOr<std::vector<CarrierEvent>>(const CarrierWebhook& hook)>;

// A media websocket connection handed over by the edge: its socket (owned) and the bytes read
// from it so far, the upgrade request first (WebSocketConnection::AcceptUpgrade).
struct MediaHandoff {
  int fd = -1;
  std::string received;
};

class PhoneLines;

// The run's end of a line; closing it (destroying it) ends the line: its URLs answer 404.
class PhoneLine {
 public:
  ~PhoneLine();
  PhoneLine(const PhoneLine&) = delete;
  PhoneLine& operator=(const PhoneLine&) = delete;

  const std::string& token() const;
  // The line's URLs under the public base URL (the media websocket's with ws:// or wss://).
  std::string media_url() const;
  std::string events_url() const;
  std::string answer_url() const;
  // An inbound line: the workspace's number it awaits the agent's call on; empty otherwise.
  const std::string& awaited_number() const;

  // What arrived, waiting up to `wait` for something: the webhooks' events in order, and the
  // media connection once the carrier opened it.
  struct Arrived {
    std::vector<CarrierEvent> events;
    std::optional<MediaHandoff> media;
  };
  Arrived Wait(absl::Duration wait);
  // What /answer serves from now on (carriers that fetch an answer document when the call is
  // answered; it names the media URL, so it is set once the line is open).
  void set_answer_document(std::string document);

  struct State;

 private:
  friend class PhoneLines;
  PhoneLine(PhoneLines* lines, std::shared_ptr<State> state);
  PhoneLines* lines_;
  std::shared_ptr<State> state_;
};

class PhoneLines {
 public:
  // `public_base_url`: where the carrier reaches this process's edge (https://host[:port]),
  // without a trailing '/'.
  explicit PhoneLines(std::string public_base_url);
  // A registry whose tokens also carry where the lines are held (services/runs/line_route.h):
  // `holder_address`, the HOST:PORT other processes' edges reach this process's media listener
  // at, MACed with the installation's internal `credential`.
  PhoneLines(std::string public_base_url, std::string holder_address, std::string credential);

  const std::string& public_base_url() const { return public_base_url_; }

  // Opens a line of `carrier` whose webhooks `read` verifies; its token expires after `ttl`
  // (the run's longest call plus the ring timeout).
  std::unique_ptr<PhoneLine> Open(std::string carrier, WebhookReader read, absl::Duration ttl);

  // The edge's part. `path` is the request's path under /media/.
  // A status webhook: NotFound for an unknown or expired token, PermissionDenied (403) when the
  // line's reader refuses the signature (nothing is delivered then), OK once its events are
  // delivered.
  // `hook.url` is set here: the public base URL followed by the path, as the carrier signed it.
  absl::Status Webhook(absl::string_view path, CarrierWebhook hook);
  // The media websocket: NotFound for an unknown or expired token, AlreadyExists (409) when the
  // token was used already; otherwise the token is spent and the returned function hands the
  // connection to the run (closing it when the run has gone meanwhile).
  absl::StatusOr<std::function<void(MediaHandoff)>> ClaimMedia(absl::string_view path);
  // The answer document; NotFound as above. `fetch`: the carrier's request for it, when it
  // signs that request like a webhook (Plivo posts the call's parameters, answered): once its
  // signature verifies, its events are delivered too, so the run knows the call was answered
  // even if the stream never comes. The document is served either way: it names only the media
  // URL, whose token the answer URL already carries.
  absl::StatusOr<std::string> Answer(absl::string_view path,
                                     std::optional<CarrierWebhook> fetch = std::nullopt);

  // Opens an inbound line of `carrier` awaiting a call from `from` (the agent's number) to one
  // of `numbers` (the workspace's, not empty): the first that no other waiting line from the
  // same number awaits, so that concurrent runs are told apart by the number called; when all
  // are taken, the first, and such calls go to the lines in the order they opened. Until the
  // call comes, the line is as Open's (its events and media URLs work as for a dialled call).
  std::unique_ptr<PhoneLine> OpenInbound(std::string carrier, WebhookReader read,
                                         absl::Duration ttl, const std::string& from,
                                         const std::vector<std::string>& numbers);

  // The carrier's incoming-call webhook at `path` (/media/<carrier>/incoming), read with
  // ReadIncomingCall. No waiting line for its numbers: not matched, with the carrier's
  // rejection (IncomingCallRejection). A waiting line: its reader checks the signature
  // (PermissionDenied when it refuses it; nothing is delivered, and the line still waits),
  // then the line takes the call (a kAnswered event whose call_id is the carrier's) and the
  // webhook is answered with the line's answer document (set_answer_document). InvalidArgument
  // for a body that is not an incoming call; NotFound for another path.
  struct IncomingAnswer {
    bool matched = false;
    std::string document;  // what the webhook is answered with (may be empty: a bare 200)
  };
  absl::StatusOr<IncomingAnswer> Incoming(absl::string_view path, CarrierWebhook hook);

  // Lines open now.
  size_t open_lines();

 private:
  friend class PhoneLine;
  struct Target {
    std::string carrier, token, rest;  // rest: "", "events" or "answer"
  };
  static std::optional<Target> ParsePath(absl::string_view path);
  // The line `target` names, unexpired; NotFound otherwise.
  absl::StatusOr<std::shared_ptr<PhoneLine::State>> Find(const Target& target);
  void Close(const std::string& token);

  const std::string public_base_url_;
  const std::string holder_address_;  // empty: tokens carry no route
  const std::string credential_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<PhoneLine::State>> lines_;  // by token; guarded by mu_
  uint64_t sequence_ = 0;  // the inbound lines' opening order; guarded by mu_
};

}  // namespace calleval::runs

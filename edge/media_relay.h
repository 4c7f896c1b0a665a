#pragma once

// The edge's hop to a phone line held by another process (docs/channels.md, "When the runs and
// edge roles run apart"). The carrier reaches the public edge; the line waits in a runs process
// that serves it on its media listener (--media-addr). Once the caller has checked the line
// token's route (services/runs/line_route.h), the relay carries the carrier's traffic there:
//   - a websocket upgrade, taken from the edge's HTTP server, is spliced as raw bytes both ways
//     with a new connection to the holder (the upgrade request as received first), so the
//     holder completes the upgrade and the media stream passes through untouched;
//   - a webhook or answer-document request is sent on as an HTTP/1.1 request (method, path,
//     end-to-end headers, body) and the holder's status, content type and body answered.
// Every hop is bounded: a connect timeout, an idle timeout on streams, a timeout and byte cap on
// forwarded requests, and a cap on what is relayed at once (each stream or request holds one
// thread while it lasts). The holder's address is never workspace input: only a route the
// installation's credential verified names it, so the public-address rule of outbound URLs
// does not apply here.

#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "edge/http_server.h"

namespace calleval::edge {

struct MediaRelayOptions {
  absl::Duration connect_timeout = absl::Seconds(3);
  // A spliced stream with no byte either way for this long is closed (a live call sends 50
  // media frames a second each way).
  absl::Duration idle_timeout = absl::Seconds(60);
  // A forwarded request, from connecting to the holder's last byte.
  absl::Duration request_timeout = absl::Seconds(15);
  size_t max_request_bytes = 1 << 20;
  size_t max_response_bytes = 1 << 20;
  // Streams and forwarded requests relayed at once; beyond it the carrier gets 503 (and
  // retries, or the run sees no stream and ends as unanswered).
  int max_active = 512;
  // How long Shutdown() lets streams end by themselves before it cuts them.
  absl::Duration drain_timeout = absl::Seconds(10);
};

class MediaRelay {
 public:
  explicit MediaRelay(MediaRelayOptions options = {});
  // Shutdown().
  ~MediaRelay();
  MediaRelay(const MediaRelay&) = delete;
  MediaRelay& operator=(const MediaRelay&) = delete;

  // Splices `connection` (an upgrade the edge handed over, the relay's to close) with
  // `holder` (HOST:PORT). Returns at once; the stream runs on a thread of its own. When the
  // relay is full, shutting down, or the holder cannot be reached, the client is answered 503
  // on the raw connection and it is closed.
  void Splice(UpgradedConnection connection, std::string holder);

  // Sends `request` on to `holder` and calls `respond` (once, from the relay's thread) with its
  // answer, or with 503 when the holder cannot be reached or answers nothing usable in time,
  // or the relay is full.
  void Forward(LocalRequest request, std::string holder,
               std::function<void(LocalResponse)> respond);

  // Streams and requests being relayed now.
  int active() const;

  // Refuses new work, lets streams end by themselves for up to drain_timeout, then cuts the
  // rest and waits for every thread. Safe to call more than once.
  void Shutdown();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace calleval::edge

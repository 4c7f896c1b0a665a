#pragma once

// The public HTTP/1.1 edge (Boost.Beast): keep-alive connections served by a small io_context
// thread pool. Routed requests are transcoded with the JSON codec and handed to a
// MethodInvoker; the answer is written back on the connection's strand whichever thread
// completes the call. Local routes (health probes, the OpenAPI document, presigned recording
// links) are answered by handlers registered before Start() and need no bearer key; an
// asynchronous one answers later from any thread, so slow work (fetching a recording from a blob
// store) never stalls the io thread that serves other connections.

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "edge/method_invoker.h"
#include "edge/route_table.h"

namespace calleval::edge {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 picks an ephemeral port; see HttpServer::port()
  int threads = 2;
  size_t max_body_bytes = 16 * 1024 * 1024;
  // A connection with no request in progress for this long is closed.
  absl::Duration idle_timeout = absl::Seconds(60);
  // A request's header must be complete this long after its first byte arrived: a client that
  // trickles it (slowloris) is closed.
  absl::Duration header_timeout = absl::Seconds(10);
  // Connections held at once; one accepted beyond it is closed at once, before it costs a read.
  int max_connections = 10000;
  // Token bucket per API key; 0 turns it off. Requests without a known key share one bucket
  // per client address, so guessing keys from one address is throttled like one key.
  double rate_limit_per_second = 0;
  int rate_limit_burst = 0;  // <= 0: max(1, rate_limit_per_second)
  // The limiter's key for an Authorization header value: an identity of the authenticated key,
  // or nullopt when the key is missing or unknown. Unset: a non-empty header is its own key.
  std::function<std::optional<std::string>(std::string_view authorization)> rate_limit_identity;
  // One line per request on stderr.
  bool access_log = true;
  // Called once per answered request (beside the access log line, whether or not that is on)
  // with the route's template ("/api/v1/agents/{id}"), a local route's path prefix, or
  // "unmatched"; the request's method as sent; the status; and the time since the request
  // began. For operational metrics: the route is a template, never the raw path, so its values
  // are bounded. Runs on an io thread: keep it short.
  std::function<void(std::string_view route, std::string_view method, int status,
                     absl::Duration latency)>
      observe_request;
  // How long Shutdown() waits for in-flight requests before abandoning them.
  absl::Duration shutdown_timeout = absl::Seconds(30);
};

struct LocalRequest {
  std::string method;  // "GET"
  std::string path;    // the target's path, not percent-decoded, without the query
  std::map<std::string, std::string> query;  // percent-decoded; the last of repeated keys wins
  // Header names lower-cased.
  std::map<std::string, std::string> headers;
  std::string request_id;
  // The body as received (a webhook's signature covers its exact bytes).
  std::string body;
};

struct LocalResponse {
  int status = 200;
  std::string content_type = "application/json; charset=utf-8";
  std::string body;
  // When not empty the file's bytes are streamed as the body (and `body` is ignored); a file
  // that cannot be opened answers 404.
  std::string file_path;
  // With file_path: honour a single `Range` (206 with Content-Range, 416 outside the file) and
  // say so with `Accept-Ranges: bytes`.
  bool accept_ranges = false;
  // With file_path: the file is the response's own (a temporary copy of a blob) and the edge
  // unlinks it right after opening it for sending; the open descriptor keeps the bytes readable
  // until the send ends, however it ends (a client gone mid-body included), so nothing is left
  // on disk once the response is gone. It is unlinked as well on every path that never opens
  // it: an asynchronous answer that arrives after Shutdown() gave up on it, a second call of
  // `respond`. A file that cannot be opened is still unlinked (and answers 404).
  bool delete_file_after_open = false;
  std::vector<std::pair<std::string, std::string>> headers;
};

using LocalHandler = std::function<LocalResponse(const LocalRequest&)>;

// Called on the io thread with the request; answers by calling `respond` exactly once, from any
// thread, now or later. The connection waits for the answer as it does for a routed call: no
// header or idle timeout runs meanwhile (nor is a client that leaves noticed before the answer
// is written). `respond` keeps the connection's state alive, so it may be called after the
// client has gone (the write fails and the connection closes) or after Shutdown() gave up on the
// request (the answer is dropped unwritten); either way a delete_file_after_open file is
// unlinked. The handler must always call it in the end; if
// every copy of `respond` is destroyed uncalled, the client gets a 500 and a line on stderr. A
// second call is ignored (its file unlinked).
using AsyncLocalHandler =
    std::function<void(LocalRequest request, std::function<void(LocalResponse)> respond)>;

// How a local route is served.
struct LocalRouteOptions {
  // Counted by the rate limiter (HttpServerOptions::rate_limit_per_second; none when that is 0)
  // in the client address's bucket, whatever Authorization the request carries: for routes no
  // API key opens (a platform's webhooks, verified by its own signature), so that one address
  // cannot flood them. Local routes are not limited otherwise.
  bool rate_limit_by_address = false;
};

// A connection handed over for a websocket upgrade: its socket, now the taker's to close, and
// every byte the server had read from it (the request head, as received, and whatever followed
// it), so the taker completes the upgrade itself (runs::WebSocketConnection::AcceptUpgrade).
struct UpgradedConnection {
  int fd = -1;
  std::string received;
};

// The answer to an upgrade request: `take` set takes the connection (called once, on the io
// thread, right after the handler: it should only hand the connection off), otherwise
// `refusal` is sent as a local route's answer would be and the connection goes on serving
// HTTP.
struct UpgradeAnswer {
  std::function<void(UpgradedConnection connection)> take;
  LocalResponse refusal;
};
using UpgradeHandler = std::function<UpgradeAnswer(const LocalRequest& request)>;

class HttpServer {
 public:
  // `routes` and `invoker` must outlive the server.
  HttpServer(const RouteTable* routes, MethodInvoker* invoker, HttpServerOptions options = {});
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves requests whose path equals `path_prefix` or continues it at a '/' boundary (a prefix
  // ending in '/' matches anything below it; "/" matches the root alone). Checked before the route table, in registration
  // order. Call before Start(). The handler runs on an io thread: keep it short.
  void AddLocalRoute(std::string method, std::string path_prefix, LocalHandler handler);
  // The same matching and order (one list with AddLocalRoute's routes), answered asynchronously:
  // see AsyncLocalHandler. The handler itself runs on an io thread: it should only hand the
  // work off.
  void AddAsyncLocalRoute(std::string method, std::string path_prefix, AsyncLocalHandler handler,
                          LocalRouteOptions options = {});

  // Serves websocket upgrades (a GET with `Upgrade: websocket`) whose path matches
  // `path_prefix` as AddLocalRoute's do; checked before the local routes, so a prefix may have
  // both (other methods, or a GET that asks no upgrade, go on to them). A connection taken
  // leaves the server: it counts toward no limit and Shutdown() neither waits for nor closes it.
  // Call before Start(). The handler runs on an io thread: keep it short.
  void AddUpgradeRoute(std::string path_prefix, UpgradeHandler handler);

  // Binds and starts the io threads.
  absl::Status Start();
  // The bound port (after Start()).
  int port() const;

  // Stops accepting, lets in-flight requests finish (up to shutdown_timeout), closes idle
  // connections and joins the threads. Safe to call more than once; not from a handler. A
  // pending asynchronous local route is in flight: its answer is awaited like a routed call's.
  void Shutdown();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace calleval::edge

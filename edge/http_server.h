#pragma once

// The public HTTP/1.1 edge (Boost.Beast): keep-alive connections served by a small io_context
// thread pool. Routed requests are transcoded with the JSON codec and handed to a
// MethodInvoker; the answer is written back on the connection's strand whichever thread
// completes the call. Local routes (health probes, the OpenAPI document, presigned recording
// links) are answered by handlers registered before Start() and need no bearer key.

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
  std::vector<std::pair<std::string, std::string>> headers;
};

using LocalHandler = std::function<LocalResponse(const LocalRequest&)>;

class HttpServer {
 public:
  // `routes` and `invoker` must outlive the server.
  HttpServer(const RouteTable* routes, MethodInvoker* invoker, HttpServerOptions options = {});
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves requests whose path equals `path_prefix` or continues it at a '/' boundary (a prefix
  // ending in '/' matches anything below it). Checked before the route table, in registration
  // order. Call before Start(). The handler runs on an io thread: keep it short.
  void AddLocalRoute(std::string method, std::string path_prefix, LocalHandler handler);

  // Binds and starts the io threads.
  absl::Status Start();
  // The bound port (after Start()).
  int port() const;

  // Stops accepting, lets in-flight requests finish (up to shutdown_timeout), closes idle
  // connections and joins the threads. Safe to call more than once; not from a handler.
  void Shutdown();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace calleval::edge

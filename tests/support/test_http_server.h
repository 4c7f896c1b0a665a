#pragma once

// A real HTTP/1.1 server on 127.0.0.1 (port 0) for tests: unit tests of the fetcher, and
// integration tests that serve corpus recordings or stand in for a provider endpoint.
//
// One thread accepts; each connection gets its own thread, answers one request and closes
// (Connection: close). GET, HEAD and requests with a Content-Length body (POST) are handled;
// HEAD answers the GET headers without the body. Content-Length is always sent unless a route
// asks for chunked encoding. The destructor interrupts delays and stalled writes, and joins
// every thread.
//
//   TestHttpServer server;
//   server.Serve("/a.wav", wav_bytes, "audio/wav");
//   server.Redirect("/old", server.url("/a.wav"));
//   FetchToFile(server.url("/old"), ...);

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval {

class TestHttpServer {
 public:
  struct Request {
    std::string method;                                        // "GET", "HEAD", "POST", ...
    std::string target;                                        // as sent: "/a.wav?x=1"
    std::string path;                                          // "/a.wav"
    std::string query;                                         // "x=1"
    std::vector<std::pair<std::string, std::string>> headers;  // names lower case
    std::string body;

    // The first header with this (lower case) name, or "".
    std::string Header(absl::string_view name) const;
  };

  struct Response {
    int status = 200;
    std::string content_type = "text/plain";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers
    // Wait this long before answering (interrupted by the destructor).
    absl::Duration delay = absl::ZeroDuration();
    // Stream this file instead of `body` (read in chunks, so large files are fine).
    std::string file_path;
    // Stream this many filler bytes instead of `body` (huge bodies without the memory).
    int64_t generated_bytes = -1;
    // Send Transfer-Encoding: chunked instead of Content-Length (a body of unannounced size).
    bool chunked = false;
    // Pause between 64 KiB pieces of the body (a slow or stalled server).
    absl::Duration chunk_delay = absl::ZeroDuration();
  };

  using Handler = std::function<Response(const Request&)>;

  // Binds 127.0.0.1:0 and starts serving; aborts the test binary when it cannot.
  TestHttpServer();
  ~TestHttpServer();
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  int port() const { return port_; }
  // "http://127.0.0.1:PORT" + path.
  std::string url(absl::string_view path) const;

  // Routes match the path exactly (query ignored); a later registration replaces an earlier
  // one. Unknown paths answer 404.
  void Handle(std::string path, Handler handler);
  // Every path starting with `prefix` that has no exact route; the longest prefix wins.
  void HandlePrefix(std::string prefix, Handler handler);

  // Shorthands for the usual routes.
  void Serve(std::string path, std::string body, std::string content_type);
  void ServeFile(std::string path, std::string file_path, std::string content_type);
  void Respond(std::string path, Response response);
  void Redirect(std::string path, std::string location, int status = 302);
  void Status(std::string path, int status, std::string body = "");
  void Delay(std::string path, absl::Duration delay, std::string body = "late",
             std::string content_type = "text/plain");
  void Stream(std::string path, int64_t bytes, bool chunked = false,
              std::string content_type = "application/octet-stream");

  // Requests received for `path` so far (counted before the handler runs).
  int hits(absl::string_view path) const;
  // Every request received, in arrival order.
  std::vector<Request> requests() const;

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    bool done = false;
  };

  void AcceptLoop();
  void ServeConnection(Connection* conn);
  Response Dispatch(const Request& request);
  bool WriteResponse(int fd, const Request& request, const Response& response);
  bool SendAll(int fd, absl::string_view data);
  bool Wait(absl::Duration d);  // false when the server is stopping
  void ReapFinished();

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};  // wakes the accept loop on shutdown
  int port_ = 0;
  std::thread accept_thread_;

  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, which
  // would then report every guarded access as a race in tests that use this server.
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;  // signalled once, when stopping_ turns true
  std::atomic<bool> stopping_{false};
  // Everything below is guarded by mu_.
  std::map<std::string, Handler> routes_;
  std::map<std::string, Handler> prefix_routes_;
  std::map<std::string, int, std::less<>> hits_;
  std::vector<Request> requests_;
  std::list<Connection> connections_;
};

}  // namespace calleval

#include "tests/support/test_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace calleval {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr int64_t kMaxRequestBody = int64_t{256} << 20;
constexpr size_t kPieceBytes = 64 * 1024;

[[noreturn]] void Die(absl::string_view what) {
  std::fprintf(stderr, "TestHttpServer: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               std::strerror(errno));
  std::abort();
}

absl::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 303:
      return "See Other";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 308:
      return "Permanent Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Status";
  }
}

bool BodyAllowed(int status) { return status >= 200 && status != 204 && status != 304; }

TestHttpServer::Response PlainResponse(int status, std::string body) {
  TestHttpServer::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace

std::string TestHttpServer::Request::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return "";
}

TestHttpServer::TestHttpServer() {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) Die("socket");
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Die("bind");
  if (listen(listen_fd_, 128) != 0) Die("listen");
  socklen_t len = sizeof addr;
  if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) Die("getsockname");
  port_ = ntohs(addr.sin_port);
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) Die("pipe2");
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TestHttpServer::~TestHttpServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  char byte = 1;
  while (write(wake_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  accept_thread_.join();
  std::list<Connection> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Unblocks connection threads stuck in recv() or send() on a client that went quiet.
    for (Connection& c : connections_) {
      if (c.fd >= 0) shutdown(c.fd, SHUT_RDWR);
    }
    connections.splice(connections.end(), connections_);
  }
  for (Connection& c : connections) c.thread.join();
  close(listen_fd_);
  close(wake_pipe_[0]);
  close(wake_pipe_[1]);
}

std::string TestHttpServer::url(absl::string_view path) const {
  return absl::StrCat("http://127.0.0.1:", port_, path);
}

void TestHttpServer::Handle(std::string path, Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  routes_[std::move(path)] = std::move(handler);
}

void TestHttpServer::HandlePrefix(std::string prefix, Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  prefix_routes_[std::move(prefix)] = std::move(handler);
}

void TestHttpServer::Respond(std::string path, Response response) {
  Handle(std::move(path), [response = std::move(response)](const Request&) { return response; });
}

void TestHttpServer::Serve(std::string path, std::string body, std::string content_type) {
  Response r;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  Respond(std::move(path), std::move(r));
}

void TestHttpServer::ServeFile(std::string path, std::string file_path, std::string content_type) {
  Response r;
  r.file_path = std::move(file_path);
  r.content_type = std::move(content_type);
  Respond(std::move(path), std::move(r));
}

void TestHttpServer::Redirect(std::string path, std::string location, int status) {
  Response r = PlainResponse(status, "redirecting\n");
  r.headers.emplace_back("Location", std::move(location));
  Respond(std::move(path), std::move(r));
}

void TestHttpServer::Status(std::string path, int status, std::string body) {
  Respond(std::move(path), PlainResponse(status, std::move(body)));
}

void TestHttpServer::Delay(std::string path, absl::Duration delay, std::string body,
                           std::string content_type) {
  Response r = PlainResponse(200, std::move(body));
  r.content_type = std::move(content_type);
  r.delay = delay;
  Respond(std::move(path), std::move(r));
}

void TestHttpServer::Stream(std::string path, int64_t bytes, bool chunked,
                            std::string content_type) {
  Response r;
  r.generated_bytes = bytes;
  r.chunked = chunked;
  r.content_type = std::move(content_type);
  Respond(std::move(path), std::move(r));
}

int TestHttpServer::hits(absl::string_view path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hits_.find(path);
  return it == hits_.end() ? 0 : it->second;
}

std::vector<TestHttpServer::Request> TestHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

void TestHttpServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      Die("poll");
    }
    if (fds[1].revents != 0 || stopping_.load()) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // ECONNABORTED, EMFILE, ...: keep serving the others.
    ReapFinished();
    std::lock_guard<std::mutex> lock(mu_);
    connections_.emplace_back();
    Connection* conn = &connections_.back();
    conn->fd = fd;
    conn->thread = std::thread([this, conn] { ServeConnection(conn); });
  }
}

void TestHttpServer::ReapFinished() {
  std::list<Connection> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), connections_, it);
      it = next;
    }
  }
  for (Connection& c : finished) c.thread.join();
}

void TestHttpServer::ServeConnection(Connection* conn) {
  const int fd = conn->fd;
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  std::string buffer;
  size_t header_end = std::string::npos;
  char chunk[16 * 1024];
  while (header_end == std::string::npos && buffer.size() <= kMaxHeaderBytes) {
    ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<size_t>(n));
    header_end = buffer.find("\r\n\r\n");
  }

  Request request;
  std::optional<Response> early;
  if (header_end == std::string::npos) {
    if (buffer.size() > kMaxHeaderBytes) early = PlainResponse(431, "headers too large\n");
  } else {
    std::vector<absl::string_view> lines =
        absl::StrSplit(absl::string_view(buffer).substr(0, header_end), "\r\n");
    std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
    if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
      early = PlainResponse(400, "bad request line\n");
    } else {
      request.method = std::string(parts[0]);
      request.target = std::string(parts[1]);
      absl::string_view target = parts[1];
      size_t q = target.find('?');
      request.path = std::string(target.substr(0, q));
      if (q != absl::string_view::npos) request.query = std::string(target.substr(q + 1));
      for (size_t i = 1; i < lines.size(); ++i) {
        size_t colon = lines[i].find(':');
        if (colon == absl::string_view::npos) continue;
        request.headers.emplace_back(
            absl::AsciiStrToLower(absl::StripAsciiWhitespace(lines[i].substr(0, colon))),
            std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
      }
      int64_t content_length = 0;
      std::string length_header = request.Header("content-length");
      if (!request.Header("transfer-encoding").empty()) {
        early = PlainResponse(501, "chunked request bodies are not supported\n");
      } else if (!length_header.empty() &&
                 (!absl::SimpleAtoi(length_header, &content_length) || content_length < 0 ||
                  content_length > kMaxRequestBody)) {
        early = PlainResponse(400, "bad Content-Length\n");
      } else {
        request.body = buffer.substr(header_end + 4);
        while (static_cast<int64_t>(request.body.size()) < content_length) {
          ssize_t n = recv(fd, chunk, sizeof chunk, 0);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) break;
          request.body.append(chunk, static_cast<size_t>(n));
        }
        if (static_cast<int64_t>(request.body.size()) < content_length) {
          early = PlainResponse(400, "truncated body\n");
        }
        request.body.resize(std::min<size_t>(request.body.size(), content_length));
      }
    }
  }

  if (header_end != std::string::npos || early) {
    Response response;
    if (early) {
      response = *std::move(early);
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++hits_[request.path];
        requests_.push_back(request);
      }
      response = Dispatch(request);
    }
    WriteResponse(fd, request, response);
  }

  shutdown(fd, SHUT_WR);
  std::lock_guard<std::mutex> lock(mu_);
  close(fd);
  conn->fd = -1;
  conn->done = true;
}

TestHttpServer::Response TestHttpServer::Dispatch(const Request& request) {
  Handler handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto exact = routes_.find(request.path);
    if (exact != routes_.end()) {
      handler = exact->second;
    } else {
      size_t best = 0;
      for (const auto& [prefix, h] : prefix_routes_) {
        if (absl::StartsWith(request.path, prefix) && prefix.size() >= best) {
          best = prefix.size();
          handler = h;
        }
      }
    }
  }
  if (!handler) return PlainResponse(404, "not found\n");
  return handler(request);
}

bool TestHttpServer::Wait(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return !stopping_.load();
  std::unique_lock<std::mutex> lock(mu_);
  return !stop_cv_.wait_for(lock, absl::ToChronoNanoseconds(d),
                            [this] { return stopping_.load(); });
}

bool TestHttpServer::SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool TestHttpServer::WriteResponse(int fd, const Request& request, const Response& response) {
  if (!Wait(response.delay)) return false;

  // The body source: a file, generated filler, or the literal body.
  int file_fd = -1;
  int64_t length = static_cast<int64_t>(response.body.size());
  if (!response.file_path.empty()) {
    file_fd = open(response.file_path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (file_fd < 0 || fstat(file_fd, &st) != 0) {
      if (file_fd >= 0) close(file_fd);
      std::string message = absl::StrCat("cannot open ", response.file_path, "\n");
      return SendAll(fd, absl::StrCat("HTTP/1.1 500 Internal Server Error\r\nContent-Type: "
                                      "text/plain\r\nConnection: close\r\nContent-Length: ",
                                      message.size(), "\r\n\r\n", message));
    }
    length = st.st_size;
  } else if (response.generated_bytes >= 0) {
    length = response.generated_bytes;
  }
  struct FdCloser {
    int fd;
    ~FdCloser() {
      if (fd >= 0) close(fd);
    }
  } closer{file_fd};

  const bool has_body = BodyAllowed(response.status);
  std::string head = absl::StrCat("HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status),
                                  "\r\nConnection: close\r\n");
  if (!response.content_type.empty() && has_body) {
    absl::StrAppend(&head, "Content-Type: ", response.content_type, "\r\n");
  }
  for (const auto& [name, value] : response.headers) {
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  }
  if (has_body) {
    if (response.chunked) {
      absl::StrAppend(&head, "Transfer-Encoding: chunked\r\n");
    } else {
      absl::StrAppend(&head, "Content-Length: ", length, "\r\n");
    }
  }
  absl::StrAppend(&head, "\r\n");
  if (!SendAll(fd, head)) return false;
  if (request.method == "HEAD" || !has_body) return true;

  std::string filler;
  if (response.generated_bytes >= 0) {
    filler.resize(kPieceBytes);
    for (size_t i = 0; i < filler.size(); ++i) filler[i] = static_cast<char>('a' + i % 26);
  }
  std::string piece(kPieceBytes, '\0');
  int64_t sent = 0;
  while (sent < length) {
    if (sent > 0 && !Wait(response.chunk_delay)) return false;
    size_t n = static_cast<size_t>(std::min<int64_t>(kPieceBytes, length - sent));
    absl::string_view data;
    if (file_fd >= 0) {
      ssize_t r = read(file_fd, piece.data(), n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;  // The file shrank: the client sees a short body.
      data = absl::string_view(piece.data(), static_cast<size_t>(r));
    } else if (response.generated_bytes >= 0) {
      data = absl::string_view(filler.data(), n);
    } else {
      data = absl::string_view(response.body).substr(static_cast<size_t>(sent), n);
    }
    bool ok = response.chunked ? SendAll(fd, absl::StrFormat("%x\r\n", data.size())) &&
                                     SendAll(fd, data) && SendAll(fd, "\r\n")
                               : SendAll(fd, data);
    if (!ok) return false;
    sent += static_cast<int64_t>(data.size());
  }
  if (response.chunked) return SendAll(fd, "0\r\n\r\n");
  return true;
}

}  // namespace calleval

#include "edge/media_relay.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#ifndef BOOST_ASIO_NO_DEPRECATED
#define BOOST_ASIO_NO_DEPRECATED
#endif
#include <boost/beast/http.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"
#include "edge/json_codec.h"

namespace calleval::edge {

struct MediaRelay::State {
  explicit State(MediaRelayOptions o) : options(std::move(o)) {}

  // A slot for one stream or request; false when full or shutting down.
  bool Enter() {
    std::lock_guard<std::mutex> lock(mu);
    if (refusing || active >= options.max_active) return false;
    ++active;
    return true;
  }
  void Leave() {
    std::lock_guard<std::mutex> lock(mu);
    --active;
    changed.notify_all();
  }

  const MediaRelayOptions options;
  std::mutex mu;
  std::condition_variable changed;
  int active = 0;          // guarded by mu
  bool refusing = false;   // guarded by mu; Shutdown() began
  std::atomic<bool> cut{false};  // streams end now
};

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;

// How often a waiting stream looks at the cut flag.
constexpr int kSliceMs = 200;
// Once one direction of a stream has ended, how long the other may go on: a websocket's close
// handshake takes a round trip, not the whole idle timeout.
constexpr auto kHalfClosedGrace = std::chrono::seconds(5);
constexpr size_t kMaxResponseHeadBytes = 16 * 1024;
constexpr size_t kPumpBufferBytes = 64 * 1024;

Clock::time_point DeadlineAfter(absl::Duration d) {
  return Clock::now() + std::chrono::nanoseconds(absl::ToInt64Nanoseconds(d));
}

int MillisUntil(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, kSliceMs)));
}

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// A TCP connection to HOST:PORT (IPv6 hosts in brackets), non-blocking, within `timeout`.
absl::StatusOr<int> Connect(const std::string& holder, absl::Duration timeout) {
  const size_t colon = holder.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(holder.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad holder address ", holder));
  }
  std::string host = holder.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  const int resolved = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(resolved)));
  }
  const Clock::time_point deadline = DeadlineAfter(timeout);
  std::string error = "no address";
  int connected = -1;
  for (addrinfo* a = found; a != nullptr && connected < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      while ((rc = poll(&p, 1, MillisUntil(deadline))) == 0 && Clock::now() < deadline) {
      }
      int so_error = ETIMEDOUT;
      if (rc > 0) {
        socklen_t len = sizeof(so_error);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
      }
      rc = so_error == 0 ? 0 : -1;
      errno = so_error;
    }
    if (rc != 0) {
      error = std::strerror(errno);
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connected = fd;
  }
  freeaddrinfo(found);
  if (connected < 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", holder, ": ", error));
  }
  return connected;
}

// Writes all of `data` to the non-blocking `fd` before `deadline`; false on an error, the
// deadline, or the cut.
bool WriteAll(int fd, absl::string_view data, Clock::time_point deadline,
              const std::atomic<bool>* cut) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (Clock::now() >= deadline || (cut != nullptr && cut->load())) return false;
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, MillisUntil(deadline));
  }
  return true;
}

LocalResponse ErrorAnswer(const absl::Status& status) {
  LocalResponse r;
  r.status = HttpStatusFor(status);
  r.body = PrintJson(ToErrorResponse(status));
  return r;
}

// An error answer written on a raw connection that is closed after it.
std::string RawErrorAnswer(const absl::Status& status) {
  const LocalResponse answer = ErrorAnswer(status);
  return absl::StrCat("HTTP/1.1 ", answer.status, " ",
                      std::string(http::obsolete_reason(http::int_to_status(answer.status))),
                      "\r\nContent-Type: ", answer.content_type,
                      "\r\nContent-Length: ", answer.body.size(), "\r\nConnection: close\r\n\r\n",
                      answer.body);
}

absl::Status Unreachable(const std::string& holder, absl::string_view why) {
  LogWarn("media relay: the phone line's holder cannot be reached",
          {{"holder", holder}, {"error", why}});
  return absl::UnavailableError(
      "the process holding this phone line cannot be reached now; try again");
}

absl::Status Full() {
  return MakeError(absl::StatusCode::kUnavailable, "overloaded",
                   "too many phone streams are relayed at once; try again");
}

// Carries bytes both ways between `client` and `holder` until both directions have ended,
// either side fails, the stream is idle too long, or the relay is cut.
void Pump(MediaRelay::State& s, int client, int holder) {
  std::vector<char> buffer(kPumpBufferBytes);
  struct Direction {
    int from, to;
    bool open;
  } directions[2] = {{client, holder, true}, {holder, client, true}};
  const auto idle = std::chrono::nanoseconds(absl::ToInt64Nanoseconds(s.options.idle_timeout));
  Clock::time_point deadline = Clock::now() + idle;
  bool half_closed = false;
  while ((directions[0].open || directions[1].open) && !s.cut.load()) {
    pollfd fds[2];
    Direction* of[2];
    nfds_t n = 0;
    for (Direction& d : directions) {
      if (!d.open) continue;
      fds[n] = pollfd{d.from, POLLIN, 0};
      of[n++] = &d;
    }
    const int ready = poll(fds, n, MillisUntil(deadline));
    if (ready < 0 && errno != EINTR) return;
    if (ready <= 0) {
      if (Clock::now() >= deadline) return;
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t got = recv(of[i]->from, buffer.data(), buffer.size(), 0);
      if (got > 0) {
        if (!WriteAll(of[i]->to, absl::string_view(buffer.data(), static_cast<size_t>(got)),
                      Clock::now() + idle, &s.cut)) {
          return;
        }
        if (!half_closed) deadline = Clock::now() + idle;
      } else if (got == 0) {
        // This side is done sending: so is the relay towards the other, which may still answer
        // (a websocket close frame) for a short while.
        shutdown(of[i]->to, SHUT_WR);
        of[i]->open = false;
        half_closed = true;
        deadline = std::min(deadline, Clock::now() + kHalfClosedGrace);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return;
      }
    }
  }
}

// Request headers that describe one hop, not the request: never passed on.
bool IsHopByHop(absl::string_view name) {
  for (absl::string_view hop :
       {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length", "expect"}) {
    if (name == hop) return true;
  }
  return false;
}

LocalResponse ForwardNow(MediaRelay::State& s, const LocalRequest& request,
                         const std::string& holder) {
  if (request.body.size() > s.options.max_request_bytes) {
    return ErrorAnswer(HttpError(413, "payload_too_large", "the request body is too large"));
  }
  const Clock::time_point deadline = DeadlineAfter(s.options.request_timeout);
  std::string head = absl::StrCat(request.method, " ", request.path, " HTTP/1.1\r\nHost: ",
                                  holder, "\r\n");
  for (const auto& [name, value] : request.headers) {
    if (IsHopByHop(name)) continue;
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&head, "Content-Length: ", request.body.size(), "\r\nConnection: close\r\n\r\n");

  absl::StatusOr<int> fd = Connect(holder, s.options.connect_timeout);
  if (!fd.ok()) return ErrorAnswer(Unreachable(holder, fd.status().message()));
  std::string received;
  bool complete = WriteAll(*fd, head, deadline, nullptr) &&
                  WriteAll(*fd, request.body, deadline, nullptr);
  // Read to the end: the request said Connection: close.
  const size_t cap = s.options.max_response_bytes + kMaxResponseHeadBytes;
  bool ended = false;
  std::vector<char> buffer(16 * 1024);
  while (complete && !ended && received.size() <= cap) {
    pollfd p{*fd, POLLIN, 0};
    const int ready = poll(&p, 1, MillisUntil(deadline));
    if (ready <= 0) {
      if (ready < 0 && errno != EINTR) break;
      if (Clock::now() >= deadline) break;
      continue;
    }
    const ssize_t got = recv(*fd, buffer.data(), buffer.size(), 0);
    if (got > 0) {
      received.append(buffer.data(), static_cast<size_t>(got));
    } else if (got == 0) {
      ended = true;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      break;
    }
  }
  close(*fd);

  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxResponseHeadBytes);
  parser.body_limit(s.options.max_response_bytes);
  parser.eager(true);
  beast::error_code ec;
  boost::asio::const_buffer rest(received.data(), received.size());
  while (rest.size() > 0 && !parser.is_done()) {
    const size_t used = parser.put(rest, ec);
    if (ec || used == 0) break;
    rest += used;
  }
  if (ec == http::error::need_more) ec = {};
  if (!ec && !parser.is_done() && ended) parser.put_eof(ec);
  if (ec || !parser.is_done()) {
    return ErrorAnswer(Unreachable(
        holder, ec ? ec.message() : (ended ? "a truncated answer" : "no complete answer in time")));
  }
  const http::response<http::string_body>& answer = parser.get();
  // Checked here as well: Boost 1.74's response parser lets a body with a Content-Length
  // past body_limit (the raw read above is capped too).
  if (answer.body().size() > s.options.max_response_bytes) {
    return ErrorAnswer(Unreachable(holder, "an answer over the byte cap"));
  }
  LocalResponse out;
  out.status = answer.result_int();
  out.content_type = std::string(answer[http::field::content_type]);
  out.body = answer.body();
  return out;
}

}  // namespace

MediaRelay::MediaRelay(MediaRelayOptions options)
    : state_(std::make_shared<State>(std::move(options))) {}

MediaRelay::~MediaRelay() { Shutdown(); }

int MediaRelay::active() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->active;
}

void MediaRelay::Splice(UpgradedConnection connection, std::string holder) {
  SetNonBlocking(connection.fd);
  if (!state_->Enter()) {
    WriteAll(connection.fd, RawErrorAnswer(Full()), DeadlineAfter(absl::Milliseconds(100)),
             nullptr);
    close(connection.fd);
    return;
  }
  std::thread([s = state_, connection = std::move(connection), holder = std::move(holder)] {
    const int client = connection.fd;
    absl::StatusOr<int> up = Connect(holder, s->options.connect_timeout);
    if (!up.ok()) {
      WriteAll(client, RawErrorAnswer(Unreachable(holder, up.status().message())),
               DeadlineAfter(absl::Seconds(1)), nullptr);
    } else {
      // The upgrade request as the carrier sent it, then whatever followed it.
      if (WriteAll(*up, connection.received, DeadlineAfter(s->options.connect_timeout),
                   &s->cut)) {
        Pump(*s, client, *up);
      }
      close(*up);
    }
    close(client);
    s->Leave();
  }).detach();
}

void MediaRelay::Forward(LocalRequest request, std::string holder,
                         std::function<void(LocalResponse)> respond) {
  if (!state_->Enter()) return respond(ErrorAnswer(Full()));
  std::thread([s = state_, request = std::move(request), holder = std::move(holder),
               respond = std::move(respond)] {
    respond(ForwardNow(*s, request, holder));
    s->Leave();
  }).detach();
}

void MediaRelay::Shutdown() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.refusing = true;
  s.changed.wait_for(lock, std::chrono::nanoseconds(absl::ToInt64Nanoseconds(
                               s.options.drain_timeout)),
                     [&s] { return s.active == 0; });
  s.cut.store(true);
  // Each thread notices within a slice (kSliceMs), a forwarded request within its timeout.
  s.changed.wait(lock, [&s] { return s.active == 0; });
}

}  // namespace calleval::edge

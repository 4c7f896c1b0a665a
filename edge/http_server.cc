#include "edge/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>

#ifndef BOOST_ASIO_NO_DEPRECATED
#define BOOST_ASIO_NO_DEPRECATED
#endif
#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/request_id.h"
#include "edge/byte_range.h"
#include "edge/file_range_body.h"
#include "edge/json_codec.h"
#include "google/protobuf/dynamic_message.h"

namespace calleval::edge {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr char kJsonContentType[] = "application/json; charset=utf-8";
constexpr const char* kRequestIdHeader = kRequestIdKey;
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
// How long a connection that must close still swallows what the client keeps sending (an
// oversized body), so that closing does not reset the connection before the answer is read.
constexpr auto kLingerTime = std::chrono::seconds(2);
// The route label of a request no route answered (404, 405, malformed HTTP, body too large).
constexpr std::string_view kUnmatchedRoute = "unmatched";
constexpr size_t kMaxRateLimitKeys = 100000;
// What the first read of a request asks for; the header parser reads on as it needs.
constexpr size_t kFirstReadBytes = 4096;
// A connection's read buffer is shrunk back to its content between requests beyond this.
constexpr size_t kKeptBufferBytes = 64 * 1024;
// The error code of work refused by a full pool (503), answered with this Retry-After.
constexpr char kOverloadedCode[] = "overloaded";
constexpr int kOverloadedRetryAfterSeconds = 1;

std::string_view View(beast::string_view s) { return std::string_view(s.data(), s.size()); }
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Clamped so that "infinite" timeouts do not overflow the steady clock.
std::chrono::nanoseconds ToChrono(absl::Duration d) {
  return std::chrono::nanoseconds(absl::ToInt64Nanoseconds(std::min(d, absl::Hours(24 * 365))));
}

// The longest path an access line names: a request line may be kilobytes long.
constexpr size_t kMaxLoggedPathBytes = 512;

// Token bucket per key (the Authorization header value).
class RateLimiter {
 public:
  RateLimiter(double rate_per_second, int burst)
      : rate_(rate_per_second),
        burst_(burst > 0 ? burst : std::max(1.0, std::ceil(rate_per_second))) {}

  // True when the request may proceed; otherwise `*retry_after_seconds` says when to retry.
  bool Allow(std::string_view key, int* retry_after_seconds) {
    const int64_t now = Clock::now().time_since_epoch().count();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = buckets_.find(Absl(key));
    if (it == buckets_.end()) {
      if (buckets_.size() >= kMaxRateLimitKeys) EvictFull(now);
      it = buckets_.emplace(std::string(key), Bucket{burst_, now}).first;
    }
    Bucket& bucket = it->second;
    Refill(bucket, now);
    if (bucket.tokens >= 1.0) {
      bucket.tokens -= 1.0;
      return true;
    }
    *retry_after_seconds = std::max(1, static_cast<int>(std::ceil((1.0 - bucket.tokens) / rate_)));
    return false;
  }

 private:
  struct Bucket {
    double tokens;
    int64_t updated;  // steady clock ticks
  };

  void Refill(Bucket& bucket, int64_t now) const {
    const double elapsed =
        std::chrono::duration<double>(Clock::duration(now - bucket.updated)).count();
    bucket.tokens = std::min(burst_, bucket.tokens + elapsed * rate_);
    bucket.updated = now;
  }

  // Keys whose bucket is full again carry no state worth keeping.
  void EvictFull(int64_t now) {  // mu_ held
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      Refill(it->second, now);
      if (it->second.tokens >= burst_) {
        buckets_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  const double rate_;
  const double burst_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_;  // guarded by mu_
};

// `path` equals `prefix` or continues it at a '/' boundary.
bool PathMatchesPrefix(std::string_view prefix, std::string_view path) {
  if (prefix == "/") return path == "/";  // the root alone, not every path below it
  if (path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return false;
  if (path.size() == prefix.size()) return true;
  return prefix.back() == '/' || path[prefix.size()] == '/';
}

struct LocalRoute {
  std::string method;
  std::string prefix;
  LocalHandler handler;              // exactly one of the two is set
  AsyncLocalHandler async_handler;
  LocalRouteOptions options;

  bool MatchesPath(std::string_view path) const { return PathMatchesPrefix(prefix, path); }
};

struct UpgradeRoute {
  std::string prefix;
  UpgradeHandler handler;
};

// Unlinks a delete_file_after_open file unless the response is handed over to be sent (which
// unlinks it after opening it): whatever drops an answer unsent leaves no file behind.
class UnlinkUnlessSent {
 public:
  explicit UnlinkUnlessSent(const std::optional<LocalResponse>& response) {
    if (response && response->delete_file_after_open) path_ = response->file_path;
  }
  UnlinkUnlessSent(UnlinkUnlessSent&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  UnlinkUnlessSent& operator=(UnlinkUnlessSent&&) = delete;
  ~UnlinkUnlessSent() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  void HandedOver() { path_.clear(); }

 private:
  std::string path_;
};

// Calls `fn(key, value)` for each `key=value` pair of a query string, both still encoded.
template <typename Fn>
void ForEachQueryParam(std::string_view query, Fn&& fn) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    if (eq == std::string_view::npos) {
      fn(pair, std::string_view());
    } else {
      fn(pair.substr(0, eq), pair.substr(eq + 1));
    }
  }
}

}  // namespace

class HttpServer::Impl : public std::enable_shared_from_this<Impl> {
 public:
  class Session;

  Impl(const RouteTable* routes, MethodInvoker* invoker, HttpServerOptions options)
      : routes_(routes),
        invoker_(invoker),
        options_(std::move(options)),
        acceptor_(net::make_strand(ioc_)) {
    if (options_.threads < 1) options_.threads = 1;
    if (options_.rate_limit_per_second > 0) {
      limiter_.emplace(options_.rate_limit_per_second, options_.rate_limit_burst);
    }
    prototypes_.reserve(routes_->routes().size());
    for (const auto& route : routes_->routes()) {
      const google::protobuf::Descriptor* input = route->method_descriptor->input_type();
      const google::protobuf::Message* prototype =
          input->file()->pool() == google::protobuf::DescriptorPool::generated_pool()
              ? google::protobuf::MessageFactory::generated_factory()->GetPrototype(input)
              : dynamic_factory_.GetPrototype(input);
      prototypes_.push_back(prototype);
    }
  }

  void AddLocalRoute(std::string method, std::string prefix, LocalHandler handler) {
    local_routes_.push_back({std::move(method), std::move(prefix), std::move(handler), {}});
  }

  void AddAsyncLocalRoute(std::string method, std::string prefix, AsyncLocalHandler handler,
                          LocalRouteOptions options) {
    local_routes_.push_back(
        {std::move(method), std::move(prefix), {}, std::move(handler), options});
  }

  void AddUpgradeRoute(std::string prefix, UpgradeHandler handler) {
    upgrade_routes_.push_back({std::move(prefix), std::move(handler)});
  }

  absl::Status Start();
  void Shutdown();
  int port() const { return port_.load(); }

 private:
  friend class Session;

  void DoAccept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  void Register(const std::shared_ptr<Session>& session);
  size_t SessionCount();
  void Unregister(Session* session);
  void RunLoop();

  const RouteTable* const routes_;
  MethodInvoker* const invoker_;
  HttpServerOptions options_;
  std::vector<LocalRoute> local_routes_;
  std::vector<UpgradeRoute> upgrade_routes_;
  google::protobuf::DynamicMessageFactory dynamic_factory_;
  std::vector<const google::protobuf::Message*> prototypes_;  // by Route::index
  std::optional<RateLimiter> limiter_;

  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  std::atomic<int> port_{0};
  std::atomic<bool> stopping_{false};
  // Set when Shutdown() gives up on in-flight requests and stops the io_context: an answer that
  // arrives later is dropped rather than posted where no thread will ever run it.
  std::atomic<bool> abandoned_{false};

  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, whose
  // runs would otherwise report false races here.
  std::mutex lifecycle_mu_;  // serializes Start() and Shutdown()
  bool started_ = false;     // guarded by lifecycle_mu_
  bool stopped_ = false;     // guarded by lifecycle_mu_

  std::mutex sessions_mu_;
  std::condition_variable sessions_empty_;
  absl::flat_hash_map<Session*, std::weak_ptr<Session>> sessions_;  // guarded by sessions_mu_
};

// One client connection. Every member is touched only on the connection's strand.
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<Impl> server)
      : server_(std::move(server)), stream_(std::move(socket)) {
    beast::error_code ec;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_address_ = peer.address().to_string();
  }

  ~Session() { server_->Unregister(this); }

  void Start() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::DoRead, shared_from_this()));
  }

  // From Shutdown(): an idle connection closes now, a busy one after its answer.
  void Stop() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) {
        beast::error_code ec;
        self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        self->stream_.close();
      }
    });
  }

 private:
  enum class After { kKeepAlive, kClose, kLinger };

  // Waits up to the idle timeout for a request's first bytes, then reads its header.
  void DoRead() {
    if (server_->stopping_.load()) return Close();
    parser_.emplace();
    parser_->body_limit(server_->options_.max_body_bytes);
    if (buffer_.size() > 0) return ReadHeader();  // pipelined: the next request is here
    stream_.expires_after(ToChrono(server_->options_.idle_timeout));
    stream_.async_read_some(buffer_.prepare(kFirstReadBytes),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) return self->OnReadError(ec);
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  // The whole header within the header timeout, however slowly its bytes arrive.
  void ReadHeader() {
    stream_.expires_after(ToChrono(server_->options_.header_timeout));
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
  }

  void OnHeader(beast::error_code ec, size_t) {
    if (ec) return OnReadError(ec);
    if (parser_->is_done()) return OnRequest();
    busy_ = true;  // from here on a request is in progress
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    stream_.expires_after(ToChrono(server_->options_.idle_timeout));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->OnReadError(ec);
                       self->OnRequest();
                     });
  }

  void OnReadError(beast::error_code ec) {
    busy_ = false;
    if (ec == http::error::body_limit) {
      // The header is complete: answer with its request id, then drain and close.
      BeginRequest(parser_->get());
      keep_alive_ = false;
      SendError(HttpError(413, "body_too_large",
                          absl::StrCat("request body is larger than ",
                                       server_->options_.max_body_bytes, " bytes")),
                After::kLinger);
      return;
    }
    if (&ec.category() == &http::make_error_code(http::error::end_of_stream).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message &&
        ec != http::error::need_more && ec != http::error::need_buffer) {
      // Unparseable HTTP: say so once, then hang up.
      request_ = {};
      start_ = Clock::now();
      request_id_ = NewRequestId();
      method_ = "-";
      path_ = "-";
      route_label_ = kUnmatchedRoute;
      keep_alive_ = false;
      SendError(HttpError(400, "malformed_http", "malformed HTTP request"), After::kLinger);
      return;
    }
    // end_of_stream, timeouts, resets, a client gone mid-request: nothing to answer.
    Close();
  }

  // Common bookkeeping for the request whose header is `header`.
  void BeginRequest(const http::request<http::string_body>& header) {
    start_ = Clock::now();
    route_label_ = kUnmatchedRoute;
    // A client's id is echoed, passed on and logged only when it is safe to
    // (common/request_id.h); otherwise the request gets a new one.
    std::string_view id = View(header[kRequestIdHeader]);
    if (IsUsableRequestId(Absl(id))) {
      request_id_.assign(id.data(), id.size());
    } else {
      request_id_ = NewRequestId();
    }
    std::string_view target = View(header.target());
    size_t q = target.find('?');
    path_ = target.substr(0, q);
    query_ = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
    method_ = View(header.method_string());
    version_ = header.version();
    keep_alive_ = header.keep_alive();
  }

  void OnRequest() {
    busy_ = true;
    request_ = parser_->release();
    BeginRequest(request_);

    // Websocket upgrades, then local routes.
    if (method_ == "GET" && beast::iequals(request_[http::field::upgrade], "websocket")) {
      for (const UpgradeRoute& upgrade : server_->upgrade_routes_) {
        if (PathMatchesPrefix(upgrade.prefix, path_)) return ServeUpgrade(upgrade);
      }
    }
    std::string allow;
    for (const LocalRoute& local : server_->local_routes_) {
      if (!local.MatchesPath(path_)) continue;
      if (local.method == method_) return ServeLocal(local);
      if (allow.find(local.method) == std::string::npos) {
        if (!allow.empty()) allow += ", ";
        allow += local.method;
      }
    }

    RouteMatch match = server_->routes_->Match(method_, path_);
    switch (match.result) {
      case RouteMatch::Result::kFound:
        return ServeRoute(match);
      case RouteMatch::Result::kMethodNotAllowed:
        if (!allow.empty()) allow += ", ";
        allow.append(match.allow.data(), match.allow.size());
        break;
      case RouteMatch::Result::kNotFound:
        break;
    }
    if (allow.empty()) {
      return SendError(HttpError(404, "not_found",
                                 absl::StrCat("no route for ", Absl(method_), " ", Absl(path_))));
    }
    extra_headers_.emplace_back("Allow", std::move(allow));
    SendError(HttpError(405, "method_not_allowed",
                        absl::StrCat(Absl(method_), " is not allowed on ", Absl(path_))));
  }

  // The state behind an asynchronous local route's `respond`; every copy of `respond` shares
  // one. It holds the session, so a late answer never touches a destroyed one.
  class AsyncAnswer {
   public:
    explicit AsyncAnswer(std::shared_ptr<Session> session) : session_(std::move(session)) {}
    AsyncAnswer(const AsyncAnswer&) = delete;
    AsyncAnswer& operator=(const AsyncAnswer&) = delete;

    // Every copy of `respond` gone uncalled: the client would otherwise wait forever.
    ~AsyncAnswer() {
      if (answered_.exchange(true)) return;
      LogError("http: an async local handler never called respond",
               {{"request_id", session_->request_id_}});
      PostAnswer(session_, std::nullopt);
    }

    void Respond(LocalResponse response) {
      if (answered_.exchange(true)) {
        LogError("http: an async local handler called respond more than once");
        UnlinkUnlessSent discarded{std::optional<LocalResponse>(std::move(response))};
        return;
      }
      // Copies of `respond` kept after the answer no longer pin the connection.
      PostAnswer(std::move(session_), std::move(response));
    }

    // True when no answer was given yet, and none may be given from now on.
    bool Claim() {
      if (answered_.exchange(true)) return false;
      session_.reset();
      return true;
    }

   private:
    // Touched only by whoever wins answered_.
    std::shared_ptr<Session> session_;
    std::atomic<bool> answered_{false};
  };

  // From any thread: back onto the session's strand, as a routed call's completion is.
  // nullopt: the handler dropped `respond`.
  static void PostAnswer(std::shared_ptr<Session> session, std::optional<LocalResponse> response) {
    UnlinkUnlessSent unlink(response);
    // An answer posted in the instant before Shutdown() stops the io_context is never run and
    // stays queued (with its session and file) until the process ends, as a routed call's would.
    if (session->server_->abandoned_.load()) return;
    net::post(session->stream_.get_executor(),
              [session, response = std::move(response), unlink = std::move(unlink)]() mutable {
                unlink.HandedOver();
                if (!response) {
                  return session->SendError(
                      InternalError("the local handler did not answer the request"));
                }
                session->SendLocalResponse(std::move(*response));
              });
  }

  // The handler takes the connection or refuses it; a connection taken leaves the server: its
  // socket is released (no longer watched by this server's io_context, nor closed by it) and
  // the session ends once this returns, so it counts toward nothing and Shutdown() does not wait
  // on it.
  void ServeUpgrade(const UpgradeRoute& upgrade) {
    route_label_ = upgrade.prefix;
    UpgradeAnswer answer;
    try {
      answer = upgrade.handler(MakeLocalRequest());
    } catch (const std::exception& e) {
      return SendError(InternalError(absl::StrCat("upgrade handler failed: ", e.what())));
    }
    if (!answer.take) return SendLocalResponse(std::move(answer.refusal));
    // The head as parsed (the taker's websocket library reads it again), then what followed it.
    std::ostringstream head;
    head << request_.base();
    UpgradedConnection connection;
    connection.received = head.str();
    connection.received += beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    beast::error_code ec;
    stream_.expires_never();
    connection.fd = stream_.socket().release(ec);
    if (ec) {
      return SendError(InternalError(absl::StrCat("cannot hand the connection over: ", ec.message())),
                       After::kClose);
    }
    busy_ = false;
    Log(101);
    Observe(101);
    try {
      answer.take(std::move(connection));
    } catch (const std::exception& e) {
      LogError("http: an upgrade handler's take failed", {{"error", e.what()}});
    }
  }

  LocalRequest MakeLocalRequest() {
    LocalRequest request;
    request.method = std::string(method_);
    request.path = std::string(path_);
    request.request_id = request_id_;
    ForEachQueryParam(query_, [&](std::string_view key, std::string_view value) {
      PercentDecode(key, /*plus_as_space=*/true, &scratch_key_);
      PercentDecode(value, /*plus_as_space=*/true, &scratch_value_);
      request.query[scratch_key_] = scratch_value_;
    });
    for (const auto& field : request_) {
      std::string name(View(field.name_string()));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      request.headers[std::move(name)] = std::string(View(field.value()));
    }
    request.body = std::move(request_.body());
    return request;
  }

  void ServeLocal(const LocalRoute& local) {
    route_label_ = local.prefix;
    if (local.options.rate_limit_by_address && RateLimited(AddressRateLimitKey())) return;
    LocalRequest request = MakeLocalRequest();
    if (local.async_handler) {
      // The connection now waits for PostAnswer: no read is pending, so no timeout runs, and
      // busy_ keeps Shutdown() from closing it.
      auto answer = std::make_shared<AsyncAnswer>(shared_from_this());
      try {
        local.async_handler(std::move(request), [answer](LocalResponse response) {
          answer->Respond(std::move(response));
        });
      } catch (const std::exception& e) {
        if (answer->Claim()) {
          return SendError(InternalError(absl::StrCat("local handler failed: ", e.what())));
        }
      }
      return;
    }
    LocalResponse response;
    try {
      response = local.handler(request);
    } catch (const std::exception& e) {
      return SendError(InternalError(absl::StrCat("local handler failed: ", e.what())));
    }
    SendLocalResponse(std::move(response));
  }

  void SendLocalResponse(LocalResponse response) {
    for (auto& header : response.headers) extra_headers_.push_back(std::move(header));
    if (!response.file_path.empty()) {
      return SendFile(response.status, response.content_type, response.file_path,
                      response.accept_ranges, response.delete_file_after_open);
    }
    Send(response.status, std::move(response.body), response.content_type);
  }

  void ServeRoute(const RouteMatch& match) {
    const Route* route = match.route;
    route_label_ = route->path_template;
    if (RateLimited(RateLimitKey())) return;
    const google::protobuf::Message* prototype = server_->prototypes_[route->index];
    if (prototype == nullptr) {
      return SendError(InternalError("no message type for the route's request"));
    }
    std::unique_ptr<google::protobuf::Message> request(prototype->New());

    if (route->body_kind != BodyKind::kNone) {
      const std::string& body = request_.body();
      if (body.empty()) {
        return SendError(
            HttpError(400, "malformed_json", "the request body must be a JSON object"));
      }
      google::protobuf::Message* target =
          route->body_kind == BodyKind::kWhole
              ? request.get()
              : request->GetReflection()->MutableMessage(request.get(), route->body_field);
      absl::Status status = ParseJsonBody(body, target);
      if (!status.ok()) return SendError(status);
    }

    absl::Status status;
    if (!route->query_fields.empty()) {
      ForEachQueryParam(query_, [&](std::string_view key, std::string_view value) {
        if (!status.ok()) return;
        PercentDecode(key, /*plus_as_space=*/true, &scratch_key_);
        for (const auto* field : route->query_fields) {
          if (field->name() != scratch_key_) continue;
          PercentDecode(value, /*plus_as_space=*/true, &scratch_value_);
          status = SetFieldFromString(field->name(), scratch_value_, request.get());
          break;
        }
      });
      if (!status.ok()) return SendError(status);
    }
    // Path variables last: they win over the body and the query.
    for (const PathBinding& binding : match.bindings) {
      status = SetFieldFromString(binding.field_path, binding.value, request.get());
      if (!status.ok()) return SendError(status);
    }

    CallContext context;
    context.authorization = std::string(View(request_[http::field::authorization]));
    context.request_id = request_id_;
    // The body is transcoded; free it before the call runs.
    request_.body().clear();
    request_.body().shrink_to_fit();
    server_->invoker_->Invoke(
        route->method_descriptor, std::move(request), context,
        [self = shared_from_this(), route](absl::Status status,
                                           std::unique_ptr<google::protobuf::Message> response) {
          net::post(self->stream_.get_executor(), [self, route, status = std::move(status),
                                                   response = std::move(response)]() mutable {
            self->OnResponse(route, status, std::move(response));
          });
        });
  }

  // Charges `key`'s bucket; when it is empty, answers 429 with Retry-After and returns true.
  bool RateLimited(const std::string& key) {
    if (!server_->limiter_) return false;
    int retry_after = 0;
    if (server_->limiter_->Allow(key, &retry_after)) return false;
    extra_headers_.emplace_back("Retry-After", std::to_string(retry_after));
    SendError(HttpError(429, "rate_limited",
                        absl::StrCat("rate limit exceeded; retry in ", retry_after, " s")));
    return true;
  }

  std::string AddressRateLimitKey() const { return absl::StrCat("addr:", remote_address_); }

  // The authenticated key's identity; without a known key, the client's address.
  std::string RateLimitKey() {
    const std::string_view authorization = View(request_[http::field::authorization]);
    if (!authorization.empty()) {
      if (!server_->options_.rate_limit_identity) return absl::StrCat("key:", Absl(authorization));
      std::optional<std::string> identity = server_->options_.rate_limit_identity(authorization);
      if (identity) return absl::StrCat("key:", *identity);
    }
    return AddressRateLimitKey();
  }

  void OnResponse(const Route* route, const absl::Status& status,
                  std::unique_ptr<google::protobuf::Message> response) {
    if (!status.ok()) return SendError(status);
    if (route->empty_response) return Send(204, std::string(), "");
    if (response == nullptr) return SendError(InternalError("the method returned no message"));
    Send(route->success_status,
         route->response_body_field != nullptr
             ? PrintJsonField(*response, route->response_body_field)
             : PrintJson(*response),
         kJsonContentType);
  }

  void SendError(const absl::Status& status, After after = After::kKeepAlive) {
    // Work shed by a full pool is worth retrying shortly; say when.
    if (status.code() == absl::StatusCode::kUnavailable &&
        ErrorInfoOf(status).code() == kOverloadedCode) {
      extra_headers_.emplace_back("Retry-After", std::to_string(kOverloadedRetryAfterSeconds));
    }
    std::string body = PrintJson(ToErrorResponse(status));
    Send(HttpStatusFor(status), std::move(body), kJsonContentType, after);
  }

  template <typename Body>
  void PrepareHeaders(http::response<Body>& header, int status, std::string_view content_type,
                      bool keep_alive) {
    header.result(static_cast<unsigned>(status));
    header.version(version_);
    if (!content_type.empty()) {
      header.set(http::field::content_type,
                 beast::string_view(content_type.data(), content_type.size()));
    }
    header.set(kRequestIdHeader, beast::string_view(request_id_.data(), request_id_.size()));
    for (const auto& [name, value] : extra_headers_) header.set(name, value);
    extra_headers_.clear();
    header.keep_alive(keep_alive);
  }

  void Send(int status, std::string body, std::string_view content_type,
            After after = After::kKeepAlive) {
    if (after == After::kKeepAlive && (!keep_alive_ || server_->stopping_.load())) {
      after = After::kClose;
    }
    response_ = {};
    PrepareHeaders(response_, status, content_type, after == After::kKeepAlive);
    response_.body() = std::move(body);
    response_.prepare_payload();
    Log(status);
    Observe(status);
    stream_.expires_after(ToChrono(server_->options_.idle_timeout));
    http::async_write(stream_, response_,
                      beast::bind_front_handler(&Session::OnWrite, shared_from_this(), after));
  }

  // Streams the file; with `accept_ranges`, a single `Range` is answered 206 with only those
  // bytes (a player seeking in a recording), an unsatisfiable one 416.
  void SendFile(int status, std::string_view content_type, const std::string& path,
                bool accept_ranges, bool delete_after_open) {
    FileRangeBody::value_type body;
    beast::error_code ec;
    body.file.open(path.c_str(), beast::file_mode::scan, ec);
    // The open descriptor keeps the bytes until file_response_ is reset after the write, however
    // it ends; the name goes now, whatever is answered.
    if (delete_after_open) ::unlink(path.c_str());
    const uint64_t size = ec ? 0 : body.file.size(ec);
    if (ec) {
      extra_headers_.clear();
      return SendError(HttpError(404, "not_found", "file not found"));
    }
    body.length = size;
    if (accept_ranges) {
      extra_headers_.emplace_back("Accept-Ranges", "bytes");
      const auto range_header = request_.find(http::field::range);
      if (status == 200 && range_header != request_.end()) {
        const RangeDecision decision = DecideRange(View(range_header->value()), size);
        if (decision.outcome == RangeOutcome::kUnsatisfiable) {
          extra_headers_.emplace_back("Content-Range", absl::StrCat("bytes */", size));
          return SendError(HttpError(416, "range_not_satisfiable",
                                     absl::StrCat("the range lies outside the ", size,
                                                  " bytes of the file")));
        }
        if (decision.outcome == RangeOutcome::kPartial) {
          status = 206;
          body.offset = decision.range.first;
          body.length = decision.range.length;
          extra_headers_.emplace_back(
              "Content-Range",
              absl::StrCat("bytes ", body.offset, "-", body.offset + body.length - 1, "/", size));
        }
      }
    }
    After after = keep_alive_ && !server_->stopping_.load() ? After::kKeepAlive : After::kClose;
    file_response_.emplace();
    PrepareHeaders(*file_response_, status, content_type, after == After::kKeepAlive);
    file_response_->body() = std::move(body);
    file_response_->prepare_payload();
    Log(status);
    Observe(status);
    stream_.expires_after(ToChrono(server_->options_.idle_timeout));
    http::async_write(stream_, *file_response_,
                      beast::bind_front_handler(&Session::OnWrite, shared_from_this(), after));
  }

  void Log(int status) {
    if (!server_->options_.access_log) return;
    const double latency_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
    LogInfo("http request", {{"request_id", request_id_},
                             {"method", Absl(method_)},
                             {"path", Absl(path_.substr(0, kMaxLoggedPathBytes))},
                             {"route", Absl(route_label_)},
                             {"status", status},
                             {"latency_ms", latency_ms}});
  }

  void Observe(int status) {
    if (!server_->options_.observe_request) return;
    server_->options_.observe_request(route_label_, method_, status,
                                      absl::FromChrono(Clock::now() - start_));
  }

  void OnWrite(After after, beast::error_code ec, size_t) {
    busy_ = false;
    file_response_.reset();
    // Between requests a connection holds no request and no large buffer: otherwise every idle
    // keep-alive connection could pin a body of up to max_body_bytes until its next request.
    request_ = {};
    response_ = {};
    if (buffer_.capacity() > kKeptBufferBytes) buffer_.shrink_to_fit();
    if (ec) return Close();
    switch (after) {
      case After::kKeepAlive:
        return DoRead();
      case After::kClose:
        return Close();
      case After::kLinger:
        return Linger();
    }
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  // Half-close, then read and discard until the client closes or kLingerTime passes.
  void Linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return stream_.close();
    linger_deadline_ = Clock::now() + kLingerTime;
    DrainSome();
  }

  void DrainSome() {
    const auto left = linger_deadline_ - Clock::now();
    if (left <= Clock::duration::zero()) return stream_.close();
    stream_.expires_after(left);
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(16 * 1024),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->stream_.close();
                              self->DrainSome();
                            });
  }

  // Before stream_: a session that outlives the HttpServer (an answer arriving after Shutdown()
  // gave up) may hold the last reference to the io_context, which must outlive the socket.
  std::shared_ptr<Impl> server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  std::optional<http::response<FileRangeBody>> file_response_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;

  // The current request; the views point into request_ (or the parser's message).
  std::string request_id_;
  std::string_view method_;
  // What observe_request is told: the matched route's template or kUnmatchedRoute; points into
  // the route table or a local route, which outlive the session.
  std::string_view route_label_ = kUnmatchedRoute;
  std::string_view path_;
  std::string_view query_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool busy_ = false;
  Clock::time_point start_;
  Clock::time_point linger_deadline_;
  std::string scratch_key_;
  std::string scratch_value_;
  std::string remote_address_;  // the peer's IP address, for the limiter
};

absl::Status HttpServer::Impl::Start() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (started_) return absl::FailedPreconditionError("HttpServer already started");
  if (options_.port < 0 || options_.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port ", options_.port));
  }
  beast::error_code ec;
  tcp::endpoint endpoint;
  net::ip::address address = net::ip::make_address(options_.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(options_.port));
  } else {
    tcp::resolver resolver(ioc_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port), ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve host ", options_.host, ": ", ec.message()));
    }
    endpoint = results.begin()->endpoint();
  }
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    acceptor_.close(ignored);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
  }
  port_ = acceptor_.local_endpoint(ec).port();
  started_ = true;
  work_.emplace(net::make_work_guard(ioc_));
  DoAccept();
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { RunLoop(); });
  return absl::OkStatus();
}

void HttpServer::Impl::RunLoop() {
  while (true) {
    try {
      ioc_.run();
      return;
    } catch (const std::exception& e) {
      // A handler threw; the connection it served is lost, the server is not.
      LogError("http: handler exception", {{"error", e.what()}});
    }
  }
}

void HttpServer::Impl::DoAccept() {
  acceptor_.async_accept(net::make_strand(ioc_),
                         beast::bind_front_handler(&Impl::OnAccept, shared_from_this()));
}

void HttpServer::Impl::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (stopping_.load() || !acceptor_.is_open()) return;
  if (!ec) {
    beast::error_code ignored;
    if (SessionCount() >= static_cast<size_t>(std::max(1, options_.max_connections))) {
      // Over the cap: hang up at once, so a flood of connections cannot exhaust descriptors.
      socket.close(ignored);
      return DoAccept();
    }
    socket.set_option(tcp::no_delay(true), ignored);
    auto session = std::make_shared<Session>(std::move(socket), shared_from_this());
    Register(session);
    session->Start();
  } else if (ec == net::error::operation_aborted) {
    return;
  }
  // Errors such as EMFILE leave the listener usable: keep accepting.
  DoAccept();
}

void HttpServer::Impl::Register(const std::shared_ptr<Session>& session) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.emplace(session.get(), session);
}

size_t HttpServer::Impl::SessionCount() {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  return sessions_.size();
}

void HttpServer::Impl::Unregister(Session* session) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.erase(session);
  if (sessions_.empty()) sessions_empty_.notify_all();
}

void HttpServer::Impl::Shutdown() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (!started_ || stopped_) {
    stopped_ = true;
    return;
  }
  stopped_ = true;
  stopping_.store(true);
  net::post(acceptor_.get_executor(), [self = shared_from_this()] {
    beast::error_code ignored;
    self->acceptor_.close(ignored);
  });
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (auto& [ptr, weak] : sessions_) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
  }
  for (auto& session : live) session->Stop();
  live.clear();

  bool drained;
  {
    std::unique_lock<std::mutex> lock(sessions_mu_);
    drained = sessions_empty_.wait_for(lock, ToChrono(options_.shutdown_timeout),
                                       [this] { return sessions_.empty(); });
  }
  // The work guard stays until here: a call in flight is work the io_context cannot see, and
  // its answer is posted back onto a strand.
  work_.reset();
  if (!drained) {
    LogWarn("http: shutdown timed out; abandoning in-flight requests");
    abandoned_.store(true);
    ioc_.stop();
  }
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

HttpServer::HttpServer(const RouteTable* routes, MethodInvoker* invoker, HttpServerOptions options)
    : impl_(std::make_shared<Impl>(routes, invoker, std::move(options))) {}

HttpServer::~HttpServer() { Shutdown(); }

void HttpServer::AddLocalRoute(std::string method, std::string path_prefix, LocalHandler handler) {
  impl_->AddLocalRoute(std::move(method), std::move(path_prefix), std::move(handler));
}

void HttpServer::AddUpgradeRoute(std::string path_prefix, UpgradeHandler handler) {
  impl_->AddUpgradeRoute(std::move(path_prefix), std::move(handler));
}

void HttpServer::AddAsyncLocalRoute(std::string method, std::string path_prefix,
                                    AsyncLocalHandler handler, LocalRouteOptions options) {
  impl_->AddAsyncLocalRoute(std::move(method), std::move(path_prefix), std::move(handler), options);
}

absl::Status HttpServer::Start() { return impl_->Start(); }

int HttpServer::port() const { return impl_->port(); }

void HttpServer::Shutdown() { impl_->Shutdown(); }

}  // namespace calleval::edge

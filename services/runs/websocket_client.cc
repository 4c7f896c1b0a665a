#include "services/runs/websocket_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/status_macros.h"

namespace calleval::runs {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

absl::Status Unreachable(absl::string_view url, absl::string_view why) {
  return MakeError(absl::StatusCode::kUnavailable, "websocket_unreachable",
                   absl::StrCat("cannot connect to ", url, ": ", why));
}

// The connection over a plain or TLS stream.
template <typename Stream>
class Connection : public WebSocketConnection {
 public:
  template <typename... Args>
  explicit Connection(std::unique_ptr<asio::io_context> ioc, Args&&... args)
      : ioc_(std::move(ioc)), ws_(std::forward<Args>(args)...) {}

  websocket::stream<Stream>& ws() { return ws_; }
  // Keeps what the stream refers to (its TLS context) alive as long as the connection.
  void KeepAlive(std::shared_ptr<void> owned) { owned_ = std::move(owned); }
  asio::io_context& ioc() { return *ioc_; }

  absl::Status SendText(absl::string_view text) override { return Send(text, false); }
  absl::Status SendBinary(absl::string_view bytes) override { return Send(bytes, true); }

  absl::StatusOr<std::vector<WebSocketMessage>> Poll(absl::Duration wait) override {
    if (!error_.ok()) return error_;
    StartRead();
    if (arrived_.empty()) {
      // Handler by handler, so the first message ends the wait: a caller pacing audio on a
      // 20 ms clock hears a frame when it arrives, not when its wait is over.
      ioc_->restart();
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::microseconds(absl::ToInt64Microseconds(wait));
      while (arrived_.empty() && error_.ok() && !ioc_->stopped() &&
             std::chrono::steady_clock::now() < deadline) {
        ioc_->run_one_until(deadline);
      }
    }
    ioc_->restart();
    ioc_->poll();
    std::vector<WebSocketMessage> out(std::make_move_iterator(arrived_.begin()),
                                      std::make_move_iterator(arrived_.end()));
    arrived_.clear();
    if (out.empty() && !error_.ok()) return error_;
    return out;
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    ws_.close(websocket::close_code::normal, ec);
  }

  // Bounded waiting for the upgrade: run the io_context until `done` or the deadline.
  bool RunUntil(const bool& done, absl::Duration timeout) {
    ioc_->restart();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::microseconds(absl::ToInt64Microseconds(timeout));
    while (!done && std::chrono::steady_clock::now() < deadline) {
      ioc_->run_one_until(deadline);
    }
    return done;
  }

 private:
  absl::Status Send(absl::string_view data, bool binary) {
    if (!error_.ok()) return error_;
    ws_.binary(binary);
    beast::error_code ec;
    ws_.write(asio::buffer(data.data(), data.size()), ec);
    if (ec) error_ = absl::UnavailableError(absl::StrCat("websocket write failed: ", ec.message()));
    return error_;
  }

  void StartRead() {
    if (reading_ || !error_.ok()) return;
    reading_ = true;
    ws_.async_read(buffer_, [this](beast::error_code ec, std::size_t) {
      reading_ = false;
      if (ec == websocket::error::closed) {
        error_ = absl::CancelledError("closed: the agent ended the websocket");
        return;
      }
      if (ec) {
        error_ = absl::UnavailableError(absl::StrCat("websocket read failed: ", ec.message()));
        return;
      }
      arrived_.push_back({ws_.got_binary(), beast::buffers_to_string(buffer_.data())});
      buffer_.consume(buffer_.size());
      StartRead();
    });
  }

  std::shared_ptr<void> owned_;  // the TLS context: declared before ws_, destroyed after it
  std::unique_ptr<asio::io_context> ioc_;
  websocket::stream<Stream> ws_;
  beast::flat_buffer buffer_;
  std::deque<WebSocketMessage> arrived_;
  bool reading_ = false;
  bool closed_ = false;
  absl::Status error_;
};

// Media goes out in small messages every 20 ms: without this, Nagle's algorithm holds one back
// until the previous is acknowledged, which a delayed acknowledgement makes up to 40 ms.
void NoDelay(tcp::socket& socket) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
}

// Resolves and keeps only public addresses (or all, for an operator-allowed host).
absl::StatusOr<std::vector<tcp::endpoint>> PublicEndpoints(
    asio::io_context& ioc, const ParsedUrl& url, const std::string& host,
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<tcp::endpoint> resolved;
  for (const auto& [name, address] : overrides) {
    if (name != host) continue;
    beast::error_code ec;
    const auto ip = asio::ip::make_address(address, ec);
    if (!ec) resolved.emplace_back(ip, static_cast<unsigned short>(url.port));
  }
  if (resolved.empty()) {
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    auto results = resolver.resolve(host, absl::StrCat(url.port), ec);
    if (ec) return Unreachable(url.url, absl::StrCat("cannot resolve ", host, ": ", ec.message()));
    for (const auto& entry : results) resolved.push_back(entry.endpoint());
  }
  std::vector<tcp::endpoint> out;
  std::string refused;
  for (const tcp::endpoint& endpoint : resolved) {
    if (!url.allowed_host && !IsPublicAddress(endpoint.data())) {
      refused = endpoint.address().to_string();
      continue;
    }
    out.push_back(endpoint);
  }
  if (out.empty()) {
    return ValidationError("url_not_public",
                           absl::StrCat(host, " resolves to ", refused,
                                        ", which is not a public address"),
                           {{"web_channel.websocket_url", "resolves to a non-public address"}});
  }
  return out;
}

template <typename Conn>
absl::Status Handshake(Conn& conn, const ParsedUrl& url, const std::string& host,
                       const WebSocketOptions& options) {
  auto& ws = conn.ws();
  ws.read_message_max(static_cast<std::size_t>(options.max_message_bytes));
  ws.set_option(websocket::stream_base::decorator([&](websocket::request_type& request) {
    request.set(beast::http::field::user_agent, "calleval");
    for (const auto& [name, value] : options.headers) request.set(name, value);
  }));
  bool done = false;
  beast::error_code result;
  const std::string host_header = absl::StrCat(host, ":", url.port);
  ws.async_handshake(host_header, url.path, [&](beast::error_code ec) {
    result = ec;
    done = true;
  });
  if (!conn.RunUntil(done, options.connect_timeout)) {
    return Unreachable(url.url, "the websocket upgrade timed out");
  }
  if (result) return Unreachable(url.url, absl::StrCat("websocket upgrade: ", result.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<WebSocketConnection>> WebSocketConnection::Accept(
    int fd, absl::Duration timeout) {
  auto ioc = std::make_unique<asio::io_context>();
  asio::io_context& io = *ioc;
  tcp::socket socket(io);
  beast::error_code ec;
  socket.assign(tcp::v4(), fd, ec);
  if (ec) return absl::InternalError(absl::StrCat("socket: ", ec.message()));
  NoDelay(socket);
  auto conn = std::make_unique<Connection<beast::tcp_stream>>(std::move(ioc), std::move(socket));
  bool done = false;
  beast::error_code result;
  conn->ws().async_accept([&](beast::error_code e) {
    result = e;
    done = true;
  });
  if (!conn->RunUntil(done, timeout)) return absl::DeadlineExceededError("upgrade timed out");
  if (result) return absl::UnavailableError(absl::StrCat("upgrade: ", result.message()));
  return std::unique_ptr<WebSocketConnection>(std::move(conn));
}

absl::StatusOr<std::unique_ptr<WebSocketConnection>> WebSocketConnection::AcceptUpgrade(
    int fd, std::string received, absl::Duration timeout, int64_t max_message_bytes) {
  auto ioc = std::make_unique<asio::io_context>();
  asio::io_context& io = *ioc;
  tcp::socket socket(io);
  beast::error_code ec;
  // The edge may listen on IPv4 or IPv6: the descriptor says which.
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const bool v6 = ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0 &&
                  address.ss_family == AF_INET6;
  socket.assign(v6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("socket: ", ec.message()));
  }
  NoDelay(socket);
  auto conn = std::make_unique<Connection<beast::tcp_stream>>(std::move(ioc), std::move(socket));
  conn->ws().read_message_max(static_cast<std::size_t>(max_message_bytes));
  bool done = false;
  beast::error_code result;
  // Beast reads the request from these bytes (and keeps what follows it) before the socket.
  conn->ws().async_accept(asio::buffer(received), [&](beast::error_code e) {
    result = e;
    done = true;
  });
  if (!conn->RunUntil(done, timeout)) return absl::DeadlineExceededError("upgrade timed out");
  if (result) return absl::UnavailableError(absl::StrCat("upgrade: ", result.message()));
  return std::unique_ptr<WebSocketConnection>(std::move(conn));
}

absl::StatusOr<std::unique_ptr<WebSocketConnection>> WebSocketConnection::AcceptTls(
    int fd, const std::string& cert_file, const std::string& key_file, absl::Duration timeout) {
  auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  beast::error_code ec;
  tls->use_certificate_chain_file(cert_file, ec);
  if (!ec) tls->use_private_key_file(key_file, asio::ssl::context::pem, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("TLS key pair: ", ec.message()));
  auto ioc = std::make_unique<asio::io_context>();
  asio::io_context& io = *ioc;
  tcp::socket socket(io);
  socket.assign(tcp::v4(), fd, ec);
  if (ec) return absl::InternalError(absl::StrCat("socket: ", ec.message()));
  NoDelay(socket);
  auto conn = std::make_unique<Connection<beast::ssl_stream<beast::tcp_stream>>>(
      std::move(ioc), std::move(socket), *tls);
  conn->KeepAlive(tls);
  bool done = false;
  beast::error_code result;
  conn->ws().next_layer().async_handshake(asio::ssl::stream_base::server,
                                          [&](beast::error_code e) {
                                            result = e;
                                            done = true;
                                          });
  if (!conn->RunUntil(done, timeout) || result) {
    return absl::UnavailableError(absl::StrCat("TLS handshake: ", result.message()));
  }
  done = false;
  conn->ws().async_accept([&](beast::error_code e) {
    result = e;
    done = true;
  });
  if (!conn->RunUntil(done, timeout)) return absl::DeadlineExceededError("upgrade timed out");
  if (result) return absl::UnavailableError(absl::StrCat("upgrade: ", result.message()));
  return std::unique_ptr<WebSocketConnection>(std::move(conn));
}

absl::StatusOr<std::unique_ptr<WebSocketConnection>> WebSocketConnection::Connect(
    const std::string& url, const WebSocketOptions& options) {
  UrlGuardOptions guard = options.guard;
  guard.allowed_schemes = {"ws", "wss"};
  ASSIGN_OR_RETURN(ParsedUrl parsed, CheckAndParseUrl(url, guard, options.field));
  if (parsed.port == 0) parsed.port = parsed.scheme == "wss" ? 443 : 80;
  std::string host = parsed.curl_host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto ioc = std::make_unique<asio::io_context>();
  ASSIGN_OR_RETURN(std::vector<tcp::endpoint> endpoints, PublicEndpoints(*ioc, parsed, host, options.resolve_override));

  auto connect = [&](beast::tcp_stream& stream, auto& conn) -> absl::Status {
    bool done = false;
    beast::error_code result;
    stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
      result = ec;
      done = true;
    });
    if (!conn.RunUntil(done, options.connect_timeout)) {
      return Unreachable(url, "the connection timed out");
    }
    if (result) return Unreachable(url, result.message());
    NoDelay(stream.socket());
    return absl::OkStatus();
  };

  if (parsed.scheme == "ws") {
    asio::io_context& io = *ioc;
    auto conn = std::make_unique<Connection<beast::tcp_stream>>(std::move(ioc), io);
    RETURN_IF_ERROR(connect(beast::get_lowest_layer(conn->ws()), *conn));
    RETURN_IF_ERROR(Handshake(*conn, parsed, host, options));
    return std::unique_ptr<WebSocketConnection>(std::move(conn));
  }
  // wss: TLS with the system's trust store (plus `ca_file`) and host name verification.
  auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  tls->set_default_verify_paths();
  tls->set_verify_mode(asio::ssl::verify_peer);
  if (!options.ca_file.empty()) {
    beast::error_code ca_error;
    tls->load_verify_file(options.ca_file, ca_error);
    if (ca_error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read the CA file ", options.ca_file, ": ", ca_error.message()));
    }
  }
  asio::io_context& io = *ioc;
  auto conn = std::make_unique<Connection<beast::ssl_stream<beast::tcp_stream>>>(std::move(ioc),
                                                                                 io, *tls);
  conn->KeepAlive(tls);
  RETURN_IF_ERROR(connect(beast::get_lowest_layer(conn->ws()), *conn));
  auto& tls_stream = conn->ws().next_layer();
  SSL_set_tlsext_host_name(tls_stream.native_handle(), host.c_str());
  tls_stream.set_verify_callback(asio::ssl::host_name_verification(host));
  bool done = false;
  beast::error_code result;
  tls_stream.async_handshake(asio::ssl::stream_base::client, [&](beast::error_code ec) {
    result = ec;
    done = true;
  });
  if (!conn->RunUntil(done, options.connect_timeout)) {
    return Unreachable(url, "the TLS handshake timed out");
  }
  if (result) return Unreachable(url, absl::StrCat("TLS: ", result.message()));
  RETURN_IF_ERROR(Handshake(*conn, parsed, host, options));
  return std::unique_ptr<WebSocketConnection>(std::move(conn));
}

}  // namespace calleval::runs

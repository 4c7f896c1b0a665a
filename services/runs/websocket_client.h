#pragma once

// A websocket client for the voice caller (docs/api.md §5 websocket channel), on Boost.Beast: ws://
// and wss:// URLs, the public-address rule of docs/api.md §8 checked on the literal host and again
// on every address the name resolves to before connecting (DNS rebinding), bounded connect time and
// message size.
//
// Single-threaded by design: the session that owns a connection calls Send() and Poll() from
// one thread; Poll() runs the pending read and returns what arrived, without blocking longer
// than asked, so a session can pace its audio on a 20 ms clock.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/url_guard.h"

namespace calleval::runs {

struct WebSocketOptions {
  UrlGuardOptions guard;  // allowed_schemes is forced to ws/wss
  absl::Duration connect_timeout = absl::Seconds(10);
  int64_t max_message_bytes = int64_t{1} << 20;
  // Extra headers of the upgrade request (e.g. Authorization for an agent's auth_token).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string field = "web_channel.websocket_url";  // named in URL errors
  // A PEM file of further trusted certificate authorities for wss:// (an on-premise agent's
  // private CA); empty: the system's trust store only.
  std::string ca_file;
  // Tests only: host -> IP address, used instead of the resolver (the address is still checked).
  std::vector<std::pair<std::string, std::string>> resolve_override;
};

struct WebSocketMessage {
  bool binary = false;
  std::string data;
};

class WebSocketConnection {
 public:
  virtual ~WebSocketConnection() = default;

  // Connects and completes the upgrade: 422-style errors for a URL that is not allowed,
  // kUnavailable for one that cannot be reached in time.
  static absl::StatusOr<std::unique_ptr<WebSocketConnection>> Connect(
      const std::string& url, const WebSocketOptions& options);

  virtual absl::Status SendText(absl::string_view text) = 0;
  virtual absl::Status SendBinary(absl::string_view bytes) = 0;
  // The server side of an accepted TCP connection (`fd`, ownership taken): completes the
  // upgrade within `timeout`. For local peers (the test agents).
  static absl::StatusOr<std::unique_ptr<WebSocketConnection>> Accept(int fd,
                                                                    absl::Duration timeout);
  // The server side of a connection another server read the upgrade request from (the HTTP
  // edge's upgrade routes): `fd` (ownership taken) and every byte already read from it, the
  // request head first; completes the upgrade within `timeout`. Messages over
  // `max_message_bytes` break the connection.
  static absl::StatusOr<std::unique_ptr<WebSocketConnection>> AcceptUpgrade(
      int fd, std::string received, absl::Duration timeout,
      int64_t max_message_bytes = int64_t{1} << 20);
  // The same over TLS, with this certificate chain and private key (PEM files).
  static absl::StatusOr<std::unique_ptr<WebSocketConnection>> AcceptTls(
      int fd, const std::string& cert_file, const std::string& key_file, absl::Duration timeout);

  // Everything that arrived, waiting up to `wait` for the first message. An error once the
  // peer closed (kCancelled, "closed") or the connection broke.
  virtual absl::StatusOr<std::vector<WebSocketMessage>> Poll(absl::Duration wait) = 0;
  // A normal close; further calls fail.
  virtual void Close() = 0;
};

}  // namespace calleval::runs

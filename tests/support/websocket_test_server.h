#pragma once

// A websocket server on 127.0.0.1 for tests: every accepted connection is upgraded and handed
// to `session` on its own thread, as a WebSocketConnection (the same class the service dials
// with). The test agents of the websocket channel run on it.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "services/runs/websocket_client.h"

namespace calleval {

class WebSocketTestServer {
 public:
  using Session = std::function<void(runs::WebSocketConnection& connection)>;
  explicit WebSocketTestServer(Session session);
  // wss://: TLS with this certificate chain and key (PEM files).
  WebSocketTestServer(Session session, std::string cert_file, std::string key_file);
  ~WebSocketTestServer();

  int port() const { return port_; }
  // ws://127.0.0.1:<port><path> (wss:// with TLS)
  std::string url(const std::string& path) const;
  int connections() const { return connections_.load(); }

 private:
  void AcceptLoop();

  Session session_;
  std::string cert_file_, key_file_;  // TLS when set
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> sessions_;  // guarded by mu_
};

}  // namespace calleval

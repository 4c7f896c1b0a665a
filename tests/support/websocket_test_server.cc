#include "tests/support/websocket_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <iostream>

namespace calleval {

WebSocketTestServer::WebSocketTestServer(Session session)
    : WebSocketTestServer(std::move(session), "", "") {}

WebSocketTestServer::WebSocketTestServer(Session session, std::string cert_file,
                                         std::string key_file)
    : session_(std::move(session)),
      cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::listen(listen_fd_, 16);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

WebSocketTestServer::~WebSocketTestServer() {
  stopping_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> sessions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions.swap(sessions_);
  }
  for (auto& t : sessions) t.join();
}

std::string WebSocketTestServer::url(const std::string& path) const {
  return (cert_file_.empty() ? "ws://127.0.0.1:" : "wss://127.0.0.1:") + std::to_string(port_) +
         path;
}

void WebSocketTestServer::AcceptLoop() {
  while (!stopping_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    ++connections_;
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.emplace_back([this, fd] {
      auto connection =
          cert_file_.empty()
              ? runs::WebSocketConnection::Accept(fd, absl::Seconds(5))
              : runs::WebSocketConnection::AcceptTls(fd, cert_file_, key_file_, absl::Seconds(5));
      if (!connection.ok()) {
        std::cerr << "websocket test server: " << connection.status() << "\n";
        return;
      }
      session_(**connection);
      (*connection)->Close();
    });
  }
}

}  // namespace calleval

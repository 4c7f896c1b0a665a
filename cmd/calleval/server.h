#pragma once

// Assembles the roles of `calleval serve` in one process: the database and stores, the gRPC
// services (with health and reflection), the recording downloader, and the HTTP edge that
// reaches the services over in-process gRPC channels (or remote ones for roles run elsewhere).

#include <grpcpp/server.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cmd/calleval/server_config.h"
#include "services/accounts/accounts_store.h"

namespace calleval {
namespace edge {
class DirectInvoker;
}  // namespace edge
struct ServerState;  // server_state.h

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerConfig& config);
  ~Server();

  // Stops accepting, finishes in-flight requests and background work, and releases
  // everything. Safe to call more than once.
  void Shutdown();

  int http_port() const;  // 0 without the edge role
  int grpc_port() const;  // 0 when no gRPC role runs here
  int admin_port() const;         // 0 when --admin-addr is off
  // The phone lines' listener (--media-addr): its port (0 without one) and the HOST:PORT the
  // lines' tokens advertise for it.
  int media_port() const;
  std::string media_advertised() const;
  std::string admin_url() const;  // http://HOST:PORT/metrics; empty when it is off
  std::string http_base_url() const;
  // The workspace and key created on the first start of an empty data dir.
  const std::optional<accounts::Bootstrap>& bootstrap() const;
  // The edge's handlers of the roles run here; null without the edge role.
  edge::DirectInvoker* direct_invoker() const;

 private:
  explicit Server(std::unique_ptr<ServerState> state);
  std::unique_ptr<ServerState> state_;
};

}  // namespace calleval

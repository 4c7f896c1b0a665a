#pragma once

// What the integration tests share to run the real server: a fresh data dir and a config on
// loopback with ephemeral ports, no access log, and the local test HTTP servers allowed as
// recording hosts (docs/api.md §8's operator allowlist).

#include <stdlib.h>

#include <string>

#include "cmd/calleval/server_config.h"
#include "gtest/gtest.h"

namespace calleval::testing {

// A new empty directory under the test's temporary directory.
inline std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = ::testing::TempDir() + "/" + prefix + "_XXXXXX";
  return mkdtemp(tmpl.data());
}

inline ServerConfig TestServerConfig(const std::string& data_dir) {
  ServerConfig config;
  config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
  config.data_dir = data_dir;
  config.http_addr = "127.0.0.1:0";
  config.grpc_addr = "127.0.0.1:0";
  config.access_log = false;
  config.allow_private_hosts = {"127.0.0.1"};
  return config;
}

}  // namespace calleval::testing

#pragma once

// A local Vapi for tests, speaking the parts of its wire protocol the service uses: the REST
// API (GET /assistant/{id}, POST /call with the vapi.websocket transport) behind a Bearer API
// key, with errors shaped like Vapi's ({"message", "error", "statusCode"}), and each call's
// transport.websocketCallUrl, a websocket that bridges the caller to a test agent speaking raw
// PCM16 at 16 kHz, with Vapi's JSON control messages (status-update) as text frames beside the
// audio. The control messages the client sends on a call's websocket (text frames, e.g.
// {"type":"hangup"}) are recorded as they pass to the agent.

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "services/runs/websocket_client.h"
#include "tests/support/test_http_server.h"
#include "tests/support/websocket_test_server.h"

namespace calleval {

class FakeVapiServer {
 public:
  // The test agent behind every call's websocket: binary frames are PCM16 at 16 kHz.
  using Agent = std::function<void(runs::WebSocketConnection& connection)>;

  FakeVapiServer(std::string api_key, Agent agent);

  // The API's base URL (what --vapi-api-url names).
  std::string base_url() const { return http_.url(""); }
  const std::string& api_key() const { return api_key_; }

  // An assistant as GET /assistant/{id} answers it (id, createdAt... are added).
  void AddAssistant(const std::string& id, nlohmann::json assistant);
  // POST /call answers this status and Vapi-shaped error message from now on (e.g. 402).
  void FailCalls(int status, std::string message);

  // The bodies of the POST /call requests accepted so far, and the ids the calls were given.
  std::vector<nlohmann::json> calls() const;
  std::vector<std::string> call_ids() const;
  // The client's control messages on the calls' websockets, in the order they arrived (a text
  // frame that is not JSON is kept as a JSON string).
  std::vector<nlohmann::json> control_messages() const;
  // Requests refused for their key.
  int refused_keys() const;

 private:
  TestHttpServer::Response Authorized(const TestHttpServer::Request& request,
                                      const std::function<TestHttpServer::Response()>& answer);
  TestHttpServer::Response GetAssistant(const TestHttpServer::Request& request);
  TestHttpServer::Response CreateCall(const TestHttpServer::Request& request);

  std::string api_key_;
  Agent agent_;
  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> assistants_;  // guarded by mu_
  std::vector<nlohmann::json> calls_;                 // guarded by mu_
  std::vector<std::string> call_ids_;                 // guarded by mu_
  std::vector<nlohmann::json> control_;               // guarded by mu_
  int fail_status_ = 0;                               // guarded by mu_
  std::string fail_message_;                          // guarded by mu_
  int refused_keys_ = 0;                              // guarded by mu_
  WebSocketTestServer websocket_;
  TestHttpServer http_;
};

// Vapi's error body: {"message": ..., "error": <reason phrase>, "statusCode": ...}.
TestHttpServer::Response VapiError(int status, const std::string& message);

}  // namespace calleval

#pragma once

// A local Retell for tests, speaking the parts of its REST API the service reads: GET
// /get-agent/{agent_id} and GET /get-retell-llm/{llm_id} behind a Bearer API key, with errors
// shaped like Retell's ({"status": "error", "message"}).

#include <map>
#include <mutex>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/support/test_http_server.h"

namespace calleval {

class FakeRetellServer {
 public:
  explicit FakeRetellServer(std::string api_key);

  // The API's base URL (what --retell-api-url names).
  std::string base_url() const { return http_.url(""); }

  // An agent whose response engine is the Retell LLM `llm` (as get-retell-llm answers it).
  void AddAgent(const std::string& agent_id, nlohmann::json agent, const std::string& llm_id,
                nlohmann::json llm);

 private:
  TestHttpServer::Response Answer(const TestHttpServer::Request& request, bool llm);

  std::string api_key_;
  std::mutex mu_;
  std::map<std::string, nlohmann::json> agents_;  // guarded by mu_
  std::map<std::string, nlohmann::json> llms_;    // guarded by mu_
  TestHttpServer http_;
};

}  // namespace calleval

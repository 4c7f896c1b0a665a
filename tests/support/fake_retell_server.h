#pragma once

// A local Retell for tests, speaking the parts of its REST API the service reads: GET
// /get-agent/{agent_id} and GET /get-retell-llm/{llm_id} behind a Bearer API key, with errors
// shaped like Retell's ({"status": "error", "message"}); and POST /v2/create-phone-call, whose
// call Retell places from the agent's number over its telephony: here the test's phone network
// (PlaceCallsWith), which a test wires to a local carrier's incoming call; and POST
// /v2/create-web-call, whose access token joins a room of the local LiveKit (HandWebCallsWith).
// Each agent has a version, as Retell's do (0 until SetAgentVersion): get-agent answers it as
// `version`, and the call objects create-web-call and create-phone-call answer carry it as
// `agent_version`, an integer, as Retell's do.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/support/test_http_server.h"

namespace calleval {

class FakeRetellServer {
 public:
  explicit FakeRetellServer(std::string api_key);
  ~FakeRetellServer();

  // The calls create-phone-call places: `dial(from_number, to_number)` runs on a thread of its
  // own once the request is answered (as Retell answers before the call rings). Unset, the
  // calls are answered and never placed.
  void PlaceCallsWith(std::function<void(const std::string& from, const std::string& to)> dial);
  // Waits for the calls being placed (their `dial`s) to return.
  void JoinCalls();
  // The access token of each web call create-web-call makes: `token(call_id)`. Unset,
  // create-web-call answers 500 (the stand-in has no room to hand out).
  void HandWebCallsWith(std::function<std::string(const std::string& call_id)> token);
  // The create-web-call bodies received, in order.
  std::vector<nlohmann::json> web_calls();
  // The create-phone-call bodies received, in order.
  std::vector<nlohmann::json> phone_calls();

  // The API's base URL (what --retell-api-url names).
  std::string base_url() const { return http_.url(""); }

  // An agent whose response engine is the Retell LLM `llm` (as get-retell-llm answers it).
  void AddAgent(const std::string& agent_id, nlohmann::json agent, const std::string& llm_id,
                nlohmann::json llm);
  // The agent's version from now on (an agent added earlier).
  void SetAgentVersion(const std::string& agent_id, int64_t version);

 private:
  TestHttpServer::Response Answer(const TestHttpServer::Request& request, bool llm);
  TestHttpServer::Response CreatePhoneCall(const TestHttpServer::Request& request);
  TestHttpServer::Response CreateWebCall(const TestHttpServer::Request& request);

  std::string api_key_;
  std::mutex mu_;
  std::map<std::string, nlohmann::json> agents_;  // guarded by mu_
  std::map<std::string, nlohmann::json> llms_;    // guarded by mu_
  std::function<void(const std::string&, const std::string&)> dial_;  // guarded by mu_
  std::vector<nlohmann::json> phone_calls_;                           // guarded by mu_
  std::function<std::string(const std::string&)> web_token_;          // guarded by mu_
  std::vector<nlohmann::json> web_calls_;                             // guarded by mu_
  std::vector<std::thread> dialing_;                                  // guarded by mu_
  TestHttpServer http_;
};

}  // namespace calleval

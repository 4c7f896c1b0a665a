#include "tests/support/fake_retell_server.h"

#include "absl/strings/strip.h"

namespace calleval {
namespace {

using ::nlohmann::json;

TestHttpServer::Response JsonAnswer(int status, const json& body) {
  TestHttpServer::Response response;
  response.status = status;
  response.content_type = "application/json";
  response.body = body.dump();
  return response;
}

TestHttpServer::Response RetellError(int status, const std::string& message) {
  return JsonAnswer(status, json{{"status", "error"}, {"message", message}});
}

}  // namespace

FakeRetellServer::FakeRetellServer(std::string api_key) : api_key_(std::move(api_key)) {
  http_.HandlePrefix("/get-agent/",
                     [this](const TestHttpServer::Request& r) { return Answer(r, false); });
  http_.HandlePrefix("/get-retell-llm/",
                     [this](const TestHttpServer::Request& r) { return Answer(r, true); });
}

void FakeRetellServer::AddAgent(const std::string& agent_id, json agent, const std::string& llm_id,
                                json llm) {
  agent["agent_id"] = agent_id;
  agent["response_engine"] = {{"type", "retell-llm"}, {"llm_id", llm_id}, {"version", 0}};
  agent["last_modification_timestamp"] = 1703413636133;
  llm["llm_id"] = llm_id;
  llm["version"] = 0;
  std::lock_guard<std::mutex> lock(mu_);
  agents_[agent_id] = std::move(agent);
  llms_[llm_id] = std::move(llm);
}

TestHttpServer::Response FakeRetellServer::Answer(const TestHttpServer::Request& request,
                                                  bool llm) {
  if (request.Header("authorization") != "Bearer " + api_key_) {
    return RetellError(401, "Invalid API Key");
  }
  if (request.method != "GET") return RetellError(404, "Not Found");
  const std::string id(absl::StripPrefix(request.path, llm ? "/get-retell-llm/" : "/get-agent/"));
  std::lock_guard<std::mutex> lock(mu_);
  const auto& table = llm ? llms_ : agents_;
  auto it = table.find(id);
  if (it == table.end()) {
    return RetellError(404, llm ? "Retell LLM not found" : "Agent not found");
  }
  return JsonAnswer(200, it->second);
}

}  // namespace calleval

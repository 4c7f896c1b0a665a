#include "tests/support/fake_retell_server.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crypto.h"

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
  http_.Handle("/v2/create-phone-call",
               [this](const TestHttpServer::Request& r) { return CreatePhoneCall(r); });
  http_.Handle("/v2/create-web-call",
               [this](const TestHttpServer::Request& r) { return CreateWebCall(r); });
}

FakeRetellServer::~FakeRetellServer() { JoinCalls(); }

void FakeRetellServer::JoinCalls() {
  std::vector<std::thread> dialing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dialing.swap(dialing_);
  }
  for (std::thread& t : dialing) t.join();
}

void FakeRetellServer::PlaceCallsWith(
    std::function<void(const std::string& from, const std::string& to)> dial) {
  std::lock_guard<std::mutex> lock(mu_);
  dial_ = std::move(dial);
}

void FakeRetellServer::HandWebCallsWith(std::function<std::string(const std::string&)> token) {
  std::lock_guard<std::mutex> lock(mu_);
  web_token_ = std::move(token);
}

std::vector<json> FakeRetellServer::web_calls() {
  std::lock_guard<std::mutex> lock(mu_);
  return web_calls_;
}

// https://docs.retellai.com/api-references/create-web-call: agent_id (required); the answer is
// the call object with call_type "web_call" and the access_token that joins its room.
TestHttpServer::Response FakeRetellServer::CreateWebCall(const TestHttpServer::Request& request) {
  if (request.method != "POST") return RetellError(404, "Not Found");
  if (request.Header("authorization") != "Bearer " + api_key_) {
    return RetellError(401, "Invalid API Key");
  }
  json body = json::parse(request.body, nullptr, false);
  if (!body.is_object() || !body.contains("agent_id") || !body["agent_id"].is_string()) {
    return RetellError(400, "agent_id is required");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto agent = agents_.find(body["agent_id"].get<std::string>());
  if (agent == agents_.end()) return RetellError(404, "Agent not found");
  if (!web_token_) return RetellError(500, "web calls are not set up on this stand-in");
  web_calls_.push_back(body);
  const std::string call_id = absl::StrCat("call_web_", web_calls_.size());
  return JsonAnswer(201, json{{"call_type", "web_call"},
                              {"call_id", call_id},
                              {"agent_id", body["agent_id"]},
                              {"agent_version", agent->second["version"]},
                              {"call_status", "registered"},
                              {"access_token", web_token_(call_id)}});
}

std::vector<json> FakeRetellServer::phone_calls() {
  std::lock_guard<std::mutex> lock(mu_);
  return phone_calls_;
}

// https://docs.retellai.com/api-references/create-phone-call: from_number (a number the account
// owns, E.164) and to_number are required; override_agent_id picks the agent for this call.
TestHttpServer::Response FakeRetellServer::CreatePhoneCall(const TestHttpServer::Request& request) {
  if (request.Header("authorization") != "Bearer " + api_key_) {
    return RetellError(401, "Invalid API Key");
  }
  if (request.method != "POST") return RetellError(404, "Not Found");
  json body = json::parse(request.body, nullptr, false);
  if (!body.is_object()) return RetellError(400, "Invalid JSON body");
  for (const char* field : {"from_number", "to_number"}) {
    if (!body.contains(field) || !body[field].is_string() ||
        body[field].get<std::string>().rfind('+', 0) != 0) {
      return RetellError(400, absl::StrCat(field, " must be an E.164 phone number"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string agent_id = body.value("override_agent_id", "");
  auto agent = agents_.find(agent_id);
  if (!agent_id.empty() && agent == agents_.end()) return RetellError(404, "Agent not found");
  phone_calls_.push_back(body);
  const std::string from = body["from_number"], to = body["to_number"];
  if (dial_) dialing_.emplace_back([dial = dial_, from, to] { dial(from, to); });
  json call{
      {"call_type", "phone_call"}, {"call_id", absl::StrCat("call_", HexEncode(RandomBytes(12)))},
      {"agent_id", agent_id},      {"call_status", "registered"},
      {"from_number", from},       {"to_number", to},
      {"direction", "outbound"}};
  // Without an override the number's own agent takes the call, which this stand-in does not
  // model: no version to tell.
  if (agent != agents_.end()) call["agent_version"] = agent->second["version"];
  return JsonAnswer(201, call);
}

void FakeRetellServer::AddAgent(const std::string& agent_id, json agent, const std::string& llm_id,
                                json llm) {
  agent["agent_id"] = agent_id;
  agent["version"] = 0;
  agent["response_engine"] = {{"type", "retell-llm"}, {"llm_id", llm_id}, {"version", 0}};
  agent["last_modification_timestamp"] = 1703413636133;
  llm["llm_id"] = llm_id;
  llm["version"] = 0;
  std::lock_guard<std::mutex> lock(mu_);
  agents_[agent_id] = std::move(agent);
  llms_[llm_id] = std::move(llm);
}

void FakeRetellServer::SetAgentVersion(const std::string& agent_id, int64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  agents_.at(agent_id)["version"] = version;
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

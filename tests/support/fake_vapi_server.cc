#include "tests/support/fake_vapi_server.h"

#include <atomic>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace calleval {
namespace {

using ::nlohmann::json;

std::string ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 402:
      return "Payment Required";
    case 404:
      return "Not Found";
    case 429:
      return "Too Many Requests";
    default:
      return "Error";
  }
}

TestHttpServer::Response JsonAnswer(int status, const json& body) {
  TestHttpServer::Response response;
  response.status = status;
  response.content_type = "application/json; charset=utf-8";
  response.body = body.dump();
  return response;
}

// The call's websocket as the agent sees it, noting the client's text frames on the way.
class ControlTap : public runs::WebSocketConnection {
 public:
  ControlTap(runs::WebSocketConnection& inner, std::function<void(json)> note)
      : inner_(inner), note_(std::move(note)) {}
  absl::Status SendText(absl::string_view text) override { return inner_.SendText(text); }
  absl::Status SendBinary(absl::string_view bytes) override { return inner_.SendBinary(bytes); }
  absl::StatusOr<std::vector<runs::WebSocketMessage>> Poll(absl::Duration wait) override {
    absl::StatusOr<std::vector<runs::WebSocketMessage>> got = inner_.Poll(wait);
    if (got.ok()) {
      for (const runs::WebSocketMessage& m : *got) {
        if (m.binary) continue;
        json message = json::parse(m.data, nullptr, false);
        note_(message.is_discarded() ? json(m.data) : std::move(message));
      }
    }
    return got;
  }
  void Close() override { inner_.Close(); }

 private:
  runs::WebSocketConnection& inner_;
  std::function<void(json)> note_;
};

std::string NewId() {
  static std::atomic<int> next{1};
  return absl::StrCat("7420f27a-30fd-4f49-a995-", 100000000000 + next++);
}

}  // namespace

TestHttpServer::Response VapiError(int status, const std::string& message) {
  return JsonAnswer(
      status, json{{"message", message}, {"error", ReasonPhrase(status)}, {"statusCode", status}});
}

FakeVapiServer::FakeVapiServer(std::string api_key, Agent agent)
    : api_key_(std::move(api_key)),
      agent_(std::move(agent)),
      websocket_([this](runs::WebSocketConnection& c) {
        // Vapi tells the client how the call goes in JSON text frames beside the audio.
        (void)c.SendText(json{{"type", "status-update"}, {"status", "in-progress"}}.dump());
        ControlTap tap(c, [this](json message) {
          std::lock_guard<std::mutex> lock(mu_);
          control_.push_back(std::move(message));
        });
        agent_(tap);
        (void)c.SendText(json{
            {"type", "status-update"}, {"status", "ended"}, {"endedReason", "customer-ended-call"}}
                             .dump());
      }) {
  http_.HandlePrefix("/assistant/", [this](const TestHttpServer::Request& r) {
    return Authorized(r, [this, &r] { return GetAssistant(r); });
  });
  http_.Handle("/call", [this](const TestHttpServer::Request& r) {
    return Authorized(r, [this, &r] { return CreateCall(r); });
  });
}

void FakeVapiServer::AddAssistant(const std::string& id, json assistant) {
  assistant["id"] = id;
  assistant["orgId"] = "eb166faa-7145-46ef-8044-589b47ae3b56";
  assistant["createdAt"] = "2026-11-01T10:00:00.000Z";
  assistant["updatedAt"] = "2026-11-01T10:00:00.000Z";
  std::lock_guard<std::mutex> lock(mu_);
  assistants_[id] = std::move(assistant);
}

void FakeVapiServer::FailCalls(int status, std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_status_ = status;
  fail_message_ = std::move(message);
}

std::vector<json> FakeVapiServer::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::vector<std::string> FakeVapiServer::call_ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return call_ids_;
}

std::vector<json> FakeVapiServer::control_messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return control_;
}

int FakeVapiServer::refused_keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_keys_;
}

TestHttpServer::Response FakeVapiServer::Authorized(
    const TestHttpServer::Request& request,
    const std::function<TestHttpServer::Response()>& answer) {
  if (request.Header("authorization") != "Bearer " + api_key_) {
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_keys_;
    return VapiError(401,
                     "Invalid Key. Hot tip, you may be using the private key instead of the "
                     "public key, or vice versa.");
  }
  return answer();
}

TestHttpServer::Response FakeVapiServer::GetAssistant(const TestHttpServer::Request& request) {
  if (request.method != "GET")
    return VapiError(404, "Cannot " + request.method + " " + request.path);
  const std::string id(absl::StripPrefix(request.path, "/assistant/"));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = assistants_.find(id);
  if (it == assistants_.end()) {
    return VapiError(404, "Couldn't Get Assistant. `assistant` Not Found.");
  }
  return JsonAnswer(200, it->second);
}

TestHttpServer::Response FakeVapiServer::CreateCall(const TestHttpServer::Request& request) {
  if (request.method != "POST") return VapiError(404, "Cannot " + request.method + " /call");
  const json body = json::parse(request.body, nullptr, false);
  if (!body.is_object()) return VapiError(400, "Unexpected token in JSON");
  std::vector<std::string> problems;
  const std::string assistant_id = body.value("assistantId", "");
  const json transport = body.value("transport", json::object());
  if (transport.value("provider", "") != "vapi.websocket") {
    problems.push_back("transport.provider must be one of the following values: vapi.websocket");
  }
  const json format = transport.value("audioFormat", json::object());
  if (format.value("format", "pcm_s16le") != "pcm_s16le" ||
      format.value("container", "raw") != "raw" || format.value("sampleRate", 16000) != 16000) {
    // The test agent speaks PCM16 at 16 kHz only.
    problems.push_back("transport.audioFormat is not the raw 16 kHz PCM this server bridges");
  }
  if (!problems.empty()) {
    return JsonAnswer(400,
                      json{{"message", problems}, {"error", "Bad Request"}, {"statusCode", 400}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_status_ != 0) return VapiError(fail_status_, fail_message_);
  if (assistants_.count(assistant_id) == 0) {
    return VapiError(400, "Couldn't Get Assistant. `assistant` Not Found.");
  }
  calls_.push_back(body);
  const std::string id = NewId();
  call_ids_.push_back(id);
  return JsonAnswer(
      201, json{{"id", id},
                {"assistantId", assistant_id},
                {"type", "vapi.websocketCall"},
                {"status", "queued"},
                {"cost", 0},
                {"createdAt", "2026-11-28T10:00:00.000Z"},
                {"transport",
                 {{"provider", "vapi.websocket"},
                  {"websocketCallUrl", websocket_.url(absl::StrCat("/", id, "/transport"))}}}});
}

}  // namespace calleval

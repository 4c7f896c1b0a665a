#include "tests/support/fake_twilio_server.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/websocket_client.h"
#include "tests/support/fake_phone_agent.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using Fields = std::vector<std::pair<std::string, std::string>>;

// --- Twilio's wire formats, written here from Twilio's documentation rather than taken from
// the service, so the service is held to them.

std::string Unescape(absl::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    int hi = 0, lo = 0;
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] == '%' && i + 2 < in.size() &&
               absl::SimpleHexAtoi(std::string(in.substr(i + 1, 1)), &hi) &&
               absl::SimpleHexAtoi(std::string(in.substr(i + 2, 1)), &lo)) {
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += in[i];
    }
  }
  return out;
}

Fields Form(absl::string_view body) {
  Fields out;
  for (absl::string_view pair : absl::StrSplit(body, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    out.emplace_back(Unescape(kv.first), Unescape(kv.second));
  }
  return out;
}

std::vector<std::string> All(const Fields& form, absl::string_view name) {
  std::vector<std::string> out;
  for (const auto& [key, value] : form) {
    if (key == name) out.push_back(value);
  }
  return out;
}

std::string One(const Fields& form, absl::string_view name) {
  std::vector<std::string> values = All(form, name);
  return values.size() == 1 ? values[0] : "";
}

std::string Escape(const std::string& in) {
  char* escaped = curl_easy_escape(nullptr, in.data(), static_cast<int>(in.size()));
  std::string out(escaped);
  curl_free(escaped);
  return out;
}

std::string Signature(const std::string& token, const std::string& url, Fields fields) {
  std::sort(fields.begin(), fields.end());
  std::string data = url;
  for (const auto& [key, value] : fields) data += key + value;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha1(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest, &length);
  return Base64Encode(std::string(reinterpret_cast<char*>(digest), length));
}

// The url attribute of the TwiML's <Connect><Stream>, XML entities undone.
std::string StreamUrl(const std::string& twiml) {
  if (!absl::StartsWith(twiml, "<Response><Connect><Stream ")) return "";
  const size_t at = twiml.find("url=\"");
  if (at == std::string::npos) return "";
  const size_t end = twiml.find('"', at + 5);
  if (end == std::string::npos) return "";
  std::string url = twiml.substr(at + 5, end - at - 5);
  for (const auto& [entity, c] : std::vector<std::pair<std::string, std::string>>{
           {"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}}) {
    for (size_t p; (p = url.find(entity)) != std::string::npos;) url.replace(p, entity.size(), c);
  }
  return url;
}

// Twilio Media Streams as Twilio sends and reads them.
class TwilioStream : public FakeStreamDialect {
 public:
  TwilioStream(std::string account_sid, std::string call_sid)
      : account_sid_(std::move(account_sid)),
        call_sid_(std::move(call_sid)),
        stream_sid_(absl::StrCat("MZ", HexEncode(RandomBytes(16)))) {}

  std::vector<std::string> Opening() override {
    return {
        json{{"event", "connected"}, {"protocol", "Call"}, {"version", "1.1.0"}}.dump(),
        json{{"event", "start"},
             {"sequenceNumber", Next()},
             {"streamSid", stream_sid_},
             {"start",
              {{"accountSid", account_sid_},
               {"streamSid", stream_sid_},
               {"callSid", call_sid_},
               {"tracks", {"inbound"}},
               {"customParameters", json::object()},
               {"mediaFormat",
                {{"encoding", "audio/x-mulaw"}, {"sampleRate", 8000}, {"channels", 1}}}}}}
            .dump()};
  }
  std::string Media(const std::string& mulaw, int64_t elapsed_ms) override {
    return json{{"event", "media"},
                {"sequenceNumber", Next()},
                {"streamSid", stream_sid_},
                {"media",
                 {{"track", "inbound"},
                  {"chunk", absl::StrCat(++chunk_)},
                  {"timestamp", absl::StrCat(elapsed_ms)},
                  {"payload", Base64Encode(mulaw)}}}}
        .dump();
  }
  std::string Played(const std::string& name) override {
    return json{{"event", "mark"},
                {"sequenceNumber", Next()},
                {"streamSid", stream_sid_},
                {"mark", {{"name", name}}}}
        .dump();
  }
  std::string Stop() override {
    return json{{"event", "stop"},
                {"sequenceNumber", Next()},
                {"streamSid", stream_sid_},
                {"stop", {{"accountSid", account_sid_}, {"callSid", call_sid_}}}}
        .dump();
  }
  // The application's messages are Twilio-shaped (media, mark, clear).
  Heard Read(const std::string& message) override { return ReadTwilioShapedMessage(message); }

 private:
  std::string Next() { return absl::StrCat(++sequence_); }
  const std::string account_sid_, call_sid_, stream_sid_;
  int sequence_ = 0;
  int64_t chunk_ = 0;
};

size_t Collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

struct FakeTwilioServer::Active {
  Call log;  // guarded by the server's mu_
  Line line;
  std::string amd_callback;
  std::atomic<bool> hangup{false};
  bool done = false;  // guarded by the server's mu_
};

FakeTwilioServer::FakeTwilioServer(std::string account_sid, std::string auth_token,
                                   absl::Duration agent_delay)
    : account_sid_(std::move(account_sid)),
      auth_token_(std::move(auth_token)),
      agent_delay_(agent_delay) {
  const std::string calls = absl::StrCat("/2010-04-01/Accounts/", account_sid_, "/Calls");
  http_.Handle(calls + ".json", [this](const TestHttpServer::Request& r) { return CreateCall(r); });
  http_.HandlePrefix(calls + "/",
                     [this](const TestHttpServer::Request& r) { return UpdateCall(r); });
}

FakeTwilioServer::~FakeTwilioServer() {
  stopping_ = true;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& call : calls_) call->hangup = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void FakeTwilioServer::SetLine(const std::string& to, Line line) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_[to] = line;
}

std::vector<FakeTwilioServer::Call> FakeTwilioServer::calls() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Call> out;
  for (const auto& call : calls_) out.push_back(call->log);
  return out;
}

bool FakeTwilioServer::WaitForEnd(const std::string& to, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return ended_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] {
    for (const auto& call : calls_) {
      if ((call->log.to == to || call->log.from == to) && call->done) return true;
    }
    return false;
  });
}

TestHttpServer::Response FakeTwilioServer::CreateCall(const TestHttpServer::Request& request) {
  TestHttpServer::Response response;
  response.content_type = "application/json";
  auto refuse = [&](int status, int code, const std::string& message) {
    response.status = status;
    response.body = json{{"code", code}, {"message", message}, {"status", status}}.dump();
    return response;
  };
  if (request.method != "POST") return refuse(405, 20004, "Method not allowed");
  if (request.Header("authorization") !=
      "Basic " + Base64Encode(account_sid_ + ":" + auth_token_)) {
    return refuse(401, 20003, "Authenticate");
  }
  if (!absl::StartsWith(request.Header("content-type"), "application/x-www-form-urlencoded")) {
    return refuse(400, 21211, "expected a form");
  }
  const Fields form = Form(request.body);
  auto active = std::make_shared<Active>();
  Call& log = active->log;
  log.to = One(form, "To");
  log.from = One(form, "From");
  log.media_url = StreamUrl(One(form, "Twiml"));
  log.status_callback = One(form, "StatusCallback");
  active->amd_callback = One(form, "AsyncAmdStatusCallback");
  if (log.to.empty() || log.to[0] != '+') {
    return refuse(400, 21211, "The 'To' number is not a valid phone number.");
  }
  if (log.from.empty()) return refuse(400, 21212, "The 'From' number is not valid.");
  if (log.media_url.empty())
    return refuse(400, 12100, "Document parse failure: no <Connect><Stream url>");
  std::vector<std::string> events = All(form, "StatusCallbackEvent");
  int timeout = 0, limit = 0;
  if (log.status_callback.empty() ||
      events != std::vector<std::string>{"initiated", "ringing", "answered", "completed"} ||
      !absl::SimpleAtoi(One(form, "Timeout"), &timeout) ||
      !absl::SimpleAtoi(One(form, "TimeLimit"), &limit) ||
      One(form, "MachineDetection") != "Enable" || One(form, "AsyncAmd") != "true" ||
      active->amd_callback.empty()) {
    return refuse(400, 21205,
                  "the status callbacks, Timeout, TimeLimit or MachineDetection are missing");
  }
  log.sid = absl::StrCat("CA", HexEncode(RandomBytes(16)));
  log.ring_timeout_seconds = timeout;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lines_.find(log.to);
  if (it != lines_.end()) active->line = it->second;
  calls_.push_back(active);
  threads_.emplace_back([this, active] { PlayCall(active); });
  response.status = 201;
  response.body = json{
      {"sid", log.sid},
      {"account_sid", account_sid_},
      {"to", log.to},
      {"from", log.from},
      {"status",
       "queued"}}.dump();
  return response;
}

TestHttpServer::Response FakeTwilioServer::UpdateCall(const TestHttpServer::Request& request) {
  TestHttpServer::Response response;
  response.content_type = "application/json";
  if (request.Header("authorization") !=
      "Basic " + Base64Encode(account_sid_ + ":" + auth_token_)) {
    response.status = 401;
    response.body = R"({"code":20003,"message":"Authenticate","status":401})";
    return response;
  }
  absl::string_view last = absl::string_view(request.path).substr(request.path.rfind('/') + 1);
  const std::string sid = absl::ConsumeSuffix(&last, ".json") ? std::string(last) : "";
  const Fields form = Form(request.body);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& call : calls_) {
    if (call->log.sid != sid) continue;
    if (One(form, "Status") == "completed") {
      call->log.hung_up_by_service = true;
      call->hangup = true;
    }
    response.body = json{{"sid", sid}, {"status", "completed"}}.dump();
    return response;
  }
  response.status = 404;
  response.body = R"({"code":20404,"message":"The requested resource was not found","status":404})";
  return response;
}

FakeTwilioServer::Answer FakeTwilioServer::PostSigned(const std::string& url, const Fields& fields,
                                                      const std::string& token) {
  std::string body;
  for (const auto& [key, value] : fields) {
    absl::StrAppend(&body, body.empty() ? "" : "&", Escape(key), "=", Escape(value));
  }
  CURL* curl = curl_easy_init();
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/x-www-form-urlencoded");
  headers = curl_slist_append(
      headers, absl::StrCat("X-Twilio-Signature: ", Signature(token, url, fields)).c_str());
  headers = curl_slist_append(headers, "User-Agent: TwilioProxy/1.1");
  Answer answer;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  answer.status = static_cast<int>(status);
  return answer;
}

int FakeTwilioServer::SendCallback(Active& call, const std::string& url, const Fields& fields,
                                   const std::string& token) {
  const int status = PostSigned(url, fields, token).status;
  std::string what;
  for (const auto& [key, value] : fields) {
    if (key == "CallStatus" || key == "AnsweredBy") what = value;
  }
  std::lock_guard<std::mutex> lock(mu_);
  call.log.callbacks_sent.push_back(absl::StrCat(what, "=", status));
  return status;
}

void FakeTwilioServer::SetIncomingUrl(std::string url) {
  std::lock_guard<std::mutex> lock(mu_);
  incoming_url_ = std::move(url);
}

FakeTwilioServer::Answer FakeTwilioServer::DialIn(const std::string& from, const std::string& to,
                                                  const std::string& auth_token) {
  auto active = std::make_shared<Active>();
  active->log.sid = absl::StrCat("CA", HexEncode(RandomBytes(16)));
  active->log.from = from;
  active->log.to = to;
  std::string url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    url = incoming_url_;
    auto it = lines_.find(from);
    if (it != lines_.end()) active->line = it->second;
  }
  // The fields of Twilio's voice webhook for an incoming call.
  const Answer answer = PostSigned(url,
                                   {{"AccountSid", account_sid_},
                                    {"ApiVersion", "2010-04-01"},
                                    {"CallSid", active->log.sid},
                                    {"CallStatus", "ringing"},
                                    {"Called", to},
                                    {"Caller", from},
                                    {"Direction", "inbound"},
                                    {"From", from},
                                    {"To", to}},
                                   auth_token.empty() ? auth_token_ : auth_token);
  active->log.callbacks_sent.push_back(absl::StrCat("incoming=", answer.status));
  active->log.media_url = answer.status == 200 ? StreamUrl(answer.body) : "";
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(active);
  if (active->log.media_url.empty()) {
    active->done = true;  // rejected, or an answer Twilio cannot do: the call ends there
    ended_.notify_all();
    return answer;
  }
  threads_.emplace_back([this, active] {
    Stream(*active);
    std::lock_guard<std::mutex> lock(mu_);
    active->done = true;
    ended_.notify_all();
  });
  return answer;
}

int FakeTwilioServer::PostCallback(const std::string& to, const std::string& status,
                                   const std::string& auth_token) {
  std::shared_ptr<Active> call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : calls_) {
      if (c->log.to == to) call = c;
    }
  }
  if (!call) return 0;
  return SendCallback(*call, call->log.status_callback,
                      {{"AccountSid", account_sid_},
                       {"CallSid", call->log.sid},
                       {"CallStatus", status},
                       {"To", to}},
                      auth_token);
}

int FakeTwilioServer::ReconnectMedia(const std::string& to) {
  std::string url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : calls_) {
      if (c->log.to == to) url = c->log.media_url;
    }
  }
  return MediaUpgradeStatus(url);
}

void FakeTwilioServer::PlayCall(std::shared_ptr<Active> call) {
  const std::string callback = call->log.status_callback;
  auto status = [&](const std::string& value) {
    SendCallback(*call, callback,
                 {{"AccountSid", account_sid_},
                  {"CallSid", call->log.sid},
                  {"CallStatus", value},
                  {"Direction", "outbound-api"},
                  {"From", call->log.from},
                  {"To", call->log.to}},
                 auth_token_);
  };
  status("initiated");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  status("ringing");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  switch (call->line.pickup) {
    case Pickup::kBusy:
      status("busy");
      break;
    case Pickup::kNoAnswer:
      status("no-answer");
      break;
    case Pickup::kAgent:
    case Pickup::kMachine:
      status("in-progress");
      Stream(*call);
      status("completed");
      break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  call->done = true;
  ended_.notify_all();
}

void FakeTwilioServer::Stream(Active& call) {
  runs::WebSocketOptions options;
  options.guard.allowed_hosts = {"127.0.0.1", "localhost"};
  options.field = "Stream url";
  absl::StatusOr<std::unique_ptr<runs::WebSocketConnection>> connected =
      runs::WebSocketConnection::Connect(call.log.media_url, options);
  if (!connected.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    call.log.error = std::string(connected.status().message());
    return;
  }
  runs::WebSocketConnection& ws = **connected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call.log.media_connected = true;
  }
  TwilioStream dialect(account_sid_, call.log.sid);
  FakeAgentOptions agent;
  agent.delay = agent_delay_;
  agent.machine = call.line.pickup == Pickup::kMachine;
  agent.machine_heard = [&] {
    SendCallback(call, call.amd_callback,
                 {{"AccountSid", account_sid_},
                  {"AnsweredBy", "machine_end_beep"},
                  {"CallSid", call.log.sid},
                  {"MachineDetectionDuration", "1800"}},
                 auth_token_);
  };
  agent.hang_up_after_answers = call.line.hang_up_after_answers;
  agent.interrupt_after = absl::Milliseconds(call.line.interrupt_after_ms);
  agent.hangup = &call.hangup;
  agent.media_arrived = [this, &call](std::chrono::steady_clock::time_point at) {
    std::lock_guard<std::mutex> lock(mu_);
    call.log.media_arrivals.push_back(at);
  };
  PlayFakeAgent(ws, dialect, agent, [&](FakeAgentNote what) {
    std::lock_guard<std::mutex> lock(mu_);
    switch (what) {
      case FakeAgentNote::kAnswered:
        ++call.log.answers;
        break;
      case FakeAgentNote::kMarkPlayed:
        ++call.log.marks_echoed;
        break;
      case FakeAgentNote::kCleared:
        ++call.log.clears;
        break;
      case FakeAgentNote::kTalkedOverAfterClear:
        ++call.log.talked_over_after_clear;
        break;
      case FakeAgentNote::kStopSent:
        call.log.stop_sent = true;
        break;
    }
  });
}

}  // namespace calleval

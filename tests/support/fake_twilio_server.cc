#include "tests/support/fake_twilio_server.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/mulaw.h"
#include "services/runs/websocket_client.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using Clock = std::chrono::steady_clock;
using Fields = std::vector<std::pair<std::string, std::string>>;

constexpr int kFrameSamples = 160;  // 20 ms at 8 kHz
constexpr auto kFrame = std::chrono::milliseconds(20);
// The agent hears the caller speaking above this RMS (about -44 dBFS).
constexpr double kLoudRms = 200;

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

std::vector<int16_t> Tone(int ms, double hz) {
  std::vector<int16_t> tone(8 * ms);
  for (size_t i = 0; i < tone.size(); ++i) {
    tone[i] = static_cast<int16_t>(9000 * std::sin(2 * 3.14159265358979 * hz * i / 8000.0));
  }
  return tone;
}

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

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
      if (call->log.to == to && call->done) return true;
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

int FakeTwilioServer::SendCallback(Active& call, const std::string& url, const Fields& fields,
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
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  std::string what;
  for (const auto& [key, value] : fields) {
    if (key == "CallStatus" || key == "AnsweredBy") what = value;
  }
  std::lock_guard<std::mutex> lock(mu_);
  call.log.callbacks_sent.push_back(absl::StrCat(what, "=", status));
  return static_cast<int>(status);
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
  // The upgrade by hand, to read the refusal's status line.
  std::string http_url = absl::StrCat("http", url.substr(url.find("://")));
  CURL* curl = curl_easy_init();
  curl_slist* headers = nullptr;
  for (const char* h : {"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="}) {
    headers = curl_slist_append(headers, h);
  }
  curl_easy_setopt(curl, CURLOPT_URL, http_url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 3000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  long status = 0;
  const CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  // A 101 leaves curl with a connection it cannot read: it reports an error with the code.
  (void)rc;
  return static_cast<int>(status);
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
  const std::string stream_sid = absl::StrCat("MZ", HexEncode(RandomBytes(16)));
  int sequence = 0;
  auto next = [&] { return absl::StrCat(++sequence); };
  (void)ws.SendText(
      json{{"event", "connected"}, {"protocol", "Call"}, {"version", "1.1.0"}}.dump());
  (void)ws.SendText(json{
      {"event", "start"},
      {"sequenceNumber", next()},
      {"streamSid", stream_sid},
      {"start",
       {{"accountSid", account_sid_},
        {"streamSid", stream_sid},
        {"callSid", call.log.sid},
        {"tracks", {"inbound"}},
        {"customParameters", json::object()},
        {"mediaFormat", {{"encoding", "audio/x-mulaw"}, {"sampleRate", 8000}, {"channels", 1}}}}}}
                        .dump());

  const bool machine = call.line.pickup == Pickup::kMachine;
  std::deque<int16_t> agent;  // what the agent (or the machine) has still to say
  for (int16_t s : Tone(machine ? 1500 : 1200, 300)) agent.push_back(s);
  const Clock::time_point started = Clock::now();
  Clock::time_point base = started;  // the pacing clock: frame n goes out at base + n * 20 ms
  int64_t frame = 0;
  int64_t chunk = 0;
  Clock::time_point caller_played_until = started;
  std::deque<std::pair<Clock::time_point, std::string>> marks;
  bool caller_spoke = false;
  Clock::time_point last_loud;
  Clock::time_point hang_up_at = Clock::time_point::max();
  bool amd_sent = false;
  const auto delay = absl::ToChronoMicroseconds(agent_delay_);

  auto stop = [&] {
    (void)ws.SendText(json{{"event", "stop"},
                           {"sequenceNumber", next()},
                           {"streamSid", stream_sid},
                           {"stop", {{"accountSid", account_sid_}, {"callSid", call.log.sid}}}}
                          .dump());
    ws.Close();
    std::lock_guard<std::mutex> lock(mu_);
    call.log.stop_sent = true;
  };

  while (true) {
    const Clock::time_point now = Clock::now();
    if (call.hangup.load() || now >= hang_up_at || now - started > std::chrono::minutes(2)) {
      return stop();
    }
    // Answering machine detection hears the machine's greeting and tells the service.
    if (machine && !amd_sent && now - started >= std::chrono::milliseconds(1800)) {
      amd_sent = true;
      SendCallback(call, call.amd_callback,
                   {{"AccountSid", account_sid_},
                    {"AnsweredBy", "machine_end_beep"},
                    {"CallSid", call.log.sid},
                    {"MachineDetectionDuration", "1800"}},
                   auth_token_);
    }
    // The agent answers `delay` after the caller's last loud frame arrived.
    Clock::time_point answer_at = Clock::time_point::max();
    if (caller_spoke && !machine) answer_at = last_loud + delay;
    if (now >= answer_at) {
      caller_spoke = false;
      for (int16_t s : Tone(1500, 350)) agent.push_back(s);
      base = answer_at;  // the answer's first frame goes out at its exact time
      frame = 0;
      int answers;
      {
        std::lock_guard<std::mutex> lock(mu_);
        answers = ++call.log.answers;
      }
      if (call.line.hang_up_after_answers > 0 && answers >= call.line.hang_up_after_answers) {
        hang_up_at = answer_at + std::chrono::milliseconds(1500 + 300);
      }
    }
    // Out goes the agent's next frame, paced in real time (silence when it says nothing).
    const Clock::time_point send_at = base + frame * kFrame;
    if (now >= send_at) {
      std::vector<int16_t> pcm(kFrameSamples, 0);
      for (int i = 0; i < kFrameSamples && !agent.empty(); ++i) {
        pcm[i] = agent.front();
        agent.pop_front();
      }
      (void)ws.SendText(json{
          {"event", "media"},
          {"sequenceNumber", next()},
          {"streamSid", stream_sid},
          {"media",
           {{"track", "inbound"},
            {"chunk", absl::StrCat(++chunk)},
            {"timestamp",
             absl::StrCat(
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count())},
            {"payload", Base64Encode(runs::MuLawEncode(pcm))}}}}
                            .dump());
      ++frame;
      continue;
    }
    // Marks come back once the caller's audio before them has played.
    while (!marks.empty() && marks.front().first <= now) {
      (void)ws.SendText(json{{"event", "mark"},
                             {"sequenceNumber", next()},
                             {"streamSid", stream_sid},
                             {"mark", {{"name", marks.front().second}}}}
                            .dump());
      marks.pop_front();
      std::lock_guard<std::mutex> lock(mu_);
      ++call.log.marks_echoed;
    }
    Clock::time_point wake = std::min(send_at, answer_at);
    if (!marks.empty()) wake = std::min(wake, marks.front().first);
    // Short slices: Poll() returns only once its wait is over, and each message is stamped
    // with the time it arrived, which the agent's timing rests on.
    const auto wait = std::min<Clock::duration>(std::max(Clock::duration::zero(), wake - now),
                                                std::chrono::milliseconds(1));
    absl::StatusOr<std::vector<runs::WebSocketMessage>> got = ws.Poll(absl::FromChrono(wait));
    if (!got.ok()) return;  // the service closed the stream: the call ends
    const Clock::time_point arrived = Clock::now();
    for (const runs::WebSocketMessage& m : *got) {
      json event = json::parse(m.data, nullptr, false);
      if (!event.is_object()) continue;
      const std::string kind = event.value("event", "");
      if (kind == "media") {
        std::optional<std::string> payload =
            Base64Decode(event["media"].value("payload", std::string()));
        if (!payload) continue;
        {
          std::lock_guard<std::mutex> lock(mu_);
          call.log.media_arrivals.push_back(arrived);
        }
        const std::vector<int16_t> pcm = runs::MuLawDecode(*payload);
        double energy = 0;
        for (int16_t s : pcm) energy += static_cast<double>(s) * s;
        if (!pcm.empty() && std::sqrt(energy / pcm.size()) > kLoudRms) {
          caller_spoke = true;
          last_loud = arrived;
        }
        caller_played_until =
            std::max(caller_played_until, arrived) + std::chrono::microseconds(125) * pcm.size();
      } else if (kind == "mark") {
        marks.emplace_back(caller_played_until, event["mark"].value("name", std::string()));
      } else if (kind == "clear") {
        // What was queued is dropped: the marks waiting on it come back at once.
        caller_played_until = arrived;
        for (auto& mark : marks) mark.first = arrived;
        std::lock_guard<std::mutex> lock(mu_);
        ++call.log.clears;
      }
    }
  }
}

}  // namespace calleval

#include "tests/support/fake_carriers.h"

#include <openssl/evp.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crypto.h"
#include "common/provider_http.h"
#include "services/runs/plivo_carrier.h"
#include "services/runs/websocket_client.h"
#include "tests/support/fake_phone_agent.h"

namespace calleval {
namespace {

TestHttpServer::Response JsonResponse(int status, const nlohmann::json& body) {
  TestHttpServer::Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = body.dump();
  return r;
}

std::string Uuid() {
  const std::string hex = HexEncode(RandomBytes(16));
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20));
}

std::string FormEncode(const std::multimap<std::string, std::string>& params) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  auto encode = [](const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
      if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
        out += static_cast<char>(c);
      } else if (c == ' ') {
        out += '+';
      } else {
        out += '%';
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    return out;
  };
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    absl::StrAppend(&out, encode(k), "=", encode(v));
  }
  return out;
}

// POSTs a webhook to the service and returns its answer (any status), or the error when it
// could not be reached.
absl::StatusOr<WebhookAnswer> Deliver(ProviderPost post) {
  long status = 0;
  post.http_status = &status;
  post.max_attempts = 1;
  post.connect_timeout = absl::Seconds(5);
  post.request_timeout = absl::Seconds(30);
  post.label = "webhook: ";
  absl::StatusOr<std::string> body = PostToProvider(post);
  if (status == 0) return body.status();
  WebhookAnswer answer;
  answer.status = static_cast<int>(status);
  if (body.ok()) answer.body = *std::move(body);
  return answer;
}

void Pause(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Opens the service's media websocket at `url` (a local one: the fakes reach loopback only).
absl::StatusOr<std::unique_ptr<runs::WebSocketConnection>> ConnectMedia(const std::string& url,
                                                                       const std::string& field) {
  runs::WebSocketOptions options;
  options.guard.allowed_hosts = {"127.0.0.1", "localhost"};
  options.field = field;
  return runs::WebSocketConnection::Connect(url, options);
}

// Plays the answered call's stream to the test agent, noting what happens in `call`'s log.
FakeCallEnd StreamToAgent(FakeCallBook& book, FakeCallBook::Entry& call,
                          runs::WebSocketConnection& ws, FakeStreamDialect& dialect,
                          std::function<void()> machine_heard) {
  book.Note(call, [](PlayedCall& log) { log.media_connected = true; });
  FakeAgentOptions agent;
  agent.delay = book.agent_delay();
  agent.machine = call.line.pickup == FakeLine::kMachine;
  agent.machine_heard = std::move(machine_heard);
  agent.hang_up_after_answers = call.line.hang_up_after_answers;
  agent.interrupt_after = absl::Milliseconds(call.line.interrupt_after_ms);
  agent.hangup = &call.hangup;
  return PlayFakeAgent(ws, dialect, agent, [&](FakeAgentNote what) {
    book.Note(call, [what](PlayedCall& log) {
      if (what == FakeAgentNote::kAnswered) ++log.answers;
      if (what == FakeAgentNote::kMarkPlayed) ++log.marks_played;
      if (what == FakeAgentNote::kCleared) ++log.clears;
      if (what == FakeAgentNote::kTalkedOverAfterClear) ++log.talked_over_after_clear;
      if (what == FakeAgentNote::kStopSent) log.stop_sent = true;
    });
  });
}

// Telnyx media streaming as Telnyx sends and reads it
// (https://developers.telnyx.com/docs/voice/programmable-voice/media-streaming).
class TelnyxStream : public FakeStreamDialect {
 public:
  explicit TelnyxStream(std::string call_control_id)
      : call_control_id_(std::move(call_control_id)), stream_id_(Uuid()) {}

  std::vector<std::string> Opening() override {
    return {nlohmann::json{{"event", "connected"}, {"version", "1.0.0"}}.dump(),
            nlohmann::json{{"event", "start"},
                           {"sequence_number", Next()},
                           {"start",
                            {{"user_id", Uuid()},
                             {"call_control_id", call_control_id_},
                             {"call_session_id", Uuid()},
                             {"media_format",
                              {{"encoding", "PCMU"}, {"sample_rate", 8000}, {"channels", 1}}}}},
                           {"stream_id", stream_id_}}
                .dump()};
  }
  std::string Media(const std::string& mulaw, int64_t elapsed_ms) override {
    return nlohmann::json{{"event", "media"},
                          {"sequence_number", Next()},
                          {"media",
                           {{"track", "inbound"},
                            {"chunk", absl::StrCat(++chunk_)},
                            {"timestamp", absl::StrCat(elapsed_ms)},
                            {"payload", Base64Encode(mulaw)}}},
                          {"stream_id", stream_id_}}
        .dump();
  }
  std::string Played(const std::string& name) override {
    return nlohmann::json{{"event", "mark"},
                          {"sequence_number", Next()},
                          {"stream_id", stream_id_},
                          {"mark", {{"name", name}}}}
        .dump();
  }
  std::string Stop() override {
    return nlohmann::json{{"event", "stop"},
                          {"sequence_number", Next()},
                          {"stop", {{"call_control_id", call_control_id_}}},
                          {"stream_id", stream_id_}}
        .dump();
  }
  // The application's messages are Twilio-shaped (media, mark, clear).
  Heard Read(const std::string& message) override { return ReadTwilioShapedMessage(message); }

 private:
  std::string Next() { return absl::StrCat(++sequence_); }
  const std::string call_control_id_, stream_id_;
  int sequence_ = 0;
  int64_t chunk_ = 0;
};

// Plivo audio streams as Plivo sends and reads them
// (https://www.plivo.com/docs/voice/xml/the-stream-element/): playAudio, checkpoint and
// clearAudio from the application; start, media and playedStream from Plivo, which ends a
// stream by closing the websocket.
class PlivoStream : public FakeStreamDialect {
 public:
  PlivoStream(std::string auth_id, std::string call_uuid)
      : auth_id_(std::move(auth_id)), call_uuid_(std::move(call_uuid)), stream_id_(Uuid()) {}

  std::vector<std::string> Opening() override {
    return {nlohmann::json{{"event", "start"},
                           {"sequenceNumber", sequence_++},
                           {"start",
                            {{"callId", call_uuid_},
                             {"streamId", stream_id_},
                             {"accountId", auth_id_},
                             {"tracks", {"inbound"}},
                             {"mediaFormat",
                              {{"encoding", "audio/x-mulaw"}, {"sampleRate", 8000}}}}}}
                .dump()};
  }
  std::string Media(const std::string& mulaw, int64_t elapsed_ms) override {
    return nlohmann::json{{"event", "media"},
                          {"sequenceNumber", sequence_++},
                          {"streamId", stream_id_},
                          {"media",
                           {{"track", "inbound"},
                            {"timestamp", absl::StrCat(elapsed_ms)},
                            {"chunk", ++chunk_},
                            {"payload", Base64Encode(mulaw)}}}}
        .dump();
  }
  std::string Played(const std::string& name) override {
    return nlohmann::json{{"event", "playedStream"},
                          {"sequenceNumber", sequence_++},
                          {"streamId", stream_id_},
                          {"name", name}}
        .dump();
  }
  std::string Stop() override { return ""; }
  Heard Read(const std::string& message) override {
    Heard heard;
    nlohmann::json event = nlohmann::json::parse(message, nullptr, false);
    if (!event.is_object()) return heard;
    const std::string kind = event.value("event", "");
    if (kind == "playAudio" && event["media"].is_object()) {
      if (event["media"].value("contentType", std::string()) != "audio/x-mulaw") return heard;
      std::optional<std::string> payload =
          Base64Decode(event["media"].value("payload", std::string()));
      if (!payload) return heard;
      heard.kind = Heard::kMedia;
      heard.mulaw = *std::move(payload);
    } else if (kind == "checkpoint" && event.value("streamId", std::string()) == stream_id_) {
      heard.kind = Heard::kMark;
      heard.name = event.value("name", std::string());
    } else if (kind == "clearAudio") {
      heard.kind = Heard::kClear;
    }
    return heard;
  }

 private:
  const std::string auth_id_, call_uuid_, stream_id_;
  int sequence_ = 0;
  int64_t chunk_ = 0;
};

// The URL of a Plivo answer document's <Stream>, XML entities undone; empty when there is none.
std::string PlivoStreamUrl(const std::string& xml) {
  const size_t open = xml.find("<Stream");
  if (open == std::string::npos || xml.find("bidirectional=\"true\"", open) == std::string::npos) {
    return "";
  }
  const size_t begin = xml.find('>', open);
  const size_t end = xml.find("</Stream>", open);
  if (begin == std::string::npos || end == std::string::npos || end < begin) return "";
  std::string url = std::string(absl::StripAsciiWhitespace(xml.substr(begin + 1, end - begin - 1)));
  for (const auto& [entity, c] : std::vector<std::pair<std::string, std::string>>{
           {"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}}) {
    for (size_t p; (p = url.find(entity)) != std::string::npos;) url.replace(p, entity.size(), c);
  }
  return url;
}

}  // namespace

// The calls a fake carrier plays.

void FakeCallBook::Enable(absl::Duration agent_delay) {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = true;
  agent_delay_ = agent_delay;
}

bool FakeCallBook::enabled() {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

absl::Duration FakeCallBook::agent_delay() {
  std::lock_guard<std::mutex> lock(mu_);
  return agent_delay_;
}

void FakeCallBook::SetLine(const std::string& to, FakeLine line) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_[to] = line;
}

void FakeCallBook::Play(const std::string& id, const std::string& to,
                        std::function<void(std::shared_ptr<Entry>)> play, const std::string& from) {
  auto entry = std::make_shared<Entry>();
  entry->log.id = id;
  entry->log.to = to;
  entry->log.from = from;
  std::lock_guard<std::mutex> lock(mu_);
  auto line = lines_.find(from.empty() ? to : from);
  if (line != lines_.end()) entry->line = line->second;
  entries_.push_back(entry);
  threads_.emplace_back([this, entry, play = std::move(play)] {
    play(entry);
    std::lock_guard<std::mutex> lock(mu_);
    entry->log.done = true;
    ended_.notify_all();
  });
}

void FakeCallBook::HangUp(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& entry : entries_) {
    if (entry->log.id != id) continue;
    entry->log.hung_up_by_service = true;
    entry->hangup = true;
  }
}

void FakeCallBook::Note(Entry& entry, const std::function<void(PlayedCall&)>& change) {
  std::lock_guard<std::mutex> lock(mu_);
  change(entry.log);
}

std::vector<PlayedCall> FakeCallBook::calls() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PlayedCall> out;
  for (const auto& entry : entries_) out.push_back(entry->log);
  return out;
}

bool FakeCallBook::WaitForEnd(const std::string& to, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return ended_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] {
    for (const auto& entry : entries_) {
      if ((entry->log.to == to || entry->log.from == to) && entry->log.done) return true;
    }
    return false;
  });
}

void FakeCallBook::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& entry : entries_) entry->hangup = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

Ed25519TestKey::Ed25519TestKey() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  if (ctx == nullptr || EVP_PKEY_keygen_init(ctx) != 1 || EVP_PKEY_keygen(ctx, &key_) != 1) {
    std::abort();
  }
  EVP_PKEY_CTX_free(ctx);
}

Ed25519TestKey::~Ed25519TestKey() { EVP_PKEY_free(key_); }

std::string Ed25519TestKey::PublicKeyBase64() const {
  unsigned char raw[32];
  size_t n = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(key_, raw, &n) != 1) std::abort();
  return Base64Encode(std::string(reinterpret_cast<char*>(raw), n));
}

std::string Ed25519TestKey::Sign(const std::string& message) const {
  unsigned char signature[64];
  size_t n = sizeof signature;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr || EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key_) != 1 ||
      EVP_DigestSign(ctx, signature, &n, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1) {
    std::abort();
  }
  EVP_MD_CTX_free(ctx);
  return Base64Encode(std::string(reinterpret_cast<char*>(signature), n));
}

// Telnyx.

FakeTelnyx::FakeTelnyx(std::string api_key, std::string connection_id)
    : api_key_(std::move(api_key)), connection_id_(std::move(connection_id)) {
  http_.Handle("/v2/calls", [this](const TestHttpServer::Request& r) { return HandleDial(r); });
  http_.HandlePrefix("/v2/calls/",
                     [this](const TestHttpServer::Request& r) { return HandleAction(r); });
}

std::vector<FakeTelnyx::Dial> FakeTelnyx::dials() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dials_;
}

std::vector<std::string> FakeTelnyx::hangups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hangups_;
}

void FakeTelnyx::RefuseDials(int status, std::string title, std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_status_ = status;
  refuse_title_ = std::move(title);
  refuse_detail_ = std::move(detail);
}

namespace {

TestHttpServer::Response TelnyxError(int status, const std::string& code, const std::string& title,
                                     const std::string& detail) {
  return JsonResponse(status,
                      {{"errors", {{{"code", code}, {"title", title}, {"detail", detail}}}}});
}

}  // namespace

TestHttpServer::Response FakeTelnyx::HandleDial(const TestHttpServer::Request& request) {
  if (request.method != "POST") return TelnyxError(405, "10005", "Method not allowed", "");
  if (request.Header("authorization") != absl::StrCat("Bearer ", api_key_)) {
    return TelnyxError(401, "10009", "Authentication failed",
                       "Could not understand the provided credentials.");
  }
  nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
  if (!body.is_object()) return TelnyxError(400, "10015", "Bad Request", "invalid JSON");
  for (const char* field : {"connection_id", "to", "from"}) {
    if (!body.contains(field) || !body[field].is_string()) {
      return TelnyxError(422, "10004", "Missing required parameter",
                         absl::StrCat("The '", field, "' parameter is required."));
    }
  }
  if (body["connection_id"] != connection_id_) {
    return TelnyxError(422, "10010", "Invalid connection_id", "The connection does not exist.");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (refuse_status_ != 0) {
    return TelnyxError(refuse_status_, "10000", refuse_title_, refuse_detail_);
  }
  Dial dial;
  dial.call_control_id = absl::StrCat("v3:fake-", dials_.size() + 1, "-", Uuid());
  dial.body = body;
  dials_.push_back(dial);
  if (book_.enabled()) {
    book_.Play(dial.call_control_id, body["to"].get<std::string>(),
               [this, body](std::shared_ptr<FakeCallBook::Entry> call) { PlayCall(call, body); });
  }
  return JsonResponse(200, {{"data",
                             {{"call_control_id", dial.call_control_id},
                              {"call_leg_id", Uuid()},
                              {"call_session_id", Uuid()},
                              {"is_alive", false},
                              {"record_type", "call"}}}});
}

TestHttpServer::Response FakeTelnyx::HandleAction(const TestHttpServer::Request& request) {
  absl::string_view rest = absl::StripPrefix(request.path, "/v2/calls/");
  if (request.method == "POST" && absl::ConsumeSuffix(&rest, "/actions/answer")) {
    return Answer(std::string(rest), request);
  }
  if (request.method != "POST" || !absl::ConsumeSuffix(&rest, "/actions/hangup")) {
    return TelnyxError(404, "10005", "Resource not found", "");
  }
  if (request.Header("authorization") != absl::StrCat("Bearer ", api_key_)) {
    return TelnyxError(401, "10009", "Authentication failed",
                       "Could not understand the provided credentials.");
  }
  const std::string id(rest);
  std::lock_guard<std::mutex> lock(mu_);
  bool known = false;
  for (const Dial& d : dials_) known = known || d.call_control_id == id;
  if (!known) return TelnyxError(404, "10005", "Resource not found", "Call not found.");
  for (const std::string& h : hangups_) {
    if (h == id) {
      return TelnyxError(422, "90018", "Call has already ended",
                         "This call is no longer active and can't receive commands.");
    }
  }
  hangups_.push_back(id);
  book_.HangUp(id);
  return JsonResponse(200, {{"data", {{"result", "ok"}}}});
}

void FakeTelnyx::SetIncomingUrl(std::string url) {
  std::lock_guard<std::mutex> lock(mu_);
  incoming_url_ = std::move(url);
}

std::map<std::string, nlohmann::json> FakeTelnyx::answers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return answers_;
}

absl::StatusOr<WebhookAnswer> FakeTelnyx::DialIn(const std::string& from, const std::string& to,
                                                 std::string* id, const Ed25519TestKey* signer) {
  std::string url, call_control_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    url = incoming_url_;
    call_control_id = absl::StrCat("v3:in-", incoming_.size() + 1, "-", Uuid());
    incoming_[call_control_id] = Incoming{from, to, false};
  }
  if (id != nullptr) *id = call_control_id;
  // https://developers.telnyx.com/api/call-control (call.initiated): an incoming call is parked
  // until a command answers it.
  return Post(url, "call.initiated",
              {{"call_control_id", call_control_id},
               {"call_leg_id", Uuid()},
               {"call_session_id", Uuid()},
               {"connection_id", connection_id_},
               {"direction", "incoming"},
               {"from", from},
               {"to", to},
               {"state", "parked"}},
              absl::Now(), signer);
}

TestHttpServer::Response FakeTelnyx::Answer(const std::string& id,
                                            const TestHttpServer::Request& request) {
  if (request.Header("authorization") != absl::StrCat("Bearer ", api_key_)) {
    return TelnyxError(401, "10009", "Authentication failed",
                       "Could not understand the provided credentials.");
  }
  nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
  if (!body.is_object()) return TelnyxError(400, "10015", "Bad Request", "invalid JSON");
  for (const char* field : {"stream_url", "webhook_url"}) {
    if (!body.contains(field) || !body[field].is_string()) {
      return TelnyxError(422, "10004", "Missing required parameter",
                         absl::StrCat("The '", field, "' parameter is required."));
    }
  }
  if (body.value("stream_bidirectional_mode", "") != "rtp" ||
      body.value("stream_bidirectional_codec", "") != "PCMU") {
    return TelnyxError(422, "10032", "Invalid parameter",
                       "a bidirectional stream needs stream_bidirectional_mode and "
                       "stream_bidirectional_codec");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = incoming_.find(id);
  if (it == incoming_.end())
    return TelnyxError(404, "10005", "Resource not found", "Call not found.");
  if (it->second.answered) {
    return TelnyxError(422, "90018", "Call has already ended",
                       "This call is no longer active and can't receive commands.");
  }
  it->second.answered = true;
  answers_[id] = body;
  Dial dial;
  dial.call_control_id = id;
  dial.body = body;
  dial.body["from"] = it->second.from;
  dial.body["to"] = it->second.to;
  dials_.push_back(dial);
  if (book_.enabled()) {
    book_.Play(
        id, it->second.to,
        [this, dial = dial.body](std::shared_ptr<FakeCallBook::Entry> call) {
          PlayCall(call, dial, /*incoming=*/true);
        },
        it->second.from);
  }
  return JsonResponse(200, {{"data", {{"result", "ok"}}}});
}

void FakeTelnyx::PlayCall(std::shared_ptr<FakeCallBook::Entry> call, nlohmann::json dial,
                          bool incoming) {
  const std::string id = call->log.id;
  auto webhook = [&](const std::string& type, nlohmann::json payload) {
    payload["from"] = dial.value("from", "");
    payload["to"] = dial.value("to", "");
    payload["direction"] = incoming ? "incoming" : "outgoing";
    absl::StatusOr<WebhookAnswer> answer = SendWebhook(id, type, std::move(payload));
    book_.Note(*call, [&](PlayedCall& log) {
      log.webhooks_sent.push_back(absl::StrCat(type, "=", answer.ok() ? answer->status : 0));
    });
  };
  if (!incoming) {
    webhook("call.initiated", {{"state", "bridging"}});
    Pause(250);
    if (call->line.pickup == FakeLine::kBusy) {
      return webhook("call.hangup", {{"hangup_cause", "user_busy"}, {"hangup_source", "callee"}});
    }
    if (call->line.pickup == FakeLine::kNoAnswer) {
      return webhook("call.hangup", {{"hangup_cause", "timeout"}, {"hangup_source", "unknown"}});
    }
  }
  webhook("call.answered", {{"state", "answered"}});
  const std::string url = dial.value("stream_url", "");
  book_.Note(*call, [&](PlayedCall& log) { log.media_url = url; });
  absl::StatusOr<std::unique_ptr<runs::WebSocketConnection>> ws = ConnectMedia(url, "stream_url");
  if (!ws.ok()) {
    book_.Note(*call, [&](PlayedCall& log) { log.error = std::string(ws.status().message()); });
    return webhook("call.hangup", {{"hangup_cause", "unspecified"}, {"hangup_source", "unknown"}});
  }
  TelnyxStream dialect(id);
  const FakeCallEnd end = StreamToAgent(book_, *call, **ws, dialect, [&] {
    webhook("call.machine.detection.ended", {{"result", "machine"}});
  });
  // The agent is the callee of a dialled call and the caller of one it made.
  const bool by_agent = end == FakeCallEnd::kAgentHungUp;
  webhook("call.hangup", {{"hangup_cause", "normal_clearing"},
                          {"hangup_source", by_agent != incoming ? "callee" : "caller"}});
}

absl::StatusOr<WebhookAnswer> FakeTelnyx::SendWebhook(const std::string& call_control_id,
                                                      const std::string& type,
                                                      nlohmann::json payload, absl::Time when,
                                                      const Ed25519TestKey* signer) {
  std::string url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Dial& d : dials_) {
      if (d.call_control_id == call_control_id) url = d.body.value("webhook_url", "");
    }
  }
  if (url.empty()) return absl::NotFoundError(absl::StrCat("no dial ", call_control_id));
  if (!payload.is_object()) payload = nlohmann::json::object();
  payload["call_control_id"] = call_control_id;
  payload["connection_id"] = connection_id_;
  return Post(url, type, std::move(payload), when, signer);
}

absl::StatusOr<WebhookAnswer> FakeTelnyx::Post(const std::string& url, const std::string& type,
                                               nlohmann::json payload, absl::Time when,
                                               const Ed25519TestKey* signer) {
  const std::string body =
      nlohmann::json{
          {"data",
           {{"event_type", type},
            {"id", Uuid()},
            {"occurred_at", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", when, absl::UTCTimeZone())},
            {"payload", payload},
            {"record_type", "event"}}},
          {"meta", {{"attempt", 1}, {"delivered_to", url}}}}
          .dump();
  const std::string timestamp = absl::StrCat(absl::ToUnixSeconds(when));
  ProviderPost post;
  post.url = url;
  post.body = body;
  post.headers = {
      absl::StrCat("telnyx-timestamp: ", timestamp),
      absl::StrCat("telnyx-signature-ed25519: ",
                   (signer != nullptr ? *signer : key_).Sign(absl::StrCat(timestamp, "|", body)))};
  return Deliver(std::move(post));
}

// Plivo.

FakePlivo::FakePlivo(std::string auth_id, std::string auth_token)
    : auth_id_(std::move(auth_id)), auth_token_(std::move(auth_token)) {
  http_.HandlePrefix(absl::StrCat("/v1/Account/", auth_id_, "/"),
                     [this](const TestHttpServer::Request& r) { return Handle(r); });
}

std::vector<FakePlivo::Call> FakePlivo::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::vector<std::string> FakePlivo::deletes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deletes_;
}

void FakePlivo::RefuseCalls(int status, std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_status_ = status;
  refuse_error_ = std::move(error);
}

TestHttpServer::Response FakePlivo::Handle(const TestHttpServer::Request& request) {
  auto error = [](int status, const std::string& message) {
    return JsonResponse(status, {{"api_id", Uuid()}, {"error", message}});
  };
  if (request.Header("authorization") !=
      absl::StrCat("Basic ", Base64Encode(absl::StrCat(auth_id_, ":", auth_token_)))) {
    return error(401, "Authentication credentials invalid.");
  }
  absl::string_view rest =
      absl::StripPrefix(request.path, absl::StrCat("/v1/Account/", auth_id_, "/"));
  std::lock_guard<std::mutex> lock(mu_);
  if (rest == "Call/" && request.method == "POST") {
    nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
    if (!body.is_object()) return error(400, "invalid JSON");
    for (const char* field : {"from", "to", "answer_url"}) {
      if (!body.contains(field) || !body[field].is_string()) {
        return error(400, absl::StrCat(field, " parameter is required"));
      }
    }
    if (refuse_status_ != 0) return error(refuse_status_, refuse_error_);
    Call call;
    call.request_uuid = Uuid();
    call.call_uuid = Uuid();
    call.body = body;
    calls_.push_back(call);
    if (book_.enabled()) {
      book_.Play(call.request_uuid, body["to"].get<std::string>(),
                 [this](std::shared_ptr<FakeCallBook::Entry> played) { PlayCall(played); });
    }
    return JsonResponse(
        201, {{"api_id", Uuid()}, {"message", "call fired"}, {"request_uuid", call.request_uuid}});
  }
  if (request.method == "DELETE") {
    deletes_.push_back(request.target);
    for (const Call& c : calls_) {
      if (rest == absl::StrCat("Call/", c.call_uuid, "/") ||
          rest == absl::StrCat("Request/", c.request_uuid, "/")) {
        book_.HangUp(c.request_uuid);
        TestHttpServer::Response r;
        r.status = 204;
        return r;
      }
    }
    return error(404, "not found");
  }
  return error(405, "method not allowed");
}

absl::StatusOr<WebhookAnswer> FakePlivo::Callback(const std::string& request_uuid,
                                                  const std::string& url_field,
                                                  std::multimap<std::string, std::string> params,
                                                  const std::string& token) {
  std::string url;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Call& c : calls_) {
      if (c.request_uuid != request_uuid) continue;
      url = c.body.value(url_field, "");
      const std::string direction = c.body.value("direction", "outbound");
      params.emplace("CallUUID", c.call_uuid);
      // Only a call placed through the API has a request.
      if (direction == "outbound") params.emplace("RequestUUID", c.request_uuid);
      params.emplace("From", c.body.value("from", ""));
      params.emplace("To", c.body.value("to", ""));
      params.emplace("Direction", direction);
    }
  }
  if (url.empty()) {
    return absl::NotFoundError(absl::StrCat("no call ", request_uuid, " with a ", url_field));
  }
  const std::string nonce =
      absl::StrCat(std::strtoull(HexEncode(RandomBytes(8)).c_str(), nullptr, 16));
  const std::string signature = runs::PlivoSignatureV3(
      token.empty() ? auth_token_ : token, runs::PlivoSignatureV3Base("POST", url, params), nonce);
  ProviderPost post;
  post.url = url;
  post.content_type = "application/x-www-form-urlencoded";
  post.body = FormEncode(params);
  post.headers = {absl::StrCat("X-Plivo-Signature-V3: ", signature),
                  absl::StrCat("X-Plivo-Signature-V3-Nonce: ", nonce)};
  return Deliver(std::move(post));
}

void FakePlivo::PlayCall(std::shared_ptr<FakeCallBook::Entry> call) {
  const std::string id = call->log.id;
  auto callback = [&](const std::string& field, std::multimap<std::string, std::string> params) {
    const std::string what =
        params.count("CallStatus") ? params.find("CallStatus")->second : field;
    absl::StatusOr<WebhookAnswer> answer = Callback(id, field, std::move(params));
    book_.Note(*call, [&](PlayedCall& log) {
      log.webhooks_sent.push_back(absl::StrCat(what, "=", answer.ok() ? answer->status : 0));
    });
    return answer;
  };
  callback("ring_url", {{"CallStatus", "ringing"}, {"Event", "Ring"}});
  Pause(250);
  if (call->line.pickup == FakeLine::kBusy) {
    callback("hangup_url", {{"CallStatus", "busy"},
                            {"Event", "Hangup"},
                            {"HangupCauseName", "Busy Line"},
                            {"HangupSource", "Callee"}});
    return;
  }
  if (call->line.pickup == FakeLine::kNoAnswer) {
    callback("hangup_url", {{"CallStatus", "no-answer"},
                            {"Event", "Hangup"},
                            {"HangupCauseName", "No Answer"},
                            {"HangupSource", "Plivo"}});
    return;
  }
  // Answered: Plivo asks the answer URL what to do and does it.
  absl::StatusOr<WebhookAnswer> document =
      callback("answer_url", {{"CallStatus", "in-progress"}, {"Event", "StartApp"}});
  std::string url;
  if (document.ok() && document->status == 200) url = PlivoStreamUrl(document->body);
  StreamCall(call, url, /*incoming=*/false);
}

void FakePlivo::SetIncomingUrl(std::string url) {
  std::lock_guard<std::mutex> lock(mu_);
  incoming_url_ = std::move(url);
}

absl::StatusOr<WebhookAnswer> FakePlivo::DialIn(const std::string& from, const std::string& to,
                                                const std::string& token) {
  Call call;
  call.call_uuid = Uuid();
  // No request for an incoming call: the book and the DELETEs know it by its CallUUID.
  call.request_uuid = call.call_uuid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call.body = {{"from", std::string(absl::StripPrefix(from, "+"))},
                 {"to", std::string(absl::StripPrefix(to, "+"))},
                 {"answer_url", incoming_url_},
                 {"direction", "inbound"}};
    calls_.push_back(call);
  }
  absl::StatusOr<WebhookAnswer> document =
      Callback(call.call_uuid, "answer_url",
               {{"CallStatus", "ringing"}, {"Event", "StartApp"}, {"CallerName", from}}, token);
  if (!document.ok() || document->status != 200) return document;
  const std::string url = PlivoStreamUrl(document->body);
  if (!url.empty() && book_.enabled()) {
    book_.Play(
        call.call_uuid, to,
        [this, url](std::shared_ptr<FakeCallBook::Entry> played) {
          StreamCall(played, url, /*incoming=*/true);
        },
        from);
  }
  return document;
}

void FakePlivo::StreamCall(std::shared_ptr<FakeCallBook::Entry> call, const std::string& url,
                           bool incoming) {
  const std::string id = call->log.id;
  auto callback = [&](const std::string& field, std::multimap<std::string, std::string> params) {
    // The application's hangup URL of a number's incoming calls is not the service's: only a
    // dialled call's hangup is reported to it.
    if (incoming) return;
    const std::string what = params.count("CallStatus") ? params.find("CallStatus")->second : field;
    absl::StatusOr<WebhookAnswer> answer = Callback(id, field, std::move(params));
    book_.Note(*call, [&](PlayedCall& log) {
      log.webhooks_sent.push_back(absl::StrCat(what, "=", answer.ok() ? answer->status : 0));
    });
  };
  book_.Note(*call, [&](PlayedCall& log) { log.media_url = url; });
  std::string call_uuid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Call& c : calls_) {
      if (c.request_uuid == id) call_uuid = c.call_uuid;
    }
  }
  absl::StatusOr<std::unique_ptr<runs::WebSocketConnection>> ws =
      url.empty() ? absl::InvalidArgumentError("the answer document has no bidirectional <Stream>")
                  : ConnectMedia(url, "<Stream>");
  if (!ws.ok()) {
    book_.Note(*call, [&](PlayedCall& log) { log.error = std::string(ws.status().message()); });
    callback("hangup_url", {{"CallStatus", "completed"},
                            {"Event", "Hangup"},
                            {"HangupCauseName", "Invalid Answer XML"},
                            {"HangupSource", "Plivo"}});
    return;
  }
  PlivoStream dialect(auth_id_, call_uuid);
  const FakeCallEnd end = StreamToAgent(book_, *call, **ws, dialect, [&] {
    callback("machine_detection_url", {{"Machine", "true"}, {"Event", "MachineDetection"}});
  });
  const bool agent = end == FakeCallEnd::kAgentHungUp;
  callback("hangup_url", {{"CallStatus", "completed"},
                          {"Event", "Hangup"},
                          {"HangupCauseName", agent ? "Normal Hangup" : "API Request"},
                          {"HangupSource", agent ? "Callee" : "API Request"}});
}

}  // namespace calleval

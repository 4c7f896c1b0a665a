#include "tests/support/fake_livekit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <deque>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/crypto.h"
#include "services/runs/webrtc_peer.h"

namespace calleval {
namespace {

std::optional<std::string> Base64UrlDecode(absl::string_view text) {
  std::string standard(text);
  for (char& c : standard) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  while (standard.size() % 4 != 0) standard.push_back('=');
  return Base64Decode(standard);
}

std::string QueryValue(absl::string_view query, absl::string_view name) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first != name) continue;
    // Percent-decoding: tokens only need it for characters a client chose to escape.
    std::string out;
    for (size_t i = 0; i < kv.second.size(); ++i) {
      if (kv.second[i] == '%' && i + 2 < kv.second.size()) {
        out.push_back(
            static_cast<char>(std::stoi(std::string(kv.second.substr(i + 1, 2)), nullptr, 16)));
        i += 2;
      } else {
        out.push_back(kv.second[i]);
      }
    }
    return out;
  }
  return "";
}

TestHttpServer::Response Twirp(int status, const std::string& code, const std::string& msg) {
  TestHttpServer::Response response;
  response.status = status;
  response.content_type = "application/json";
  response.body = nlohmann::json{{"code", code}, {"msg", msg}}.dump();
  return response;
}

TestHttpServer::Response Json(const nlohmann::json& body) {
  TestHttpServer::Response response;
  response.content_type = "application/json";
  response.body = body.dump();
  return response;
}

// A request body member under its proto name or its JSON (camelCase) name: LiveKit's server
// reads bodies with protojson, which accepts both, and its SDKs send the camelCase one.
template <typename T>
T Member(const nlohmann::json& body, const char* proto_name, const char* json_name, T fallback) {
  for (const char* name : {proto_name, json_name}) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    try {
      return it->get<T>();
    } catch (const nlohmann::json::exception&) {
      return fallback;
    }
  }
  return fallback;
}

bool Grant(const nlohmann::json& claims, const char* name) {
  auto video = claims.find("video");
  if (video == claims.end() || !video->is_object()) return false;
  auto it = video->find(name);
  return it != video->end() && it->is_boolean() && it->get<bool>();
}

std::string GrantRoom(const nlohmann::json& claims) {
  auto video = claims.find("video");
  if (video == claims.end() || !video->is_object()) return "";
  return video->value("room", "");
}

void SendResponse(runs::WebSocketConnection& connection, const livekit::SignalResponse& response) {
  std::string bytes;
  response.SerializeToString(&bytes);
  (void)connection.SendBinary(bytes);
}

using Clock = std::chrono::steady_clock;

constexpr int kAgentRate = 16000;
constexpr size_t kAgentFrame = kAgentRate / 50;  // 20 ms
constexpr int kHearingRate = 16000;
// The agent hears the caller speaking above this RMS (about -44 dBFS).
constexpr double kLoudRms = 200;

std::vector<int16_t> AgentTone(int ms, double hz) {
  std::vector<int16_t> tone(static_cast<size_t>(kAgentRate / 1000 * ms));
  for (size_t i = 0; i < tone.size(); ++i) {
    tone[i] = static_cast<int16_t>(9000 * std::sin(2 * 3.14159265358979 * hz * i / kAgentRate));
  }
  return tone;
}

// What the session's thread and the peers' callbacks share: the signalling frames waiting to
// be sent (the websocket is the session thread's), and what the agent heard.
struct RoomShared {
  std::mutex mu;
  std::vector<livekit::SignalResponse> outbox;
  bool caller_spoke = false;
  Clock::time_point first_loud, last_loud;
};

// The test agent's two peers and its voice (FakeRoomAgentOptions).
class FakeRoomAgent {
 public:
  FakeRoomAgent(FakeRoomAgentOptions options, std::function<void(Clock::time_point)> answered)
      : options_(options),
        answered_(std::move(answered)),
        shared_(std::make_shared<RoomShared>()) {}
  ~FakeRoomAgent() {
    stopping_ = true;
    if (voice_.joinable()) voice_.join();
    if (out_) out_->Close();
    if (in_) in_->Close();
  }

  std::vector<livekit::SignalResponse> TakeOutbox() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    std::vector<livekit::SignalResponse> out;
    out.swap(shared_->outbox);
    return out;
  }

  // The subscriber connection's offer: the agent's track (unless it never publishes) and the
  // data channels LiveKit's server opens.
  absl::StatusOr<std::string> SubscriberOffer() {
    runs::WebRtcPeerOptions options = PeerOptions();
    options.send_audio = options_.publishes;
    options.send_sample_rate = kAgentRate;
    options.data_channels = true;
    absl::StatusOr<std::unique_ptr<runs::WebRtcPeer>> peer =
        runs::WebRtcPeer::Create(options, Callbacks(livekit::SUBSCRIBER, false));
    if (!peer.ok()) return peer.status();
    out_ = *std::move(peer);
    for (const runs::IceCandidate& c : pending_out_) (void)out_->AddRemoteCandidate(c);
    absl::StatusOr<std::string> offer = out_->CreateOffer();
    started_ = Clock::now();
    if (options_.publishes) voice_ = std::thread([this] { Speak(); });
    return offer;
  }
  absl::Status SubscriberAnswer(const std::string& sdp) {
    if (!out_) return absl::FailedPreconditionError("no subscriber offer was made");
    return out_->SetAnswer(sdp);
  }
  absl::StatusOr<std::string> AnswerPublisher(const std::string& sdp) {
    if (in_) return in_->AcceptOffer(sdp);
    runs::WebRtcPeerOptions options = PeerOptions();
    options.receive_sample_rate = kHearingRate;
    absl::StatusOr<std::unique_ptr<runs::WebRtcPeer>> peer =
        runs::WebRtcPeer::Create(options, Callbacks(livekit::PUBLISHER, true));
    if (!peer.ok()) return peer.status();
    in_ = *std::move(peer);
    absl::StatusOr<std::string> answer = in_->AcceptOffer(sdp);
    for (const runs::IceCandidate& c : pending_in_) (void)in_->AddRemoteCandidate(c);
    return answer;
  }
  void AddCandidate(livekit::SignalTarget target, const runs::IceCandidate& c) {
    if (target == livekit::SUBSCRIBER) {
      if (out_)
        (void)out_->AddRemoteCandidate(c);
      else
        pending_out_.push_back(c);
    } else {
      if (in_)
        (void)in_->AddRemoteCandidate(c);
      else
        pending_in_.push_back(c);
    }
  }

 private:
  static runs::WebRtcPeerOptions PeerOptions() {
    runs::WebRtcPeerOptions options;
    options.guard.allowed_hosts = {"127.0.0.1"};
    options.local_addresses = {"127.0.0.1"};
    options.idle_timeout = absl::Minutes(5);  // the stand-in outlives its caller's silences
    return options;
  }

  runs::WebRtcPeerCallbacks Callbacks(livekit::SignalTarget target, bool hears) {
    runs::WebRtcPeerCallbacks callbacks;
    std::shared_ptr<RoomShared> shared = shared_;
    callbacks.on_ice_candidate = [shared, target](const runs::IceCandidate& c) {
      if (c.candidate.empty()) return;
      livekit::SignalResponse response;
      response.mutable_trickle()->set_target(target);
      response.mutable_trickle()->set_candidateinit(nlohmann::json{
          {"candidate", c.candidate},
          {"sdpMid", c.sdp_mid},
          {"sdpMLineIndex", c.sdp_mline_index}}.dump());
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->outbox.push_back(std::move(response));
    };
    if (hears) {
      callbacks.on_audio = [shared](absl::Span<const int16_t> pcm) {
        double energy = 0;
        for (int16_t v : pcm) energy += static_cast<double>(v) * v;
        if (pcm.empty() || std::sqrt(energy / pcm.size()) <= kLoudRms) return;
        std::lock_guard<std::mutex> lock(shared->mu);
        if (!shared->caller_spoke) shared->first_loud = Clock::now();
        shared->caller_spoke = true;
        shared->last_loud = Clock::now();
      };
    }
    return callbacks;
  }

  // The agent's voice, paced in real time: frame n of a turn goes out at the turn's start plus
  // n * 20 ms; an answer starts exactly `delay` after the caller's last loud frame.
  void Speak() {
    // Frames pushed before the connection would queue ahead of every later one, and the
    // agent's voice would reach the caller late by that much for the rest of the call.
    while (!stopping_ && out_->WaitForState(runs::PeerState::kConnected, absl::Milliseconds(50)) !=
                             runs::PeerState::kConnected) {
      const runs::PeerState state = out_->state();
      if (state == runs::PeerState::kFailed || state == runs::PeerState::kDisconnected ||
          state == runs::PeerState::kClosed) {
        return;
      }
    }
    std::deque<int16_t> saying;
    for (int16_t v : AgentTone(1200, 300)) saying.push_back(v);
    Clock::time_point base = Clock::now();
    int64_t frame = 0;
    bool interrupted = false;
    const auto delay = absl::ToChronoMicroseconds(options_.delay);
    const auto interrupt = absl::ToChronoMicroseconds(options_.interrupt_after);
    const auto drop = absl::ToChronoMicroseconds(options_.drop_media_after);
    while (!stopping_) {
      const Clock::time_point now = Clock::now();
      if (options_.drop_media_after > absl::ZeroDuration() && now - started_ >= drop) {
        // Dead: nothing more leaves either connection, as when ICE drops.
        out_->Close();
        if (in_) in_->Close();
        return;
      }
      std::optional<Clock::time_point> answer_at;
      {
        std::lock_guard<std::mutex> lock(shared_->mu);
        if (shared_->caller_spoke && saying.empty()) {
          answer_at = shared_->last_loud + delay;
        }
        if (shared_->caller_spoke && !interrupted &&
            options_.interrupt_after > absl::ZeroDuration()) {
          const Clock::time_point cue = shared_->first_loud + interrupt;
          if (!answer_at || cue < *answer_at) answer_at = cue;
        }
      }
      Clock::time_point next = base + std::chrono::milliseconds(20 * frame);
      if (answer_at && *answer_at <= next) {
        std::this_thread::sleep_until(*answer_at);
        {
          std::lock_guard<std::mutex> lock(shared_->mu);
          if (!interrupted && options_.interrupt_after > absl::ZeroDuration() &&
              *answer_at < shared_->last_loud + delay) {
            interrupted = true;
          }
          shared_->caller_spoke = false;
        }
        saying.clear();
        for (int16_t v : AgentTone(1000, 400)) saying.push_back(v);
        base = *answer_at;
        frame = 0;
        next = base;
        answered_(*answer_at);
      }
      std::this_thread::sleep_until(next);
      int16_t pcm[kAgentFrame] = {0};
      for (size_t i = 0; i < kAgentFrame && !saying.empty(); ++i) {
        pcm[i] = saying.front();
        saying.pop_front();
      }
      (void)out_->SendAudio(absl::MakeConstSpan(pcm, kAgentFrame));
      ++frame;
    }
  }

  const FakeRoomAgentOptions options_;
  std::function<void(Clock::time_point)> answered_;
  std::shared_ptr<RoomShared> shared_;
  std::unique_ptr<runs::WebRtcPeer> out_;  // the subscriber connection: the agent speaks
  std::unique_ptr<runs::WebRtcPeer> in_;   // the publisher connection: the agent hears
  std::vector<runs::IceCandidate> pending_out_, pending_in_;
  Clock::time_point started_;
  std::atomic<bool> stopping_{false};
  std::thread voice_;
};

}  // namespace

absl::StatusOr<nlohmann::json> VerifyLiveKitToken(const std::string& token,
                                                  const std::string& api_key,
                                                  const std::string& secret, absl::Time now) {
  std::vector<std::string> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3) return absl::UnauthenticatedError("not a JWT");
  std::optional<std::string> header = Base64UrlDecode(parts[0]);
  std::optional<std::string> payload = Base64UrlDecode(parts[1]);
  std::optional<std::string> signature = Base64UrlDecode(parts[2]);
  if (!header || !payload || !signature) return absl::UnauthenticatedError("bad base64url");
  nlohmann::json head = nlohmann::json::parse(*header, nullptr, false);
  if (!head.is_object() || head.value("alg", "") != "HS256") {
    return absl::UnauthenticatedError("alg is not HS256");
  }
  const std::string signing_input = absl::StrCat(parts[0], ".", parts[1]);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(), mac,
       &mac_len);
  if (signature->size() != mac_len || CRYPTO_memcmp(signature->data(), mac, mac_len) != 0) {
    return absl::UnauthenticatedError("invalid token signature");
  }
  nlohmann::json claims = nlohmann::json::parse(*payload, nullptr, false);
  if (!claims.is_object()) return absl::UnauthenticatedError("claims are not an object");
  if (claims.value("iss", "") != api_key) return absl::UnauthenticatedError("unknown API key");
  const int64_t seconds = absl::ToUnixSeconds(now);
  if (!claims.contains("nbf") || !claims["nbf"].is_number() ||
      claims["nbf"].get<int64_t>() > seconds) {
    return absl::UnauthenticatedError("token not valid yet");
  }
  if (!claims.contains("exp") || !claims["exp"].is_number() ||
      claims["exp"].get<int64_t>() <= seconds) {
    return absl::UnauthenticatedError("token expired");
  }
  return claims;
}

FakeLiveKit::FakeLiveKit(std::string api_key, std::string api_secret)
    : api_key_(std::move(api_key)), api_secret_(std::move(api_secret)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::listen(listen_fd_, 16);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  http_.HandlePrefix(
      "/twirp/", [this](const TestHttpServer::Request& request) { return HandleTwirp(request); });
}

FakeLiveKit::~FakeLiveKit() {
  stopping_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> sessions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions.swap(sessions_);
  }
  for (auto& t : sessions) t.join();
}

std::string FakeLiveKit::ws_url() const { return absl::StrCat("ws://127.0.0.1:", port_); }

void FakeLiveKit::SetPing(int interval_seconds, int timeout_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ping_interval_ = interval_seconds;
  ping_timeout_ = timeout_seconds;
}

void FakeLiveKit::SetAnswerJoin(bool answer) {
  std::lock_guard<std::mutex> lock(mu_);
  answer_join_ = answer;
}

void FakeLiveKit::SetAnswerPings(bool answer) {
  std::lock_guard<std::mutex> lock(mu_);
  answer_pings_ = answer;
}

void FakeLiveKit::EnableMedia(FakeRoomAgentOptions agent) {
  std::lock_guard<std::mutex> lock(mu_);
  media_ = true;
  agent_ = agent;
}

std::vector<std::chrono::steady_clock::time_point> FakeLiveKit::answers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return answers_;
}

std::vector<std::string> FakeLiveKit::rooms() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, sid] : rooms_) out.push_back(name);
  return out;
}

std::vector<std::string> FakeLiveKit::deleted_rooms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deleted_rooms_;
}

std::vector<FakeLiveKit::Dispatch> FakeLiveKit::dispatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dispatches_;
}

std::vector<FakeLiveKit::Participant> FakeLiveKit::participants() const {
  std::lock_guard<std::mutex> lock(mu_);
  return participants_;
}

std::vector<livekit::SignalRequest> FakeLiveKit::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

void FakeLiveKit::AcceptLoop() {
  while (!stopping_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.emplace_back([this, fd] { Serve(fd); });
  }
}

// Reads the upgrade request's head without consuming it (MSG_PEEK), so the token can be
// checked before the websocket library takes the connection over: LiveKit refuses a bad token
// with HTTP 401 instead of upgrading.
void FakeLiveKit::Serve(int fd) {
  std::string head;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline && !stopping_) {
    char buffer[8192];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) head.assign(buffer, static_cast<size_t>(n));
    if (n == 0 || head.find("\r\n\r\n") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  const size_t line_end = head.find("\r\n");
  std::vector<std::string> request_line = absl::StrSplit(head.substr(0, line_end), ' ');
  std::string target = request_line.size() >= 2 ? request_line[1] : "";
  std::pair<std::string, std::string> path_query = absl::StrSplit(target, absl::MaxSplits('?', 1));
  auto refuse = [&](int status, const std::string& reason) {
    ++refused_upgrades_;
    char drain[8192];
    (void)::recv(fd, drain, sizeof(drain), MSG_DONTWAIT);
    const std::string answer =
        absl::StrCat("HTTP/1.1 ", status, status == 401 ? " Unauthorized" : " Not Found",
                     "\r\nContent-Type: text/plain\r\nContent-Length: ", reason.size(),
                     "\r\nConnection: close\r\n\r\n", reason);
    (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
    ::close(fd);
  };
  // The server API on the same port as the signalling, as a LiveKit server has them.
  if (absl::StartsWith(path_query.first, "/twirp/")) return ServeTwirp(fd);
  if (path_query.first != "/rtc") return refuse(404, "not found");
  absl::StatusOr<nlohmann::json> claims =
      VerifyLiveKitToken(QueryValue(path_query.second, "access_token"), api_key_, api_secret_);
  if (!claims.ok()) return refuse(401, std::string(claims.status().message()));
  if (!Grant(*claims, "roomJoin") || GrantRoom(*claims).empty() ||
      claims->value("sub", "").empty()) {
    return refuse(401, "permissions denied");
  }
  Participant participant{claims->value("sub", ""), GrantRoom(*claims), path_query.second};
  auto connection = runs::WebSocketConnection::Accept(fd, absl::Seconds(5));
  if (!connection.ok()) {
    std::cerr << "fake livekit: " << connection.status() << "\n";
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    participants_.push_back(participant);
  }
  Session(**connection, participant);
  (*connection)->Close();
  ++sessions_ended_;
}

// One Twirp request read off the signalling port (one per connection, as LiveKit's SDKs send
// them).
void FakeLiveKit::ServeTwirp(int fd) {
  std::string data;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  size_t head_end = std::string::npos;
  size_t length = 0;
  while (absl::Now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    char buffer[8192];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    data.append(buffer, static_cast<size_t>(n));
    if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
      for (absl::string_view line : absl::StrSplit(data.substr(0, head_end), "\r\n")) {
        std::string lower = absl::AsciiStrToLower(line);
        if (absl::StartsWith(lower, "content-length:")) {
          length = static_cast<size_t>(std::stoul(lower.substr(15)));
        }
      }
    }
    if (head_end != std::string::npos && data.size() >= head_end + 4 + length) break;
  }
  TestHttpServer::Request request;
  if (head_end != std::string::npos) {
    std::vector<std::string> lines = absl::StrSplit(data.substr(0, head_end), "\r\n");
    std::vector<std::string> request_line = absl::StrSplit(lines[0], ' ');
    request.method = request_line[0];
    request.target = request_line.size() > 1 ? request_line[1] : "";
    request.path = request.target.substr(0, request.target.find('?'));
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      request.headers.emplace_back(
          absl::AsciiStrToLower(lines[i].substr(0, colon)),
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
    }
    request.body = data.substr(head_end + 4, length);
  }
  TestHttpServer::Response response = HandleTwirp(request);
  const std::string answer = absl::StrCat(
      "HTTP/1.1 ", response.status, " ", response.status == 200 ? "OK" : "Error",
      "\r\nContent-Type: ", response.content_type, "\r\nContent-Length: ", response.body.size(),
      "\r\nConnection: close\r\n\r\n", response.body);
  (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
  ::close(fd);
}

void FakeLiveKit::Session(runs::WebSocketConnection& connection, const Participant& participant) {
  bool answer_join;
  std::unique_ptr<FakeRoomAgent> agent;
  FakeRoomAgentOptions agent_options;
  {
    std::lock_guard<std::mutex> lock(mu_);
    answer_join = answer_join_;
    agent_options = agent_;
    if (media_) {
      FakeRoomAgentOptions options = agent_;
      // Leaving, the agent's media stops as a dropped connection's does; the update says why.
      if (options.leave_after > absl::ZeroDuration())
        options.drop_media_after = options.leave_after;
      agent = std::make_unique<FakeRoomAgent>(options, [this](Clock::time_point at) {
        std::lock_guard<std::mutex> lock(mu_);
        answers_.push_back(at);
      });
    }
    if (answer_join) {
      livekit::SignalResponse join;
      livekit::JoinResponse* r = join.mutable_join();
      r->mutable_room()->set_name(participant.room);
      auto room = rooms_.find(participant.room);
      r->mutable_room()->set_sid(room != rooms_.end() ? room->second : "RM_auto");
      r->mutable_participant()->set_sid(absl::StrCat("PA_", next_id_++));
      r->mutable_participant()->set_identity(participant.identity);
      r->set_server_version("1.8.0-fake");
      r->set_subscriber_primary(true);
      r->set_ping_interval(ping_interval_);
      r->set_ping_timeout(ping_timeout_);
      r->mutable_server_info()->set_protocol(16);
      r->add_ice_servers()->add_urls("stun:127.0.0.1:3478");
      SendResponse(connection, join);
    }
  }
  if (answer_join) {
    // The server opens the subscriber connection: its offer follows the join.
    livekit::SignalResponse offer;
    offer.mutable_offer()->set_type("offer");
    offer.mutable_offer()->set_sdp("v=0\r\ns=fake-livekit-subscriber\r\n");
    if (agent) {
      absl::StatusOr<std::string> sdp = agent->SubscriberOffer();
      if (!sdp.ok()) {
        std::cerr << "fake livekit: the agent's offer: " << sdp.status() << "\n";
        return;
      }
      offer.mutable_offer()->set_sdp(*sdp);
    }
    offer.mutable_offer()->set_id(1);
    SendResponse(connection, offer);
  }
  // The agent in the room, as the server announces it: active, with its microphone when it
  // publishes; DISCONNECTED once it leaves.
  const absl::Time joined = absl::Now();
  bool agent_left = false;
  auto announce_agent = [&](livekit::ParticipantInfo::State state) {
    livekit::SignalResponse update;
    livekit::ParticipantInfo* info = update.mutable_update()->add_participants();
    info->set_sid("PA_agent");
    info->set_identity("agent");
    info->set_kind(livekit::ParticipantInfo::AGENT);
    info->set_state(state);
    if (agent_options.publishes && state != livekit::ParticipantInfo::DISCONNECTED) {
      livekit::TrackInfo* track = info->add_tracks();
      track->set_sid("TR_agent_voice");
      track->set_type(livekit::AUDIO);
      track->set_source(livekit::MICROPHONE);
    }
    SendResponse(connection, update);
  };
  if (answer_join && agent) announce_agent(livekit::ParticipantInfo::ACTIVE);
  int candidates = 0;
  while (!stopping_) {
    if (agent) {
      for (const livekit::SignalResponse& r : agent->TakeOutbox()) SendResponse(connection, r);
      if (!agent_left && agent_options.leave_after > absl::ZeroDuration() &&
          absl::Now() - joined >= agent_options.leave_after) {
        agent_left = true;
        announce_agent(livekit::ParticipantInfo::DISCONNECTED);
      }
    }
    absl::StatusOr<std::vector<runs::WebSocketMessage>> messages =
        connection.Poll(absl::Milliseconds(agent ? 10 : 50));
    if (!messages.ok()) return;
    for (const runs::WebSocketMessage& message : *messages) {
      livekit::SignalRequest request;
      if (!message.binary || !request.ParseFromString(message.data)) {
        std::cerr << "fake livekit: a frame that is not a SignalRequest\n";
        return;
      }
      bool answer_pings;
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(request);
        answer_pings = answer_pings_;
      }
      livekit::SignalResponse response;
      switch (request.message_case()) {
        case livekit::SignalRequest::kOffer:
          response.mutable_answer()->set_type("answer");
          response.mutable_answer()->set_sdp(
              absl::StrCat("v=0\r\ns=fake-livekit-publisher-answer\r\n"));
          if (agent) {
            absl::StatusOr<std::string> sdp = agent->AnswerPublisher(request.offer().sdp());
            if (!sdp.ok()) {
              std::cerr << "fake livekit: the agent's answer: " << sdp.status() << "\n";
              return;
            }
            response.mutable_answer()->set_sdp(*sdp);
          }
          response.mutable_answer()->set_id(request.offer().id());
          SendResponse(connection, response);
          break;
        case livekit::SignalRequest::kAnswer:
          if (agent) {
            if (absl::Status s = agent->SubscriberAnswer(request.answer().sdp()); !s.ok()) {
              std::cerr << "fake livekit: the caller's answer: " << s << "\n";
              return;
            }
          }
          break;
        case livekit::SignalRequest::kTrickle:
          if (request.trickle().final()) break;
          if (agent) {
            nlohmann::json init =
                nlohmann::json::parse(request.trickle().candidateinit(), nullptr, false);
            if (!init.is_object()) break;
            runs::IceCandidate c;
            c.candidate = init.value("candidate", "");
            c.sdp_mid = init.value("sdpMid", "");
            c.sdp_mline_index = init.value("sdpMLineIndex", 0);
            agent->AddCandidate(request.trickle().target(), c);
            break;
          }
          ++candidates;
          response.mutable_trickle()->set_target(request.trickle().target());
          response.mutable_trickle()->set_candidateinit(nlohmann::json{
              {"candidate", absl::StrCat("candidate:", candidates, " 1 udp 2130706431 127.0.0.1 ",
                                         40000 + candidates, " typ host")},
              {"sdpMid", "0"},
              {"sdpMLineIndex", 0}}.dump());
          SendResponse(connection, response);
          break;
        case livekit::SignalRequest::kAddTrack: {
          livekit::TrackPublishedResponse* published = response.mutable_track_published();
          published->set_cid(request.add_track().cid());
          published->mutable_track()->set_sid(absl::StrCat("TR_", next_id_++));
          published->mutable_track()->set_type(request.add_track().type());
          published->mutable_track()->set_name(request.add_track().name());
          published->mutable_track()->set_source(request.add_track().source());
          published->mutable_track()->set_mime_type("audio/opus");
          SendResponse(connection, response);
          break;
        }
        case livekit::SignalRequest::kPingReq:
          if (!answer_pings) break;
          response.mutable_pong_resp()->set_last_ping_timestamp(request.ping_req().timestamp());
          response.mutable_pong_resp()->set_timestamp(absl::ToUnixMillis(absl::Now()));
          SendResponse(connection, response);
          break;
        case livekit::SignalRequest::kPing:
          if (!answer_pings) break;
          response.set_pong(absl::ToUnixMillis(absl::Now()));
          SendResponse(connection, response);
          break;
        case livekit::SignalRequest::kLeave:
          return;
        default:
          break;
      }
    }
  }
}

TestHttpServer::Response FakeLiveKit::HandleTwirp(const TestHttpServer::Request& request) {
  if (request.method != "POST") return Twirp(400, "bad_route", "Twirp routes are POST only");
  if (request.Header("content-type").rfind("application/json", 0) != 0) {
    return Twirp(400, "bad_route", "unexpected Content-Type");
  }
  const std::string authorization = request.Header("authorization");
  absl::string_view auth = authorization;
  if (!absl::ConsumePrefix(&auth, "Bearer ")) {
    return Twirp(401, "unauthenticated", "no authorization header");
  }
  absl::StatusOr<nlohmann::json> claims =
      VerifyLiveKitToken(std::string(auth), api_key_, api_secret_);
  if (!claims.ok()) return Twirp(401, "unauthenticated", std::string(claims.status().message()));
  nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
  if (!body.is_object()) return Twirp(400, "malformed", "the body is not JSON");
  std::lock_guard<std::mutex> lock(mu_);
  if (request.path == "/twirp/livekit.RoomService/CreateRoom") {
    if (!Grant(*claims, "roomCreate")) return Twirp(403, "permission_denied", "permissions denied");
    const std::string name = Member<std::string>(body, "name", "name", "");
    if (name.empty()) return Twirp(400, "invalid_argument", "room name is required");
    auto it = rooms_.find(name);
    if (it == rooms_.end()) it = rooms_.emplace(name, absl::StrCat("RM_", next_id_++)).first;
    return Json({{"sid", it->second},
                 {"name", name},
                 {"empty_timeout", Member<int>(body, "empty_timeout", "emptyTimeout", 300)},
                 {"max_participants", Member<int>(body, "max_participants", "maxParticipants", 0)},
                 {"creation_time", std::to_string(absl::ToUnixSeconds(absl::Now()))}});
  }
  if (request.path == "/twirp/livekit.RoomService/DeleteRoom") {
    if (!Grant(*claims, "roomCreate")) return Twirp(403, "permission_denied", "permissions denied");
    const std::string name = Member<std::string>(body, "room", "room", "");
    if (rooms_.erase(name) == 0) return Twirp(404, "not_found", "requested room does not exist");
    deleted_rooms_.push_back(name);
    return Json(nlohmann::json::object());
  }
  if (request.path == "/twirp/livekit.AgentDispatchService/CreateDispatch") {
    const std::string room = Member<std::string>(body, "room", "room", "");
    if (!Grant(*claims, "roomAdmin") || GrantRoom(*claims) != room) {
      return Twirp(403, "permission_denied", "permissions denied");
    }
    Dispatch dispatch{absl::StrCat("AD_", next_id_++),
                      Member<std::string>(body, "agent_name", "agentName", ""), room,
                      Member<std::string>(body, "metadata", "metadata", "")};
    dispatches_.push_back(dispatch);
    return Json({{"id", dispatch.id},
                 {"agent_name", dispatch.agent_name},
                 {"room", dispatch.room},
                 {"metadata", dispatch.metadata}});
  }
  return Twirp(404, "bad_route", absl::StrCat("no handler for path ", request.path));
}

}  // namespace calleval

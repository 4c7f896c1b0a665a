#include "tests/support/fake_phone_agent.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/mulaw.h"

namespace calleval {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFrameSamples = 160;  // 20 ms at 8 kHz
constexpr auto kFrame = std::chrono::milliseconds(20);
// The agent hears the caller speaking above this RMS (about -44 dBFS).
constexpr double kLoudRms = 200;

std::vector<int16_t> Tone(int ms, double hz) {
  std::vector<int16_t> tone(8 * ms);
  for (size_t i = 0; i < tone.size(); ++i) {
    tone[i] = static_cast<int16_t>(9000 * std::sin(2 * 3.14159265358979 * hz * i / 8000.0));
  }
  return tone;
}

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

}  // namespace

int MediaUpgradeStatus(const std::string& ws_url) {
  const size_t scheme = ws_url.find("://");
  if (scheme == std::string::npos) return 0;
  // The upgrade by hand, to read the refusal's status line.
  const std::string http_url = absl::StrCat("http", ws_url.substr(scheme));
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
  // A 101 leaves curl with a connection it cannot read: it reports an error with the code.
  (void)curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return static_cast<int>(status);
}

FakeStreamDialect::Heard ReadTwilioShapedMessage(const std::string& message) {
  FakeStreamDialect::Heard heard;
  nlohmann::json event = nlohmann::json::parse(message, nullptr, false);
  if (!event.is_object()) return heard;
  const std::string kind = event.value("event", "");
  if (kind == "media" && event["media"].is_object()) {
    std::optional<std::string> payload =
        Base64Decode(event["media"].value("payload", std::string()));
    if (!payload) return heard;
    heard.kind = FakeStreamDialect::Heard::kMedia;
    heard.mulaw = *std::move(payload);
  } else if (kind == "mark" && event["mark"].is_object()) {
    heard.kind = FakeStreamDialect::Heard::kMark;
    heard.name = event["mark"].value("name", std::string());
  } else if (kind == "clear") {
    heard.kind = FakeStreamDialect::Heard::kClear;
  }
  return heard;
}

FakeCallEnd PlayFakeAgent(runs::WebSocketConnection& ws, FakeStreamDialect& dialect,
                          const FakeAgentOptions& options,
                          const std::function<void(FakeAgentNote)>& note) {
  for (const std::string& message : dialect.Opening()) (void)ws.SendText(message);

  const bool machine = options.machine;
  std::deque<int16_t> agent;  // what the agent (or the machine) has still to say
  for (int16_t s : Tone(machine ? 1500 : 1200, 300)) agent.push_back(s);
  const Clock::time_point started = Clock::now();
  Clock::time_point base = started;  // the pacing clock: frame n goes out at base + n * 20 ms
  int64_t frame = 0;
  Clock::time_point caller_played_until = started;
  std::deque<std::pair<Clock::time_point, std::string>> marks;
  bool caller_spoke = false;
  Clock::time_point first_loud;  // the start of the caller's line being heard
  Clock::time_point last_loud;
  // Interrupting on cue: once per call; `talking_over` while the interrupting answer is said,
  // `cleared` once the application cleared its audio meanwhile.
  bool interrupted = false;
  bool talking_over = false;
  bool cleared = false;
  Clock::time_point hang_up_at = Clock::time_point::max();
  bool machine_heard = false;
  int answers = 0;
  const auto delay = absl::ToChronoMicroseconds(options.delay);

  auto stop = [&] {
    const std::string message = dialect.Stop();
    if (!message.empty()) (void)ws.SendText(message);
    ws.Close();
    note(FakeAgentNote::kStopSent);
  };

  while (true) {
    const Clock::time_point now = Clock::now();
    if ((options.hangup != nullptr && options.hangup->load()) ||
        now - started > std::chrono::minutes(2)) {
      stop();
      return FakeCallEnd::kHungUpElsewhere;
    }
    if (now >= hang_up_at) {
      stop();
      return FakeCallEnd::kAgentHungUp;
    }
    // Answering machine detection hears the machine's greeting and tells the service.
    if (machine && !machine_heard && now - started >= std::chrono::milliseconds(1800)) {
      machine_heard = true;
      if (options.machine_heard) options.machine_heard();
    }
    // The agent answers `delay` after the caller's last loud frame arrived.
    Clock::time_point answer_at = Clock::time_point::max();
    if (caller_spoke && !machine) answer_at = last_loud + delay;
    const bool cue = options.interrupt_after > absl::ZeroDuration() && !interrupted;
    if (cue && caller_spoke && !machine) {
      answer_at =
          std::min(answer_at, first_loud + absl::ToChronoMicroseconds(options.interrupt_after));
    }
    if (talking_over && agent.empty()) talking_over = false;  // the interrupting answer is said
    if (now >= answer_at) {
      if (cue && answer_at < last_loud + delay) interrupted = talking_over = true;
      caller_spoke = false;
      for (int16_t s : Tone(1500, 350)) agent.push_back(s);
      base = answer_at;  // the answer's first frame goes out at its exact time
      frame = 0;
      ++answers;
      note(FakeAgentNote::kAnswered);
      if (options.hang_up_after_answers > 0 && answers >= options.hang_up_after_answers) {
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
      (void)ws.SendText(dialect.Media(
          runs::MuLawEncode(pcm),
          std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count()));
      ++frame;
      continue;
    }
    // Marks come back once the caller's audio before them has played.
    while (!marks.empty() && marks.front().first <= now) {
      (void)ws.SendText(dialect.Played(marks.front().second));
      marks.pop_front();
      note(FakeAgentNote::kMarkPlayed);
    }
    Clock::time_point wake = std::min(send_at, answer_at);
    if (!marks.empty()) wake = std::min(wake, marks.front().first);
    // Poll() returns at the first message, so each is stamped with the time it arrived, which
    // the agent's timing rests on.
    const auto wait = std::max(Clock::duration::zero(), wake - now);
    absl::StatusOr<std::vector<runs::WebSocketMessage>> got = ws.Poll(absl::FromChrono(wait));
    if (!got.ok()) return FakeCallEnd::kStreamClosed;  // the service closed the stream
    const Clock::time_point arrived = Clock::now();
    for (const runs::WebSocketMessage& m : *got) {
      FakeStreamDialect::Heard heard = dialect.Read(m.data);
      if (heard.kind == FakeStreamDialect::Heard::kMedia) {
        if (options.media_arrived) options.media_arrived(arrived);
        const std::vector<int16_t> pcm = runs::MuLawDecode(heard.mulaw);
        double energy = 0;
        for (int16_t s : pcm) energy += static_cast<double>(s) * s;
        if (!pcm.empty() && std::sqrt(energy / pcm.size()) > kLoudRms) {
          if (talking_over) {
            if (cleared) note(FakeAgentNote::kTalkedOverAfterClear);
          } else {
            if (!caller_spoke) first_loud = arrived;
            caller_spoke = true;
            last_loud = arrived;
          }
        }
        caller_played_until =
            std::max(caller_played_until, arrived) + std::chrono::microseconds(125) * pcm.size();
      } else if (heard.kind == FakeStreamDialect::Heard::kMark) {
        marks.emplace_back(caller_played_until, heard.name);
      } else if (heard.kind == FakeStreamDialect::Heard::kClear) {
        // What was queued is dropped: the marks waiting on it come back at once.
        caller_played_until = arrived;
        for (auto& mark : marks) mark.first = arrived;
        if (talking_over) cleared = true;
        note(FakeAgentNote::kCleared);
      }
    }
  }
}

}  // namespace calleval

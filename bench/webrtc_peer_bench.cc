// Many WebRTC peer pairs at once (services/runs/webrtc_peer.h): the cost per connection that a
// room run will pay (docs/architecture.md, "The WebRTC peer"). Each pair is two webrtcbin peers in
// this process over loopback; the offerer streams a 440 Hz tone as 20 ms PCM16 frames at 48 kHz
// (one pacing thread for all), the answerer decodes it to 16 kHz. It reports:
//
// - the time to connect each pair (offer to both sides connected), the worst;
// - the audio each answerer decoded against what was sent, the worst;
// - threads and resident memory of the process before the peers, with them, and after they
//   closed (from /proc/self/status), per pair;
// - CPU time (getrusage, user + system) over the streaming period, as a share of one core, per
//   pair;
// - how long after the last close the process is back to its threads before the peers (webrtcbin
//   and libnice end their threads asynchronously, GStreamer's pool keeps idle ones a while).
//
// Several rounds (--rounds, default 2) create and close the same number of pairs: resident memory
// that grows from one round's end to the next would be a leak.
//
//   webrtc_peer_bench [--pairs N] [--seconds S] [--rounds R]
//
// Run it under /usr/bin/time -v for the peak resident size as the kernel counts it.

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "services/runs/webrtc_peer.h"

namespace {

using calleval::runs::IceCandidate;
using calleval::runs::PeerState;
using calleval::runs::WebRtcPeer;
using calleval::runs::WebRtcPeerCallbacks;
using calleval::runs::WebRtcPeerOptions;

// A /proc/self/status field ("Threads", "VmRSS") as a number (kB for sizes).
long ProcStatus(absl::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l = line;
    if (absl::ConsumePrefix(&l, field) && absl::ConsumePrefix(&l, ":")) {
      l = absl::StripAsciiWhitespace(l);
      absl::ConsumeSuffix(&l, " kB");
      long value = 0;
      if (absl::SimpleAtoi(l, &value)) return value;
    }
  }
  return -1;
}

double CpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

struct PairState {
  std::unique_ptr<WebRtcPeer> offerer;
  std::unique_ptr<WebRtcPeer> answerer;
  std::atomic<WebRtcPeer*> to_offerer{nullptr};
  std::atomic<WebRtcPeer*> to_answerer{nullptr};
  std::atomic<int64_t> decoded{0};
  std::atomic<int> dropped{0};
};

// One round: `pairs` pairs connected, streaming for `seconds`, closed. False on a failure.
bool RunRound(int pairs, int seconds, long threads_before, long rss_before) {
  std::vector<std::unique_ptr<PairState>> states;
  absl::Duration worst_connect;
  for (int p = 0; p < pairs; ++p) {
    auto state = std::make_unique<PairState>();
    PairState* s = state.get();
    WebRtcPeerOptions options;
    options.local_addresses = {"127.0.0.1"};
    options.guard.allowed_hosts = {"127.0.0.1"};
    WebRtcPeerOptions sender = options;
    sender.send_audio = true;
    WebRtcPeerCallbacks offer_callbacks;
    offer_callbacks.on_ice_candidate = [s](const IceCandidate& c) {
      WebRtcPeer* peer = s->to_answerer.load();
      if (peer != nullptr && !peer->AddRemoteCandidate(c).ok()) ++s->dropped;
    };
    WebRtcPeerCallbacks answer_callbacks;
    answer_callbacks.on_ice_candidate = [s](const IceCandidate& c) {
      WebRtcPeer* peer = s->to_offerer.load();
      if (peer != nullptr && !peer->AddRemoteCandidate(c).ok()) ++s->dropped;
    };
    answer_callbacks.on_audio = [s](absl::Span<const int16_t> pcm) {
      s->decoded += static_cast<int64_t>(pcm.size());
    };
    auto offerer = WebRtcPeer::Create(sender, std::move(offer_callbacks));
    auto answerer = WebRtcPeer::Create(options, std::move(answer_callbacks));
    if (!offerer.ok() || !answerer.ok()) {
      std::fprintf(stderr, "pair %d: %s %s\n", p, offerer.status().ToString().c_str(),
                   answerer.status().ToString().c_str());
      return false;
    }
    s->offerer = std::move(*offerer);
    s->answerer = std::move(*answerer);
    s->to_offerer = s->offerer.get();
    s->to_answerer = s->answerer.get();
    absl::Time start = absl::Now();
    auto offer = s->offerer->CreateOffer();
    auto answer = offer.ok() ? s->answerer->AcceptOffer(*offer) : offer;
    absl::Status set = answer.ok() ? s->offerer->SetAnswer(*answer) : answer.status();
    if (!set.ok()) {
      std::fprintf(stderr, "pair %d: %s\n", p, set.ToString().c_str());
      return false;
    }
    if (s->offerer->WaitForState(PeerState::kConnected, absl::Seconds(10)) !=
            PeerState::kConnected ||
        s->answerer->WaitForState(PeerState::kConnected, absl::Seconds(10)) !=
            PeerState::kConnected) {
      std::fprintf(stderr, "pair %d did not connect\n", p);
      return false;
    }
    worst_connect = std::max(worst_connect, absl::Now() - start);
    states.push_back(std::move(state));
  }
  long threads_with = ProcStatus("Threads");

  // One pacing thread for every sender, on an absolute 20 ms clock.
  const int frame = 960;
  std::vector<int16_t> pcm(frame);
  double cpu_start = CpuSeconds();
  absl::Time start = absl::Now();
  absl::Time next = start;
  int64_t sent = 0;
  int refused = 0;
  for (int f = 0; f < seconds * 50; ++f) {
    for (int i = 0; i < frame; ++i) {
      pcm[i] = static_cast<int16_t>(8000 * std::sin(2 * M_PI * 440 * (sent + i) / 48000.0));
    }
    for (auto& s : states) {
      if (!s->offerer->SendAudio(pcm).ok()) ++refused;
    }
    sent += frame;
    next += absl::Milliseconds(20);
    absl::SleepFor(next - absl::Now());
  }
  absl::SleepFor(absl::Milliseconds(300));  // the last frames through the decoders
  double cpu = CpuSeconds() - cpu_start;
  double wall = absl::ToDoubleSeconds(absl::Now() - start);
  long rss_with = ProcStatus("VmRSS");

  double worst_ratio = 1e9;
  int connected = 0;
  for (auto& s : states) {
    // Decoded at 16 kHz from 48 kHz sent: a third of the samples.
    worst_ratio = std::min(worst_ratio, s->decoded.load() / (sent / 3.0));
    if (s->answerer->state() == PeerState::kConnected) ++connected;
  }
  absl::Time closing = absl::Now();
  for (auto& s : states) {
    s->offerer->Close();
    s->answerer->Close();
  }
  states.clear();
  absl::Duration close_time = absl::Now() - closing;
  long threads_after = ProcStatus("Threads");
  while (ProcStatus("Threads") > threads_before && absl::Now() - closing < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  absl::Duration settle = absl::Now() - closing;
  long rss_after = ProcStatus("VmRSS");

  std::printf("pairs %d (%d peers), streaming %d s, still connected at the end %d\n", pairs,
              2 * pairs, seconds, connected);
  std::printf("worst connect (offer -> both connected): %.0f ms\n",
              absl::ToDoubleMilliseconds(worst_connect));
  std::printf("worst decoded/sent audio: %.3f; frames refused by a full queue: %d\n", worst_ratio,
              refused);
  std::printf(
      "threads: %ld before, %ld with the peers (%.1f per peer), %ld just after closing "
      "(%.0f ms for all), back to %ld after %.1f s\n",
      threads_before, threads_with,
      static_cast<double>(threads_with - threads_before) / (2 * pairs), threads_after,
      absl::ToDoubleMilliseconds(close_time), ProcStatus("Threads"), absl::ToDoubleSeconds(settle));
  std::printf("resident: %ld kB before, %ld kB streaming (%.0f kB per pair), %ld kB after\n",
              rss_before, rss_with, static_cast<double>(rss_with - rss_before) / pairs, rss_after);
  std::printf("CPU while streaming: %.2f s over %.1f s = %.1f%% of a core (%.2f%% per pair)\n", cpu,
              wall, 100 * cpu / wall, 100 * cpu / wall / pairs);
  return worst_ratio > 0.9 && connected == pairs;
}

}  // namespace

int main(int argc, char** argv) {
  int pairs = 10;
  int seconds = 20;
  int rounds = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    absl::string_view flag = argv[i];
    int* target = flag == "--pairs"     ? &pairs
                  : flag == "--seconds" ? &seconds
                  : flag == "--rounds"  ? &rounds
                                        : nullptr;
    if (target == nullptr || !absl::SimpleAtoi(argv[i + 1], target) || *target <= 0) {
      std::fprintf(stderr, "usage: webrtc_peer_bench [--pairs N] [--seconds S] [--rounds R]\n");
      return 2;
    }
  }
  // gst_init and its plugin registry are paid once per process: measured apart from the peers.
  {
    WebRtcPeerOptions options;
    options.send_audio = true;
    auto warm = WebRtcPeer::Create(options, {});
    if (!warm.ok()) {
      std::fprintf(stderr, "%s\n", warm.status().ToString().c_str());
      return 1;
    }
  }
  long threads_before = ProcStatus("Threads");
  long rss_before = ProcStatus("VmRSS");
  bool ok = true;
  for (int r = 1; r <= rounds && ok; ++r) {
    std::printf("round %d\n", r);
    ok = RunRound(pairs, seconds, threads_before, rss_before);
  }
  return ok ? 0 : 1;
}

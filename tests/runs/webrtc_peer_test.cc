// The WebRTC peer (services/runs/webrtc_peer.h): two real webrtcbin peers in one process, over
// loopback, their offer/answer and trickled candidates handed across directly (the signalling a
// LiveKit server would carry). Audio is Opus on the wire, DTLS-SRTP encrypted, through libnice.

#include "services/runs/webrtc_peer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::runs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kPi = 3.14159265358979323846;

// Goertzel power of `freq` in `pcm`, normalized per sample.
double TonePower(const std::vector<int16_t>& pcm, int rate, double freq) {
  if (pcm.empty()) return 0;
  double coeff = 2 * std::cos(2 * kPi * freq / rate);
  double s1 = 0, s2 = 0;
  for (int16_t v : pcm) {
    double s = v + coeff * s1 - s2;
    s2 = s1;
    s1 = s;
  }
  double power = s1 * s1 + s2 * s2 - coeff * s1 * s2;
  return power / (static_cast<double>(pcm.size()) * pcm.size());
}

double Rms(const int16_t* pcm, size_t n) {
  if (n == 0) return 0;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(pcm[i]) * pcm[i];
  return std::sqrt(sum / n);
}

// The receiving side's audio as it arrives, with the time the first loud frame came.
struct Received {
  absl::Mutex mu;
  std::vector<int16_t> pcm ABSL_GUARDED_BY(mu);
  absl::Time first_loud ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  std::vector<std::pair<std::string, std::string>> messages ABSL_GUARDED_BY(mu);
};

struct Pair {
  std::unique_ptr<WebRtcPeer> offerer;
  std::unique_ptr<WebRtcPeer> answerer;
  // Candidates the guard dropped on either side.
  std::shared_ptr<std::atomic<int>> dropped = std::make_shared<std::atomic<int>>(0);
  // The offerer's candidates as its callback gave them (signalling needs the mid too).
  struct Gathered {
    absl::Mutex mu;
    std::vector<IceCandidate> candidates ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<Gathered> gathered = std::make_shared<Gathered>();
};

WebRtcPeerOptions LoopbackOptions(bool allow_loopback) {
  WebRtcPeerOptions options;
  options.local_addresses = {"127.0.0.1"};
  if (allow_loopback) options.guard.allowed_hosts = {"127.0.0.1"};
  options.connect_timeout = absl::Seconds(10);
  return options;
}

// Two peers whose candidates are handed straight to each other. The offerer sends audio and
// opens the data channels; the answerer receives into `received` (its audio into its own queue
// when `pull`).
Pair MakePair(WebRtcPeerOptions offer_options, WebRtcPeerOptions answer_options,
              std::shared_ptr<Received> received, bool pull = false) {
  Pair pair;
  // Each side's callbacks reach the other through a slot filled once both exist; candidates
  // gathered before then wait in the peer (they are only gathered after the offer anyway).
  auto to_answerer = std::make_shared<std::atomic<WebRtcPeer*>>(nullptr);
  auto to_offerer = std::make_shared<std::atomic<WebRtcPeer*>>(nullptr);
  auto dropped = pair.dropped;
  WebRtcPeerCallbacks offer_callbacks;
  auto gathered = pair.gathered;
  offer_callbacks.on_ice_candidate = [to_answerer, dropped, gathered](const IceCandidate& c) {
    {
      absl::MutexLock lock(&gathered->mu);
      gathered->candidates.push_back(c);
    }
    WebRtcPeer* peer = to_answerer->load();
    if (peer != nullptr && !peer->AddRemoteCandidate(c).ok()) ++*dropped;
  };
  WebRtcPeerCallbacks answer_callbacks;
  answer_callbacks.on_ice_candidate = [to_offerer, dropped](const IceCandidate& c) {
    WebRtcPeer* peer = to_offerer->load();
    if (peer != nullptr && !peer->AddRemoteCandidate(c).ok()) ++*dropped;
  };
  if (!pull) {
    answer_callbacks.on_audio = [received](absl::Span<const int16_t> pcm) {
      absl::MutexLock lock(&received->mu);
      received->pcm.insert(received->pcm.end(), pcm.begin(), pcm.end());
      if (received->first_loud == absl::InfiniteFuture() && Rms(pcm.data(), pcm.size()) > 1000) {
        received->first_loud = absl::Now();
      }
    };
  }
  answer_callbacks.on_data = [received](absl::string_view label, absl::string_view data, bool) {
    absl::MutexLock lock(&received->mu);
    received->messages.emplace_back(std::string(label), std::string(data));
  };
  auto offerer = WebRtcPeer::Create(offer_options, std::move(offer_callbacks));
  EXPECT_TRUE(offerer.ok()) << offerer.status();
  auto answerer = WebRtcPeer::Create(answer_options, std::move(answer_callbacks));
  EXPECT_TRUE(answerer.ok()) << answerer.status();
  if (!offerer.ok() || !answerer.ok()) return pair;
  pair.offerer = std::move(*offerer);
  pair.answerer = std::move(*answerer);
  to_answerer->store(pair.answerer.get());
  to_offerer->store(pair.offerer.get());
  return pair;
}

// Offer, answer, answer set: what LiveKit's publisher connection does through the server.
void Negotiate(Pair& pair) {
  absl::StatusOr<std::string> offer = pair.offerer->CreateOffer();
  ASSERT_TRUE(offer.ok()) << offer.status();
  absl::StatusOr<std::string> answer = pair.answerer->AcceptOffer(*offer);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_TRUE(pair.offerer->SetAnswer(*answer).ok());
}

// 20 ms frames at `rate` on a real-time clock: silence, then a tone of `freq` for `tone_ms`.
// Returns when the tone started.
absl::Time SendSilenceThenTone(WebRtcPeer& peer, int rate, double freq, int silence_ms,
                               int tone_ms) {
  const int frame = rate / 50;
  std::vector<int16_t> pcm(frame);
  absl::Time next = absl::Now();
  absl::Time tone_start = absl::InfiniteFuture();
  int64_t sample = 0;
  for (int ms = 0; ms < silence_ms + tone_ms; ms += 20) {
    bool tone = ms >= silence_ms;
    if (tone && tone_start == absl::InfiniteFuture()) tone_start = absl::Now();
    for (int i = 0; i < frame; ++i, ++sample) {
      pcm[i] = tone ? static_cast<int16_t>(8000 * std::sin(2 * kPi * freq * sample / rate)) : 0;
    }
    EXPECT_TRUE(peer.SendAudio(pcm).ok());
    next += absl::Milliseconds(20);
    absl::SleepFor(next - absl::Now());
  }
  return tone_start;
}

TEST(CandidateGuardTest, PrivateAndNamedAddressesAreRefusedUnlessAllowed) {
  UrlGuardOptions guard;
  EXPECT_TRUE(
      CheckRemoteCandidate("candidate:1 1 UDP 2015363327 8.8.8.8 43877 typ host", guard).ok());
  EXPECT_TRUE(CheckRemoteCandidate("a=candidate:1 1 udp 1 2606:4700::1111 9 typ host", guard).ok());
  for (const char* address : {"127.0.0.1", "10.1.2.3", "192.168.0.4", "169.254.1.1", "::1",
                              "fe80::1", "fd00::5", "::ffff:10.0.0.1", "abcd-ef.local"}) {
    absl::Status status = CheckRemoteCandidate(
        absl::StrCat("candidate:1 1 UDP 2015363327 ", address, " 43877 typ host"), guard);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(status.message(), HasSubstr(address));
  }
  EXPECT_THAT(CheckRemoteCandidate("candidate:1 1 UDP 1 10.1.2.3 5 typ host", guard).message(),
              HasSubstr("private"));
  EXPECT_FALSE(CheckRemoteCandidate("not a candidate", guard).ok());
  guard.allowed_hosts = {"127.0.0.1", "[::1]"};
  EXPECT_TRUE(CheckRemoteCandidate("candidate:1 1 UDP 1 127.0.0.1 5 typ host", guard).ok());
  EXPECT_TRUE(CheckRemoteCandidate("candidate:1 1 UDP 1 ::1 5 typ host", guard).ok());
  EXPECT_FALSE(CheckRemoteCandidate("candidate:1 1 UDP 1 127.0.0.2 5 typ host", guard).ok());
}

TEST(CandidateGuardTest, RemoteDescriptionLosesItsRefusedCandidates) {
  const std::string sdp =
      "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
      "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n"
      "a=candidate:1 1 UDP 2015363327 10.0.0.8 5000 typ host\r\n"
      "a=candidate:2 1 UDP 1015363327 8.8.8.8 5001 typ srflx raddr 10.0.0.8 rport 5000\r\n"
      "a=candidate:3 1 UDP 2015363327 host-1.local 5002 typ host\r\n"
      "a=rtpmap:111 OPUS/48000/2\r\n";
  int dropped = -1;
  absl::StatusOr<std::string> filtered = FilterRemoteCandidates(sdp, UrlGuardOptions(), &dropped);
  ASSERT_TRUE(filtered.ok()) << filtered.status();
  EXPECT_EQ(dropped, 2);
  EXPECT_THAT(*filtered, HasSubstr("8.8.8.8 5001 typ srflx"));
  EXPECT_THAT(*filtered, Not(HasSubstr("10.0.0.8 5000 typ host")));
  EXPECT_THAT(*filtered, Not(HasSubstr(".local")));
  EXPECT_THAT(*filtered, HasSubstr("a=rtpmap:111 OPUS/48000/2"));
  EXPECT_FALSE(FilterRemoteCandidates("not sdp", UrlGuardOptions()).ok());
}

TEST(WebRtcPeerTest, BadOptionsAreRefused) {
  WebRtcPeerOptions options;
  options.turn_servers = {"http://user:secret@turn.example.com:3478"};
  absl::StatusOr<std::unique_ptr<WebRtcPeer>> peer = WebRtcPeer::Create(options, {});
  ASSERT_FALSE(peer.ok());
  EXPECT_THAT(peer.status().message(), HasSubstr("TURN"));
  EXPECT_THAT(peer.status().message(), Not(HasSubstr("secret")));
  options = WebRtcPeerOptions();
  options.stun_server = "stun.example.com:3478";
  EXPECT_FALSE(WebRtcPeer::Create(options, {}).ok());
  options = WebRtcPeerOptions();
  options.receive_sample_rate = 1000;
  EXPECT_FALSE(WebRtcPeer::Create(options, {}).ok());
  options = WebRtcPeerOptions();
  options.turn_servers = {"turn://user:secret@turn.example.com:3478"};
  options.stun_server = "stun://stun.example.com:3478";
  EXPECT_TRUE(WebRtcPeer::Create(options, {}).ok());
}

TEST(WebRtcPeerTest, ToneCrossesAndIsDecodedAtTheAskedRate) {
  auto received = std::make_shared<Received>();
  WebRtcPeerOptions sender = LoopbackOptions(true);
  sender.send_audio = true;
  sender.send_sample_rate = 48000;
  WebRtcPeerOptions receiver = LoopbackOptions(true);
  receiver.receive_sample_rate = 16000;
  Pair pair = MakePair(sender, receiver, received);
  ASSERT_NE(pair.offerer, nullptr);
  Negotiate(pair);
  ASSERT_EQ(pair.offerer->WaitForState(PeerState::kConnected, absl::Seconds(10)),
            PeerState::kConnected);
  ASSERT_EQ(pair.answerer->WaitForState(PeerState::kConnected, absl::Seconds(10)),
            PeerState::kConnected);
  EXPECT_EQ(*pair.dropped, 0);
  {
    // Host candidates on loopback, each with the m-line's mid and index (one bundled m-line).
    absl::MutexLock lock(&pair.gathered->mu);
    ASSERT_FALSE(pair.gathered->candidates.empty());
    for (const IceCandidate& c : pair.gathered->candidates) {
      if (c.candidate.empty()) continue;
      EXPECT_THAT(c.candidate, HasSubstr(" 127.0.0.1 "));
      EXPECT_EQ(c.sdp_mid, "audio0");
      EXPECT_EQ(c.sdp_mline_index, 0);
    }
  }

  absl::Time tone_start = SendSilenceThenTone(*pair.offerer, 48000, 440, 600, 1000);
  // Silence after the tone, so the decoder flushes its tail.
  SendSilenceThenTone(*pair.offerer, 48000, 440, 300, 0);
  absl::MutexLock lock(&received->mu);
  ASSERT_NE(received->first_loud, absl::InfiniteFuture()) << received->pcm.size() << " samples";
  absl::Duration delay = received->first_loud - tone_start;
  std::printf("one-way delay (tone start pushed -> first loud frame decoded): %.1f ms\n",
              absl::ToDoubleMilliseconds(delay));
  EXPECT_GT(delay, absl::ZeroDuration());
  EXPECT_LT(delay, absl::Seconds(1));

  // The loud stretch: about a second of 440 Hz at 16 kHz, not noise and not another pitch.
  std::vector<int16_t> loud;
  const std::vector<int16_t>& pcm = received->pcm;
  for (size_t i = 0; i + 320 <= pcm.size(); i += 320) {
    if (Rms(&pcm[i], 320) > 1000) loud.insert(loud.end(), pcm.begin() + i, pcm.begin() + i + 320);
  }
  double seconds = loud.size() / 16000.0;
  std::printf("tone received: %.2f s loud of %.2f s decoded\n", seconds, pcm.size() / 16000.0);
  EXPECT_GT(seconds, 0.8);
  EXPECT_LT(seconds, 1.2);
  double at_440 = TonePower(loud, 16000, 440);
  double at_880 = TonePower(loud, 16000, 880);
  double at_300 = TonePower(loud, 16000, 300);
  double rms = Rms(loud.data(), loud.size());
  std::printf("tone rms %.0f (sent 5657), power 440 Hz %.0f, 300 Hz %.0f, 880 Hz %.0f\n", rms,
              at_440, at_300, at_880);
  // A pure tone of amplitude A has Goertzel power A²/4 at its frequency.
  EXPECT_GT(rms, 3000);
  EXPECT_GT(at_440, 100 * at_880);
  EXPECT_GT(at_440, 100 * at_300);
}

TEST(WebRtcPeerTest, AConnectedPairRenegotiatesAndKeepsItsAudio) {
  // A LiveKit server sends the subscriber a new offer whenever the room's tracks change.
  auto received = std::make_shared<Received>();
  WebRtcPeerOptions sender = LoopbackOptions(true);
  sender.send_audio = true;
  Pair pair = MakePair(sender, LoopbackOptions(true), received);
  ASSERT_NE(pair.offerer, nullptr);
  Negotiate(pair);
  ASSERT_EQ(pair.answerer->WaitForState(PeerState::kConnected, absl::Seconds(10)),
            PeerState::kConnected);
  SendSilenceThenTone(*pair.offerer, 48000, 440, 0, 300);
  Negotiate(pair);
  size_t before;
  {
    absl::MutexLock lock(&received->mu);
    before = received->pcm.size();
  }
  SendSilenceThenTone(*pair.offerer, 48000, 440, 0, 500);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(pair.answerer->state(), PeerState::kConnected);
  absl::MutexLock lock(&received->mu);
  // Half a second more, at 16 kHz.
  EXPECT_GT(received->pcm.size() - before, 7000u);
  // An offer that is not SDP is refused, and the connection goes on.
  EXPECT_EQ(pair.answerer->AcceptOffer("v=0 nonsense").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WebRtcPeerTest, PulledAudioIsKeptUpToItsCap) {
  auto received = std::make_shared<Received>();
  WebRtcPeerOptions sender = LoopbackOptions(true);
  sender.send_audio = true;
  sender.send_sample_rate = 16000;
  WebRtcPeerOptions receiver = LoopbackOptions(true);
  receiver.receive_sample_rate = 8000;
  receiver.max_received_audio = absl::Milliseconds(500);
  Pair pair = MakePair(sender, receiver, received, /*pull=*/true);
  ASSERT_NE(pair.offerer, nullptr);
  Negotiate(pair);
  ASSERT_EQ(pair.answerer->WaitForState(PeerState::kConnected, absl::Seconds(10)),
            PeerState::kConnected);
  SendSilenceThenTone(*pair.offerer, 16000, 1000, 0, 1200);
  absl::SleepFor(absl::Milliseconds(200));
  std::vector<int16_t> pcm = pair.answerer->TakeAudio();
  // The newest half second, at 8 kHz; the rest was dropped oldest first.
  EXPECT_EQ(pcm.size(), 4000u);
  EXPECT_GT(TonePower(pcm, 8000, 1000), 100 * TonePower(pcm, 8000, 500));
  EXPECT_LE(pair.answerer->TakeAudio().size(), 320u);
  EXPECT_EQ(pair.answerer->SendAudio(pcm).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(WebRtcPeerTest, DataChannelsOpenAndCarryMessages) {
  auto received = std::make_shared<Received>();
  WebRtcPeerOptions sender = LoopbackOptions(true);
  sender.data_channels = true;
  Pair pair = MakePair(sender, LoopbackOptions(true), received);
  ASSERT_NE(pair.offerer, nullptr);
  EXPECT_EQ(pair.offerer->SendData("_reliable", "early").code(),
            absl::StatusCode::kFailedPrecondition);
  Negotiate(pair);
  ASSERT_EQ(pair.offerer->WaitForState(PeerState::kConnected, absl::Seconds(10)),
            PeerState::kConnected);
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!(pair.offerer->DataChannelOpen("_reliable") && pair.offerer->DataChannelOpen("_lossy")) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(pair.offerer->DataChannelOpen("_reliable"));
  ASSERT_TRUE(pair.offerer->DataChannelOpen("_lossy"));
  std::string binary("\x01\x00\xffpacket", 9);
  ASSERT_TRUE(pair.offerer->SendData("_reliable", binary).ok());
  ASSERT_TRUE(pair.offerer->SendData("_lossy", "text message", true).ok());
  EXPECT_EQ(pair.offerer->SendData("_reliable", std::string(70000, 'x')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.offerer->SendData("nope", "x").code(), absl::StatusCode::kFailedPrecondition);
  deadline = absl::Now() + absl::Seconds(10);
  for (;;) {
    {
      absl::MutexLock lock(&received->mu);
      if (received->messages.size() >= 2 || absl::Now() > deadline) break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::MutexLock lock(&received->mu);
  EXPECT_THAT(received->messages,
              ::testing::UnorderedElementsAre(
                  std::make_pair(std::string("_reliable"), binary),
                  std::make_pair(std::string("_lossy"), std::string("text message"))));
}

TEST(WebRtcPeerTest, ClosingOneSideEndsTheOther) {
  auto received = std::make_shared<Received>();
  WebRtcPeerOptions sender = LoopbackOptions(true);
  sender.send_audio = true;
  WebRtcPeerOptions receiver = LoopbackOptions(true);
  receiver.idle_timeout = absl::Seconds(2);
  Pair pair = MakePair(sender, receiver, received);
  ASSERT_NE(pair.offerer, nullptr);
  Negotiate(pair);
  ASSERT_EQ(pair.answerer->WaitForState(PeerState::kConnected, absl::Seconds(10)),
            PeerState::kConnected);
  SendSilenceThenTone(*pair.offerer, 48000, 440, 0, 500);
  EXPECT_EQ(pair.answerer->state(), PeerState::kConnected);
  pair.offerer->Close();
  EXPECT_EQ(pair.offerer->SendAudio(std::vector<int16_t>(960)).code(),
            absl::StatusCode::kUnavailable);
  absl::Time closed = absl::Now();
  PeerState state = pair.answerer->WaitForState(PeerState::kDisconnected, absl::Seconds(10));
  std::printf("the other side reported %s %.2f s after the close\n",
              std::string(PeerStateName(state)).c_str(),
              absl::ToDoubleSeconds(absl::Now() - closed));
  EXPECT_TRUE(state == PeerState::kDisconnected || state == PeerState::kFailed)
      << PeerStateName(state);
}

TEST(WebRtcPeerTest, LoopbackCandidatesRefusedByTheGuardMeanNoConnection) {
  auto received = std::make_shared<Received>();
  WebRtcPeerOptions sender = LoopbackOptions(false);
  sender.send_audio = true;
  sender.connect_timeout = absl::Seconds(3);
  WebRtcPeerOptions receiver = LoopbackOptions(false);
  receiver.connect_timeout = absl::Seconds(3);
  Pair pair = MakePair(sender, receiver, received);
  ASSERT_NE(pair.offerer, nullptr);
  Negotiate(pair);
  PeerState offerer = pair.offerer->WaitForState(PeerState::kFailed, absl::Seconds(10));
  PeerState answerer = pair.answerer->WaitForState(PeerState::kFailed, absl::Seconds(10));
  EXPECT_EQ(offerer, PeerState::kFailed) << PeerStateName(offerer);
  EXPECT_EQ(answerer, PeerState::kFailed) << PeerStateName(answerer);
  EXPECT_THAT(pair.answerer->reason(), HasSubstr("refused by the address guard"));
  EXPECT_THAT(pair.offerer->reason(), HasSubstr("not connected within 3s"));
  // Every candidate each side gathered (host candidates on 127.0.0.1) was dropped.
  EXPECT_GE(*pair.dropped, 2);
  absl::MutexLock lock(&received->mu);
  EXPECT_TRUE(received->pcm.empty());
}

}  // namespace
}  // namespace calleval::runs

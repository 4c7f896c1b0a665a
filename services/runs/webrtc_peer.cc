#include "services/runs/webrtc_peer.h"

#include <arpa/inet.h>

#define GST_USE_UNSTABLE_API  // webrtc headers: the API is stable since 1.16 but still flagged
#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/webrtc/webrtc.h>

#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/errors.h"
#include "common/status_macros.h"

namespace calleval::runs {
namespace {

absl::once_flag gst_once;

void InitGstreamer() {
  absl::call_once(gst_once, [] { gst_init(nullptr, nullptr); });
}

// A GError's message, freeing it.
std::string TakeError(GError* error) {
  std::string message = error != nullptr && error->message != nullptr ? error->message : "unknown";
  if (error != nullptr) g_error_free(error);
  return message;
}

// Waits for a GstPromise's reply with a bound: webrtcbin answers on its own thread, and a
// promise has no timed wait of its own.
struct PromiseWaiter {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
};

void OnPromiseChanged(GstPromise*, gpointer data) {
  auto* waiter = static_cast<std::shared_ptr<PromiseWaiter>*>(data);
  absl::MutexLock lock(&(*waiter)->mu);
  (*waiter)->done = true;
}

void FreeWaiter(gpointer data) { delete static_cast<std::shared_ptr<PromiseWaiter>*>(data); }

// Emits `signal` on `element` with `arg` (may be null) and a promise, and returns the reply's
// copy (null when the reply is empty); kDeadlineExceeded after `timeout`, an error when the reply
// carries one.
absl::StatusOr<GstStructure*> EmitAndWait(GstElement* element, const char* signal, gpointer arg,
                                          absl::Duration timeout) {
  auto waiter = std::make_shared<PromiseWaiter>();
  GstPromise* promise = gst_promise_new_with_change_func(
      OnPromiseChanged, new std::shared_ptr<PromiseWaiter>(waiter), FreeWaiter);
  g_signal_emit_by_name(element, signal, arg, promise);
  bool done;
  {
    absl::MutexLock lock(&waiter->mu);
    auto replied = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiter->mu) { return waiter->done; };
    done = waiter->mu.AwaitWithTimeout(absl::Condition(&replied), timeout);
  }
  if (!done) {
    gst_promise_interrupt(promise);
    gst_promise_unref(promise);
    return absl::DeadlineExceededError(
        absl::StrCat("webrtc ", signal, " did not answer in ", absl::FormatDuration(timeout)));
  }
  GstStructure* reply = nullptr;
  absl::Status status;
  if (gst_promise_wait(promise) == GST_PROMISE_RESULT_REPLIED) {
    const GstStructure* r = gst_promise_get_reply(promise);
    if (r != nullptr) {
      GError* error = nullptr;
      if (gst_structure_has_field(r, "error") &&
          gst_structure_get(r, "error", G_TYPE_ERROR, &error, nullptr)) {
        status =
            absl::InvalidArgumentError(absl::StrCat("webrtc ", signal, ": ", TakeError(error)));
      } else {
        reply = gst_structure_copy(r);
      }
    }
  } else {
    status = absl::InternalError(absl::StrCat("webrtc ", signal, " was interrupted"));
  }
  gst_promise_unref(promise);
  if (!status.ok()) return status;
  return reply;
}

absl::StatusOr<GstSDPMessage*> ParseSdp(absl::string_view text) {
  GstSDPMessage* sdp = nullptr;
  if (gst_sdp_message_new(&sdp) != GST_SDP_OK) return absl::InternalError("sdp message");
  if (gst_sdp_message_parse_buffer(reinterpret_cast<const guint8*>(text.data()), text.size(),
                                   sdp) != GST_SDP_OK ||
      gst_sdp_message_medias_len(sdp) == 0) {
    gst_sdp_message_free(sdp);
    return absl::InvalidArgumentError("the session description is not SDP with media");
  }
  return sdp;
}

std::string SdpText(const GstSDPMessage* sdp) {
  gchar* text = gst_sdp_message_as_text(sdp);
  std::string out = text != nullptr ? text : "";
  g_free(text);
  return out;
}

bool HostAllowed(absl::string_view address, const UrlGuardOptions& guard) {
  for (const std::string& entry : guard.allowed_hosts) {
    absl::string_view e = entry;
    if (absl::ConsumePrefix(&e, "[")) absl::ConsumeSuffix(&e, "]");
    if (absl::EqualsIgnoreCase(e, address)) return true;
  }
  return false;
}

absl::Status NotAllowed(absl::string_view address, absl::string_view why) {
  std::string issue = absl::StrCat("candidate address ", address, " is ", why);
  return ValidationError(kUrlNotPublicCode, absl::StrCat("ICE candidate dropped: ", issue),
                         {{std::string("ice_candidate"), issue}});
}

PeerState FromConnectionState(GstWebRTCPeerConnectionState state) {
  switch (state) {
    case GST_WEBRTC_PEER_CONNECTION_STATE_NEW:
      return PeerState::kNew;
    case GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTING:
      return PeerState::kConnecting;
    case GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTED:
      return PeerState::kConnected;
    case GST_WEBRTC_PEER_CONNECTION_STATE_DISCONNECTED:
      return PeerState::kDisconnected;
    case GST_WEBRTC_PEER_CONNECTION_STATE_FAILED:
      return PeerState::kFailed;
    case GST_WEBRTC_PEER_CONNECTION_STATE_CLOSED:
      return PeerState::kClosed;
  }
  return PeerState::kNew;
}

bool IsFinal(PeerState state) {
  return state == PeerState::kDisconnected || state == PeerState::kFailed ||
         state == PeerState::kClosed;
}

}  // namespace

absl::string_view PeerStateName(PeerState state) {
  switch (state) {
    case PeerState::kNew:
      return "new";
    case PeerState::kConnecting:
      return "connecting";
    case PeerState::kConnected:
      return "connected";
    case PeerState::kDisconnected:
      return "disconnected";
    case PeerState::kFailed:
      return "failed";
    case PeerState::kClosed:
      return "closed";
  }
  return "unknown";
}

absl::Status CheckRemoteCandidate(absl::string_view candidate, const UrlGuardOptions& guard) {
  absl::string_view line = absl::StripAsciiWhitespace(candidate);
  absl::ConsumePrefix(&line, "a=");
  // candidate:<foundation> <component> <transport> <priority> <address> <port> typ <type> ...
  std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (fields.size() < 8 || !absl::StartsWith(fields[0], "candidate:") || fields[6] != "typ") {
    return FieldError("ice_candidate", "is not an ICE candidate line");
  }
  std::string address(fields[4]);
  if (HostAllowed(address, guard)) return absl::OkStatus();
  in_addr v4;
  in6_addr v6;
  std::optional<std::string> reason;
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    reason = NonPublicReason(v4);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    reason = NonPublicReason(v6);
  } else {
    return NotAllowed(address, "a name, not an IP address (it cannot be checked before use)");
  }
  if (reason.has_value()) return NotAllowed(address, *reason);
  return absl::OkStatus();
}

absl::StatusOr<std::string> FilterRemoteCandidates(absl::string_view sdp_text,
                                                   const UrlGuardOptions& guard, int* dropped) {
  absl::StatusOr<GstSDPMessage*> parsed = ParseSdp(sdp_text);
  if (!parsed.ok()) return parsed.status();
  GstSDPMessage* sdp = *parsed;
  int count = 0;
  for (guint m = 0; m < gst_sdp_message_medias_len(sdp); ++m) {
    GstSDPMedia* media = const_cast<GstSDPMedia*>(gst_sdp_message_get_media(sdp, m));
    for (guint a = gst_sdp_media_attributes_len(media); a-- > 0;) {
      const GstSDPAttribute* attr = gst_sdp_media_get_attribute(media, a);
      if (std::strcmp(attr->key, "candidate") != 0 || attr->value == nullptr) continue;
      if (!CheckRemoteCandidate(absl::StrCat("candidate:", attr->value), guard).ok()) {
        gst_sdp_media_remove_attribute(media, a);
        ++count;
      }
    }
  }
  std::string out = SdpText(sdp);
  gst_sdp_message_free(sdp);
  if (dropped != nullptr) *dropped = count;
  return out;
}

class WebRtcPeer::Impl {
 public:
  Impl(const WebRtcPeerOptions& options, WebRtcPeerCallbacks callbacks)
      : options_(options), callbacks_(std::move(callbacks)) {}
  ~Impl() { Close(); }

  absl::Status Start();
  absl::StatusOr<std::string> CreateOffer();
  absl::StatusOr<std::string> AcceptOffer(absl::string_view offer_sdp);
  absl::Status SetAnswer(absl::string_view answer_sdp);
  absl::Status AddRemoteCandidate(const IceCandidate& candidate);
  absl::Status SendAudio(absl::Span<const int16_t> pcm);
  std::vector<int16_t> TakeAudio();
  absl::Status SendData(absl::string_view label, absl::string_view data, bool text);
  bool DataChannelOpen(absl::string_view label) const;
  PeerState state() const;
  std::string reason() const;
  PeerState WaitForState(PeerState state, absl::Duration timeout) const;
  void Close();

 private:
  absl::Status BuildSendChain();
  absl::StatusOr<std::string> SetDescription(const char* signal, GstWebRTCSDPType type,
                                             absl::string_view sdp_text);
  absl::Status SetLocal(GstWebRTCSessionDescription* desc);
  void RemoteDescriptionSet();
  void AddCandidateNow(const IceCandidate& candidate);
  void AddDataChannel(GstWebRTCDataChannel* channel);
  void SetState(PeerState state, absl::string_view reason);
  void Watchdog();

  // webrtcbin and GStreamer callbacks (static trampolines take `this` as user data).
  static void OnIceCandidate(GstElement* webrtc, guint mline, gchar* candidate, gpointer self);
  static void OnConnectionState(GObject* webrtc, GParamSpec*, gpointer self);
  static void OnPadAdded(GstElement* webrtc, GstPad* pad, gpointer self);
  static void OnDataChannel(GstElement* webrtc, GObject* channel, gpointer self);
  static void OnChannelOpen(GObject* channel, gpointer self);
  static void OnMessageData(GObject* channel, GBytes* bytes, gpointer self);
  static void OnMessageString(GObject* channel, gchar* text, gpointer self);
  static void OnDeepElementAdded(GstBin*, GstBin*, GstElement* element, gpointer self);
  static GstPadProbeReturn OnInboundPacket(GstPad*, GstPadProbeInfo*, gpointer self);
  static GstFlowReturn OnNewSample(GstAppSink* sink, gpointer self);
  static GstBusSyncReply OnBusMessage(GstBus*, GstMessage* message, gpointer self);

  const WebRtcPeerOptions options_;
  const WebRtcPeerCallbacks callbacks_;

  GstElement* pipeline_ = nullptr;
  GstElement* webrtc_ = nullptr;  // owned by pipeline_
  // Owned by pipeline_; send_mu_ keeps Close() from freeing it under a SendAudio().
  absl::Mutex send_mu_;
  GstElement* appsrc_ ABSL_GUARDED_BY(send_mu_) = nullptr;
  std::atomic<bool> closing_{false};
  std::atomic<int64_t> last_inbound_ns_{0};  // monotonic, of the last packet off the wire
  std::atomic<int> refused_candidates_{0};   // by the guard, trickled or in a description

  // Serializes the offer/answer operations against each other and Close().
  absl::Mutex op_mu_;
  // Remote candidates have their own lock, never held while waiting on webrtcbin: they are
  // trickled from the other side's callbacks, which may run while an offer/answer waits here.
  absl::Mutex cand_mu_ ABSL_ACQUIRED_AFTER(op_mu_);
  bool remote_set_ ABSL_GUARDED_BY(cand_mu_) = false;
  std::vector<IceCandidate> pending_candidates_ ABSL_GUARDED_BY(cand_mu_);

  mutable absl::Mutex mu_;
  PeerState state_ ABSL_GUARDED_BY(mu_) = PeerState::kNew;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  absl::Time connecting_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stop_watchdog_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, GstWebRTCDataChannel*, std::less<>> channels_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool, std::less<>> channel_open_ ABSL_GUARDED_BY(mu_);
  std::deque<int16_t> received_ ABSL_GUARDED_BY(mu_);
  std::thread watchdog_;
};

absl::Status WebRtcPeer::Impl::Start() {
  InitGstreamer();
  for (const char* factory : {"webrtcbin", "nicesrc", "opusenc", "opusdec", "rtpopuspay",
                              "rtpopusdepay", "appsrc", "appsink", "audioresample"}) {
    GstElementFactory* f = gst_element_factory_find(factory);
    if (f == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the GStreamer element ", factory,
                       " is not installed (gstreamer1.0-plugins-base, "
                       "-good, -bad and gstreamer1.0-nice are needed for WebRTC)"));
    }
    gst_object_unref(f);
  }
  if (options_.send_sample_rate < 8000 || options_.send_sample_rate > 48000 ||
      options_.receive_sample_rate < 8000 || options_.receive_sample_rate > 48000) {
    return absl::InvalidArgumentError("sample rates must be 8000..48000 Hz");
  }
  pipeline_ = gst_pipeline_new(nullptr);
  webrtc_ = gst_element_factory_make("webrtcbin", nullptr);
  gst_bin_add(GST_BIN(pipeline_), webrtc_);
  g_object_set(webrtc_, "bundle-policy", GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE, "latency",
               static_cast<guint>(absl::ToInt64Milliseconds(options_.jitter_latency)), nullptr);
  if (!options_.stun_server.empty()) {
    if (!absl::StartsWith(options_.stun_server, "stun://")) {
      return absl::InvalidArgumentError("the STUN server must be a stun:// URI");
    }
    g_object_set(webrtc_, "stun-server", options_.stun_server.c_str(), nullptr);
  }
  for (const std::string& turn : options_.turn_servers) {
    gboolean added = FALSE;
    if (absl::StartsWith(turn, "turn://") || absl::StartsWith(turn, "turns://")) {
      g_signal_emit_by_name(webrtc_, "add-turn-server", turn.c_str(), &added);
    }
    if (!added) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a TURN server URI (turn(s)://user:password@host:port): ", RedactUrl(turn)));
    }
  }
  GstWebRTCICE* ice = nullptr;
  g_object_get(webrtc_, "ice-agent", &ice, nullptr);
  if (ice == nullptr) return absl::InternalError("webrtcbin has no ICE agent");
  // libnice asks the LAN's router for a port mapping over UPnP (SSDP multicast, then HTTP to
  // whatever answers) unless told not to: outbound traffic the address guard never sees, and a
  // thread per agent. Relays are the installation's TURN servers instead.
  GObject* agent = nullptr;
  if (g_object_class_find_property(G_OBJECT_GET_CLASS(ice), "agent") != nullptr) {
    g_object_get(ice, "agent", &agent, nullptr);
  }
  if (agent == nullptr) {
    gst_object_unref(ice);
    return absl::FailedPreconditionError("webrtcbin's ICE agent is not libnice");
  }
  g_object_set(agent, "upnp", FALSE, nullptr);
  g_object_unref(agent);
  for (const std::string& address : options_.local_addresses) {
    gboolean added = FALSE;
    g_signal_emit_by_name(ice, "add-local-ip-address", address.c_str(), &added);
    if (!added) {
      gst_object_unref(ice);
      return absl::InvalidArgumentError(absl::StrCat("not a local address: ", address));
    }
  }
  gst_object_unref(ice);

  g_signal_connect(webrtc_, "on-ice-candidate", G_CALLBACK(OnIceCandidate), this);
  g_signal_connect(webrtc_, "notify::connection-state", G_CALLBACK(OnConnectionState), this);
  g_signal_connect(webrtc_, "pad-added", G_CALLBACK(OnPadAdded), this);
  g_signal_connect(webrtc_, "on-data-channel", G_CALLBACK(OnDataChannel), this);
  g_signal_connect(pipeline_, "deep-element-added", G_CALLBACK(OnDeepElementAdded), this);
  GstBus* bus = gst_pipeline_get_bus(GST_PIPELINE(pipeline_));
  gst_bus_set_sync_handler(bus, OnBusMessage, this, nullptr);
  gst_object_unref(bus);

  if (options_.send_audio) RETURN_IF_ERROR(BuildSendChain());
  if (gst_element_set_state(pipeline_, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    return absl::InternalError("the WebRTC pipeline did not start");
  }
  if (options_.data_channels) {
    // As LiveKit's clients open them on the publisher: `_reliable` ordered with retransmissions,
    // `_lossy` unordered without.
    for (bool lossy : {false, true}) {
      GstStructure* init =
          lossy ? gst_structure_new("init", "ordered", G_TYPE_BOOLEAN, FALSE, "max-retransmits",
                                    G_TYPE_INT, 0, nullptr)
                : gst_structure_new("init", "ordered", G_TYPE_BOOLEAN, TRUE, nullptr);
      GstWebRTCDataChannel* channel = nullptr;
      g_signal_emit_by_name(webrtc_, "create-data-channel", lossy ? "_lossy" : "_reliable", init,
                            &channel);
      gst_structure_free(init);
      if (channel == nullptr) return absl::InternalError("webrtcbin made no data channel");
      AddDataChannel(channel);  // takes the reference
    }
  }
  watchdog_ = std::thread([this] { Watchdog(); });
  return absl::OkStatus();
}

absl::Status WebRtcPeer::Impl::BuildSendChain() {
  absl::MutexLock lock(&send_mu_);
  appsrc_ = gst_element_factory_make("appsrc", nullptr);
  GstElement* convert = gst_element_factory_make("audioconvert", nullptr);
  GstElement* resample = gst_element_factory_make("audioresample", nullptr);
  GstElement* encoder = gst_element_factory_make("opusenc", nullptr);
  GstElement* payloader = gst_element_factory_make("rtpopuspay", nullptr);
  GstElement* rtp_caps = gst_element_factory_make("capsfilter", nullptr);
  gst_bin_add_many(GST_BIN(pipeline_), appsrc_, convert, resample, encoder, payloader, rtp_caps,
                   nullptr);
  GstCaps* caps = gst_caps_new_simple(
      "audio/x-raw", "format", G_TYPE_STRING, "S16LE", "layout", G_TYPE_STRING, "interleaved",
      "rate", G_TYPE_INT, options_.send_sample_rate, "channels", G_TYPE_INT, 1, nullptr);
  guint64 max_bytes = static_cast<guint64>(absl::ToDoubleSeconds(options_.max_send_queue) *
                                           options_.send_sample_rate * 2);
  // Live, stamped with the running time as frames are pushed; a full queue drops the new
  // frame rather than blocking the caller's 20 ms clock.
  g_object_set(appsrc_, "caps", caps, "format", GST_FORMAT_TIME, "is-live", TRUE, "do-timestamp",
               TRUE, "max-bytes", max_bytes, "block", FALSE, nullptr);
  gst_app_src_set_leaky_type(GST_APP_SRC(appsrc_), GST_APP_LEAKY_TYPE_UPSTREAM);
  gst_caps_unref(caps);
  g_object_set(encoder, "frame-size", 20, "bitrate", 32000, nullptr);
  gst_util_set_object_arg(G_OBJECT(encoder), "audio-type", "voice");
  g_object_set(payloader, "pt", 111, nullptr);
  GstCaps* rtp = gst_caps_from_string(
      "application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000");
  g_object_set(rtp_caps, "caps", rtp, nullptr);
  gst_caps_unref(rtp);
  if (!gst_element_link_many(appsrc_, convert, resample, encoder, payloader, rtp_caps, nullptr)) {
    return absl::InternalError("the audio send chain did not link");
  }
  GstPad* src = gst_element_get_static_pad(rtp_caps, "src");
  GstPad* sink = gst_element_request_pad_simple(webrtc_, "sink_%u");
  bool linked = sink != nullptr && gst_pad_link(src, sink) == GST_PAD_LINK_OK;
  gst_object_unref(src);
  if (!linked) {
    if (sink != nullptr) gst_object_unref(sink);
    return absl::InternalError("the audio track did not link to webrtcbin");
  }
  // The caller only speaks on this connection: a sendonly transceiver.
  GstWebRTCRTPTransceiver* transceiver = nullptr;
  g_object_get(sink, "transceiver", &transceiver, nullptr);
  gst_object_unref(sink);
  if (transceiver != nullptr) {
    g_object_set(transceiver, "direction", GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDONLY, nullptr);
    gst_object_unref(transceiver);
  }
  return absl::OkStatus();
}

absl::Status WebRtcPeer::Impl::SetLocal(GstWebRTCSessionDescription* desc) {
  absl::StatusOr<GstStructure*> reply =
      EmitAndWait(webrtc_, "set-local-description", desc, options_.operation_timeout);
  if (!reply.ok()) return reply.status();
  if (*reply != nullptr) gst_structure_free(*reply);
  return absl::OkStatus();
}

absl::StatusOr<std::string> WebRtcPeer::Impl::CreateOffer() {
  absl::MutexLock lock(&op_mu_);
  if (closing_) return absl::UnavailableError("the peer is closed");
  ASSIGN_OR_RETURN(GstStructure * reply,
                   EmitAndWait(webrtc_, "create-offer", nullptr, options_.operation_timeout));
  GstWebRTCSessionDescription* offer = nullptr;
  if (reply != nullptr) {
    gst_structure_get(reply, "offer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &offer, nullptr);
    gst_structure_free(reply);
  }
  if (offer == nullptr) return absl::InternalError("webrtcbin made no offer");
  absl::Status set = SetLocal(offer);
  std::string text = SdpText(offer->sdp);
  gst_webrtc_session_description_free(offer);
  RETURN_IF_ERROR(set);
  {
    absl::MutexLock state_lock(&mu_);
    if (connecting_since_ == absl::InfiniteFuture()) connecting_since_ = absl::Now();
  }
  return text;
}

absl::StatusOr<std::string> WebRtcPeer::Impl::SetDescription(const char* signal,
                                                             GstWebRTCSDPType type,
                                                             absl::string_view sdp_text) {
  int dropped = 0;
  ASSIGN_OR_RETURN(std::string filtered,
                   FilterRemoteCandidates(sdp_text, options_.guard, &dropped));
  refused_candidates_ += dropped;
  ASSIGN_OR_RETURN(GstSDPMessage * sdp, ParseSdp(filtered));
  GstWebRTCSessionDescription* desc = gst_webrtc_session_description_new(type, sdp);
  absl::StatusOr<GstStructure*> reply =
      EmitAndWait(webrtc_, signal, desc, options_.operation_timeout);
  gst_webrtc_session_description_free(desc);
  if (!reply.ok()) return reply.status();
  if (*reply != nullptr) gst_structure_free(*reply);
  return filtered;
}

absl::StatusOr<std::string> WebRtcPeer::Impl::AcceptOffer(absl::string_view offer_sdp) {
  absl::MutexLock lock(&op_mu_);
  if (closing_) return absl::UnavailableError("the peer is closed");
  RETURN_IF_ERROR(
      SetDescription("set-remote-description", GST_WEBRTC_SDP_TYPE_OFFER, offer_sdp).status());
  RemoteDescriptionSet();
  ASSIGN_OR_RETURN(GstStructure * reply,
                   EmitAndWait(webrtc_, "create-answer", nullptr, options_.operation_timeout));
  GstWebRTCSessionDescription* answer = nullptr;
  if (reply != nullptr) {
    gst_structure_get(reply, "answer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &answer, nullptr);
    gst_structure_free(reply);
  }
  if (answer == nullptr) return absl::InternalError("webrtcbin made no answer");
  absl::Status set = SetLocal(answer);
  std::string text = SdpText(answer->sdp);
  gst_webrtc_session_description_free(answer);
  RETURN_IF_ERROR(set);
  return text;
}

absl::Status WebRtcPeer::Impl::SetAnswer(absl::string_view answer_sdp) {
  absl::MutexLock lock(&op_mu_);
  if (closing_) return absl::UnavailableError("the peer is closed");
  RETURN_IF_ERROR(
      SetDescription("set-remote-description", GST_WEBRTC_SDP_TYPE_ANSWER, answer_sdp).status());
  RemoteDescriptionSet();
  return absl::OkStatus();
}

void WebRtcPeer::Impl::RemoteDescriptionSet() {
  {
    absl::MutexLock lock(&mu_);
    if (connecting_since_ == absl::InfiniteFuture()) connecting_since_ = absl::Now();
  }
  absl::MutexLock lock(&cand_mu_);
  remote_set_ = true;
  for (const IceCandidate& candidate : pending_candidates_) AddCandidateNow(candidate);
  pending_candidates_.clear();
}

void WebRtcPeer::Impl::AddCandidateNow(const IceCandidate& candidate) {
  // Queued to webrtcbin's thread, so this does not wait. An empty candidate tells webrtcbin
  // (and libnice) that the remote has no more.
  absl::string_view line = candidate.candidate;
  absl::ConsumePrefix(&line, "a=");
  std::string text(line);
  g_signal_emit_by_name(webrtc_, "add-ice-candidate", static_cast<guint>(candidate.sdp_mline_index),
                        text.c_str());
}

absl::Status WebRtcPeer::Impl::AddRemoteCandidate(const IceCandidate& candidate) {
  if (!candidate.candidate.empty()) {
    absl::Status allowed = CheckRemoteCandidate(candidate.candidate, options_.guard);
    if (!allowed.ok()) {
      ++refused_candidates_;
      return allowed;
    }
  }
  if (candidate.sdp_mline_index < 0) return FieldError("sdp_mline_index", "must not be negative");
  absl::MutexLock lock(&cand_mu_);
  if (closing_) return absl::UnavailableError("the peer is closed");
  if (!remote_set_) {
    if (pending_candidates_.size() >= 256) {
      return absl::ResourceExhaustedError("too many ICE candidates before the remote description");
    }
    pending_candidates_.push_back(candidate);
    return absl::OkStatus();
  }
  AddCandidateNow(candidate);
  return absl::OkStatus();
}

absl::Status WebRtcPeer::Impl::SendAudio(absl::Span<const int16_t> pcm) {
  absl::MutexLock lock(&send_mu_);
  if (closing_) return absl::UnavailableError("the peer is closed");
  if (appsrc_ == nullptr) return absl::FailedPreconditionError("this peer sends no audio");
  if (pcm.empty()) return absl::OkStatus();
  guint64 queued = gst_app_src_get_current_level_bytes(GST_APP_SRC(appsrc_));
  guint64 max_bytes = 0;
  g_object_get(appsrc_, "max-bytes", &max_bytes, nullptr);
  if (queued + pcm.size() * sizeof(int16_t) > max_bytes) {
    return absl::UnavailableError("the audio send queue is full");
  }
  GstBuffer* buffer = gst_buffer_new_memdup(pcm.data(), pcm.size() * sizeof(int16_t));
  GST_BUFFER_DURATION(buffer) =
      gst_util_uint64_scale(pcm.size(), GST_SECOND, options_.send_sample_rate);
  if (gst_app_src_push_buffer(GST_APP_SRC(appsrc_), buffer) != GST_FLOW_OK) {
    return absl::UnavailableError("the audio track is not flowing");
  }
  return absl::OkStatus();
}

std::vector<int16_t> WebRtcPeer::Impl::TakeAudio() {
  absl::MutexLock lock(&mu_);
  std::vector<int16_t> out(received_.begin(), received_.end());
  received_.clear();
  return out;
}

absl::Status WebRtcPeer::Impl::SendData(absl::string_view label, absl::string_view data,
                                        bool text) {
  if (static_cast<int64_t>(data.size()) > options_.max_data_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("a data channel message is at most ",
                                                   options_.max_data_message_bytes, " bytes"));
  }
  GstWebRTCDataChannel* channel = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = channels_.find(label);
    auto open = channel_open_.find(label);
    if (it == channels_.end() || open == channel_open_.end() || !open->second) {
      return absl::FailedPreconditionError(
          absl::StrCat("the data channel ", label, " is not open"));
    }
    channel = GST_WEBRTC_DATA_CHANNEL(gst_object_ref(it->second));
  }
  GError* error = nullptr;
  gboolean sent;
  if (text) {
    std::string copy(data);
    sent = gst_webrtc_data_channel_send_string_full(channel, copy.c_str(), &error);
  } else {
    GBytes* bytes = g_bytes_new(data.data(), data.size());
    sent = gst_webrtc_data_channel_send_data_full(channel, bytes, &error);
    g_bytes_unref(bytes);
  }
  gst_object_unref(channel);
  if (!sent) {
    return absl::UnavailableError(absl::StrCat("data channel ", label, ": ", TakeError(error)));
  }
  return absl::OkStatus();
}

bool WebRtcPeer::Impl::DataChannelOpen(absl::string_view label) const {
  absl::MutexLock lock(&mu_);
  auto it = channel_open_.find(label);
  return it != channel_open_.end() && it->second;
}

PeerState WebRtcPeer::Impl::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

std::string WebRtcPeer::Impl::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

PeerState WebRtcPeer::Impl::WaitForState(PeerState state, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ == state || IsFinal(state_);
  };
  mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  return state_;
}

void WebRtcPeer::Impl::SetState(PeerState state, absl::string_view reason) {
  {
    absl::MutexLock lock(&mu_);
    // A final state stays: webrtcbin may report "connecting" again after the watchdog gave up.
    if (state_ == state || IsFinal(state_)) return;
    state_ = state;
    if (IsFinal(state)) reason_ = std::string(reason);
    if (state == PeerState::kConnected) {
      last_inbound_ns_ = absl::GetCurrentTimeNanos();
    }
  }
  if (callbacks_.on_state && !closing_) callbacks_.on_state(state, reason);
}

void WebRtcPeer::Impl::Watchdog() {
  const absl::Duration tick = absl::Milliseconds(100);
  absl::MutexLock lock(&mu_);
  while (!stop_watchdog_) {
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_watchdog_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), tick);
    if (stop_watchdog_) break;
    std::string reason;
    PeerState next = state_;
    if (state_ == PeerState::kConnected) {
      absl::Duration idle = absl::Nanoseconds(absl::GetCurrentTimeNanos() - last_inbound_ns_);
      if (idle > options_.idle_timeout) {
        next = PeerState::kDisconnected;
        reason = absl::StrCat("nothing received for ", absl::FormatDuration(idle));
      }
    } else if (!IsFinal(state_) && absl::Now() - connecting_since_ > options_.connect_timeout) {
      next = PeerState::kFailed;
      reason =
          absl::StrCat("not connected within ", absl::FormatDuration(options_.connect_timeout));
      if (int refused = refused_candidates_.load(); refused > 0) {
        absl::StrAppend(&reason, " (", refused, " remote candidate", refused == 1 ? "" : "s",
                        " refused by the address guard)");
      }
    }
    if (next != state_) {
      mu_.Unlock();
      SetState(next, reason);
      mu_.Lock();
    }
  }
}

void WebRtcPeer::Impl::Close() {
  if (pipeline_ == nullptr) return;
  closing_ = true;
  {
    absl::MutexLock lock(&mu_);
    stop_watchdog_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
  absl::MutexLock op_lock(&op_mu_);
  {
    absl::MutexLock cand_lock(&cand_mu_);
  }  // a trickle emitting now is done; later ones see closing_
  // NULL stops every streaming thread before the handlers that point at us go.
  gst_element_set_state(pipeline_, GST_STATE_NULL);
  std::map<std::string, GstWebRTCDataChannel*, std::less<>> channels;
  {
    absl::MutexLock lock(&mu_);
    channels.swap(channels_);
    if (!IsFinal(state_)) state_ = PeerState::kClosed;
  }
  for (auto& [label, channel] : channels) {
    g_signal_handlers_disconnect_by_data(channel, this);
    gst_object_unref(channel);
  }
  g_signal_handlers_disconnect_by_data(webrtc_, this);
  g_signal_handlers_disconnect_by_data(pipeline_, this);
  GstBus* bus = gst_pipeline_get_bus(GST_PIPELINE(pipeline_));
  gst_bus_set_sync_handler(bus, nullptr, nullptr, nullptr);
  gst_object_unref(bus);
  {
    absl::MutexLock lock(&send_mu_);
    appsrc_ = nullptr;
  }
  gst_object_unref(pipeline_);
  pipeline_ = nullptr;
  webrtc_ = nullptr;
}

void WebRtcPeer::Impl::AddDataChannel(GstWebRTCDataChannel* channel) {
  gchar* label = nullptr;
  GstWebRTCDataChannelState ready = GST_WEBRTC_DATA_CHANNEL_STATE_CONNECTING;
  g_object_get(channel, "label", &label, "ready-state", &ready, nullptr);
  std::string name = label != nullptr ? label : "";
  g_free(label);
  g_signal_connect(channel, "on-open", G_CALLBACK(OnChannelOpen), this);
  g_signal_connect(channel, "on-message-data", G_CALLBACK(OnMessageData), this);
  g_signal_connect(channel, "on-message-string", G_CALLBACK(OnMessageString), this);
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(name);
  if (it != channels_.end()) gst_object_unref(it->second);
  channels_[name] = channel;
  channel_open_[name] = ready == GST_WEBRTC_DATA_CHANNEL_STATE_OPEN;
}

void WebRtcPeer::Impl::OnIceCandidate(GstElement* webrtc, guint mline, gchar* candidate,
                                      gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  if (impl->closing_ || !impl->callbacks_.on_ice_candidate) return;
  IceCandidate out;
  out.candidate = candidate != nullptr ? candidate : "";
  out.sdp_mline_index = static_cast<int>(mline);
  // webrtcbin gives the m-line; signalling (LiveKit's RTCIceCandidateInit) wants its mid too.
  GstWebRTCSessionDescription* local = nullptr;
  g_object_get(webrtc, "local-description", &local, nullptr);
  if (local != nullptr) {
    if (mline < gst_sdp_message_medias_len(local->sdp)) {
      const char* mid =
          gst_sdp_media_get_attribute_val(gst_sdp_message_get_media(local->sdp, mline), "mid");
      if (mid != nullptr) out.sdp_mid = mid;
    }
    gst_webrtc_session_description_free(local);
  }
  impl->callbacks_.on_ice_candidate(out);
}

void WebRtcPeer::Impl::OnConnectionState(GObject* webrtc, GParamSpec*, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  GstWebRTCPeerConnectionState state = GST_WEBRTC_PEER_CONNECTION_STATE_NEW;
  g_object_get(webrtc, "connection-state", &state, nullptr);
  PeerState next = FromConnectionState(state);
  if (next == PeerState::kNew) return;
  impl->SetState(next, next == PeerState::kFailed ? "ICE or DTLS failed" : "");
}

void WebRtcPeer::Impl::OnPadAdded(GstElement*, GstPad* pad, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  if (GST_PAD_DIRECTION(pad) != GST_PAD_SRC || impl->closing_) return;
  GstCaps* caps = gst_pad_get_current_caps(pad);
  if (caps == nullptr) caps = gst_pad_query_caps(pad, nullptr);
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  const char* encoding = gst_structure_get_string(s, "encoding-name");
  bool opus = encoding != nullptr && g_ascii_strcasecmp(encoding, "OPUS") == 0;
  gst_caps_unref(caps);
  GstBin* bin = GST_BIN(impl->pipeline_);
  if (!opus) {
    // Not ours to decode (video, another codec): drained so it does not stall the bundle.
    GstElement* sink = gst_element_factory_make("fakesink", nullptr);
    g_object_set(sink, "async", FALSE, "sync", FALSE, nullptr);
    gst_bin_add(bin, sink);
    gst_element_sync_state_with_parent(sink);
    GstPad* sink_pad = gst_element_get_static_pad(sink, "sink");
    gst_pad_link(pad, sink_pad);
    gst_object_unref(sink_pad);
    return;
  }
  GstElement* depay = gst_element_factory_make("rtpopusdepay", nullptr);
  GstElement* decoder = gst_element_factory_make("opusdec", nullptr);
  GstElement* convert = gst_element_factory_make("audioconvert", nullptr);
  GstElement* resample = gst_element_factory_make("audioresample", nullptr);
  GstElement* sink = gst_element_factory_make("appsink", nullptr);
  GstCaps* pcm = gst_caps_new_simple(
      "audio/x-raw", "format", G_TYPE_STRING, "S16LE", "layout", G_TYPE_STRING, "interleaved",
      "rate", G_TYPE_INT, impl->options_.receive_sample_rate, "channels", G_TYPE_INT, 1, nullptr);
  // Delivered as decoded, not held to the clock: the caller paces itself and measures latency.
  g_object_set(sink, "caps", pcm, "sync", FALSE, "async", FALSE, "max-buffers", 50, "drop", TRUE,
               nullptr);
  gst_caps_unref(pcm);
  GstAppSinkCallbacks callbacks = {};
  callbacks.new_sample = OnNewSample;
  gst_app_sink_set_callbacks(GST_APP_SINK(sink), &callbacks, impl, nullptr);
  gst_bin_add_many(bin, depay, decoder, convert, resample, sink, nullptr);
  gst_element_link_many(depay, decoder, convert, resample, sink, nullptr);
  for (GstElement* e : {sink, resample, convert, decoder, depay}) {
    gst_element_sync_state_with_parent(e);
  }
  GstPad* sink_pad = gst_element_get_static_pad(depay, "sink");
  gst_pad_link(pad, sink_pad);
  gst_object_unref(sink_pad);
}

GstFlowReturn WebRtcPeer::Impl::OnNewSample(GstAppSink* sink, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  GstSample* sample = gst_app_sink_pull_sample(sink);
  if (sample == nullptr) return GST_FLOW_EOS;
  GstBuffer* buffer = gst_sample_get_buffer(sample);
  GstMapInfo map;
  if (buffer != nullptr && gst_buffer_map(buffer, &map, GST_MAP_READ)) {
    absl::Span<const int16_t> pcm(reinterpret_cast<const int16_t*>(map.data),
                                  map.size / sizeof(int16_t));
    if (impl->callbacks_.on_audio) {
      if (!impl->closing_) impl->callbacks_.on_audio(pcm);
    } else {
      size_t cap = static_cast<size_t>(absl::ToDoubleSeconds(impl->options_.max_received_audio) *
                                       impl->options_.receive_sample_rate);
      absl::MutexLock lock(&impl->mu_);
      impl->received_.insert(impl->received_.end(), pcm.begin(), pcm.end());
      while (impl->received_.size() > cap) impl->received_.pop_front();
    }
    gst_buffer_unmap(buffer, &map);
  }
  gst_sample_unref(sample);
  return GST_FLOW_OK;
}

void WebRtcPeer::Impl::OnDataChannel(GstElement*, GObject* channel, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  if (impl->closing_) return;
  impl->AddDataChannel(GST_WEBRTC_DATA_CHANNEL(gst_object_ref(channel)));
}

void WebRtcPeer::Impl::OnChannelOpen(GObject* channel, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  gchar* label = nullptr;
  g_object_get(channel, "label", &label, nullptr);
  absl::MutexLock lock(&impl->mu_);
  impl->channel_open_[label != nullptr ? label : ""] = true;
  g_free(label);
}

void WebRtcPeer::Impl::OnMessageData(GObject* channel, GBytes* bytes, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  if (impl->closing_ || !impl->callbacks_.on_data || bytes == nullptr) return;
  gchar* label = nullptr;
  g_object_get(channel, "label", &label, nullptr);
  gsize size = 0;
  const char* data = static_cast<const char*>(g_bytes_get_data(bytes, &size));
  impl->callbacks_.on_data(label != nullptr ? label : "", absl::string_view(data, size), false);
  g_free(label);
}

void WebRtcPeer::Impl::OnMessageString(GObject* channel, gchar* text, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  if (impl->closing_ || !impl->callbacks_.on_data || text == nullptr) return;
  gchar* label = nullptr;
  g_object_get(channel, "label", &label, nullptr);
  impl->callbacks_.on_data(label != nullptr ? label : "", text, true);
  g_free(label);
}

void WebRtcPeer::Impl::OnDeepElementAdded(GstBin*, GstBin*, GstElement* element, gpointer self) {
  // Every packet off the wire (DTLS, SRTP, SCTP) leaves through a nicesrc: the watchdog's
  // measure of a live connection. STUN stays inside libnice.
  GstElementFactory* factory = gst_element_get_factory(element);
  if (factory == nullptr ||
      std::strcmp(gst_plugin_feature_get_name(GST_PLUGIN_FEATURE(factory)), "nicesrc") != 0) {
    return;
  }
  GstPad* src = gst_element_get_static_pad(element, "src");
  if (src == nullptr) return;
  gst_pad_add_probe(
      src, static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
      OnInboundPacket, self, nullptr);
  gst_object_unref(src);
}

GstPadProbeReturn WebRtcPeer::Impl::OnInboundPacket(GstPad*, GstPadProbeInfo*, gpointer self) {
  static_cast<Impl*>(self)->last_inbound_ns_ = absl::GetCurrentTimeNanos();
  return GST_PAD_PROBE_OK;
}

GstBusSyncReply WebRtcPeer::Impl::OnBusMessage(GstBus*, GstMessage* message, gpointer self) {
  auto* impl = static_cast<Impl*>(self);
  if (GST_MESSAGE_TYPE(message) == GST_MESSAGE_ERROR && !impl->closing_) {
    GError* error = nullptr;
    gst_message_parse_error(message, &error, nullptr);
    impl->SetState(PeerState::kFailed, absl::StrCat("media error: ", TakeError(error)));
  }
  gst_message_unref(message);
  return GST_BUS_DROP;
}

WebRtcPeer::WebRtcPeer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WebRtcPeer::~WebRtcPeer() = default;

absl::StatusOr<std::unique_ptr<WebRtcPeer>> WebRtcPeer::Create(const WebRtcPeerOptions& options,
                                                               WebRtcPeerCallbacks callbacks) {
  auto impl = std::make_unique<Impl>(options, std::move(callbacks));
  RETURN_IF_ERROR(impl->Start());
  return absl::WrapUnique(new WebRtcPeer(std::move(impl)));
}

absl::StatusOr<std::string> WebRtcPeer::CreateOffer() { return impl_->CreateOffer(); }
absl::StatusOr<std::string> WebRtcPeer::AcceptOffer(absl::string_view offer_sdp) {
  return impl_->AcceptOffer(offer_sdp);
}
absl::Status WebRtcPeer::SetAnswer(absl::string_view answer_sdp) {
  return impl_->SetAnswer(answer_sdp);
}
absl::Status WebRtcPeer::AddRemoteCandidate(const IceCandidate& candidate) {
  return impl_->AddRemoteCandidate(candidate);
}
absl::Status WebRtcPeer::SendAudio(absl::Span<const int16_t> pcm) { return impl_->SendAudio(pcm); }
std::vector<int16_t> WebRtcPeer::TakeAudio() { return impl_->TakeAudio(); }
absl::Status WebRtcPeer::SendData(absl::string_view label, absl::string_view data, bool text) {
  return impl_->SendData(label, data, text);
}
bool WebRtcPeer::DataChannelOpen(absl::string_view label) const {
  return impl_->DataChannelOpen(label);
}
PeerState WebRtcPeer::state() const { return impl_->state(); }
std::string WebRtcPeer::reason() const { return impl_->reason(); }
PeerState WebRtcPeer::WaitForState(PeerState state, absl::Duration timeout) const {
  return impl_->WaitForState(state, timeout);
}
void WebRtcPeer::Close() { impl_->Close(); }

}  // namespace calleval::runs

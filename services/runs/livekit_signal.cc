#include "services/runs/livekit_signal.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace calleval::runs {
namespace {

constexpr absl::string_view kErrorCode = "livekit_signal_failed";

absl::Status SignalError(absl::string_view message) {
  return MakeError(absl::StatusCode::kUnavailable, kErrorCode,
                   absl::StrCat("LiveKit signalling: ", message));
}

// Query values: RFC 3986 unreserved characters as they are, everything else %XX.
std::string QueryEscape(absl::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// The websocket client quotes the URL it dialed in its errors, and the token is in its query:
// the token never leaves in a message (a run's failure reason is shown to users).
absl::Status WithoutToken(const absl::Status& status, absl::string_view token) {
  if (status.ok() || token.empty()) return status;
  const std::string message =
      absl::StrReplaceAll(status.message(), {{QueryEscape(token), "<token>"}, {token, "<token>"}});
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::Duration SecondsOr(int32_t seconds, absl::Duration fallback) {
  return seconds > 0 ? absl::Seconds(seconds) : fallback;
}

}  // namespace

std::string CandidateInitJson(absl::string_view candidate, absl::string_view sdp_mid,
                              int sdp_mline_index) {
  return nlohmann::json{{"candidate", std::string(candidate)},
                        {"sdpMid", std::string(sdp_mid)},
                        {"sdpMLineIndex", sdp_mline_index}}
      .dump();
}

absl::StatusOr<std::string> LiveKitSignalUrl(absl::string_view room_url, absl::string_view token,
                                             const LiveKitSignalOptions& options) {
  std::string base(room_url);
  // LiveKit's SDKs take the room's http(s) URL as well and dial its ws(s) twin.
  if (absl::StartsWithIgnoreCase(base, "https://")) {
    base = absl::StrCat("wss://", base.substr(8));
  } else if (absl::StartsWithIgnoreCase(base, "http://")) {
    base = absl::StrCat("ws://", base.substr(7));
  }
  if (base.find('?') != std::string::npos || base.find('#') != std::string::npos) {
    return ValidationError("invalid_url", "the LiveKit URL must not carry a query or fragment",
                           {{options.websocket.field, "must not carry a query or fragment"}});
  }
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (token.empty()) {
    return MakeError(absl::StatusCode::kInvalidArgument, kErrorCode,
                     "LiveKit signalling: no access token");
  }
  return absl::StrCat(
      base, "/rtc?access_token=", QueryEscape(token),
      "&auto_subscribe=", options.auto_subscribe ? "1" : "0", "&sdk=", QueryEscape(options.sdk),
      "&version=", QueryEscape(options.sdk_version), "&protocol=", options.protocol);
}

absl::StatusOr<std::unique_ptr<LiveKitSignal>> LiveKitSignal::Join(
    absl::string_view room_url, absl::string_view token, const LiveKitSignalOptions& options,
    absl::Time now) {
  ASSIGN_OR_RETURN(std::string url, LiveKitSignalUrl(room_url, token, options));
  WebSocketOptions websocket = options.websocket;
  websocket.guard.allowed_schemes = {"ws", "wss"};
  absl::StatusOr<std::unique_ptr<WebSocketConnection>> connection =
      WebSocketConnection::Connect(url, websocket);
  if (!connection.ok()) return WithoutToken(connection.status(), token);
  absl::StatusOr<std::unique_ptr<LiveKitSignal>> signal =
      JoinOver(*std::move(connection), options, now);
  if (!signal.ok()) return WithoutToken(signal.status(), token);
  return signal;
}

absl::StatusOr<std::unique_ptr<LiveKitSignal>> LiveKitSignal::JoinOver(
    std::unique_ptr<WebSocketConnection> connection, const LiveKitSignalOptions& options,
    absl::Time now) {
  std::unique_ptr<LiveKitSignal> signal(new LiveKitSignal(std::move(connection), options));
  RETURN_IF_ERROR(signal->ReadJoin(now));
  return signal;
}

absl::Status LiveKitSignal::ReadJoin(absl::Time now) {
  const absl::Time deadline = absl::Now() + options_.join_timeout;
  bool joined = false;
  while (!joined) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      connection_->Close();
      return SignalError(absl::StrCat("the server did not answer the join within ",
                                      absl::FormatDuration(options_.join_timeout)));
    }
    // Poll returns at the first message, so the join costs no more than its answer takes.
    absl::StatusOr<std::vector<WebSocketMessage>> messages = connection_->Poll(left);
    if (!messages.ok()) {
      return SignalError(absl::StrCat("the server closed the connection before the join (",
                                      messages.status().message(), ")"));
    }
    for (WebSocketMessage& message : *messages) {
      livekit::SignalResponse response;
      if (!message.binary || !response.ParseFromString(message.data)) {
        connection_->Close();
        return MakeError(absl::StatusCode::kDataLoss, kErrorCode,
                         "LiveKit signalling: the server sent a frame that is not a "
                         "SignalResponse");
      }
      if (joined) {
        pending_.push_back(std::move(response));
      } else if (response.has_join()) {
        join_ = std::move(*response.mutable_join());
        joined = true;
      } else if (response.has_leave()) {
        connection_->Close();
        return SignalError(absl::StrCat("the server refused the join (",
                                        livekit::DisconnectReason_Name(response.leave().reason()),
                                        ")"));
      }
      // Anything else before the join (none is expected) is dropped.
    }
  }
  ping_interval_ = SecondsOr(join_.ping_interval(), options_.default_ping_interval);
  ping_timeout_ = SecondsOr(join_.ping_timeout(), options_.default_ping_timeout);
  next_ping_ = now;
  last_pong_ = now;
  return absl::OkStatus();
}

absl::Status LiveKitSignal::Send(const livekit::SignalRequest& request) {
  if (left_) return absl::FailedPreconditionError("LiveKit signalling: the room was left");
  std::string bytes;
  if (!request.SerializeToString(&bytes)) {
    return absl::InternalError("LiveKit signalling: cannot serialize a SignalRequest");
  }
  absl::Status sent = connection_->SendBinary(bytes);
  if (!sent.ok()) return SignalError(sent.message());
  return absl::OkStatus();
}

absl::Status LiveKitSignal::SendOffer(absl::string_view sdp, uint32_t id) {
  livekit::SignalRequest request;
  request.mutable_offer()->set_type("offer");
  request.mutable_offer()->set_sdp(std::string(sdp));
  request.mutable_offer()->set_id(id);
  return Send(request);
}

absl::Status LiveKitSignal::SendAnswer(absl::string_view sdp, uint32_t id) {
  livekit::SignalRequest request;
  request.mutable_answer()->set_type("answer");
  request.mutable_answer()->set_sdp(std::string(sdp));
  request.mutable_answer()->set_id(id);
  return Send(request);
}

absl::Status LiveKitSignal::SendTrickle(absl::string_view candidate_init,
                                        livekit::SignalTarget target, bool final) {
  livekit::SignalRequest request;
  request.mutable_trickle()->set_candidateinit(std::string(candidate_init));
  request.mutable_trickle()->set_target(target);
  request.mutable_trickle()->set_final(final);
  return Send(request);
}

absl::Status LiveKitSignal::AddTrack(absl::string_view cid, absl::string_view name,
                                     livekit::TrackSource source, livekit::TrackType type) {
  livekit::SignalRequest request;
  livekit::AddTrackRequest* track = request.mutable_add_track();
  track->set_cid(std::string(cid));
  track->set_name(std::string(name));
  track->set_type(type);
  track->set_source(source);
  return Send(request);
}

absl::Status LiveKitSignal::Leave() {
  livekit::SignalRequest request;
  request.mutable_leave()->set_reason(livekit::CLIENT_INITIATED);
  request.mutable_leave()->set_action(livekit::LeaveRequest::DISCONNECT);
  absl::Status sent = Send(request);
  left_ = true;
  connection_->Close();
  return sent;
}

absl::Status LiveKitSignal::SendPing(absl::Time now) {
  livekit::SignalRequest request;
  request.mutable_ping_req()->set_timestamp(absl::ToUnixMillis(now));
  request.mutable_ping_req()->set_rtt(absl::ToInt64Milliseconds(last_rtt_));
  RETURN_IF_ERROR(Send(request));
  next_ping_ = now + ping_interval_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<livekit::SignalResponse>> LiveKitSignal::Poll(absl::Duration wait,
                                                                         absl::Time now) {
  if (left_) return absl::FailedPreconditionError("LiveKit signalling: the room was left");
  if (now - last_pong_ > ping_timeout_) {
    return SignalError(
        absl::StrCat("no pong from the server for ", absl::FormatDuration(now - last_pong_)));
  }
  if (now >= next_ping_) RETURN_IF_ERROR(SendPing(now));
  std::vector<livekit::SignalResponse> out = std::move(pending_);
  pending_.clear();
  absl::StatusOr<std::vector<WebSocketMessage>> messages =
      connection_->Poll(out.empty() ? wait : absl::ZeroDuration());
  if (!messages.ok()) {
    return SignalError(absl::StrCat("the connection ended (", messages.status().message(), ")"));
  }
  for (WebSocketMessage& message : *messages) {
    livekit::SignalResponse response;
    if (!message.binary || !response.ParseFromString(message.data)) {
      return MakeError(absl::StatusCode::kDataLoss, kErrorCode,
                       "LiveKit signalling: the server sent a frame that is not a "
                       "SignalResponse");
    }
    if (response.has_pong_resp()) {
      ++pongs_;
      last_pong_ = now;
      // In whole milliseconds, the unit the ping carries its timestamp in.
      last_rtt_ = absl::Milliseconds(std::max<int64_t>(
          0, absl::ToUnixMillis(now) - response.pong_resp().last_ping_timestamp()));
      continue;
    }
    if (response.message_case() == livekit::SignalResponse::kPong) {
      ++pongs_;
      last_pong_ = now;
      continue;
    }
    out.push_back(std::move(response));
  }
  return out;
}

}  // namespace calleval::runs

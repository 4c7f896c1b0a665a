#include "services/runs/twilio_media_streams.h"

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/runs/media_events.h"

namespace calleval::runs {

TwilioStreamWriter::TwilioStreamWriter(std::string stream_sid, std::string call_sid,
                                       std::string account_sid)
    : stream_sid_(std::move(stream_sid)),
      call_sid_(std::move(call_sid)),
      account_sid_(std::move(account_sid)) {}

std::string TwilioStreamWriter::Next() { return absl::StrCat(++sequence_); }

std::string TwilioStreamWriter::Connected() {
  ++sequence_;  // `connected` carries no sequenceNumber but starts the count
  return nlohmann::json{{"event", "connected"}, {"protocol", "Call"}, {"version", "1.0.0"}}.dump();
}

std::string TwilioStreamWriter::Start(
    const std::vector<std::pair<std::string, std::string>>& parameters) {
  nlohmann::json custom = nlohmann::json::object();
  for (const auto& [k, v] : parameters) custom[k] = v;
  nlohmann::json start = {
      {"streamSid", stream_sid_},
      {"accountSid", account_sid_},
      {"callSid", call_sid_},
      {"tracks", {"inbound"}},
      {"customParameters", custom},
      {"mediaFormat", {{"encoding", "audio/x-mulaw"}, {"sampleRate", kTwilioSampleRate},
                       {"channels", 1}}}};
  return nlohmann::json{
      {"event", "start"}, {"sequenceNumber", Next()}, {"start", start}, {"streamSid", stream_sid_}}
      .dump();
}

std::string TwilioStreamWriter::Media(absl::string_view mulaw, int64_t timestamp_ms) {
  nlohmann::json media = {{"track", "inbound"},
                          {"chunk", absl::StrCat(++chunk_)},
                          {"timestamp", absl::StrCat(timestamp_ms)},
                          {"payload", Base64Encode(mulaw)}};
  return nlohmann::json{
      {"event", "media"}, {"sequenceNumber", Next()}, {"media", media}, {"streamSid", stream_sid_}}
      .dump();
}

std::string TwilioStreamWriter::Mark(absl::string_view name) {
  return nlohmann::json{{"event", "mark"},
                        {"sequenceNumber", Next()},
                        {"streamSid", stream_sid_},
                        {"mark", {{"name", std::string(name)}}}}
      .dump();
}

std::string TwilioStreamWriter::Stop() {
  return nlohmann::json{{"event", "stop"},
                        {"sequenceNumber", Next()},
                        {"streamSid", stream_sid_},
                        {"stop", {{"accountSid", account_sid_}, {"callSid", call_sid_}}}}
      .dump();
}

absl::StatusOr<TwilioAgentEvent> ParseTwilioAgentEvent(absl::string_view message) {
  nlohmann::json j = nlohmann::json::parse(message, nullptr, false);
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) {
    return absl::InvalidArgumentError("not a Twilio Media Streams event: no \"event\"");
  }
  TwilioAgentEvent out;
  out.event = j["event"].get<std::string>();
  if (out.event == "media") {
    ASSIGN_OR_RETURN(out.mulaw, MediaPayload(j, "Twilio"));
    out.kind = TwilioAgentEvent::kMedia;
  } else if (out.event == "mark") {
    out.kind = TwilioAgentEvent::kMark;
    const nlohmann::json& mark = j.value("mark", nlohmann::json::object());
    if (mark.is_object() && mark.contains("name") && mark["name"].is_string()) {
      out.mark = mark["name"].get<std::string>();
    }
  } else if (out.event == "clear") {
    out.kind = TwilioAgentEvent::kClear;
  }
  return out;
}

}  // namespace calleval::runs

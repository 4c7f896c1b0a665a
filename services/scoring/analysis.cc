#include "services/scoring/analysis.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/errors.h"
#include "common/standard_metrics.h"
#include "common/status_macros.h"
#include "services/scoring/audio_decoder.h"
#include "services/scoring/audio_metrics.h"
#include "services/scoring/turns.h"
#include "services/scoring/voice_activity.h"
#include "services/scoring/voice_quality.h"
#include "services/scoring/waveform_peaks.h"

namespace calleval::scoring {
namespace {

// Metrics that need to know who speaks when, on a recording that cannot tell (mono without a
// transcript): not_applicable, with the reason.
v1::StandardMetricResult NotApplicable(v1::StandardMetricResult result, absl::string_view why) {
  result.set_status("not_applicable");
  result.mutable_result()->Clear();
  result.clear_score();
  result.set_error(std::string(why));
  return result;
}

}  // namespace

ChannelMap ChannelMapOf(const google::protobuf::Struct& metadata) {
  ChannelMap map;
  auto it = metadata.fields().find("channel_map");
  if (it == metadata.fields().end() || !it->second.has_struct_value()) return map;
  const auto& fields = it->second.struct_value().fields();
  auto channel = [&](const char* key, int fallback) {
    auto f = fields.find(key);
    if (f == fields.end() || !f->second.has_number_value()) return fallback;
    double v = f->second.number_value();
    return v == 0 || v == 1 ? static_cast<int>(v) : fallback;
  };
  ChannelMap parsed{channel("agent", 0), channel("user", 1)};
  return parsed.agent != parsed.user ? parsed : map;
}

absl::StatusOr<ChannelMap> ParseChannelMap(const std::string& text) {
  ChannelMap map;
  bool agent = false, user = false;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, '=');
    int channel = -1;
    if (!absl::SimpleAtoi(kv.second, &channel) || channel < 0 || channel > 1) {
      return FieldError("channel_map", "channels are 0 (left) or 1 (right)");
    }
    if (kv.first == "agent") {
      map.agent = channel;
      agent = true;
    } else if (kv.first == "user") {
      map.user = channel;
      user = true;
    } else {
      return FieldError("channel_map", "expected agent=N,user=M");
    }
  }
  if (!agent || !user || map.agent == map.user) {
    return FieldError("channel_map", "agent and user must name different channels");
  }
  return map;
}

absl::StatusOr<AnalysisResult> AnalyzeRecording(const std::string& path,
                                                const std::vector<v1::Turn>* transcript,
                                                const AnalysisOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<AudioDecoder> decoder,
                   AudioDecoder::Open(path, kWorkingSampleRate));
  const int channels = decoder->channels();
  VoiceActivityDetector detector(kWorkingSampleRate, channels);
  VoiceQualityAnalyzer agent_voice(kWorkingSampleRate);
  WaveformPeaks peaks(kWorkingSampleRate, channels);
  const int agent_channel = channels == 2 ? options.channel_map.agent : 0;
  std::array<std::vector<float>, 2> block;
  while (true) {
    ASSIGN_OR_RETURN(size_t frames, decoder->Read(&block));
    if (frames == 0) break;
    detector.Feed(block, frames);
    agent_voice.Feed(block[agent_channel].data(), frames);
    peaks.Feed(block, frames);
  }
  std::array<SpeechSegments, 2> speech = detector.Finish();

  AnalysisResult out;
  out.duration_seconds = decoder->decoded_seconds();
  out.timeline.duration_s = out.duration_seconds;
  out.waveform = peaks.Finish();
  bool roles_known = true;
  if (channels == 2) {
    out.timeline.agent = BuildTurns(speech[options.channel_map.agent]);
    out.timeline.user = BuildTurns(speech[options.channel_map.user]);
  } else if (transcript != nullptr && !transcript->empty()) {
    // Mono: both parties share the channel, so the transcript's timings say who spoke when.
    out.timeline = TimelineFromTranscript(*transcript, out.duration_seconds);
  } else {
    // Mono without a transcript: speech is known but not whose it is. Silence needs no roles.
    roles_known = false;
    out.timeline.agent = BuildTurns(speech[0]);
  }

  const CallTimeline& t = out.timeline;
  std::vector<v1::StandardMetricResult> metrics = {
      Latency(t),
      AiInterruptions(t),
      UserInterruptions(t),
      StopTimeAfterInterruption(t),
      SilenceDetection(t, options.silence_threshold_ms),
      WordsPerMinute(t, transcript),
      agent_voice.Clarity(t.agent),
      agent_voice.VoiceChange(t.agent),
      TalkRatio(t),
  };
  for (auto& m : metrics) {
    // Silence needs no roles.
    if (!roles_known && m.standard_metric_key() != "silence_detection") {
      m = NotApplicable(std::move(m),
                        "mono recording without a transcript: the parties cannot be told apart");
    }
    out.standard_metrics.push_back(std::move(m));
  }
  return out;
}

}  // namespace calleval::scoring

#pragma once

// The audio pass over one recording: decode in blocks, find speech per channel, build each
// party's turns and compute the audio-based standard metrics (docs/metrics.md) and the
// waveform's peaks. Used by the scoring workers and by `callevalctl analyze`; memory stays flat
// with the length of the call.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "calleval/v1/calls.pb.h"
#include "services/scoring/timeline.h"

namespace calleval::scoring {

struct AnalysisOptions {
  ChannelMap channel_map;
  int silence_threshold_ms = 3000;
};

struct AnalysisResult {
  double duration_seconds = 0;
  CallTimeline timeline;
  std::vector<v1::StandardMetricResult> standard_metrics;
  // The recording's peaks for a waveform (waveform_peaks.h), from the same decoded audio.
  v1::CallWaveform waveform;
};

// The 9 audio metrics of docs/metrics.md that need only the recording (and, for words, the
// transcript): every audio-based standard metric except transcription_accuracy, which needs
// speech-to-text (transcription_accuracy.h). `transcript` (may be null) supplies the words for
// words_per_minute and, for mono recordings, the turn boundaries. An undecodable file:
// kInvalidArgument with code "unsupported_audio".
absl::StatusOr<AnalysisResult> AnalyzeRecording(const std::string& path,
                                                const std::vector<v1::Turn>* transcript,
                                                const AnalysisOptions& options);

// metadata.channel_map = {"agent": 0|1, "user": 0|1} (docs/metrics.md); anything else: the default.
ChannelMap ChannelMapOf(const google::protobuf::Struct& metadata);

// Parses "agent=0,user=1" (either order); the two channels must differ.
absl::StatusOr<ChannelMap> ParseChannelMap(const std::string& text);

}  // namespace calleval::scoring

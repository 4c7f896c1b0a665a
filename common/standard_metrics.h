#pragma once

// The twelve standard metrics every installation has, with fixed ids (docs/metrics.md).

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "calleval/v1/calls.pb.h"

namespace calleval {

struct StandardMetricInfo {
  int64_t id;
  absl::string_view key;
  absl::string_view name;
  absl::string_view result_type;
  bool requires_audio;  // ids 1–10 are measured from the recording; 11–12 judged on the transcript
};

inline constexpr StandardMetricInfo kStandardMetrics[] = {
    {1, "latency", "Latency", "numeric", true},
    {2, "ai_interruptions", "AI Interruptions", "numeric", true},
    {3, "user_interruptions", "User Interruptions", "numeric", true},
    {4, "stop_time_after_interruption", "Stop Time After Interruption", "numeric", true},
    {5, "silence_detection", "Silence Detection", "numeric", true},
    {6, "words_per_minute", "Words Per Minute", "numeric", true},
    {7, "transcription_accuracy", "Transcription Accuracy", "numeric", true},
    {8, "voice_tone_clarity", "Voice Tone Clarity", "rating", true},
    {9, "voice_change_detection", "Voice Change Detection", "boolean", true},
    {10, "talk_ratio", "Talk Ratio", "numeric", true},
    {11, "user_sentiment", "User Sentiment", "enum", false},
    {12, "task_completion", "Task Completion", "boolean", false},
};

// Custom metrics are numbered from here on (the standard ids are 1-12): every store that tells
// the two kinds apart by id uses this.
inline constexpr int64_t kFirstCustomMetricId = 101;

// The audio metrics that may need speech-to-text, which the pipeline names:
// words_per_minute counts the generated transcript's words when none was provided, and
// transcription_accuracy compares a provided transcript with the generated one.
inline constexpr int64_t kWordsPerMinuteMetricId = 6;
inline constexpr int64_t kTranscriptionAccuracyMetricId = 7;

// The standard metric with this id, or nullptr.
inline const StandardMetricInfo* FindStandardMetric(int64_t id) {
  for (const auto& m : kStandardMetrics) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

// An element of a call's standard_metrics for metric `id` with `status` and an empty result,
// for the stages that fill in the rest.
inline v1::StandardMetricResult NewStandardMetricResult(int64_t id, absl::string_view status) {
  v1::StandardMetricResult r;
  r.set_metric_id(id);
  if (const StandardMetricInfo* info = FindStandardMetric(id)) {
    r.set_standard_metric_key(std::string(info->key));
    r.set_name(std::string(info->name));
  }
  r.set_status(std::string(status));
  r.mutable_result();
  return r;
}

}  // namespace calleval

#pragma once

// The twelve standard metrics every installation has, with fixed ids (SPEC §3).

#include <cstdint>

#include "absl/strings/string_view.h"

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

// The standard metric with this id, or nullptr.
inline const StandardMetricInfo* FindStandardMetric(int64_t id) {
  for (const auto& m : kStandardMetrics) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

}  // namespace calleval

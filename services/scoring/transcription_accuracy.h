#pragma once

// transcription_accuracy (docs/metrics.md row 7): the word error rate of the transcript the user
// provided against the one generated from the recording by speech-to-text.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "calleval/v1/calls.pb.h"

namespace calleval::scoring {

// The spoken words of a transcript: the content of its "AI Assistant" and "User" turns in
// order of start_time (turns without times keep their place), joined. Roles are not compared:
// the metric measures which words were heard, and a mono recording's generated transcript
// cannot say who spoke.
std::string SpokenText(const std::vector<v1::Turn>& transcript);

// Metric 7 completed with accuracy (max(0, 1 - wer), the score), wer, substitutions,
// deletions, insertions and reference_words; the generated transcript is the reference. A
// pair too long to align on the scoring path (over kMaxWerAlignmentCells) ends failed.
v1::StandardMetricResult TranscriptionAccuracy(const std::vector<v1::Turn>& provided,
                                               const std::vector<v1::Turn>& generated);

// Metric 7 not_applicable with its counts at 0 (docs/metrics.md), saying `why`.
v1::StandardMetricResult TranscriptionAccuracyNotApplicable(absl::string_view why);

// The reason when no transcript was provided.
inline constexpr absl::string_view kNoProvidedTranscript =
    "transcription accuracy needs a provided transcript to compare with the one generated from "
    "the recording";

}  // namespace calleval::scoring

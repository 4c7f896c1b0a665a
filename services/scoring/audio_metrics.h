#pragma once

// The timeline-based standard metrics (docs/metrics.md ids 1–6 and 10) as pure functions of a
// call's turns. The exact reading of each definition at its edges is the corpus contract
// (corpus/README.md, "What the truth means"); the comments below restate it.
//
// Every function returns a complete element of `standard_metrics`: metric_id,
// standard_metric_key and name from common/standard_metrics.h, status "completed" or
// "not_applicable", `result` with exactly the keys of docs/metrics.md, `score` = the headline
// number (unset when that number is null), credits_used 0 (charging is done by the caller) and no
// error unless a reason is stated below.
//
// Values are rounded the way the corpus truth writes them: times in seconds (`_s`,
// `at_second`) to 0.1 ms, milliseconds to 0.1 ms, ratios to 1e-4, words per minute to 0.1;
// every figure is computed at full precision and rounded only when written.

#include <vector>

#include "absl/strings/string_view.h"
#include "calleval/v1/calls.pb.h"
#include "services/scoring/timeline.h"

namespace calleval::scoring {

// Overlaps of at least this long are interruptions; shorter ones are neither an interruption
// nor a latency turn.
inline constexpr double kInterruptionMinOverlapMs = 200;
inline constexpr int kDefaultSilenceThresholdMs = 3000;

// Id 1. A user turn yields a latency turn when no agent turn started during it or is in
// progress at its end, and the next turn to start at or after its end is an agent turn (no
// user turn starts first). latency_ms = agent start − user end (0 when the agent starts exactly
// at the user's end). Result: turns [{user_end_s, agent_start_s, latency_ms}] in time order,
// average_ms (the score), p50_ms, p90_ms, p95_ms, p99_ms (linear interpolation between closest
// ranks, numpy's default), min_ms, max_ms, count. With no latency turn: not_applicable, turns
// empty, count 0 and every other key null.
v1::StandardMetricResult Latency(const CallTimeline& timeline);

// Id 2. An agent turn that starts while a user turn is in progress (user start < agent start <
// user end) and overlaps it by ≥ 200 ms. at_second = agent start, duration_ms = min(agent end,
// user end) − agent start. Result: count (the score), events [{at_second, duration_ms}].
// Always completed.
v1::StandardMetricResult AiInterruptions(const CallTimeline& timeline);

// Id 3. AiInterruptions with the roles swapped.
v1::StandardMetricResult UserInterruptions(const CallTimeline& timeline);

// Id 4. For each user interruption (as in UserInterruptions), stop_ms = end of the agent turn in
// progress − the caller's start, at_second = the caller's start. Result: average_ms (the
// score), events [{at_second, stop_ms}]. With no user interruption: not_applicable,
// average_ms null, events empty.
v1::StandardMetricResult StopTimeAfterInterruption(const CallTimeline& timeline);

// Id 5. Stretches in nobody's turn lasting ≥ threshold_ms; the start and the end of the
// recording (0 and timeline.duration_s) count as edges, so leading and trailing silence are
// stretches too. Result: count (the score), total_ms, threshold_ms, silences
// [{start_s, end_s, duration_ms}]. Always completed.
v1::StandardMetricResult SilenceDetection(const CallTimeline& timeline,
                                          int threshold_ms = kDefaultSilenceThresholdMs);

// Id 6. Words come from the transcript (CountWords over the content of its "AI Assistant" and
// "User" entries), speaking time from the turns: ai_speaking_s = sum of agent turn durations,
// ai_wpm = ai_words / (ai_speaking_s / 60) (the score), and the same for the caller. A party
// with no speaking time has a null wpm (and words are still counted).
// Without a transcript (`transcript` == nullptr) there are no words to count: the metric is
// not_applicable with kWordsNeedATranscript in `error`, both wpm null, both word counts 0 and
// the speaking times as measured. An empty transcript is a transcript: its word counts are 0.
// `transcript` in the result names which transcript was counted: `transcript_source`
// ("provided" or "generated"), or null without one.
v1::StandardMetricResult WordsPerMinute(const CallTimeline& timeline,
                                        const std::vector<v1::Turn>* transcript,
                                        absl::string_view transcript_source = "provided");

// The error of a words_per_minute result that had no transcript to count.
inline constexpr absl::string_view kWordsNeedATranscript =
    "words per minute needs a transcript to count words";

// Id 6 again, for a voice call that had no transcript at its audio pass: the speaking times
// `measured` (a WordsPerMinute result without a transcript) recorded, and the words of
// `transcript` (the generated one), labelled `transcript_source`.
v1::StandardMetricResult RecountWordsPerMinute(const v1::StandardMetricResult& measured,
                                               const std::vector<v1::Turn>& transcript,
                                               absl::string_view transcript_source);

// Id 10. ai_ratio (the score) = agent turn time / recording duration, user_ratio likewise,
// silence_ratio = time in nobody's turn / duration; overlaps count for both parties, so the
// three can sum to more than 1. Turns are clipped to the recording. A recording without a
// duration (duration_s <= 0) is not_applicable with a reason in `error` and null ratios.
v1::StandardMetricResult TalkRatio(const CallTimeline& timeline);

// The number of words in `text`: whitespace-separated tokens (Unicode white space, as Python's
// str.split()) that contain at least one letter or digit. Non-ASCII characters count as letters
// unless they are punctuation, symbols, marks or white space of the common Unicode blocks.
int CountWords(absl::string_view text);

}  // namespace calleval::scoring

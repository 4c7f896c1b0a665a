#pragma once

// Turns per party (docs/metrics.md): a party's speech with internal pauses shorter than 700 ms
// merged. Stereo recordings get their speech segments from voice activity on each channel; mono
// recordings take turn boundaries from the transcript timings.

#include <vector>

#include "calleval/v1/calls.pb.h"
#include "services/scoring/timeline.h"

namespace calleval::scoring {

// Pauses shorter than this join two speech segments of one party into one turn.
inline constexpr double kTurnMergeGapS = 0.7;

// The turns of one party: `speech` (in any order; overlapping or touching segments are
// allowed) with every pause shorter than `merge_gap_s` merged away. A pause of exactly
// `merge_gap_s` separates two turns. Empty segments (end <= start) are dropped. The result is
// in time order and its spans neither overlap nor touch.
std::vector<Span> BuildTurns(const SpeechSegments& speech, double merge_gap_s = kTurnMergeGapS);

// The timeline of a mono recording of `duration_s` seconds, from the transcript timings:
// "AI Assistant" entries are agent speech, "User" entries caller speech; entries of other roles
// and entries without both start_time and end_time are skipped. Each party's entries are merged
// into turns by the same rule as BuildTurns. When `duration_s` > 0, timings are clipped to
// [0, duration_s] (an entry wholly outside the recording is dropped).
CallTimeline TimelineFromTranscript(const std::vector<v1::Turn>& transcript, double duration_s);

}  // namespace calleval::scoring

#include "services/scoring/turns.h"

#include <algorithm>

namespace calleval::scoring {
namespace {

// Times come from decimal seconds (10.7 - 10.0 == 0.69999...), so a pause that is the merge gap
// to within a nanosecond counts as exactly the merge gap.
constexpr double kTimeEpsilonS = 1e-9;

constexpr char kAgentRole[] = "AI Assistant";
constexpr char kUserRole[] = "User";

}  // namespace

std::vector<Span> BuildTurns(const SpeechSegments& speech, double merge_gap_s) {
  std::vector<Span> segments;
  segments.reserve(speech.size());
  for (const Span& s : speech) {
    if (s.end_s > s.start_s) segments.push_back(s);
  }
  std::sort(segments.begin(), segments.end(), [](const Span& a, const Span& b) {
    return a.start_s < b.start_s || (a.start_s == b.start_s && a.end_s < b.end_s);
  });
  std::vector<Span> turns;
  for (const Span& s : segments) {
    if (!turns.empty() && s.start_s - turns.back().end_s < merge_gap_s - kTimeEpsilonS) {
      turns.back().end_s = std::max(turns.back().end_s, s.end_s);
    } else {
      turns.push_back(s);
    }
  }
  return turns;
}

CallTimeline TimelineFromTranscript(const std::vector<v1::Turn>& transcript, double duration_s) {
  SpeechSegments agent;
  SpeechSegments user;
  for (const v1::Turn& turn : transcript) {
    if (!turn.has_start_time() || !turn.has_end_time()) continue;
    SpeechSegments* party = nullptr;
    if (turn.role() == kAgentRole) {
      party = &agent;
    } else if (turn.role() == kUserRole) {
      party = &user;
    } else {
      continue;
    }
    Span span{turn.start_time(), turn.end_time()};
    if (duration_s > 0) {
      span.start_s = std::max(span.start_s, 0.0);
      span.end_s = std::min(span.end_s, duration_s);
    }
    if (span.end_s > span.start_s) party->push_back(span);
  }
  CallTimeline timeline;
  timeline.agent = BuildTurns(agent);
  timeline.user = BuildTurns(user);
  timeline.duration_s = duration_s;
  return timeline;
}

}  // namespace calleval::scoring

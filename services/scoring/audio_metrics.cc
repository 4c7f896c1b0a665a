#include "services/scoring/audio_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/standard_metrics.h"
#include "google/protobuf/struct.pb.h"

namespace calleval::scoring {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

// Turn boundaries come from decimal seconds (10.2 - 10.0 == 0.19999...). Comparisons of times
// treat values within a nanosecond as equal, and thresholds in ms accept values a micro-ms
// short, so a boundary given exactly at a threshold is on the threshold.
constexpr double kTimeEpsilonS = 1e-9;
constexpr double kMsEpsilon = 1e-6;

constexpr int kSecondsDecimals = 4;  // 0.1 ms
constexpr int kMsDecimals = 1;       // 0.1 ms
constexpr int kRatioDecimals = 4;
constexpr int kWpmDecimals = 1;

constexpr char kAgentRole[] = "AI Assistant";
constexpr char kUserRole[] = "User";

// --- Results -----------------------------------------------------------------------------------

double Round(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  const double rounded = std::round(value * scale) / scale;
  return rounded == 0 ? 0.0 : rounded;  // no -0
}

Value NumberValue(double number) {
  Value v;
  v.set_number_value(number);
  return v;
}

Value NullValue() {
  Value v;
  v.set_null_value(google::protobuf::NULL_VALUE);
  return v;
}

Value OptionalNumberValue(const std::optional<double>& number) {
  return number.has_value() ? NumberValue(*number) : NullValue();
}

void SetField(Struct* s, const std::string& key, Value value) {
  (*s->mutable_fields())[key] = std::move(value);
}

// An empty list under `key`, to be filled by the caller.
ListValue* SetList(Struct* s, const std::string& key) {
  return (*s->mutable_fields())[key].mutable_list_value();
}

// A new object appended to `list`.
Struct* AppendObject(ListValue* list) { return list->add_values()->mutable_struct_value(); }

// The element for standard metric `id` with everything but result and score filled in.
v1::StandardMetricResult NewResult(int64_t id, bool applicable) {
  return NewStandardMetricResult(id, applicable ? "completed" : "not_applicable");
}

void SetScore(v1::StandardMetricResult* r, const std::optional<double>& score) {
  if (score.has_value()) {
    r->set_score(*score);
  } else {
    r->clear_score();
  }
}

// --- Timeline arithmetic ---------------------------------------------------------------------

std::vector<Span> Sorted(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.start_s < b.start_s; });
  return spans;
}

// `span` limited to [0, duration_s]; duration_s <= 0 means "unknown" and limits nothing.
Span Clip(const Span& span, double duration_s) {
  if (duration_s <= 0) return span;
  return Span{std::max(span.start_s, 0.0), std::min(span.end_s, duration_s)};
}

// Sum of the lengths of `spans` (each clipped to the recording).
double TotalLength(const std::vector<Span>& spans, double duration_s) {
  double total = 0;
  for (const Span& s : spans) {
    const Span c = Clip(s, duration_s);
    if (c.end_s > c.start_s) total += c.duration_s();
  }
  return total;
}

// The stretches of [0, duration_s] that lie in nobody's turn, in time order.
std::vector<Span> Gaps(const CallTimeline& timeline) {
  std::vector<Span> all;
  for (const auto* party : {&timeline.agent, &timeline.user}) {
    for (const Span& s : *party) {
      const Span c = Clip(s, timeline.duration_s);
      if (c.end_s > c.start_s) all.push_back(c);
    }
  }
  all = Sorted(std::move(all));
  std::vector<Span> gaps;
  double cursor = 0;
  for (const Span& s : all) {
    if (s.start_s > cursor) gaps.push_back(Span{cursor, s.start_s});
    cursor = std::max(cursor, s.end_s);
  }
  if (timeline.duration_s > cursor) gaps.push_back(Span{cursor, timeline.duration_s});
  return gaps;
}

double Ms(double seconds) { return seconds * 1000.0; }

struct Interruption {
  double at_s;               // the interrupter's start
  double overlap_ms;         // min(ends) − at_s
  double interrupted_end_s;  // end of the interrupted turn
};

// Turns of `interrupter` that start while a turn of `interrupted` is in progress (strictly
// after its start and before its end) and overlap it by at least 200 ms, in time order.
std::vector<Interruption> FindInterruptions(const std::vector<Span>& interrupter,
                                            const std::vector<Span>& interrupted) {
  std::vector<Interruption> out;
  for (const Span& x : Sorted(interrupter)) {
    for (const Span& y : interrupted) {
      if (!(x.start_s > y.start_s + kTimeEpsilonS && x.start_s < y.end_s - kTimeEpsilonS)) {
        continue;
      }
      const double overlap_ms = Ms(std::min(x.end_s, y.end_s) - x.start_s);
      if (overlap_ms >= kInterruptionMinOverlapMs - kMsEpsilon) {
        out.push_back(Interruption{x.start_s, overlap_ms, y.end_s});
        break;
      }
    }
  }
  return out;
}

v1::StandardMetricResult InterruptionResult(int64_t id, const std::vector<Span>& interrupter,
                                            const std::vector<Span>& interrupted) {
  const std::vector<Interruption> found = FindInterruptions(interrupter, interrupted);
  v1::StandardMetricResult r = NewResult(id, /*applicable=*/true);
  Struct* result = r.mutable_result();
  SetField(result, "count", NumberValue(static_cast<double>(found.size())));
  ListValue* events = SetList(result, "events");
  for (const Interruption& i : found) {
    Struct* e = AppendObject(events);
    SetField(e, "at_second", NumberValue(Round(i.at_s, kSecondsDecimals)));
    SetField(e, "duration_ms", NumberValue(Round(i.overlap_ms, kMsDecimals)));
  }
  SetScore(&r, static_cast<double>(found.size()));
  return r;
}

// numpy.percentile's default ("linear"): interpolation between the closest ranks of the sorted
// values. `sorted` is not empty.
double Percentile(const std::vector<double>& sorted, double p) {
  const double k = (sorted.size() - 1) * p / 100.0;
  const size_t f = static_cast<size_t>(std::floor(k));
  const size_t c = static_cast<size_t>(std::ceil(k));
  return sorted[f] + (sorted[c] - sorted[f]) * (k - static_cast<double>(f));
}

// --- Words -------------------------------------------------------------------------------------

// The code point at text[*i], advancing *i past it. Malformed UTF-8 decodes one byte at a time
// as U+FFFD.
char32_t NextCodePoint(absl::string_view text, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(*i);
  int length = 0;
  char32_t cp = 0;
  if (b0 < 0x80) {
    ++*i;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    length = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4;
    cp = b0 & 0x07;
  } else {
    ++*i;
    return 0xFFFD;
  }
  if (*i + length > text.size()) {
    ++*i;
    return 0xFFFD;
  }
  for (int k = 1; k < length; ++k) {
    const unsigned char b = byte(*i + k);
    if ((b & 0xC0) != 0x80) {
      ++*i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *i += length;
  return cp;
}

// White space as Python's str.isspace() has it.
bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// A letter or digit: ASCII alphanumerics, and non-ASCII characters outside the common blocks
// of punctuation, symbols, combining marks and specials.
bool IsLetterOrDigit(char32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
  }
  if (c <= 0xBF) {  // Latin-1 controls, punctuation and symbols; a few are letters or digits
    return c == 0xAA || c == 0xB2 || c == 0xB3 || c == 0xB5 || c == 0xB9 || c == 0xBA ||
           (c >= 0xBC && c <= 0xBE);
  }
  constexpr std::pair<char32_t, char32_t> kNotWordRanges[] = {
      {0xD7, 0xD7},       {0xF7, 0xF7},     {0x0300, 0x036F}, {0x2000, 0x206F}, {0x20A0, 0x20FF},
      {0x2190, 0x245F},   {0x2500, 0x27BF}, {0x27C0, 0x2BFF}, {0x2E00, 0x2E7F}, {0x3000, 0x3004},
      {0x3008, 0x3020},   {0x3030, 0x303F}, {0xFE00, 0xFE0F}, {0xFE30, 0xFE6F}, {0xFF01, 0xFF0F},
      {0xFF1A, 0xFF20},   {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}, {0xFFF0, 0xFFFF}, {0x1F000, 0x1FAFF},
      {0xE0000, 0xE007F},
  };
  for (const auto& [lo, hi] : kNotWordRanges) {
    if (c >= lo && c <= hi) return false;
  }
  return true;
}

// Words of each party in `transcript`.
struct WordCounts {
  int agent = 0;
  int user = 0;
};

WordCounts CountTranscriptWords(const std::vector<v1::Turn>& transcript) {
  WordCounts counts;
  for (const v1::Turn& turn : transcript) {
    if (turn.role() == kAgentRole) {
      counts.agent += CountWords(turn.content());
    } else if (turn.role() == kUserRole) {
      counts.user += CountWords(turn.content());
    }
  }
  return counts;
}

}  // namespace

int CountWords(absl::string_view text) {
  int words = 0;
  bool in_token = false;
  bool token_has_word_char = false;
  size_t i = 0;
  while (i < text.size()) {
    const char32_t c = NextCodePoint(text, &i);
    if (IsSpace(c)) {
      if (in_token && token_has_word_char) ++words;
      in_token = false;
      token_has_word_char = false;
      continue;
    }
    in_token = true;
    token_has_word_char = token_has_word_char || IsLetterOrDigit(c);
  }
  if (in_token && token_has_word_char) ++words;
  return words;
}

v1::StandardMetricResult Latency(const CallTimeline& timeline) {
  struct LatencyTurn {
    double user_end_s;
    double agent_start_s;
    double latency_ms;
  };
  const std::vector<Span> agent = Sorted(timeline.agent);
  const std::vector<Span> user = Sorted(timeline.user);
  std::vector<LatencyTurn> turns;
  for (size_t u = 0; u < user.size(); ++u) {
    const Span& turn = user[u];
    const double end = turn.end_s;
    bool agent_overlaps = false;
    std::optional<double> next_agent_start;
    for (const Span& a : agent) {
      const bool started_during =
          a.start_s >= turn.start_s - kTimeEpsilonS && a.start_s < end - kTimeEpsilonS;
      const bool in_progress_at_end =
          a.start_s < end - kTimeEpsilonS && a.end_s > end + kTimeEpsilonS;
      agent_overlaps = agent_overlaps || started_during || in_progress_at_end;
      if (a.start_s >= end - kTimeEpsilonS && !next_agent_start.has_value()) {
        next_agent_start = a.start_s;
      }
    }
    if (agent_overlaps || !next_agent_start.has_value()) continue;
    std::optional<double> next_user_start;
    for (size_t v = 0; v < user.size(); ++v) {
      if (v == u || user[v].start_s < end - kTimeEpsilonS) continue;
      if (!next_user_start.has_value() || user[v].start_s < *next_user_start) {
        next_user_start = user[v].start_s;
      }
    }
    // A user turn that starts first (ties go to the agent) means the caller went on talking.
    if (next_user_start.has_value() && *next_user_start < *next_agent_start - kTimeEpsilonS) {
      continue;
    }
    turns.push_back(
        LatencyTurn{end, *next_agent_start, std::max(0.0, Ms(*next_agent_start - end))});
  }

  v1::StandardMetricResult r = NewResult(1, /*applicable=*/!turns.empty());
  Struct* result = r.mutable_result();
  ListValue* list = SetList(result, "turns");
  std::vector<double> latencies;
  for (const LatencyTurn& t : turns) {
    Struct* e = AppendObject(list);
    SetField(e, "user_end_s", NumberValue(Round(t.user_end_s, kSecondsDecimals)));
    SetField(e, "agent_start_s", NumberValue(Round(t.agent_start_s, kSecondsDecimals)));
    SetField(e, "latency_ms", NumberValue(Round(t.latency_ms, kMsDecimals)));
    latencies.push_back(t.latency_ms);
  }
  std::optional<double> average;
  std::optional<double> p50, p90, p95, p99, min, max;
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    double sum = 0;
    for (double l : latencies) sum += l;
    average = Round(sum / latencies.size(), kMsDecimals);
    p50 = Round(Percentile(latencies, 50), kMsDecimals);
    p90 = Round(Percentile(latencies, 90), kMsDecimals);
    p95 = Round(Percentile(latencies, 95), kMsDecimals);
    p99 = Round(Percentile(latencies, 99), kMsDecimals);
    min = Round(latencies.front(), kMsDecimals);
    max = Round(latencies.back(), kMsDecimals);
  }
  SetField(result, "average_ms", OptionalNumberValue(average));
  SetField(result, "p50_ms", OptionalNumberValue(p50));
  SetField(result, "p90_ms", OptionalNumberValue(p90));
  SetField(result, "p95_ms", OptionalNumberValue(p95));
  SetField(result, "p99_ms", OptionalNumberValue(p99));
  SetField(result, "min_ms", OptionalNumberValue(min));
  SetField(result, "max_ms", OptionalNumberValue(max));
  SetField(result, "count", NumberValue(static_cast<double>(turns.size())));
  SetScore(&r, average);
  return r;
}

v1::StandardMetricResult AiInterruptions(const CallTimeline& timeline) {
  return InterruptionResult(2, timeline.agent, timeline.user);
}

v1::StandardMetricResult UserInterruptions(const CallTimeline& timeline) {
  return InterruptionResult(3, timeline.user, timeline.agent);
}

v1::StandardMetricResult StopTimeAfterInterruption(const CallTimeline& timeline) {
  const std::vector<Interruption> found = FindInterruptions(timeline.user, timeline.agent);
  v1::StandardMetricResult r = NewResult(4, /*applicable=*/!found.empty());
  Struct* result = r.mutable_result();
  ListValue* events = SetList(result, "events");
  double sum = 0;
  for (const Interruption& i : found) {
    const double stop_ms = Ms(i.interrupted_end_s - i.at_s);
    sum += stop_ms;
    Struct* e = AppendObject(events);
    SetField(e, "at_second", NumberValue(Round(i.at_s, kSecondsDecimals)));
    SetField(e, "stop_ms", NumberValue(Round(stop_ms, kMsDecimals)));
  }
  std::optional<double> average;
  if (!found.empty()) average = Round(sum / found.size(), kMsDecimals);
  SetField(result, "average_ms", OptionalNumberValue(average));
  SetScore(&r, average);
  return r;
}

v1::StandardMetricResult SilenceDetection(const CallTimeline& timeline, int threshold_ms) {
  v1::StandardMetricResult r = NewResult(5, /*applicable=*/true);
  Struct* result = r.mutable_result();
  ListValue* silences = SetList(result, "silences");
  int count = 0;
  double total_ms = 0;
  for (const Span& gap : Gaps(timeline)) {
    const double duration_ms = Ms(gap.duration_s());
    if (duration_ms < threshold_ms - kMsEpsilon) continue;
    ++count;
    total_ms += duration_ms;
    Struct* e = AppendObject(silences);
    SetField(e, "start_s", NumberValue(Round(gap.start_s, kSecondsDecimals)));
    SetField(e, "end_s", NumberValue(Round(gap.end_s, kSecondsDecimals)));
    SetField(e, "duration_ms", NumberValue(Round(duration_ms, kMsDecimals)));
  }
  SetField(result, "count", NumberValue(count));
  SetField(result, "total_ms", NumberValue(Round(total_ms, kMsDecimals)));
  SetField(result, "threshold_ms", NumberValue(threshold_ms));
  SetScore(&r, count);
  return r;
}

namespace {

// words_per_minute from speaking times and, when there is one, the transcript to count.
v1::StandardMetricResult WordsPerMinuteOf(double ai_speaking_s, double user_speaking_s,
                                          const std::vector<v1::Turn>* transcript,
                                          absl::string_view transcript_source) {
  const WordCounts words = transcript != nullptr ? CountTranscriptWords(*transcript) : WordCounts{};
  const auto wpm = [&](int n, double speaking_s) -> std::optional<double> {
    if (transcript == nullptr || speaking_s <= 0) return std::nullopt;
    return Round(n / (speaking_s / 60.0), kWpmDecimals);
  };
  const std::optional<double> ai_wpm = wpm(words.agent, ai_speaking_s);
  const std::optional<double> user_wpm = wpm(words.user, user_speaking_s);

  v1::StandardMetricResult r = NewResult(6, /*applicable=*/transcript != nullptr);
  if (transcript == nullptr) r.set_error(std::string(kWordsNeedATranscript));
  Struct* result = r.mutable_result();
  SetField(result, "ai_wpm", OptionalNumberValue(ai_wpm));
  SetField(result, "user_wpm", OptionalNumberValue(user_wpm));
  SetField(result, "ai_words", NumberValue(words.agent));
  SetField(result, "ai_speaking_s", NumberValue(Round(ai_speaking_s, kSecondsDecimals)));
  SetField(result, "user_words", NumberValue(words.user));
  SetField(result, "user_speaking_s", NumberValue(Round(user_speaking_s, kSecondsDecimals)));
  Value source = NullValue();
  if (transcript != nullptr) source.set_string_value(std::string(transcript_source));
  SetField(result, "transcript", std::move(source));
  SetScore(&r, ai_wpm);
  return r;
}

double NumberField(const v1::StandardMetricResult& r, const std::string& key) {
  const auto& fields = r.result().fields();
  auto it = fields.find(key);
  return it == fields.end() ? 0.0 : it->second.number_value();
}

}  // namespace

v1::StandardMetricResult WordsPerMinute(const CallTimeline& timeline,
                                        const std::vector<v1::Turn>* transcript,
                                        absl::string_view transcript_source) {
  return WordsPerMinuteOf(TotalLength(timeline.agent, timeline.duration_s),
                          TotalLength(timeline.user, timeline.duration_s), transcript,
                          transcript_source);
}

v1::StandardMetricResult RecountWordsPerMinute(const v1::StandardMetricResult& measured,
                                               const std::vector<v1::Turn>& transcript,
                                               absl::string_view transcript_source) {
  return WordsPerMinuteOf(NumberField(measured, "ai_speaking_s"),
                          NumberField(measured, "user_speaking_s"), &transcript,
                          transcript_source);
}

v1::StandardMetricResult TalkRatio(const CallTimeline& timeline) {
  const double duration = timeline.duration_s;
  v1::StandardMetricResult r = NewResult(10, /*applicable=*/duration > 0);
  Struct* result = r.mutable_result();
  std::optional<double> ai, user, silence;
  if (duration > 0) {
    double silent = 0;
    for (const Span& gap : Gaps(timeline)) silent += gap.duration_s();
    ai = Round(TotalLength(timeline.agent, duration) / duration, kRatioDecimals);
    user = Round(TotalLength(timeline.user, duration) / duration, kRatioDecimals);
    silence = Round(silent / duration, kRatioDecimals);
  } else {
    r.set_error("talk ratio needs the recording's duration");
  }
  SetField(result, "ai_ratio", OptionalNumberValue(ai));
  SetField(result, "user_ratio", OptionalNumberValue(user));
  SetField(result, "silence_ratio", OptionalNumberValue(silence));
  SetScore(&r, ai);
  return r;
}

}  // namespace calleval::scoring

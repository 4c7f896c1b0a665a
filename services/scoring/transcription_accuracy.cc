#include "services/scoring/transcription_accuracy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/standard_metrics.h"
#include "services/scoring/word_error_rate.h"

namespace calleval::scoring {
namespace {

double Round4(double value) { return std::round(value * 1e4) / 1e4; }

}  // namespace

std::string SpokenText(const std::vector<v1::Turn>& transcript) {
  std::vector<const v1::Turn*> spoken;
  for (const v1::Turn& turn : transcript) {
    if (turn.role() == "AI Assistant" || turn.role() == "User") spoken.push_back(&turn);
  }
  // A turn without a start_time takes the previous turn's, so the stable sort keeps it in place.
  std::vector<std::pair<double, const v1::Turn*>> timed;
  double last_start = 0;
  for (const v1::Turn* turn : spoken) {
    if (turn->has_start_time()) last_start = turn->start_time();
    timed.emplace_back(last_start, turn);
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string text;
  for (const auto& [start, turn] : timed) {
    if (!text.empty()) text += ' ';
    text += turn->content();
  }
  return text;
}

v1::StandardMetricResult TranscriptionAccuracyNotApplicable(absl::string_view why) {
  v1::StandardMetricResult r = NewStandardMetricResult(kTranscriptionAccuracyMetricId, "not_applicable");
  auto& fields = *r.mutable_result()->mutable_fields();
  fields["accuracy"].set_null_value(google::protobuf::NULL_VALUE);
  fields["wer"].set_null_value(google::protobuf::NULL_VALUE);
  for (const char* count : {"substitutions", "deletions", "insertions", "reference_words"}) {
    fields[count].set_number_value(0);
  }
  r.set_error(std::string(why));
  return r;
}

v1::StandardMetricResult TranscriptionAccuracy(const std::vector<v1::Turn>& provided,
                                               const std::vector<v1::Turn>& generated) {
  const std::vector<std::string> reference = NormalizeWords(SpokenText(generated));
  const std::vector<std::string> hypothesis = NormalizeWords(SpokenText(provided));
  if (!WithinWerAlignmentLimit(reference.size(), hypothesis.size())) {
    v1::StandardMetricResult r = NewStandardMetricResult(kTranscriptionAccuracyMetricId, "failed");
    r.set_error(absl::StrCat("the transcripts are too long to align (", reference.size(), " by ",
                             hypothesis.size(), " words)"));
    return r;
  }
  const WordErrorCounts counts = CountWordErrors(reference, hypothesis);
  v1::StandardMetricResult r = NewStandardMetricResult(kTranscriptionAccuracyMetricId, "completed");
  auto& fields = *r.mutable_result()->mutable_fields();
  const double accuracy = Round4(counts.accuracy());
  fields["accuracy"].set_number_value(accuracy);
  fields["wer"].set_number_value(Round4(counts.wer()));
  fields["substitutions"].set_number_value(static_cast<double>(counts.substitutions));
  fields["deletions"].set_number_value(static_cast<double>(counts.deletions));
  fields["insertions"].set_number_value(static_cast<double>(counts.insertions));
  fields["reference_words"].set_number_value(static_cast<double>(counts.reference_words));
  r.set_score(accuracy);
  return r;
}

}  // namespace calleval::scoring

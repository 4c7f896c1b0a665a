#pragma once

// Word error rate for the transcription_accuracy standard metric (docs/metrics.md row 7): the
// transcript generated from the audio is the reference, the provided one the hypothesis
// (transcription_accuracy.h).
//
// The counts reproduce NIST sclite (SCTK 2.4, transcript mode, default options) exactly, not
// only the total: sclite's weights (correct 0, substitution 4, insertion 3, deletion 3) and its
// tie-breaking (a diagonal step wins ties; deletion beats insertion only when strictly cheaper)
// decide which of several equally cheap alignments is reported, and so the S/D/I split.
//
// Complexity of CountWordErrors for N reference and M hypothesis words, S = min(N, M) and
// L = max(N, M): time O(N·M) (the DP is run about twice), memory O(S·sqrt(L)) — cost rows are
// checkpointed every ~2·sqrt(L) steps along the longer side and one block of 1-byte
// backpointers is recomputed at a time during the backtrace. 10k × 10k words needs about 4 MB.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace calleval::scoring {

// sclite's alignment weights.
inline constexpr int kWerSubstitutionCost = 4;
inline constexpr int kWerInsertionCost = 3;
inline constexpr int kWerDeletionCost = 3;

// Alignments above this many cells (N·M, i.e. 20k × 20k words) take seconds of CPU. The
// algorithm stays exact and its memory small beyond it, but callers on a request path should
// test WithinWerAlignmentLimit first and report the metric as failed instead of aligning.
inline constexpr int64_t kMaxWerAlignmentCells = int64_t{20000} * 20000;
bool WithinWerAlignmentLimit(size_t reference_words, size_t hypothesis_words);

// Splits `text` into the words that are compared. ASCII letters are lower-cased; digits and
// bytes >= 0x80 (other UTF-8 text) are kept as they are. Whitespace (including U+00A0),
// hyphens and dashes (U+2013, U+2014) separate words, so "follow-up" is "follow" "up". Other
// punctuation is dropped without splitting ("U.S." is "us"). Apostrophes (and U+2018/U+2019,
// written as ') survive only inside a word: "Don't" is "don't", "'cause" is "cause".
std::vector<std::string> NormalizeWords(absl::string_view text);

struct WordErrorCounts {
  int64_t reference_words = 0;  // N = hits + substitutions + deletions.
  int64_t hits = 0;
  int64_t substitutions = 0;
  int64_t deletions = 0;
  int64_t insertions = 0;

  // (S + D + I) / N. With an empty reference it is 0 when the hypothesis is empty too and 1.0
  // otherwise: any inserted word is as wrong as it gets (the ratio itself is undefined).
  double wer() const;
  // max(0, 1 - wer()): wer exceeds 1 when insertions outnumber the reference.
  double accuracy() const;
};

// Aligns the word sequences as sclite does and counts the edits. Words compare byte for byte
// (normalize first; sclite lower-cases too).
WordErrorCounts CountWordErrors(const std::vector<std::string>& reference,
                                const std::vector<std::string>& hypothesis);

// CountWordErrors(NormalizeWords(reference_text), NormalizeWords(hypothesis_text)).
WordErrorCounts WordErrorRate(absl::string_view reference_text,
                              absl::string_view hypothesis_text);

}  // namespace calleval::scoring

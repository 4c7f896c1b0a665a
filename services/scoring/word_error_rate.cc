#include "services/scoring/word_error_rate.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

namespace calleval::scoring {
namespace {

bool IsAsciiSpace(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Drops apostrophes at either end of `word` (quotes, "dogs'") and appends what is left.
void FlushWord(std::string& word, std::vector<std::string>& words) {
  const size_t begin = word.find_first_not_of('\'');
  if (begin != std::string::npos) {
    const size_t end = word.find_last_not_of('\'');
    words.push_back(word.substr(begin, end - begin + 1));
  }
  word.clear();
}

// The DP steps, named by the dimension they advance. The loop runs over the longer sequence
// (the "outer" one) so that rows have the length of the shorter; a step along the outer
// dimension is a deletion when the reference is outer and an insertion otherwise.
enum Step : uint8_t { kDiagonal = 0, kOuter = 1, kInner = 2 };

// Fills `row` (outer position `o` >= 1) from `prev` (position o - 1), the DP of sclite's
// net_dp.c restricted to linear networks: a diagonal step wins every tie; otherwise a deletion
// wins only when strictly cheaper than the insertion. `steps`, when given, gets the step that
// reached each cell.
template <bool kRefOuter>
void FillRow(int32_t outer_word, const std::vector<int32_t>& inner, int64_t o,
             const int32_t* prev, int32_t* row, uint8_t* steps) {
  constexpr int32_t kOuterCost = kRefOuter ? kWerDeletionCost : kWerInsertionCost;
  constexpr int32_t kInnerCost = kRefOuter ? kWerInsertionCost : kWerDeletionCost;
  row[0] = static_cast<int32_t>(o) * kOuterCost;
  if (steps != nullptr) steps[0] = kOuter;
  for (size_t i = 1; i <= inner.size(); ++i) {
    const int32_t diagonal =
        prev[i - 1] + (inner[i - 1] == outer_word ? 0 : kWerSubstitutionCost);
    const int32_t outer = prev[i] + kOuterCost;
    const int32_t inner_cost = row[i - 1] + kInnerCost;
    const int32_t del = kRefOuter ? outer : inner_cost;
    const int32_t ins = kRefOuter ? inner_cost : outer;
    Step step;
    if (diagonal <= del && diagonal <= ins) {
      row[i] = diagonal;
      step = kDiagonal;
    } else if (del < ins) {
      row[i] = del;
      step = kRefOuter ? kOuter : kInner;
    } else {
      row[i] = ins;
      step = kRefOuter ? kInner : kOuter;
    }
    if (steps != nullptr) steps[i] = step;
  }
}

// Checkpointed DP with backtrace (see the header for the complexity).
template <bool kRefOuter>
WordErrorCounts Align(const std::vector<int32_t>& outer, const std::vector<int32_t>& inner) {
  const size_t width = inner.size() + 1;
  const int64_t length = static_cast<int64_t>(outer.size());
  // Block height ~2·sqrt(L) balances the int32 checkpoint rows (L/k of them) against the
  // uint8 backpointer block (k rows).
  const int64_t block =
      std::max<int64_t>(1, std::llround(2 * std::sqrt(static_cast<double>(length))));

  std::vector<int32_t> checkpoints((length / block + 1) * width);
  std::vector<int32_t> prev(width), row(width);
  for (size_t i = 0; i < width; ++i) {
    prev[i] = static_cast<int32_t>(i) * (kRefOuter ? kWerInsertionCost : kWerDeletionCost);
  }
  std::copy(prev.begin(), prev.end(), checkpoints.begin());
  for (int64_t o = 1; o <= length; ++o) {
    FillRow<kRefOuter>(outer[o - 1], inner, o, prev.data(), row.data(), nullptr);
    if (o % block == 0) {
      std::copy(row.begin(), row.end(), checkpoints.begin() + o / block * width);
    }
    prev.swap(row);
  }

  WordErrorCounts counts;
  int64_t& outer_skips = kRefOuter ? counts.deletions : counts.insertions;
  int64_t& inner_skips = kRefOuter ? counts.insertions : counts.deletions;
  std::vector<uint8_t> steps(block * width);
  int64_t o = length;
  int64_t i = static_cast<int64_t>(inner.size());
  while (o > 0) {
    // Recompute the block of rows (base, base + block] holding row o, keeping its steps.
    const int64_t base = (o - 1) / block * block;
    std::copy_n(checkpoints.begin() + base / block * width, width, prev.begin());
    for (int64_t r = base + 1; r <= o; ++r) {
      FillRow<kRefOuter>(outer[r - 1], inner, r, prev.data(), row.data(),
                         &steps[(r - base - 1) * width]);
      prev.swap(row);
    }
    while (o > base) {
      switch (steps[(o - base - 1) * width + i]) {
        case kDiagonal:
          --o;
          --i;
          ++(outer[o] == inner[i] ? counts.hits : counts.substitutions);
          break;
        case kOuter:
          --o;
          ++outer_skips;
          break;
        default:
          --i;
          ++inner_skips;
          break;
      }
    }
  }
  inner_skips += i;  // Row 0: only inner steps are left.
  counts.reference_words = counts.hits + counts.substitutions + counts.deletions;
  return counts;
}

}  // namespace

bool WithinWerAlignmentLimit(size_t reference_words, size_t hypothesis_words) {
  return reference_words == 0 ||
         hypothesis_words <= static_cast<size_t>(kMaxWerAlignmentCells) / reference_words;
}

std::vector<std::string> NormalizeWords(absl::string_view text) {
  std::vector<std::string> words;
  std::string word;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (IsAsciiSpace(c) || c == '-') {
      FlushWord(word, words);
    } else if (c == 0xC2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) == 0xA0) {
      FlushWord(word, words);  // U+00A0 no-break space.
      ++i;
    } else if (c == 0xE2 && i + 2 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) == 0x80) {
      // U+2000..U+203F, General Punctuation: the typographic spaces, dashes and quotes of
      // human-written transcripts, which ASR output spells in ASCII.
      const unsigned char t = static_cast<unsigned char>(text[i + 2]);
      if (t <= 0x8B || (t >= 0x90 && t <= 0x95) || t == 0xA8 || t == 0xA9 || t == 0xAF) {
        FlushWord(word, words);  // Spaces, hyphens, dashes, line/paragraph separators.
      } else if (t == 0x98 || t == 0x99) {
        word += '\'';  // Curly single quotes: "don’t" is "don't".
      }
      // Anything else in the block (quotes, bullets, ellipsis, zero-width marks) is dropped.
      i += 2;
    } else if (c >= 0x80) {
      word += static_cast<char>(c);
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '\'') {
      word += static_cast<char>(c);
    } else if (c >= 'A' && c <= 'Z') {
      word += static_cast<char>(c - 'A' + 'a');
    }
    // Any other ASCII byte is punctuation or a control character: dropped.
  }
  FlushWord(word, words);
  return words;
}

double WordErrorCounts::wer() const {
  const int64_t errors = substitutions + deletions + insertions;
  if (reference_words == 0) return errors == 0 ? 0.0 : 1.0;
  return static_cast<double>(errors) / static_cast<double>(reference_words);
}

double WordErrorCounts::accuracy() const { return std::max(0.0, 1.0 - wer()); }

WordErrorCounts CountWordErrors(const std::vector<std::string>& reference,
                                const std::vector<std::string>& hypothesis) {
  // Interning turns the O(N·M) comparisons into integer compares.
  std::unordered_map<std::string_view, int32_t> ids;
  auto intern = [&ids](const std::vector<std::string>& words) {
    std::vector<int32_t> out;
    out.reserve(words.size());
    for (const std::string& w : words) {
      out.push_back(ids.emplace(std::string_view(w), static_cast<int32_t>(ids.size()))
                        .first->second);
    }
    return out;
  };
  const std::vector<int32_t> ref = intern(reference);
  const std::vector<int32_t> hyp = intern(hypothesis);
  return ref.size() >= hyp.size() ? Align<true>(ref, hyp) : Align<false>(hyp, ref);
}

WordErrorCounts WordErrorRate(absl::string_view reference_text,
                              absl::string_view hypothesis_text) {
  return CountWordErrors(NormalizeWords(reference_text), NormalizeWords(hypothesis_text));
}

}  // namespace calleval::scoring

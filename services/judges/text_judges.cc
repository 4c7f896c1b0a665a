#include "services/judges/text_judges.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "unicode/normalizer2.h"
#include "unicode/uchar.h"
#include "unicode/unistr.h"
#include "unicode/uscript.h"
#include "unicode/utf16.h"
#include "unicode/utf8.h"

namespace calleval::judges {
namespace {

constexpr absl::string_view kAssistant = "AI Assistant";
constexpr absl::string_view kUser = "User";
constexpr absl::string_view kAnySpeaker = "any";

// Explanations stay readable (and bounded) however many phrases a metric lists.
constexpr size_t kMaxListed = 20;
constexpr int32_t kMaxQuotedChars = 80;

// Joins the turns searched together. Normalized text never holds it (every whitespace run
// becomes one space), so a phrase cannot match across two turns, and it is not a letter or
// digit, so it is a word boundary.
constexpr char kTurnSeparator = '\n';

// ---------------------------------------------------------------------------------------------
// Normalization

void AppendUtf8(UChar32 c, std::string& out) {
  char buf[U8_MAX_LENGTH];
  int32_t len = 0;
  U8_APPEND_UNSAFE(buf, len, c);
  out.append(buf, len);
}

const icu::Normalizer2* Nfc() {
  static const icu::Normalizer2* const nfc = [] {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
    return U_SUCCESS(err) ? n : nullptr;
  }();
  return nfc;
}

// Composed form, so that "café" typed with a combining accent matches a precomposed "café"
// (and a trailing accent cannot be taken for a word boundary).
void ToNfc(icu::UnicodeString& u) {
  const icu::Normalizer2* nfc = Nfc();
  if (nfc == nullptr) return;
  UErrorCode err = U_ZERO_ERROR;
  if (nfc->quickCheck(u, err) == UNORM_YES && U_SUCCESS(err)) return;
  err = U_ZERO_ERROR;
  icu::UnicodeString composed = nfc->normalize(u, err);
  if (U_SUCCESS(err)) u = std::move(composed);
}

bool IsAscii(absl::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// The form both text and phrases are compared in, as UTF-8, appended to `out`: NFC; full
// Unicode case folding unless case-sensitive ("STRASSE" and "straße" both become "strasse");
// every run of Unicode whitespace as one space; typographic apostrophes (’ ‘ ʼ) as "'", so
// "don't" in a metric matches "don’t" in a transcript. Invalid UTF-8 becomes U+FFFD.
void AppendNormalized(absl::string_view text, bool fold, std::string& out) {
  out.reserve(out.size() + text.size());
  bool in_space = false;
  if (IsAscii(text)) {
    // Most transcripts are plain ASCII, where NFC changes nothing and folding is A-Z -> a-z;
    // this path gives the same result as the one below without ICU's conversions.
    for (char c : text) {
      if (c == ' ' || (c >= '\t' && c <= '\r')) {
        if (!in_space) out.push_back(' ');
        in_space = true;
        continue;
      }
      in_space = false;
      out.push_back(fold ? absl::ascii_tolower(c) : c);
    }
    return;
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  ToNfc(u);
  if (fold) {
    u.foldCase();
    ToNfc(u);  // folding can leave a decomposed sequence (İ -> i + U+0307)
  }
  const char16_t* units = u.getBuffer();
  const int32_t length = u.length();
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U16_NEXT(units, i, length, c);
    if (c < 0x80) {  // the ASCII of mostly ASCII text, without ICU's property lookups
      if (c == ' ' || (c >= '\t' && c <= '\r')) {
        if (!in_space) out.push_back(' ');
        in_space = true;
      } else {
        in_space = false;
        out.push_back(static_cast<char>(c));
      }
      continue;
    }
    if (u_isUWhiteSpace(c)) {
      if (!in_space) out.push_back(' ');
      in_space = true;
      continue;
    }
    in_space = false;
    if (c == 0x2019 || c == 0x2018 || c == 0x02BC) c = '\'';
    AppendUtf8(c, out);
  }
}

std::string Normalize(absl::string_view text, bool fold) {
  std::string out;
  AppendNormalized(text, fold, out);
  return out;
}

std::string NormalizePhrase(absl::string_view phrase, bool fold) {
  std::string normalized = Normalize(phrase, fold);
  absl::string_view trimmed = absl::StripAsciiWhitespace(normalized);
  return std::string(trimmed);
}

// ---------------------------------------------------------------------------------------------
// Whole-word search

// Letters, digits, and combining marks (a mark continues the word it sits on: Devanagari vowel
// signs and viramas, accents without a precomposed form).
bool IsWordChar(UChar32 c) { return u_isalnum(c) || (U_GET_GC_MASK(c) & U_GC_M_MASK) != 0; }

// Scripts written without spaces between words (Han, kana, Thai, Lao, Khmer, Myanmar...): there a
// word's edge cannot be seen from the characters alone, so letters of these scripts next to a
// match do not prevent it (a phrase matches as a substring).
bool InScriptWithoutSpaces(UChar32 c) {
  UErrorCode err = U_ZERO_ERROR;
  UScriptCode script = uscript_getScript(c, &err);
  return U_SUCCESS(err) && uscript_breaksBetweenLetters(script);
}

// Whether the match may end between `inner` (the phrase's edge character) and `outer` (the text's
// neighbouring character). A phrase edge that is punctuation ("$5", "help!") needs no boundary.
bool IsBoundary(UChar32 inner, UChar32 outer) {
  if (!IsWordChar(inner) || !IsWordChar(outer)) return true;
  return InScriptWithoutSpaces(inner) || InScriptWithoutSpaces(outer);
}

const uint8_t* Bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

UChar32 FirstCodePoint(std::string_view s) {
  UChar32 c = U_SENTINEL;
  int32_t i = 0;
  U8_NEXT(Bytes(s), i, static_cast<int32_t>(s.size()), c);
  return c;
}

UChar32 LastCodePoint(std::string_view s) {
  UChar32 c = U_SENTINEL;
  int32_t i = static_cast<int32_t>(s.size());
  U8_PREV(Bytes(s), 0, i, c);
  return c;
}

// Whether haystack[start, end), which holds a phrase whose edge characters are `first` and
// `last`, stands there as whole words.
bool WholeWordsAt(std::string_view haystack, size_t start, size_t end, UChar32 first,
                  UChar32 last) {
  if (start > 0 && !IsBoundary(first, LastCodePoint(haystack.substr(0, start)))) return false;
  return end >= haystack.size() || IsBoundary(last, FirstCodePoint(haystack.substr(end)));
}

// The position of the first whole-word occurrence of `needle` (normalized, non-empty) in
// `haystack` (normalized), or npos.
size_t FindWholeWords(std::string_view haystack, std::string_view needle) {
  if (needle.empty() || needle.size() > haystack.size()) return std::string_view::npos;
  const UChar32 first = FirstCodePoint(needle);
  const UChar32 last = LastCodePoint(needle);
  size_t from = 0;
  while (true) {
    // glibc's memmem (two-way, with a fast path for short needles) beats
    // std::boyer_moore_horspool_searcher here.
    const void* found =
        memmem(haystack.data() + from, haystack.size() - from, needle.data(), needle.size());
    if (found == nullptr) return std::string_view::npos;
    const size_t start = static_cast<size_t>(static_cast<const char*>(found) - haystack.data());
    if (WholeWordsAt(haystack, start, start + needle.size(), first, last)) return start;
    // UTF-8 is self-synchronizing: a needle starting with a lead byte cannot match inside a
    // code point, so stepping one byte is safe.
    from = start + 1;
  }
}

// Aho-Corasick over bytes: every occurrence of any of a set of needles in one pass over the
// text, so that 100 phrases cost one scan of a 10,000-turn transcript rather than 100. The
// transition table is dense over byte classes (the bytes that occur in some needle, plus one
// class for all others), which keeps it small: states x classes entries.
class MultiSearch {
 public:
  // Tables larger than this are split: needles go into several automatons.
  static constexpr size_t kMaxTableEntries = size_t{1} << 20;

  // Entries `needles` would need in one automaton.
  static size_t TableEntries(size_t total_bytes, size_t classes) {
    return (total_bytes + 1) * classes;
  }

  // `needles` are distinct and non-empty; ids are their positions.
  explicit MultiSearch(const std::vector<std::string_view>& needles) {
    class_of_.fill(0);
    num_classes_ = 1;
    for (std::string_view n : needles) {
      for (char c : n) {
        uint8_t& cls = class_of_[static_cast<uint8_t>(c)];
        if (cls == 0) cls = static_cast<uint8_t>(num_classes_++);
      }
    }
    // The trie; -1 marks a missing edge until the breadth-first pass fills it in.
    AddState();
    for (size_t id = 0; id < needles.size(); ++id) {
      int32_t s = 0;
      for (char c : needles[id]) {
        const size_t edge = Index(s, c);
        if (next_[edge] < 0) {
          const int32_t added = AddState();  // grows next_: no reference into it across this
          next_[edge] = added;
        }
        s = next_[edge];
      }
      needle_at_[s] = static_cast<int32_t>(id);
    }
    // Failure links, breadth first, turning the trie into a complete automaton: a missing edge
    // goes where the failure state's edge goes. A state's failure is shallower, so complete.
    std::vector<int32_t> fail(needle_at_.size(), 0);
    std::vector<int32_t> queue;
    queue.reserve(needle_at_.size());
    for (int32_t c = 0; c < num_classes_; ++c) {
      int32_t& next = next_[static_cast<size_t>(c)];
      if (next < 0) {
        next = 0;
      } else {
        queue.push_back(next);
      }
    }
    for (size_t q = 0; q < queue.size(); ++q) {
      const int32_t s = queue[q];
      for (int32_t c = 0; c < num_classes_; ++c) {
        int32_t& next = next_[static_cast<size_t>(s) * num_classes_ + c];
        const int32_t via_fail = next_[static_cast<size_t>(fail[s]) * num_classes_ + c];
        if (next < 0) {
          next = via_fail;
        } else {
          fail[next] = via_fail;
          queue.push_back(next);
        }
      }
      // The nearest proper suffix of this state that ends a needle.
      const int32_t f = fail[s];
      output_link_[s] = needle_at_[f] >= 0 ? f : output_link_[f];
    }
  }

  // Calls on_match(id, end) for every occurrence of a needle, in order of its end offset in
  // `text`, until on_match returns false.
  template <typename OnMatch>
  void Scan(std::string_view text, OnMatch on_match) const {
    int32_t s = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      s = next_[Index(s, text[i])];
      for (int32_t t = needle_at_[s] >= 0 ? s : output_link_[s]; t > 0; t = output_link_[t]) {
        if (!on_match(static_cast<size_t>(needle_at_[t]), i + 1)) return;
      }
    }
  }

 private:
  size_t Index(int32_t state, char c) const {
    return static_cast<size_t>(state) * num_classes_ + class_of_[static_cast<uint8_t>(c)];
  }

  int32_t AddState() {
    next_.resize(next_.size() + num_classes_, -1);
    needle_at_.push_back(-1);
    output_link_.push_back(-1);
    return static_cast<int32_t>(needle_at_.size()) - 1;
  }

  std::array<uint8_t, 256> class_of_;
  int32_t num_classes_;
  std::vector<int32_t> next_;         // state x class -> state
  std::vector<int32_t> needle_at_;    // the needle a state completes, or -1
  std::vector<int32_t> output_link_;  // the next state along the suffixes that completes one
};

// ---------------------------------------------------------------------------------------------
// Transcripts

// Only what the agent and the caller said is searched, never function calls or their results.
bool SpeakerSelected(const v1::Turn& turn, absl::string_view speaker) {
  if (turn.role() != kAssistant && turn.role() != kUser) return false;
  return absl::EqualsIgnoreCase(speaker, kAnySpeaker) ||
         absl::EqualsIgnoreCase(turn.role(), speaker);
}

// The selected turns, each normalized once, joined into one buffer so that every phrase is one
// search however many turns there are.
class SearchText {
 public:
  SearchText(const std::vector<v1::Turn>& transcript, absl::string_view speaker, bool fold) {
    for (size_t i = 0; i < transcript.size(); ++i) {
      const v1::Turn& turn = transcript[i];
      if (!turn.has_content() || turn.content().empty() || !SpeakerSelected(turn, speaker)) {
        continue;
      }
      if (!starts_.empty()) buffer_.push_back(kTurnSeparator);
      starts_.push_back(buffer_.size());
      turns_.push_back(i);
      AppendNormalized(turn.content(), fold, buffer_);
    }
  }

  // For each of `needles` (normalized, distinct, non-empty), the index in the transcript of the
  // first turn where it is said, if any. With `stop_at_first`, the search ends at the first
  // needle found (the others may then be left unfound).
  std::vector<std::optional<size_t>> FirstTurns(const std::vector<std::string_view>& needles,
                                                bool stop_at_first) const {
    std::vector<std::optional<size_t>> found(needles.size());
    if (buffer_.empty()) return found;
    // Needles in groups whose automaton stays within kMaxTableEntries; a needle too long for
    // any automaton is searched alone.
    std::vector<size_t> group;
    std::array<bool, 256> bytes{};
    size_t classes = 1;
    size_t total = 0;
    auto flush = [&]() {
      if (group.empty()) return false;
      if (SearchGroup(needles, group, found, stop_at_first)) return true;
      group.clear();
      bytes.fill(false);
      classes = 1;
      total = 0;
      return false;
    };
    for (size_t id = 0; id < needles.size(); ++id) {
      const std::string_view n = needles[id];
      size_t new_classes = classes;
      for (char c : n) new_classes += bytes[static_cast<uint8_t>(c)] ? 0 : 1;
      if (MultiSearch::TableEntries(n.size(), new_classes) > MultiSearch::kMaxTableEntries) {
        const size_t pos = FindWholeWords(buffer_, n);
        if (pos != std::string_view::npos) {
          found[id] = TurnAt(pos);
          if (stop_at_first) return found;
        }
        continue;
      }
      if (MultiSearch::TableEntries(total + n.size(), new_classes) >
          MultiSearch::kMaxTableEntries) {
        if (flush()) return found;
        new_classes = 1;
        for (char c : n) new_classes += bytes[static_cast<uint8_t>(c)] ? 0 : 1;
      }
      for (char c : n) {
        bool& seen = bytes[static_cast<uint8_t>(c)];
        if (!seen) {
          seen = true;
          ++classes;
        }
      }
      total += n.size();
      group.push_back(id);
    }
    flush();
    return found;
  }

 private:
  // One pass of an automaton over the group's needles; true when stop_at_first and one was
  // found.
  bool SearchGroup(const std::vector<std::string_view>& needles, const std::vector<size_t>& group,
                   std::vector<std::optional<size_t>>& found, bool stop_at_first) const {
    std::vector<std::string_view> members;
    std::vector<UChar32> first;
    std::vector<UChar32> last;
    for (size_t id : group) {
      members.push_back(needles[id]);
      first.push_back(FirstCodePoint(needles[id]));
      last.push_back(LastCodePoint(needles[id]));
    }
    size_t remaining = group.size();
    bool stopped = false;
    MultiSearch(members).Scan(buffer_, [&](size_t k, size_t end) {
      std::optional<size_t>& slot = found[group[k]];
      if (slot.has_value()) return true;
      const size_t start = end - members[k].size();
      if (!WholeWordsAt(buffer_, start, end, first[k], last[k])) return true;
      slot = TurnAt(start);
      stopped = stop_at_first;
      return !stopped && --remaining > 0;
    });
    return stopped;
  }

  size_t TurnAt(size_t pos) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), pos);
    return turns_[static_cast<size_t>(it - starts_.begin()) - 1];
  }

  std::string buffer_;
  std::vector<size_t> starts_;  // offset in buffer_ of each selected turn
  std::vector<size_t> turns_;   // its index in the transcript
};

struct Phrase {
  std::string shown;       // as the metric lists it, for explanations
  std::string normalized;  // as searched
};

// Blank phrases can never be said and are left out; repeats (after normalization) are listed
// once.
std::vector<Phrase> PreparePhrases(const std::vector<std::string>& phrases, bool fold) {
  std::vector<Phrase> out;
  absl::flat_hash_set<std::string> seen;
  for (const std::string& p : phrases) {
    std::string normalized = NormalizePhrase(p, fold);
    if (normalized.empty() || !seen.insert(normalized).second) continue;
    out.push_back(Phrase{std::string(absl::StripAsciiWhitespace(p)), std::move(normalized)});
  }
  return out;
}

struct Hit {
  const Phrase* phrase;
  std::optional<size_t> turn;  // index in the transcript
};

std::vector<Hit> Search(const SearchText& text, const std::vector<Phrase>& phrases) {
  std::vector<std::string_view> needles;
  needles.reserve(phrases.size());
  for (const Phrase& p : phrases) needles.push_back(p.normalized);
  std::vector<std::optional<size_t>> turns = text.FirstTurns(needles, /*stop_at_first=*/false);
  std::vector<Hit> hits;
  hits.reserve(phrases.size());
  for (size_t i = 0; i < phrases.size(); ++i) hits.push_back(Hit{&phrases[i], turns[i]});
  return hits;
}

// ---------------------------------------------------------------------------------------------
// Explanations

std::string Quote(absl::string_view phrase) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(phrase.data(), static_cast<int32_t>(phrase.size())));
  if (u.countChar32() <= kMaxQuotedChars) return absl::StrCat("\"", phrase, "\"");
  std::string head;
  u.tempSubString(0, u.moveIndex32(0, kMaxQuotedChars)).toUTF8String(head);
  return absl::StrCat("\"", head, "…\"");
}

// "a", "b" and "c" -- or "a", "b", ... and 7 more past kMaxListed.
std::string ListItems(const std::vector<std::string>& items, absl::string_view last_separator) {
  if (items.size() > kMaxListed) {
    std::vector<std::string> head(items.begin(), items.begin() + kMaxListed);
    return absl::StrCat(absl::StrJoin(head, ", "), " and ", items.size() - kMaxListed, " more");
  }
  if (items.size() <= 1) return absl::StrJoin(items, "");
  std::vector<std::string> head(items.begin(), items.end() - 1);
  return absl::StrCat(absl::StrJoin(head, ", "), last_separator, items.back());
}

std::string SpeakerLabel(absl::string_view speaker) {
  if (absl::EqualsIgnoreCase(speaker, kAnySpeaker)) return "AI Assistant or User";
  return std::string(speaker);
}

// `"p" (turn 3)`, or `"p" (AI Assistant, turn 3)` with the role.
std::string FoundItem(const Hit& hit, const std::vector<v1::Turn>& transcript, bool with_role) {
  const size_t turn = *hit.turn;
  if (with_role) {
    return absl::StrCat(Quote(hit.phrase->shown), " (", transcript[turn].role(), ", turn ",
                        turn + 1, ")");
  }
  return absl::StrCat(Quote(hit.phrase->shown), " (turn ", turn + 1, ")");
}

std::string NoneSaid(const std::vector<Phrase>& phrases, absl::string_view speaker) {
  std::vector<std::string> quoted;
  quoted.reserve(phrases.size());
  for (const Phrase& p : phrases) quoted.push_back(Quote(p.shown));
  return absl::StrCat("None of the phrases was said by ", SpeakerLabel(speaker), ": ",
                      ListItems(quoted, ", "), ".");
}

}  // namespace

Verdict JudgePhrases(const std::vector<v1::Turn>& transcript, const PhraseCheck& check) {
  const bool fold = !check.case_sensitive;
  const std::vector<Phrase> phrases = PreparePhrases(check.phrases, fold);
  if (phrases.empty()) return Verdict{false, "No phrases to look for."};

  const SearchText text(transcript, check.speaker, fold);
  std::vector<std::string> found;
  std::vector<std::string> missing;
  for (const Hit& hit : Search(text, phrases)) {
    if (hit.turn.has_value()) {
      found.push_back(FoundItem(hit, transcript, /*with_role=*/!check.match_all));
    } else {
      missing.push_back(Quote(hit.phrase->shown));
    }
  }
  if (found.empty()) return Verdict{false, NoneSaid(phrases, check.speaker)};
  if (!check.match_all)
    return Verdict{true, absl::StrCat("Found ", ListItems(found, " and "), ".")};
  if (missing.empty()) return Verdict{true, absl::StrCat("Found ", ListItems(found, " and "), ".")};
  return Verdict{false, absl::StrCat("Missing ", ListItems(missing, " and "), "; found ",
                                     ListItems(found, " and "), ".")};
}

Verdict JudgeOptions(const std::vector<v1::Turn>& transcript, const OptionsCheck& check) {
  const std::vector<Phrase> permitted = PreparePhrases(check.permitted_options, /*fold=*/true);
  const std::vector<Phrase> forbidden = PreparePhrases(check.forbidden_options, /*fold=*/true);
  const SearchText text(transcript, check.speaker, /*fold=*/true);

  auto mentioned = [&](const std::vector<Phrase>& options) {
    std::vector<std::string> items;
    for (const Hit& hit : Search(text, options)) {
      if (hit.turn.has_value()) items.push_back(FoundItem(hit, transcript, /*with_role=*/false));
    }
    return items;
  };
  const std::vector<std::string> permitted_said = mentioned(permitted);
  const std::vector<std::string> forbidden_said = mentioned(forbidden);

  std::string permitted_part;
  if (permitted.empty()) {
    permitted_part = "No permitted options are defined.";
  } else if (permitted_said.empty()) {
    permitted_part = "No permitted option was mentioned.";
  } else {
    permitted_part =
        absl::StrCat("Mentioned permitted option(s): ", ListItems(permitted_said, ", "), ".");
  }
  if (!forbidden_said.empty()) {
    return Verdict{false, absl::StrCat("Mentioned forbidden option(s): ",
                                       ListItems(forbidden_said, ", "), ". ", permitted_part)};
  }
  if (permitted_said.empty()) return Verdict{false, permitted_part};
  return Verdict{true, absl::StrCat(permitted_part, " No forbidden option mentioned.")};
}

bool AnyPhraseSaid(const std::vector<v1::Turn>& transcript,
                   const std::vector<std::string>& phrases) {
  const std::vector<Phrase> prepared = PreparePhrases(phrases, /*fold=*/true);
  if (prepared.empty()) return false;
  const SearchText text(transcript, kAnySpeaker, /*fold=*/true);
  std::vector<std::string_view> needles;
  for (const Phrase& p : prepared) needles.push_back(p.normalized);
  for (const std::optional<size_t>& turn : text.FirstTurns(needles, /*stop_at_first=*/true)) {
    if (turn.has_value()) return true;
  }
  return false;
}

bool ContainsPhrase(absl::string_view text, absl::string_view phrase, bool case_sensitive) {
  const std::string needle = NormalizePhrase(phrase, !case_sensitive);
  if (needle.empty()) return false;
  return FindWholeWords(Normalize(text, !case_sensitive), needle) != std::string_view::npos;
}

}  // namespace calleval::judges

#pragma once

// The deterministic judges of docs/api.md §4 (no LLM): phrase checks and permitted-options checks
// over a transcript, and the phrase trigger. Pure functions.
//
// Matching: a phrase matches where it appears as whole words (the characters before and after
// the match are not letters or digits, Unicode-aware), with runs of whitespace treated as one
// space; without case_sensitive both sides are Unicode case-folded. In detail:
//  - Text and phrase are NFC-normalized; without case_sensitive, fully case-folded (ICU default
//    folding: "straße" matches "STRASSE"; no Turkish dotted/dotless i rule).
//  - Every run of Unicode whitespace counts as one space; a phrase's leading and trailing
//    whitespace is ignored; a blank phrase never matches. Typographic apostrophes (’ ‘ ʼ) count
//    as "'".
//  - The boundary is checked only on a side where the phrase's own edge character is a letter,
//    digit or combining mark ("$5" matches "costs $5 now" but not "$50"; "help" does not match
//    "helpful"). Combining marks count as part of a word.
//  - In scripts written without spaces between words (Han, kana, Thai, Lao, Khmer, Myanmar), a
//    neighbouring letter of such a script does not block a match: there phrases match as
//    substrings.
//  - Only "AI Assistant" and "User" turns are searched ("any" means both); function-call turns
//    never are. A phrase does not span two turns. Turn numbers in explanations are 1-based
//    positions in the whole transcript.
//  - Blank phrases are left out of the checks, and phrases equal once normalized count once.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "calleval/v1/calls.pb.h"

namespace calleval::judges {

// "AI Assistant" | "User" | "any": whose turns are searched.
struct PhraseCheck {
  std::vector<std::string> phrases;
  bool match_all = false;  // match: "all" (else "any")
  std::string speaker = "AI Assistant";
  bool case_sensitive = false;
};

struct OptionsCheck {
  std::vector<std::string> permitted_options;
  std::vector<std::string> forbidden_options;
  std::string speaker = "AI Assistant";
};

struct Verdict {
  bool value = false;
  std::string explanation;  // names what matched (and, for match all, what is missing)
};

// `Found "p" (AI Assistant, turn 1).` / `None of the phrases was said by AI Assistant: "a",
// "b".`; with match all, `Found "x" (turn 1) and "y" (turn 4).` / `Missing "z"; found "x" (turn
// 1).` Lists stop at 20 phrases ("and N more"). No phrases at all: false.
Verdict JudgePhrases(const std::vector<v1::Turn>& transcript, const PhraseCheck& check);

// True when the speaker mentioned at least one permitted option and no forbidden one (an option
// in both lists counts as forbidden). Options match case-insensitively, as phrases do.
Verdict JudgeOptions(const std::vector<v1::Turn>& transcript, const OptionsCheck& check);

// The phrase trigger: any of `phrases` said by anyone, case-insensitively.
bool AnyPhraseSaid(const std::vector<v1::Turn>& transcript,
                   const std::vector<std::string>& phrases);

// Whether `phrase` occurs in `text` as whole words (the matching rule above).
bool ContainsPhrase(absl::string_view text, absl::string_view phrase, bool case_sensitive);

}  // namespace calleval::judges

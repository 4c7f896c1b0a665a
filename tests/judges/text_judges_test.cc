#include "services/judges/text_judges.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::judges {
namespace {

using ::testing::HasSubstr;

v1::Turn MakeTurn(const std::string& role, const std::string& content) {
  v1::Turn t;
  t.set_role(role);
  t.set_content(content);
  return t;
}

v1::Turn Ai(const std::string& content) { return MakeTurn("AI Assistant", content); }
v1::Turn User(const std::string& content) { return MakeTurn("User", content); }

// ---------------------------------------------------------------------------------------------
// ContainsPhrase

struct ContainsCase {
  std::string name;
  std::string text;
  std::string phrase;
  bool case_sensitive;
  bool expected;
};

void PrintTo(const ContainsCase& c, std::ostream* os) { *os << c.name; }

class ContainsPhraseTest : public ::testing::TestWithParam<ContainsCase> {};

TEST_P(ContainsPhraseTest, Matches) {
  const ContainsCase& c = GetParam();
  EXPECT_EQ(ContainsPhrase(c.text, c.phrase, c.case_sensitive), c.expected)
      << "text: " << c.text << "\nphrase: " << c.phrase;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ContainsPhraseTest,
    ::testing::Values(
        // Whole words.
        ContainsCase{"WordWithPeriod", "I can help.", "help", false, true},
        ContainsCase{"Shouted", "HELP!", "help", false, true},
        ContainsCase{"Exact", "help", "help", false, true},
        ContainsCase{"PrefixOfWord", "That was helpful", "help", false, false},
        ContainsCase{"SuffixOfWord", "unhelp me", "help", false, false},
        ContainsCase{"LaterWholeWord", "helpful, but I can help", "help", false, true},
        ContainsCase{"Underscore", "help_desk", "help", false, true},
        ContainsCase{"Hyphen", "self-help book", "help", false, true},
        ContainsCase{"Apostrophe", "help's on the way", "help", false, true},
        // Case.
        ContainsCase{"CaseSensitiveMiss", "HELP!", "help", true, false},
        ContainsCase{"CaseSensitiveHit", "Please help.", "help", true, true},
        ContainsCase{"PhraseUpperCase", "i can help", "I CAN HELP", false, true},
        // Whitespace.
        ContainsCase{"WhitespaceRuns", "Thank   you\nfor calling", "thank you", false, true},
        ContainsCase{"WhitespaceInPhrase", "thank you for calling", "thank \t you  for", false,
                     true},
        ContainsCase{"PhraseTrimmed", "thank you", "  thank you \n", false, true},
        ContainsCase{"NoBreakSpace", "thank\u00a0you", "thank you", false, true},
        ContainsCase{"NoSpaceInText", "thankyou", "thank you", false, false},
        // Empty phrases never match.
        ContainsCase{"EmptyPhrase", "anything", "", false, false},
        ContainsCase{"BlankPhrase", "anything at all", "   \n ", false, false},
        ContainsCase{"EmptyBoth", "", "", false, false},
        ContainsCase{"EmptyText", "", "help", false, false},
        // Unicode case folding.
        ContainsCase{"AccentFolded", "WELCOME TO THE CAFÉ", "café", false, true},
        ContainsCase{"AccentCaseSensitive", "CAFÉ", "café", true, false},
        ContainsCase{"AccentNotDropped", "cafe", "café", false, false},
        ContainsCase{"SharpSFullFolding", "STRASSE", "straße", false, true},
        ContainsCase{"SharpSReverse", "Die Straße", "STRASSE", false, true},
        ContainsCase{"Greek", "ΚΑΛΗΜΈΡΑ σας", "καλημέρα", false, true},
        ContainsCase{"Cyrillic", "Спасибо ЗА звонок", "за звонок", false, true},
        ContainsCase{"DecomposedAccent", "cafe\u0301 au lait", "café", false, true},
        ContainsCase{"DecomposedNotBoundary", "cafe\u0301", "cafe", false, false},
        // Letters of other scripts are letters for the boundary.
        ContainsCase{"AccentedNeighbour", "cafés", "café", false, false},
        ContainsCase{"CyrillicInsideWord", "перезвонок", "звонок", false, false},
        ContainsCase{"DevanagariMark", "नमस्ते", "नमस", false, false},
        ContainsCase{"DevanagariWord", "नमस्ते जी", "नमस्ते", false, true},
        // Scripts without spaces between words match as substrings.
        ContainsCase{"Chinese", "我们可以帮助您", "帮助", false, true},
        ContainsCase{"Japanese", "ありがとうございます", "ありがとう", false, true},
        ContainsCase{"Thai", "ขอบคุณครับ", "ขอบคุณ", false, true},
        // Digits.
        ContainsCase{"DigitBoundary", "press option 25", "option 2", false, false},
        ContainsCase{"DigitExact", "press option 2 now", "option 2", false, true},
        ContainsCase{"DigitAtEnd", "press option 2", "option 2", false, true},
        ContainsCase{"ArabicIndicDigit", "option 2\u0665", "option 2", false, false},
        // Phrases with punctuation at an edge.
        ContainsCase{"Dollar", "it costs $5 now", "$5", false, true},
        ContainsCase{"DollarPrefix", "it costs US$5 now", "$5", false, true},
        ContainsCase{"DollarMoreDigits", "it costs $50 now", "$5", false, false},
        ContainsCase{"DollarDecimal", "it costs $5.50", "$5", false, true},
        ContainsCase{"TrailingPunct", "help!!", "help!", false, true},
        ContainsCase{"TrailingPunctWordAfter", "help!me", "help!", false, true},
        ContainsCase{"LeadingPunctWordBefore", "a#1", "#1", false, true},
        ContainsCase{"OnlyPunct", "really?!", "?!", false, true},
        ContainsCase{"PunctMismatch", "help", "help!", false, false},
        // Typographic apostrophes.
        ContainsCase{"CurlyApostropheInText", "I don\u2019t know", "don't", false, true},
        ContainsCase{"CurlyApostropheInPhrase", "I don't know", "don\u2019t", false, true},
        // Invalid UTF-8 does not crash and does not match what is not there.
        ContainsCase{"InvalidUtf8",
                     "hel\xff"
                     "p",
                     "help", false, false},
        ContainsCase{"InvalidUtf8Around", "\xff help \xfe", "help", false, true}),
    [](const ::testing::TestParamInfo<ContainsCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// JudgePhrases

TEST(JudgePhrasesTest, AnyFoundNamesPhraseRoleAndTurn) {
  std::vector<v1::Turn> transcript = {Ai("Thank you for calling Acme."), User("Hi.")};
  PhraseCheck check;
  check.phrases = {"thank you for calling"};
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation, "Found \"thank you for calling\" (AI Assistant, turn 1).");
}

TEST(JudgePhrasesTest, AnyNoneFound) {
  std::vector<v1::Turn> transcript = {Ai("Hello."), User("a and b")};
  PhraseCheck check;
  check.phrases = {"a", "b"};
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation, "None of the phrases was said by AI Assistant: \"a\", \"b\".");
}

TEST(JudgePhrasesTest, AnyListsEveryFoundPhrase) {
  std::vector<v1::Turn> transcript = {Ai("hello"), User("x"), Ai("goodbye and hello")};
  PhraseCheck check;
  check.phrases = {"goodbye", "missing", "hello"};
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation,
            "Found \"goodbye\" (AI Assistant, turn 3) and \"hello\" (AI Assistant, turn 1).");
}

TEST(JudgePhrasesTest, AllFound) {
  std::vector<v1::Turn> transcript = {Ai("x said"), User("y"), MakeTurn("Function Call", "y"),
                                      Ai("and y too")};
  PhraseCheck check;
  check.phrases = {"x", "y"};
  check.match_all = true;
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation, "Found \"x\" (turn 1) and \"y\" (turn 4).");
}

TEST(JudgePhrasesTest, AllMissingOne) {
  std::vector<v1::Turn> transcript = {Ai("x said")};
  PhraseCheck check;
  check.phrases = {"x", "z"};
  check.match_all = true;
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation, "Missing \"z\"; found \"x\" (turn 1).");
}

TEST(JudgePhrasesTest, AllMissingSeveral) {
  std::vector<v1::Turn> transcript = {Ai("x said")};
  PhraseCheck check;
  check.phrases = {"z", "x", "w", "v"};
  check.match_all = true;
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation, "Missing \"z\", \"w\" and \"v\"; found \"x\" (turn 1).");
}

TEST(JudgePhrasesTest, AllNoneFound) {
  std::vector<v1::Turn> transcript = {Ai("nothing")};
  PhraseCheck check;
  check.phrases = {"x", "y"};
  check.match_all = true;
  check.speaker = "any";
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation, "None of the phrases was said by AI Assistant or User: \"x\", \"y\".");
}

TEST(JudgePhrasesTest, SpeakerFilter) {
  std::vector<v1::Turn> transcript = {User("cancel my account"), Ai("sure")};
  PhraseCheck check;
  check.phrases = {"cancel"};
  EXPECT_FALSE(JudgePhrases(transcript, check).value);  // default: AI Assistant
  check.speaker = "User";
  Verdict user = JudgePhrases(transcript, check);
  EXPECT_TRUE(user.value);
  EXPECT_EQ(user.explanation, "Found \"cancel\" (User, turn 1).");
  check.speaker = "any";
  EXPECT_TRUE(JudgePhrases(transcript, check).value);
  check.speaker = "AI Assistant";
  EXPECT_FALSE(JudgePhrases(transcript, check).value);
}

TEST(JudgePhrasesTest, FunctionCallTurnsAreNeverSearched) {
  v1::Turn call = MakeTurn("Function Call", "refund approved");
  v1::Turn result = MakeTurn("Function Call Result", "refund approved");
  std::vector<v1::Turn> transcript = {call, result};
  PhraseCheck check;
  check.phrases = {"refund"};
  for (const char* speaker : {"any", "AI Assistant", "User", "Function Call"}) {
    check.speaker = speaker;
    EXPECT_FALSE(JudgePhrases(transcript, check).value) << speaker;
  }
}

TEST(JudgePhrasesTest, TurnsWithoutContentAreSkippedButCounted) {
  v1::Turn empty;
  empty.set_role("AI Assistant");
  std::vector<v1::Turn> transcript = {empty, User("hi"), Ai("")};
  transcript.push_back(Ai("goodbye"));
  PhraseCheck check;
  check.phrases = {"goodbye"};
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation, "Found \"goodbye\" (AI Assistant, turn 4).");
}

TEST(JudgePhrasesTest, PhraseDoesNotSpanTurns) {
  std::vector<v1::Turn> transcript = {Ai("thank"), Ai("you")};
  PhraseCheck check;
  check.phrases = {"thank you"};
  EXPECT_FALSE(JudgePhrases(transcript, check).value);
}

TEST(JudgePhrasesTest, CaseSensitive) {
  std::vector<v1::Turn> transcript = {Ai("Welcome to ACME")};
  PhraseCheck check;
  check.phrases = {"acme"};
  EXPECT_TRUE(JudgePhrases(transcript, check).value);
  check.case_sensitive = true;
  EXPECT_FALSE(JudgePhrases(transcript, check).value);
  check.phrases = {"ACME"};
  EXPECT_TRUE(JudgePhrases(transcript, check).value);
}

TEST(JudgePhrasesTest, FirstTurnIsReported) {
  std::vector<v1::Turn> transcript = {Ai("helpful"), Ai("I can help"), Ai("help again")};
  PhraseCheck check;
  check.phrases = {"help"};
  EXPECT_EQ(JudgePhrases(transcript, check).explanation, "Found \"help\" (AI Assistant, turn 2).");
}

TEST(JudgePhrasesTest, BlankAndRepeatedPhrasesAreIgnored) {
  std::vector<v1::Turn> transcript = {Ai("hello there")};
  PhraseCheck check;
  check.phrases = {"", "hello", "  ", "HELLO", "hello  "};
  check.match_all = true;
  Verdict v = JudgePhrases(transcript, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation, "Found \"hello\" (turn 1).");
}

TEST(JudgePhrasesTest, NoPhrases) {
  std::vector<v1::Turn> transcript = {Ai("hello")};
  for (bool all : {false, true}) {
    PhraseCheck check;
    check.match_all = all;
    EXPECT_FALSE(JudgePhrases(transcript, check).value);
    check.phrases = {" "};
    Verdict v = JudgePhrases(transcript, check);
    EXPECT_FALSE(v.value);
    EXPECT_EQ(v.explanation, "No phrases to look for.");
  }
}

TEST(JudgePhrasesTest, EmptyTranscript) {
  PhraseCheck check;
  check.phrases = {"hello"};
  Verdict v = JudgePhrases({}, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation, "None of the phrases was said by AI Assistant: \"hello\".");
}

TEST(JudgePhrasesTest, ExplanationIsBounded) {
  PhraseCheck check;
  for (int i = 0; i < 300; ++i) check.phrases.push_back(absl::StrCat("phrase", i));
  Verdict none = JudgePhrases({Ai("nothing")}, check);
  EXPECT_FALSE(none.value);
  EXPECT_THAT(none.explanation, HasSubstr("\"phrase19\" and 280 more."));
  EXPECT_THAT(none.explanation, ::testing::Not(HasSubstr("\"phrase20\"")));

  std::string all_said;
  for (int i = 0; i < 300; ++i) absl::StrAppend(&all_said, "phrase", i, " ");
  Verdict found = JudgePhrases({Ai(all_said)}, check);
  EXPECT_TRUE(found.value);
  EXPECT_THAT(found.explanation, HasSubstr("(AI Assistant, turn 1) and 280 more."));
  EXPECT_LT(found.explanation.size(), 1000u);
}

TEST(JudgePhrasesTest, LongPhraseIsShortenedInExplanation) {
  std::string long_phrase(200, 'a');
  PhraseCheck check;
  check.phrases = {long_phrase};
  Verdict v = JudgePhrases({Ai(long_phrase)}, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation,
            absl::StrCat("Found \"", std::string(80, 'a'), "…\" (AI Assistant, turn 1)."));
}

TEST(JudgePhrasesTest, ExplanationShowsPhraseAsWritten) {
  PhraseCheck check;
  check.phrases = {"  Thank You  "};
  Verdict v = JudgePhrases({Ai("thank   you")}, check);
  EXPECT_EQ(v.explanation, "Found \"Thank You\" (AI Assistant, turn 1).");
}

TEST(JudgePhrasesTest, OverlappingPhrases) {
  PhraseCheck check;
  check.phrases = {"he", "she", "hers", "ushers"};
  check.match_all = true;
  Verdict inside = JudgePhrases({Ai("the ushers")}, check);
  EXPECT_FALSE(inside.value);
  EXPECT_EQ(inside.explanation, "Missing \"he\", \"she\" and \"hers\"; found \"ushers\" (turn 1).");
  Verdict apart = JudgePhrases({Ai("ushers"), Ai("she said hers"), Ai("he")}, check);
  EXPECT_TRUE(apart.value);
  EXPECT_EQ(apart.explanation,
            "Found \"he\" (turn 3), \"she\" (turn 2), \"hers\" (turn 2) and \"ushers\" (turn 1).");
}

TEST(JudgePhrasesTest, PhraseInsideAnotherPhrase) {
  PhraseCheck check;
  check.phrases = {"credit card", "card", "credit"};
  check.match_all = true;
  Verdict v = JudgePhrases({Ai("pay by credit card")}, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation,
            "Found \"credit card\" (turn 1), \"card\" (turn 1) and \"credit\" (turn 1).");
}

// A phrase too long for the multi-phrase automaton is searched on its own.
TEST(JudgePhrasesTest, VeryLongPhrase) {
  std::string long_phrase;
  while (long_phrase.size() < 40000) long_phrase += "abcdefghijklmnopqrstuvwxyz 0123456789 ";
  long_phrase.pop_back();
  PhraseCheck check;
  check.phrases = {"short", long_phrase, "other"};
  check.match_all = true;
  Verdict v = JudgePhrases({Ai("other"), Ai("x " + long_phrase + " y"), Ai("short")}, check);
  EXPECT_TRUE(v.value);
  EXPECT_THAT(v.explanation, HasSubstr("…\" (turn 2) and \"other\" (turn 1)."));
  check.phrases = {long_phrase};
  EXPECT_FALSE(JudgePhrases({Ai(long_phrase + "0")}, check).value);
}

// The explanation's list: "a", "b" and "c", or the first 20 and "and N more".
std::string ListLike(const std::vector<std::string>& items) {
  std::string out;
  const size_t shown = std::min<size_t>(items.size(), 20);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += (i + 1 == shown && items.size() <= 20) ? " and " : ", ";
    out += items[i];
  }
  if (items.size() > 20) absl::StrAppend(&out, " and ", items.size() - 20, " more");
  return out;
}

// Phrases searched together give what ContainsPhrase gives turn by turn, including with
// enough phrases to need several automatons (the big rounds).
TEST(JudgePhrasesTest, AgreesWithContainsPhrase) {
  const std::vector<std::string> vocabulary = {
      "help",  "helpful", "Help!",   "thank",  "you",    "YOU",    "for", "calling", "café",
      "CAFÉ",  "straße",  "STRASSE", "$5",     "$50",    "option", "2",   "25",      "don't",
      "don’t", "a",       "an",      "card",   "credit", "-",      "?",   "the",     "then",
      "he",    "she",     "hers",    "ushers", "帮助",   "我们"};
  std::mt19937 rng(20240601);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  for (int round = 0; round < 60; ++round) {
    const bool big = round % 10 == 0;
    std::vector<v1::Turn> transcript;
    const size_t turns = 1 + pick(big ? 200 : 12);
    for (size_t t = 0; t < turns; ++t) {
      std::string text;
      const size_t words = pick(15);
      for (size_t w = 0; w < words; ++w) {
        absl::StrAppend(&text, vocabulary[pick(vocabulary.size())], pick(4) == 0 ? "  " : " ");
      }
      transcript.push_back(pick(3) == 0 ? User(text) : Ai(text));
    }
    PhraseCheck check;
    check.match_all = true;
    // Big rounds are case-sensitive and leave out "don’t", so that distinct phrases stay
    // distinct once normalized; small rounds drop phrases equal to an earlier one once
    // normalized (each contains the other), as JudgePhrases does.
    check.case_sensitive = big || round % 4 == 3;
    const size_t phrases = big ? 3000 : 1 + pick(8);
    std::set<std::string> seen;
    for (size_t p = 0; p < phrases; ++p) {
      std::string phrase;
      const size_t words = big ? 2 + pick(4) : 1 + pick(3);
      for (size_t w = 0; w < words; ++w) {
        std::string word = vocabulary[pick(vocabulary.size())];
        if (big && word == "don’t") word = "don't";
        absl::StrAppend(&phrase, w > 0 ? " " : "", word);
      }
      if (!seen.insert(phrase).second) continue;
      bool duplicate = false;
      for (size_t q = 0; !big && q < check.phrases.size(); ++q) {
        duplicate |= ContainsPhrase(phrase, check.phrases[q], check.case_sensitive) &&
                     ContainsPhrase(check.phrases[q], phrase, check.case_sensitive);
      }
      if (!duplicate) check.phrases.push_back(phrase);
    }

    std::vector<std::string> found;
    std::vector<std::string> missing;
    for (const std::string& phrase : check.phrases) {
      bool said = false;
      for (size_t t = 0; t < transcript.size() && !said; ++t) {
        if (transcript[t].role() == "AI Assistant" &&
            ContainsPhrase(transcript[t].content(), phrase, check.case_sensitive)) {
          found.push_back(absl::StrCat("\"", phrase, "\" (turn ", t + 1, ")"));
          said = true;
        }
      }
      if (!said) missing.push_back(absl::StrCat("\"", phrase, "\""));
    }
    std::string expected;
    if (found.empty()) {
      expected = absl::StrCat(
          "None of the phrases was said by AI Assistant: ",
          [&] {
            std::string list = ListLike(missing);
            if (missing.size() > 1 && missing.size() <= 20) {
              // This sentence lists with commas only.
              list.replace(list.rfind(" and "), 5, ", ");
            }
            return list;
          }(),
          ".");
    } else if (missing.empty()) {
      expected = absl::StrCat("Found ", ListLike(found), ".");
    } else {
      expected = absl::StrCat("Missing ", ListLike(missing), "; found ", ListLike(found), ".");
    }
    Verdict v = JudgePhrases(transcript, check);
    EXPECT_EQ(v.value, missing.empty()) << "round " << round;
    EXPECT_EQ(v.explanation, expected) << "round " << round;

    check.match_all = false;
    EXPECT_EQ(JudgePhrases(transcript, check).value, !found.empty()) << "round " << round;

    // The trigger: anyone, case-insensitively, stopping at the first phrase found.
    bool said_by_anyone = false;
    for (size_t p = 0; p < check.phrases.size() && !said_by_anyone; ++p) {
      for (const v1::Turn& turn : transcript) {
        said_by_anyone |= ContainsPhrase(turn.content(), check.phrases[p], false);
      }
    }
    EXPECT_EQ(AnyPhraseSaid(transcript, check.phrases), said_by_anyone) << "round " << round;
  }
}

// 10,000 turns and 100 phrases: each turn is normalized once and each phrase is one search.
// No timing assertion (CI machines vary); the time is printed.
TEST(JudgePhrasesTest, LargeTranscript) {
  std::vector<v1::Turn> transcript;
  transcript.reserve(10000);
  for (int i = 0; i < 10000; ++i) {
    std::string text = absl::StrCat(
        "Turn ", i, ": Thank you for calling, how can I help you with your account today? ",
        "Ich möchte über die Straße gehen. ");
    transcript.push_back(i % 2 == 0 ? Ai(text) : User(text));
  }
  transcript.back().set_content("the final special phrase appears here");
  transcript.back().set_role("AI Assistant");
  PhraseCheck check;
  for (int i = 0; i < 99; ++i) check.phrases.push_back(absl::StrCat("missing phrase ", i));
  check.phrases.push_back("final special phrase");
  check.speaker = "any";

  const auto start = std::chrono::steady_clock::now();
  Verdict v = JudgePhrases(transcript, check);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  std::cout << "JudgePhrases, 10000 turns x 100 phrases: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms\n";
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation, "Found \"final special phrase\" (AI Assistant, turn 10000).");

  check.match_all = true;
  Verdict all = JudgePhrases(transcript, check);
  EXPECT_FALSE(all.value);
  EXPECT_THAT(all.explanation, HasSubstr("and 79 more; found \"final special phrase\""));
}

// ---------------------------------------------------------------------------------------------
// JudgeOptions

TEST(JudgeOptionsTest, PermittedMentioned) {
  std::vector<v1::Turn> transcript = {User("how can I pay?"), Ai("You can pay by CARD.")};
  OptionsCheck check;
  check.permitted_options = {"card", "bank transfer"};
  check.forbidden_options = {"cash"};
  Verdict v = JudgeOptions(transcript, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation,
            "Mentioned permitted option(s): \"card\" (turn 2). No forbidden option mentioned.");
}

TEST(JudgeOptionsTest, SeveralPermittedMentioned) {
  std::vector<v1::Turn> transcript = {Ai("Bank transfer works."), Ai("Or card.")};
  OptionsCheck check;
  check.permitted_options = {"card", "bank transfer"};
  Verdict v = JudgeOptions(transcript, check);
  EXPECT_TRUE(v.value);
  EXPECT_EQ(v.explanation,
            "Mentioned permitted option(s): \"card\" (turn 2), \"bank transfer\" (turn 1). No "
            "forbidden option mentioned.");
}

TEST(JudgeOptionsTest, ForbiddenMentioned) {
  std::vector<v1::Turn> transcript = {User("x"), Ai("card works"), Ai("or cash")};
  OptionsCheck check;
  check.permitted_options = {"card"};
  check.forbidden_options = {"cash", "cheque"};
  Verdict v = JudgeOptions(transcript, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation,
            "Mentioned forbidden option(s): \"cash\" (turn 3). Mentioned permitted option(s): "
            "\"card\" (turn 2).");
}

TEST(JudgeOptionsTest, OnlyForbiddenMentioned) {
  std::vector<v1::Turn> transcript = {User("x"), Ai("y"), Ai("Cash only")};
  OptionsCheck check;
  check.permitted_options = {"card"};
  check.forbidden_options = {"cash"};
  Verdict v = JudgeOptions(transcript, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation,
            "Mentioned forbidden option(s): \"cash\" (turn 3). No permitted option was mentioned.");
}

TEST(JudgeOptionsTest, NothingMentioned) {
  OptionsCheck check;
  check.permitted_options = {"card"};
  Verdict v = JudgeOptions({Ai("hello")}, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation, "No permitted option was mentioned.");
}

TEST(JudgeOptionsTest, SpeakerFilter) {
  std::vector<v1::Turn> transcript = {User("can I pay cash?"), Ai("card please")};
  OptionsCheck check;
  check.permitted_options = {"card"};
  check.forbidden_options = {"cash"};
  EXPECT_TRUE(JudgeOptions(transcript, check).value);  // the caller's "cash" does not count
  check.speaker = "any";
  EXPECT_FALSE(JudgeOptions(transcript, check).value);
  check.speaker = "User";
  Verdict user = JudgeOptions(transcript, check);
  EXPECT_FALSE(user.value);
  EXPECT_EQ(user.explanation,
            "Mentioned forbidden option(s): \"cash\" (turn 1). No permitted option was mentioned.");
}

TEST(JudgeOptionsTest, WholeWordsCaseInsensitive) {
  OptionsCheck check;
  check.permitted_options = {"card"};
  check.forbidden_options = {"cash"};
  EXPECT_FALSE(JudgeOptions({Ai("cardboard and cashback")}, check).value);
  EXPECT_TRUE(JudgeOptions({Ai("CARD, not cashback")}, check).value);
}

TEST(JudgeOptionsTest, NoPermittedOptions) {
  OptionsCheck check;
  Verdict v = JudgeOptions({Ai("card")}, check);
  EXPECT_FALSE(v.value);
  EXPECT_EQ(v.explanation, "No permitted options are defined.");
}

TEST(JudgeOptionsTest, OptionBothPermittedAndForbiddenIsForbidden) {
  OptionsCheck check;
  check.permitted_options = {"card"};
  check.forbidden_options = {"card"};
  EXPECT_FALSE(JudgeOptions({Ai("card")}, check).value);
}

// ---------------------------------------------------------------------------------------------
// AnyPhraseSaid

TEST(AnyPhraseSaidTest, AnySpeakerCaseInsensitive) {
  std::vector<v1::Turn> transcript = {User("I want a REFUND"), Ai("ok")};
  EXPECT_TRUE(AnyPhraseSaid(transcript, {"refund"}));
  EXPECT_TRUE(AnyPhraseSaid(transcript, {"nothing", "OK"}));
  EXPECT_FALSE(AnyPhraseSaid(transcript, {"refunds"}));
  EXPECT_FALSE(AnyPhraseSaid(transcript, {}));
  EXPECT_FALSE(AnyPhraseSaid(transcript, {"", "  "}));
  EXPECT_FALSE(AnyPhraseSaid({}, {"refund"}));
}

TEST(AnyPhraseSaidTest, IgnoresFunctionCalls) {
  std::vector<v1::Turn> transcript = {MakeTurn("Function Call", "refund"),
                                      MakeTurn("Function Call Result", "refund")};
  EXPECT_FALSE(AnyPhraseSaid(transcript, {"refund"}));
}

}  // namespace
}  // namespace calleval::judges

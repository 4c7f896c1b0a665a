#include "services/scoring/word_error_rate.h"

#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::scoring {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

struct Expected {
  int64_t hits, substitutions, deletions, insertions;
};

void ExpectCounts(const WordErrorCounts& c, Expected e) {
  EXPECT_EQ(c.hits, e.hits);
  EXPECT_EQ(c.substitutions, e.substitutions);
  EXPECT_EQ(c.deletions, e.deletions);
  EXPECT_EQ(c.insertions, e.insertions);
  EXPECT_EQ(c.reference_words, e.hits + e.substitutions + e.deletions);
}

// ---- Normalization ----

TEST(NormalizeWordsTest, LowerCasesAndStripsPunctuation) {
  EXPECT_THAT(NormalizeWords("Hello, World! How are YOU?"),
              ElementsAre("hello", "world", "how", "are", "you"));
  EXPECT_THAT(NormalizeWords("  U.S.A.\t(really)\n\"yes\";  "),
              ElementsAre("usa", "really", "yes"));
  EXPECT_THAT(NormalizeWords(""), IsEmpty());
  EXPECT_THAT(NormalizeWords(" ... -- ! "), IsEmpty());
}

TEST(NormalizeWordsTest, KeepsApostrophesInsideWordsOnly) {
  EXPECT_THAT(NormalizeWords("Don't say 'cause, it's the dogs' ball"),
              ElementsAre("don't", "say", "cause", "it's", "the", "dogs", "ball"));
  EXPECT_THAT(NormalizeWords("rock 'n' roll ''"), ElementsAre("rock", "n", "roll"));
  EXPECT_THAT(NormalizeWords("don\u2019t \u2018quote\u2019"), ElementsAre("don't", "quote"));
}

TEST(NormalizeWordsTest, HyphensAndDashesSplit) {
  EXPECT_THAT(NormalizeWords("a follow-up call"), ElementsAre("a", "follow", "up", "call"));
  EXPECT_THAT(NormalizeWords("well\u2014maybe\u2013not"), ElementsAre("well", "maybe", "not"));
}

TEST(NormalizeWordsTest, KeepsDigitsAndNonAscii) {
  EXPECT_THAT(NormalizeWords("Call 555-1234 at 9pm"),
              ElementsAre("call", "555", "1234", "at", "9pm"));
  // Non-ASCII bytes are left as they are (no Unicode case folding); U+00A0 separates.
  EXPECT_THAT(NormalizeWords("Caf\u00e9 \u00c9T\u00c9\u00a0Stra\u00dfe\u2026"),
              ElementsAre("caf\u00e9", "\u00c9t\u00c9", "stra\u00dfe"));
}

// ---- Hand-computed counts ----

TEST(WordErrorRateTest, Identical) {
  const WordErrorCounts c = WordErrorRate("the quick brown fox", "the quick brown fox");
  ExpectCounts(c, {4, 0, 0, 0});
  EXPECT_DOUBLE_EQ(c.wer(), 0.0);
  EXPECT_DOUBLE_EQ(c.accuracy(), 1.0);
}

TEST(WordErrorRateTest, EmptyReferenceAndHypothesis) {
  const WordErrorCounts c = WordErrorRate("", "  ,. ");
  ExpectCounts(c, {0, 0, 0, 0});
  EXPECT_DOUBLE_EQ(c.wer(), 0.0);
  EXPECT_DOUBLE_EQ(c.accuracy(), 1.0);
}

TEST(WordErrorRateTest, EmptyReferenceIsAllInsertionsWithWerOne) {
  const WordErrorCounts c = WordErrorRate("", "hello there");
  ExpectCounts(c, {0, 0, 0, 2});
  EXPECT_DOUBLE_EQ(c.wer(), 1.0);
  EXPECT_DOUBLE_EQ(c.accuracy(), 0.0);
}

TEST(WordErrorRateTest, EmptyHypothesisIsAllDeletions) {
  const WordErrorCounts c = WordErrorRate("one two three", "");
  ExpectCounts(c, {0, 0, 3, 0});
  EXPECT_DOUBLE_EQ(c.wer(), 1.0);
  EXPECT_DOUBLE_EQ(c.accuracy(), 0.0);
}

TEST(WordErrorRateTest, PureInsertions) {
  // Errors beyond the reference length: wer 1.5, accuracy clamped at 0.
  const WordErrorCounts c = WordErrorRate("yes please", "oh yes yes please please");
  ExpectCounts(c, {2, 0, 0, 3});
  EXPECT_DOUBLE_EQ(c.wer(), 1.5);
  EXPECT_DOUBLE_EQ(c.accuracy(), 0.0);
}

TEST(WordErrorRateTest, PureDeletions) {
  const WordErrorCounts c = WordErrorRate("i would like to book a table", "i like a table");
  ExpectCounts(c, {4, 0, 3, 0});
  EXPECT_DOUBLE_EQ(c.wer(), 3.0 / 7.0);
}

TEST(WordErrorRateTest, Substitutions) {
  const WordErrorCounts c = WordErrorRate("the cat sat on the mat", "the bat sat in the hat");
  ExpectCounts(c, {3, 3, 0, 0});
  EXPECT_DOUBLE_EQ(c.wer(), 0.5);
  EXPECT_DOUBLE_EQ(c.accuracy(), 0.5);
}

TEST(WordErrorRateTest, Mixed) {
  // A substitution (4) is cheaper than a deletion plus an insertion (6), so "smith" against
  // "thanks" is one substitution, not two errors.
  ExpectCounts(WordErrorRate("my name is john smith", "my name is jon thanks"), {3, 2, 0, 0});
  // a=a, b->x (S), c=c, d deleted (D), e=e, f=f, g inserted (I).
  const WordErrorCounts c = WordErrorRate("a b c d e f", "a x c e f g");
  ExpectCounts(c, {4, 1, 1, 1});
  EXPECT_DOUBLE_EQ(c.wer(), 0.5);
}

TEST(WordErrorRateTest, NormalizationMakesCaseAndPunctuationFree) {
  ExpectCounts(WordErrorRate("Hello, how are you today?", "hello how ARE you... today"),
               {5, 0, 0, 0});
  ExpectCounts(WordErrorRate("It's a follow-up.", "its a follow up"), {3, 1, 0, 0});
}

TEST(WordErrorRateTest, Apostrophes) {
  // "don't" is one word and "do not" two: one substitution plus one insertion.
  ExpectCounts(WordErrorRate("I don't know", "I do not know"), {2, 1, 0, 1});
  ExpectCounts(WordErrorRate("I don\u2019t know", "i don't know"), {3, 0, 0, 0});
}

TEST(WordErrorRateTest, ShiftsCostLessThanSubstitutingEverything) {
  // Two substitutions cost 8; deleting "a" and inserting it after "b" costs 6.
  ExpectCounts(WordErrorRate("a b", "b a"), {1, 0, 1, 1});
  ExpectCounts(WordErrorRate("x y", "y z"), {1, 0, 1, 1});
  ExpectCounts(WordErrorRate("a b c", "b c d"), {2, 0, 1, 1});
}

TEST(WordErrorRateTest, AlignmentLimit) {
  EXPECT_TRUE(WithinWerAlignmentLimit(0, 100'000'000));
  EXPECT_TRUE(WithinWerAlignmentLimit(20000, 20000));
  EXPECT_FALSE(WithinWerAlignmentLimit(20000, 20001));
  EXPECT_FALSE(WithinWerAlignmentLimit(1'000'000, 1'000'000));
}

// ---- Agreement with a plain full-matrix implementation of sclite's DP ----

// net_dp.c's recurrence over the whole (N+1)×(M+1) matrix with no checkpointing and no
// transposition: the reference for the memory-saving version on larger inputs.
WordErrorCounts FullMatrixSclite(const std::vector<std::string>& ref,
                                 const std::vector<std::string>& hyp) {
  const size_t n = ref.size(), m = hyp.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  std::vector<std::vector<char>> back(n + 1, std::vector<char>(m + 1));
  for (size_t b = 1; b <= m; ++b) d[0][b] = d[0][b - 1] + 3, back[0][b] = 'I';
  for (size_t a = 1; a <= n; ++a) d[a][0] = d[a - 1][0] + 3, back[a][0] = 'D';
  for (size_t a = 1; a <= n; ++a) {
    for (size_t b = 1; b <= m; ++b) {
      const int sub = d[a - 1][b - 1] + (ref[a - 1] == hyp[b - 1] ? 0 : 4);
      const int del = d[a - 1][b] + 3, ins = d[a][b - 1] + 3;
      if (sub <= del && sub <= ins) {
        d[a][b] = sub, back[a][b] = 'S';
      } else if (del < ins) {
        d[a][b] = del, back[a][b] = 'D';
      } else {
        d[a][b] = ins, back[a][b] = 'I';
      }
    }
  }
  WordErrorCounts c;
  size_t a = n, b = m;
  while (a > 0 || b > 0) {
    switch (back[a][b]) {
      case 'S':
        --a, --b;
        ++(ref[a] == hyp[b] ? c.hits : c.substitutions);
        break;
      case 'D':
        --a, ++c.deletions;
        break;
      default:
        --b, ++c.insertions;
    }
  }
  c.reference_words = c.hits + c.substitutions + c.deletions;
  return c;
}

std::vector<std::string> RandomWords(std::mt19937& rng, size_t count, uint32_t vocabulary) {
  std::vector<std::string> words;
  for (size_t i = 0; i < count; ++i) words.push_back(absl::StrCat("w", rng() % vocabulary));
  return words;
}

// A noisy copy of `ref`: substitutions, deletions and insertions at the given per-word rates
// (in percent), the way an ASR transcript differs from the truth.
std::vector<std::string> Corrupt(std::mt19937& rng, const std::vector<std::string>& ref,
                                 uint32_t vocabulary, uint32_t sub, uint32_t del, uint32_t ins) {
  std::vector<std::string> hyp;
  for (const std::string& w : ref) {
    const uint32_t roll = rng() % 100;
    if (roll < sub) {
      hyp.push_back(absl::StrCat("w", rng() % vocabulary));
    } else if (roll >= sub + del) {
      hyp.push_back(w);
    }
    if (rng() % 100 < ins) hyp.push_back(absl::StrCat("w", rng() % vocabulary));
  }
  return hyp;
}

TEST(WordErrorRateTest, MatchesFullMatrixOnRandomInputs) {
  std::mt19937 rng(20261122);
  const std::vector<std::pair<size_t, size_t>> shapes = {
      {0, 0},   {0, 7},     {7, 0},      {1, 1},     {3, 50},    {50, 3},
      {37, 41}, {400, 401}, {1500, 1200}, {60, 2500}, {2500, 60}, {999, 1000}};
  for (const auto& [n, m] : shapes) {
    for (uint32_t vocabulary : {2u, 5u, 50u}) {
      const std::vector<std::string> ref = RandomWords(rng, n, vocabulary);
      const std::vector<std::string> hyp = RandomWords(rng, m, vocabulary);
      SCOPED_TRACE(absl::StrCat(n, "x", m, " vocabulary ", vocabulary));
      const WordErrorCounts want = FullMatrixSclite(ref, hyp);
      ExpectCounts(CountWordErrors(ref, hyp),
                   {want.hits, want.substitutions, want.deletions, want.insertions});
    }
    if (n > 0) {
      const std::vector<std::string> ref = RandomWords(rng, n, 200);
      const std::vector<std::string> hyp = Corrupt(rng, ref, 200, 8, 5, 5);
      const WordErrorCounts want = FullMatrixSclite(ref, hyp);
      ExpectCounts(CountWordErrors(ref, hyp),
                   {want.hits, want.substitutions, want.deletions, want.insertions});
    }
  }
}

// ---- Agreement with NIST sclite ----

std::string ScliteBinary() {
  if (const char* env = getenv("CALLEVAL_SCLITE"); env != nullptr && *env != '\0') return env;
#ifdef CALLEVAL_SCLITE
  return CALLEVAL_SCLITE;
#else
  return "";
#endif
}

struct ScliteCase {
  std::string ref, hyp;
};

std::vector<ScliteCase> ScliteCases() {
  std::vector<ScliteCase> cases = {
      {"the quick brown fox jumps over the lazy dog", "the quick brown fox jumps over the lazy"},
      {"hello how can i help you today", ""},
      {"", "um hello"},
      {"", ""},
      {"good morning", "good morning"},
      {"one two three four", "five six seven eight"},
      {"one two", "five six seven eight nine"},
      {"one two three four five six", "seven eight"},
      {"a b c d", "d c b a"},
      {"the cat sat", "cat the sat"},
      {"the the the", "the"},
      {"the", "the the the"},
      {"a a a a b", "a b b b b"},
      {"thanks for calling", "oh thanks for calling"},
      {"thanks for calling", "thanks for calling bye"},
      {"i want to cancel my order please", "i want cancel order please"},
      {"yes", "no no no no"},
      {"x", "y"},
      {"x", "y x"},
      {"x", "x y"},
      {"a b c d e", "b c d e a"},
      {"Call me at 555-1234, OK?", "call me at five five five one two three four ok"},
      {"I don't think we've met", "i do not think we have met"},
      {"It's a FOLLOW-UP call; right?", "its a follow up call right"},
      {"a b a b a b a b", "b a b a b a b a"},
      {"my account number is 4 4 2 1 9", "my count number is 4 2 2 1 9 9"},
      {"so so so so so", "no no no"},
      {"i i i want want the the refund", "i want the the refund refund"},
  };
  // Longer, call-like texts built from a small vocabulary (many repeats, many equal-cost
  // alignments) and a noisy copy: these cross checkpoint blocks in CountWordErrors.
  std::mt19937 rng(7);
  for (size_t length : {120, 300, 700}) {
    const std::vector<std::string> ref = RandomWords(rng, length, 40);
    cases.push_back(
        {absl::StrJoin(ref, " "), absl::StrJoin(Corrupt(rng, ref, 40, 10, 6, 6), " ")});
  }
  // Random short pairs over 2..5 words: ties everywhere, the hardest test of tie-breaking.
  for (int k = 0; k < 1500; ++k) {
    const uint32_t vocabulary = 2 + k % 4;
    cases.push_back({absl::StrJoin(RandomWords(rng, rng() % 21, vocabulary), " "),
                     absl::StrJoin(RandomWords(rng, rng() % 21, vocabulary), " ")});
  }
  return cases;
}

// Per-utterance "Scores: (#C #S #D #I) c s d i" from sclite's pra report, by utterance id.
std::map<std::string, Expected> ParsePra(const std::string& path) {
  std::map<std::string, Expected> scores;
  std::ifstream in(path);
  std::string line, id;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "id: (")) {
      id = line.substr(5, line.find(')') - 5);
    } else if (absl::StartsWith(line, "Scores: (#C #S #D #I)")) {
      std::vector<std::string> f = absl::StrSplit(line.substr(21), ' ', absl::SkipEmpty());
      Expected e{};
      if (f.size() == 4 && absl::SimpleAtoi(f[0], &e.hits) &&
          absl::SimpleAtoi(f[1], &e.substitutions) && absl::SimpleAtoi(f[2], &e.deletions) &&
          absl::SimpleAtoi(f[3], &e.insertions)) {
        scores[id] = e;
      }
    }
  }
  return scores;
}

TEST(WordErrorRateTest, MatchesNistSclite) {
  const std::string sclite = ScliteBinary();
  if (sclite.empty()) {
    GTEST_SKIP() << "sclite not found (install Debian's sctk, or set CALLEVAL_SCLITE)";
  }
  std::string dir = ::testing::TempDir() + "/wer_sclite_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);

  const std::vector<ScliteCase> cases = ScliteCases();
  std::vector<std::string> ids;
  {
    std::ofstream ref(dir + "/ref.trn"), hyp(dir + "/hyp.trn");
    for (size_t k = 0; k < cases.size(); ++k) {
      ids.push_back(absl::StrCat("spk1_", 10000 + k));
      // Both sides go in normalized, as the metric compares them; sclite lower-cases again.
      ref << absl::StrJoin(NormalizeWords(cases[k].ref), " ") << " (" << ids.back() << ")\n";
      hyp << absl::StrJoin(NormalizeWords(cases[k].hyp), " ") << " (" << ids.back() << ")\n";
    }
  }
  const std::string command =
      absl::StrCat("'", sclite, "' -r '", dir, "/ref.trn' trn -h '", dir,
                   "/hyp.trn' trn -i rm -o pra -O '", dir, "' -n out > '", dir, "/log' 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0) << command << " failed; see " << dir << "/log";
  const std::map<std::string, Expected> scores = ParsePra(dir + "/out.pra");
  ASSERT_EQ(scores.size(), cases.size());

  int identical = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(
        absl::StrCat(ids[k], " ref: \"", cases[k].ref, "\" hyp: \"", cases[k].hyp, "\""));
    const auto it = scores.find(ids[k]);
    ASSERT_NE(it, scores.end());
    const WordErrorCounts ours = WordErrorRate(cases[k].ref, cases[k].hyp);
    ExpectCounts(ours, it->second);
    const Expected& e = it->second;
    identical += ours.hits == e.hits && ours.substitutions == e.substitutions &&
                 ours.deletions == e.deletions && ours.insertions == e.insertions;
  }
  std::cout << "sclite agreement: " << identical << " of " << cases.size()
            << " pairs identical (C, S, D, I)\n";
}

// ---- Size: a one-hour call, ~10k words per side ----

TEST(WordErrorRateTest, TenThousandWordsPerSide) {
  std::mt19937 rng(42);
  const std::vector<std::string> ref = RandomWords(rng, 10000, 2000);
  std::vector<std::string> hyp = Corrupt(rng, ref, 2000, 6, 4, 4);
  hyp.resize(10000, "w0");  // Exactly 10k per side.
  const auto start = std::chrono::steady_clock::now();
  const WordErrorCounts c = CountWordErrors(ref, hyp);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::cout << "10k x 10k words: " << took.count() << " s, wer " << c.wer() << "\n";
  EXPECT_EQ(c.reference_words, 10000);
  EXPECT_EQ(c.hits + c.substitutions + c.insertions, 10000);
  // ~14% of words were edited; the minimum-cost alignment cannot report more errors than that
  // by much, nor far fewer.
  EXPECT_GT(c.wer(), 0.08);
  EXPECT_LT(c.wer(), 0.20);
}

}  // namespace
}  // namespace calleval::scoring

#include "services/scoring/turns.h"

#include <cmath>
#include <string>
#include <vector>

#include "calleval/v1/calls.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::scoring {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

MATCHER_P2(SpanIs, start_s, end_s, "") {
  return std::abs(arg.start_s - start_s) < 1e-9 && std::abs(arg.end_s - end_s) < 1e-9;
}

v1::Turn MakeTurn(const std::string& role, const std::string& content, double start_s,
                  double end_s) {
  v1::Turn t;
  t.set_role(role);
  t.set_content(content);
  t.set_start_time(start_s);
  t.set_end_time(end_s);
  return t;
}

TEST(BuildTurnsTest, EmptySpeechHasNoTurns) { EXPECT_THAT(BuildTurns({}), IsEmpty()); }

TEST(BuildTurnsTest, PauseShorterThanGapIsMerged) {
  EXPECT_THAT(BuildTurns({{1.0, 2.0}, {2.699, 3.0}}), ElementsAre(SpanIs(1.0, 3.0)));
}

TEST(BuildTurnsTest, PauseLongerThanGapSeparates) {
  EXPECT_THAT(BuildTurns({{1.0, 2.0}, {2.701, 3.0}}),
              ElementsAre(SpanIs(1.0, 2.0), SpanIs(2.701, 3.0)));
}

TEST(BuildTurnsTest, PauseOfExactlyTheGapSeparates) {
  // 10.7 - 10.0 is 0.69999... in binary; it is still a 700 ms pause.
  EXPECT_THAT(BuildTurns({{9.0, 10.0}, {10.7, 11.0}}),
              ElementsAre(SpanIs(9.0, 10.0), SpanIs(10.7, 11.0)));
}

TEST(BuildTurnsTest, ChainsOfShortPausesMergeIntoOneTurn) {
  EXPECT_THAT(BuildTurns({{0.0, 1.0}, {1.4, 2.0}, {2.5, 3.0}, {3.6, 4.0}, {5.0, 6.0}}),
              ElementsAre(SpanIs(0.0, 4.0), SpanIs(5.0, 6.0)));
}

TEST(BuildTurnsTest, UnsortedOverlappingAndEmptySegments) {
  EXPECT_THAT(BuildTurns({{5.0, 6.0}, {0.0, 2.0}, {1.0, 1.5}, {3.0, 3.0}, {1.8, 2.5}}),
              ElementsAre(SpanIs(0.0, 2.5), SpanIs(5.0, 6.0)));
}

TEST(BuildTurnsTest, CustomGap) {
  EXPECT_THAT(BuildTurns({{0.0, 1.0}, {1.5, 2.0}}, 0.4),
              ElementsAre(SpanIs(0.0, 1.0), SpanIs(1.5, 2.0)));
  EXPECT_THAT(BuildTurns({{0.0, 1.0}, {1.5, 2.0}}, 0.6), ElementsAre(SpanIs(0.0, 2.0)));
}

TEST(TimelineFromTranscriptTest, RolesBecomePartiesAndShortPausesMerge) {
  std::vector<v1::Turn> transcript = {
      MakeTurn("AI Assistant", "Hello.", 0.5, 1.5),
      MakeTurn("AI Assistant", "How can I help?", 1.9, 3.0),  // 400 ms later: same turn
      MakeTurn("User", "Hi.", 4.0, 5.0),
      MakeTurn("Function Call", "", 5.0, 5.1),
      MakeTurn("User", "My card.", 6.0, 7.0),  // 1 s later: a new turn
      MakeTurn("AI Assistant", "Sure.", 7.5, 8.0),
  };
  CallTimeline t = TimelineFromTranscript(transcript, 10.0);
  EXPECT_THAT(t.agent, ElementsAre(SpanIs(0.5, 3.0), SpanIs(7.5, 8.0)));
  EXPECT_THAT(t.user, ElementsAre(SpanIs(4.0, 5.0), SpanIs(6.0, 7.0)));
  EXPECT_DOUBLE_EQ(t.duration_s, 10.0);
}

TEST(TimelineFromTranscriptTest, EntriesWithoutTimingsAreSkipped) {
  v1::Turn no_end;
  no_end.set_role("User");
  no_end.set_content("Hello?");
  no_end.set_start_time(1.0);
  v1::Turn no_times;
  no_times.set_role("AI Assistant");
  no_times.set_content("Hi.");
  std::vector<v1::Turn> transcript = {no_end, no_times, MakeTurn("User", "Yes.", 2.0, 3.0)};
  CallTimeline t = TimelineFromTranscript(transcript, 5.0);
  EXPECT_THAT(t.agent, IsEmpty());
  EXPECT_THAT(t.user, ElementsAre(SpanIs(2.0, 3.0)));
}

TEST(TimelineFromTranscriptTest, TimingsAreClippedToTheRecording) {
  std::vector<v1::Turn> transcript = {
      MakeTurn("AI Assistant", "a", -0.2, 1.0), MakeTurn("User", "b", 4.0, 6.0),
      MakeTurn("User", "c", 7.0, 8.0),          // wholly after the end
      MakeTurn("AI Assistant", "d", 3.0, 2.0),  // end before start
  };
  CallTimeline t = TimelineFromTranscript(transcript, 5.0);
  EXPECT_THAT(t.agent, ElementsAre(SpanIs(0.0, 1.0)));
  EXPECT_THAT(t.user, ElementsAre(SpanIs(4.0, 5.0)));
}

TEST(TimelineFromTranscriptTest, UnknownDurationClipsNothing) {
  CallTimeline t = TimelineFromTranscript({MakeTurn("User", "b", 4.0, 6.0)}, 0);
  EXPECT_THAT(t.user, ElementsAre(SpanIs(4.0, 6.0)));
}

TEST(TimelineFromTranscriptTest, EmptyTranscript) {
  CallTimeline t = TimelineFromTranscript({}, 3.0);
  EXPECT_THAT(t.agent, IsEmpty());
  EXPECT_THAT(t.user, IsEmpty());
  EXPECT_DOUBLE_EQ(t.duration_s, 3.0);
}

}  // namespace
}  // namespace calleval::scoring

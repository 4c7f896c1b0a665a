#include "edge/byte_range.h"

#include <gtest/gtest.h>

#include <ostream>

namespace calleval::edge {
namespace {

struct Case {
  const char* header;
  uint64_t size;
  RangeOutcome outcome;
  uint64_t first;
  uint64_t length;
};

void PrintTo(const Case& c, std::ostream* os) { *os << '"' << c.header << "\" of " << c.size; }

class DecideRangeTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecideRangeTest, Decides) {
  const Case& c = GetParam();
  const RangeDecision d = DecideRange(c.header, c.size);
  EXPECT_EQ(d.outcome, c.outcome) << c.header;
  if (c.outcome == RangeOutcome::kPartial) {
    EXPECT_EQ(d.range.first, c.first) << c.header;
    EXPECT_EQ(d.range.length, c.length) << c.header;
  }
}

constexpr auto kWhole = RangeOutcome::kWhole;
constexpr auto kPartial = RangeOutcome::kPartial;
constexpr auto kUnsatisfiable = RangeOutcome::kUnsatisfiable;

INSTANTIATE_TEST_SUITE_P(
    Ranges, DecideRangeTest,
    ::testing::Values(
        Case{"bytes=0-0", 100, kPartial, 0, 1}, Case{"bytes=0-99", 100, kPartial, 0, 100},
        Case{"bytes=10-19", 100, kPartial, 10, 10},
        Case{"bytes=90-500", 100, kPartial, 90, 10},  // clamped to the end
        Case{"bytes=90-", 100, kPartial, 90, 10}, Case{"bytes=0-", 100, kPartial, 0, 100},
        Case{"bytes=-10", 100, kPartial, 90, 10},
        Case{"bytes=-500", 100, kPartial, 0, 100},  // more than the file: all of it
        Case{" BYTES=1-2 ", 100, kPartial, 1, 2}, Case{"bytes=100-", 100, kUnsatisfiable, 0, 0},
        Case{"bytes=100-200", 100, kUnsatisfiable, 0, 0},
        Case{"bytes=-0", 100, kUnsatisfiable, 0, 0}, Case{"bytes=0-", 0, kUnsatisfiable, 0, 0},
        Case{"bytes=-5", 0, kUnsatisfiable, 0, 0},
        // Served whole: several ranges, other units, nonsense, an inverted range, overflow.
        Case{"bytes=0-1,5-6", 100, kWhole, 0, 0}, Case{"items=0-1", 100, kWhole, 0, 0},
        Case{"bytes=a-b", 100, kWhole, 0, 0}, Case{"bytes=5-1", 100, kWhole, 0, 0},
        Case{"bytes=-", 100, kWhole, 0, 0}, Case{"bytes=5", 100, kWhole, 0, 0},
        Case{"bytes=+5-6", 100, kWhole, 0, 0}, Case{"", 100, kWhole, 0, 0},
        Case{"bytes=99999999999999999999-", 100, kWhole, 0, 0}));

}  // namespace
}  // namespace calleval::edge

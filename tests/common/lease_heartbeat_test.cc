#include "common/lease_heartbeat.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/time/clock.h"

namespace calleval {
namespace {

TEST(LeaseTokenTest, CarriesTheHolder) {
  const std::string token = LeaseToken("host-1/scoring");
  EXPECT_EQ(token.rfind("host-1/scoring:", 0), 0u) << token;
  EXPECT_EQ(token.size(), std::string("host-1/scoring:").size() + 32);
  EXPECT_NE(LeaseToken("h"), LeaseToken("h"));
  EXPECT_EQ(LeaseToken("").size(), 32u);
  EXPECT_EQ(LeaseTokenPrefix("h"), "h:");
}

TEST(LeaseTokenTest, HolderIdsHaveNoSeparatorOrSpaces) {
  EXPECT_TRUE(ValidateLeaseHolder("pod-7/scoring,calls").ok());
  EXPECT_FALSE(ValidateLeaseHolder("").ok());
  EXPECT_FALSE(ValidateLeaseHolder("a:b").ok());
  EXPECT_FALSE(ValidateLeaseHolder("a b").ok());
  EXPECT_FALSE(ValidateLeaseHolder("a\nb").ok());
}

TEST(LeaseHeartbeatTest, IntervalIsAThirdOfTheLease) {
  EXPECT_EQ(LeaseHeartbeat::IntervalFor(absl::Seconds(30)), absl::Seconds(10));
  EXPECT_EQ(LeaseHeartbeat::IntervalFor(absl::Milliseconds(90)), absl::Milliseconds(100));
}

TEST(LeaseHeartbeatTest, RenewsEachHeldLeaseEveryBeatUntilReleased) {
  LeaseHeartbeat heartbeat("test", absl::Milliseconds(20));
  std::atomic<int> a{0}, b{0};
  auto held_a = heartbeat.Hold([&] {
    ++a;
    return absl::OkStatus();
  });
  {
    auto held_b = heartbeat.Hold([&] {
      ++b;
      return absl::OkStatus();
    });
    absl::SleepFor(absl::Milliseconds(150));
    EXPECT_FALSE(held_b->lost());
  }
  const int b_after_release = b.load();
  EXPECT_GE(b_after_release, 3);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(b.load(), b_after_release);  // no longer renewed
  EXPECT_GE(a.load(), 6);
  EXPECT_FALSE(held_a->lost());
  heartbeat.Stop();
  const int a_after_stop = a.load();
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(a.load(), a_after_stop);
}

TEST(LeaseHeartbeatTest, ARefusedRenewalMarksTheLeaseLostAndStopsRenewingIt) {
  LeaseHeartbeat heartbeat("test", absl::Milliseconds(20));
  std::atomic<int> calls{0}, lost_calls{0};
  auto held = heartbeat.Hold(
      [&] {
        ++calls;
        return calls.load() >= 2 ? absl::FailedPreconditionError("lost")
                                 : absl::OkStatus();
      },
      [&] { ++lost_calls; });
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!held->lost() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(held->lost());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(lost_calls.load(), 1);
}

TEST(LeaseHeartbeatTest, OtherErrorsAreRetriedNotLost) {
  LeaseHeartbeat heartbeat("test", absl::Milliseconds(20));
  std::atomic<int> calls{0};
  auto held = heartbeat.Hold([&] {
    ++calls;
    return calls.load() < 3 ? absl::UnavailableError("calls role down") : absl::OkStatus();
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_GE(calls.load(), 5);
  EXPECT_FALSE(held->lost());
}

}  // namespace
}  // namespace calleval

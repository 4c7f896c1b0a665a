#include "common/telemetry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace calleval::telemetry {
namespace {

TEST(TelemetryTest, CounterFamilyHasHelpTypeAndOneLinePerLabelSet) {
  Registry registry;
  auto& family = registry.Counter("calleval_things_total", "Things done.", {"kind", "outcome"});
  family.WithLabels({"a", "ok"}).Increment();
  family.WithLabels({"a", "ok"}).Increment(2);
  family.WithLabels({"b", "error"}).Increment(0.5);
  family.WithLabels({"b", "error"}).Increment(-7);  // a counter never goes down
  EXPECT_EQ(registry.Scrape(),
            "# HELP calleval_things_total Things done.\n"
            "# TYPE calleval_things_total counter\n"
            "calleval_things_total{kind=\"a\",outcome=\"ok\"} 3\n"
            "calleval_things_total{kind=\"b\",outcome=\"error\"} 0.5\n");
}

TEST(TelemetryTest, TheSameFamilyIsReturnedAndChildrenAreStable) {
  Registry registry;
  Counter& first = registry.Counter("calleval_x_total", "X.", {"k"}).WithLabels({"v"});
  Counter& again = registry.Counter("calleval_x_total", "X.", {"k"}).WithLabels({"v"});
  EXPECT_EQ(&first, &again);
  for (int i = 0; i < 100; ++i) {
    registry.Counter("calleval_x_total", "X.", {"k"}).WithLabels({std::to_string(i)});
  }
  first.Increment();
  EXPECT_EQ(again.Value(), 1);
}

TEST(TelemetryTest, UnlabelledGaugeGoesUpAndDown) {
  Registry registry;
  Gauge& gauge = registry.Gauge("calleval_busy", "Busy.").WithLabels({});
  gauge.Add(3);
  gauge.Add(-1);
  EXPECT_EQ(registry.Scrape(),
            "# HELP calleval_busy Busy.\n# TYPE calleval_busy gauge\ncalleval_busy 2\n");
  gauge.Set(-0.25);
  EXPECT_TRUE(absl::StrContains(registry.Scrape(), "calleval_busy -0.25\n"));
}

TEST(TelemetryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry registry;
  auto& h = registry.Histogram("calleval_wait_seconds", "Wait.", {"queue"}, {0.1, 1, 10})
                .WithLabels({"runs"});
  h.Observe(0.05);
  h.Observe(0.1);  // le is inclusive
  h.Observe(0.5);
  h.Observe(100);
  EXPECT_EQ(registry.Scrape(),
            "# HELP calleval_wait_seconds Wait.\n"
            "# TYPE calleval_wait_seconds histogram\n"
            "calleval_wait_seconds_bucket{queue=\"runs\",le=\"0.1\"} 2\n"
            "calleval_wait_seconds_bucket{queue=\"runs\",le=\"1\"} 3\n"
            "calleval_wait_seconds_bucket{queue=\"runs\",le=\"10\"} 3\n"
            "calleval_wait_seconds_bucket{queue=\"runs\",le=\"+Inf\"} 4\n"
            "calleval_wait_seconds_sum{queue=\"runs\"} 100.65\n"
            "calleval_wait_seconds_count{queue=\"runs\"} 4\n");
}

TEST(TelemetryTest, LabelValuesAndHelpAreEscaped) {
  Registry registry;
  registry.Counter("calleval_e_total", "Back\\slash\nnewline \"quotes\" stay.", {"v"})
      .WithLabels({"a\\b\"c\nd"})
      .Increment();
  EXPECT_EQ(registry.Scrape(),
            "# HELP calleval_e_total Back\\\\slash\\nnewline \"quotes\" stay.\n"
            "# TYPE calleval_e_total counter\n"
            "calleval_e_total{v=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(TelemetryTest, ValuesFormat) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(12345678901234), "12345678901234");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.0025), "0.0025");
  EXPECT_EQ(FormatValue(1.0 / 3), "0.3333333333333333");  // the shortest that reads back
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(TelemetryTest, ConcurrentUpdatesAreNotLost) {
  Registry registry;
  Counter& counter = registry.Counter("calleval_c_total", "C.").WithLabels({});
  Histogram& histogram = registry.Histogram("calleval_h_seconds", "H.", {}).WithLabels({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        counter.Increment();
        histogram.Observe(0.5);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter.Value(), 40000);
  const Histogram::Snapshot s = histogram.Collect();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.sum, 20000);
}

TEST(TelemetryTest, CallbackGaugeIsEvaluatedAtScrapeTime) {
  Registry registry;
  std::atomic<int> depth{3};
  CallbackGaugeHandle handle =
      registry.CallbackGauge("calleval_queue_depth", "Depth.", {"queue"}, [&] {
        return std::vector<GaugeSample>{{{"analysis"}, static_cast<double>(depth.load())}};
      });
  EXPECT_TRUE(absl::StrContains(registry.Scrape(), "calleval_queue_depth{queue=\"analysis\"} 3\n"));
  depth = 7;
  EXPECT_TRUE(absl::StrContains(registry.Scrape(), "calleval_queue_depth{queue=\"analysis\"} 7\n"));
  {
    // A second server in the process offers its own: the first stays.
    CallbackGaugeHandle second =
        registry.CallbackGauge("calleval_queue_depth", "Depth.", {"queue"}, [] {
          return std::vector<GaugeSample>{{{"analysis"}, 99}};
        });
    EXPECT_TRUE(absl::StrContains(registry.Scrape(), "{queue=\"analysis\"} 7\n"));
  }
  EXPECT_TRUE(absl::StrContains(registry.Scrape(), "{queue=\"analysis\"} 7\n"));
  handle = CallbackGaugeHandle();  // unregistered
  EXPECT_FALSE(absl::StrContains(registry.Scrape(), "calleval_queue_depth"));
}

TEST(TelemetryTest, ASlowCallbackIsLeftOutWithoutHangingTheScrape) {
  Registry registry;
  registry.Counter("calleval_other_total", "Other.").WithLabels({}).Increment();
  absl::Notification release;
  std::atomic<int> calls{0};
  CallbackGaugeHandle handle = registry.CallbackGauge(
      "calleval_slow", "Slow.", {},
      [&] {
        ++calls;
        release.WaitForNotification();
        return std::vector<GaugeSample>{{{}, 1}};
      },
      absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  std::string first = registry.Scrape();
  std::string second = registry.Scrape();  // the first evaluation still runs: not started again
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(absl::StrContains(first, "calleval_slow")) << first;
  EXPECT_TRUE(absl::StrContains(first, "calleval_other_total 1\n")) << first;
  EXPECT_FALSE(absl::StrContains(second, "calleval_slow")) << second;
  EXPECT_EQ(calls.load(), 1);
  release.Notify();
  // Unregistering waits for the evaluation still running, then the family is gone.
  handle = CallbackGaugeHandle();
  EXPECT_FALSE(absl::StrContains(registry.Scrape(), "calleval_slow"));
}

TEST(TelemetryDeathTest, MisuseIsAProgrammingError) {
  Registry registry;
  auto& family = registry.Counter("calleval_d_total", "D.", {"a", "b"});
  EXPECT_DEATH(family.WithLabels({"only-one"}), "label values");
  EXPECT_DEATH(registry.Gauge("calleval_d_total", "D.", {"a", "b"}), "registered twice");
  EXPECT_DEATH(registry.Counter("bad name", "D."), "bad metric name");
  EXPECT_DEATH(registry.Counter("calleval_l_total", "D.", {"le"}), "bad label name");
}

}  // namespace
}  // namespace calleval::telemetry

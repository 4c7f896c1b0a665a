#pragma once

// Operational metrics of a calleval process in the Prometheus text exposition format 0.0.4
// (docs/operations.md, "Metrics"). Named "telemetry" because "metrics" in this code base are
// the call-evaluation metrics of services/metrics.
//
// A family (a name, its help text and its label names) hands out one child per label-value
// tuple; the lookup takes a lock, so hot paths look a child up once and keep the reference,
// which stays valid for the registry's lifetime. Updating a child is a few relaxed atomics.
//
//   static telemetry::Counter& refunds =
//       telemetry::DefaultRegistry().Counter("calleval_x_total", "Things.", {"kind"})
//           .WithLabels({"refund"});
//   refunds.Increment();
//
// Asking for a family that already exists returns it (the same type and label names are
// required; anything else is a programming error and aborts), so each instrumented module
// declares what it uses without a central list.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace calleval::telemetry {

using LabelValues = std::vector<std::string>;

// A monotonically increasing value: events, seconds, bytes.
class Counter {
 public:
  // `amount` must be >= 0; a negative one is ignored (a counter never goes down).
  void Increment(double amount = 1);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down: items in flight, busy workers.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets by upper bound, with their sum and count.
class Histogram {
 public:
  // `bounds` strictly increasing and finite; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  void ObserveDuration(absl::Duration duration) { Observe(absl::ToDoubleSeconds(duration)); }

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Collect() const;

 private:
  const std::vector<double> bounds_;
  // Per bucket (not cumulative), the last one +Inf.
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// Latency buckets in seconds, 1 ms to 60 s: fit for requests, statements, provider calls.
const std::vector<double>& LatencyBuckets();
// Queue waits in seconds, 10 ms to 1 h: work may sit queued behind a long backlog.
const std::vector<double>& QueueWaitBuckets();

// Times a scope into a histogram.
class ScopedTimer {
 public:
  explicit ScopedTimer(Histogram& histogram) : histogram_(histogram), start_(absl::Now()) {}
  ~ScopedTimer() { histogram_.ObserveDuration(absl::Now() - start_); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Histogram& histogram_;
  absl::Time start_;
};

enum class MetricType { kCounter, kGauge, kHistogram };

class Registry;

// The children of one family, keyed by label values.
template <typename Metric>
class Family {
 public:
  // The child for these label values (as many as the family has label names; a wrong count is
  // a programming error and aborts), created at first use.
  Metric& WithLabels(const LabelValues& values);

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::function<std::unique_ptr<Metric>()> make);

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<Metric>()> make_;
  mutable std::mutex mu_;
  std::map<LabelValues, std::unique_ptr<Metric>> children_;  // guarded by mu_
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// One sample of a callback gauge.
struct GaugeSample {
  LabelValues labels;
  double value = 0;
};

// A gauge family whose values are computed at scrape time by a callback (queue depth from a
// database query). The callback runs on a thread of its own: a scrape waits for it at most
// `deadline` and otherwise answers without this family, and a callback still running from an
// earlier scrape is not started again. Destroying the handle unregisters the family and waits
// for a running callback, so the callback may use objects that outlive the handle. A name
// that is already registered answers an empty handle and the first callback stays.
class CallbackGaugeHandle {
 public:
  CallbackGaugeHandle() = default;
  ~CallbackGaugeHandle();
  CallbackGaugeHandle(CallbackGaugeHandle&&) noexcept;
  CallbackGaugeHandle& operator=(CallbackGaugeHandle&&) noexcept;

  struct State;  // telemetry.cc

 private:
  friend class Registry;
  CallbackGaugeHandle(Registry* registry, std::shared_ptr<State> state);
  void Reset();
  Registry* registry_ = nullptr;
  std::shared_ptr<State> state_;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]* (not
  // starting with "__", never "le"); both are compile-time constants in this code base, so a
  // bad one aborts.
  CounterFamily& Counter(absl::string_view name, absl::string_view help,
                         std::vector<std::string> label_names = {});
  GaugeFamily& Gauge(absl::string_view name, absl::string_view help,
                     std::vector<std::string> label_names = {});
  HistogramFamily& Histogram(absl::string_view name, absl::string_view help,
                             std::vector<std::string> label_names,
                             const std::vector<double>& bounds = LatencyBuckets());

  [[nodiscard]] CallbackGaugeHandle CallbackGauge(
      absl::string_view name, absl::string_view help, std::vector<std::string> label_names,
      std::function<std::vector<GaugeSample>()> callback,
      absl::Duration deadline = absl::Seconds(2));

  // Every family in the text exposition format 0.0.4, sorted by name.
  std::string Scrape();

 private:
  friend class CallbackGaugeHandle;
  struct Entry;
  Entry& FindOrAdd(absl::string_view name, absl::string_view help, MetricType type,
                   const std::vector<std::string>& label_names);
  void RemoveCallback(const std::shared_ptr<CallbackGaugeHandle::State>& state);

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> entries_;  // guarded by mu_
};

// The process-wide registry every instrumented module reports to and the admin server
// serves. Never destroyed.
Registry& DefaultRegistry();

// The value of a sample in the text format: integers without an exponent, +Inf, -Inf, NaN.
std::string FormatValue(double value);
// A label value escaped for the text format: backslash, double quote and newline.
std::string EscapeLabelValue(absl::string_view value);

inline constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace calleval::telemetry

#include "common/telemetry.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace calleval::telemetry {
namespace {

void AddRelaxed(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "telemetry: %s\n", message.c_str());
  std::abort();
}

bool ValidName(absl::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' ||
                    (allow_colon && c == ':') ||
                    (i > 0 && absl::ascii_isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  return true;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="x",b="y"}` for the family's labels, with `extra` (le="...") last; "" without labels.
std::string LabelBlock(const std::vector<std::string>& names, const LabelValues& values,
                       absl::string_view extra_name = "", absl::string_view extra_value = "") {
  if (names.empty() && extra_name.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    absl::StrAppend(&out, names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    if (!names.empty()) out += ',';
    absl::StrAppend(&out, extra_name, "=\"", extra_value, "\"");
  }
  out += '}';
  return out;
}

absl::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

void Counter::Increment(double amount) {
  if (!(amount >= 0)) return;
  AddRelaxed(value_, amount);
}

void Gauge::Add(double amount) { AddRelaxed(value_, amount); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      Die("histogram bounds must be finite and strictly increasing");
    }
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // The first bound >= value: Prometheus buckets are `le` (less than or equal).
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AddRelaxed(sum_, value);
}

Histogram::Snapshot Histogram::Collect() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  snapshot.cumulative_counts.reserve(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts.push_back(running);
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

const std::vector<double>& LatencyBuckets() {
  static const auto* buckets = new std::vector<double>{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *buckets;
}

const std::vector<double>& QueueWaitBuckets() {
  static const auto* buckets = new std::vector<double>{0.01, 0.05, 0.1, 0.5, 1,   2.5,  5,   10,
                                                       30,   60,   120, 300, 600, 1800, 3600};
  return *buckets;
}

template <typename Metric>
Family<Metric>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                       std::function<std::unique_ptr<Metric>()> make)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      make_(std::move(make)) {}

template <typename Metric>
Metric& Family<Metric>::WithLabels(const LabelValues& values) {
  if (values.size() != label_names_.size()) {
    Die(absl::StrCat(name_, ": ", values.size(), " label values for ", label_names_.size(),
                     " labels"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(values);
  if (it == children_.end()) it = children_.emplace(values, make_()).first;
  return *it->second;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// What a scrape runs and waits for; shared with the thread that runs the callback.
struct CallbackGaugeHandle::State {
  std::string name;
  std::function<std::vector<GaugeSample>()> callback;
  absl::Duration deadline;
  std::mutex mu;
  std::condition_variable changed;
  bool running = false;           // guarded by mu
  uint64_t finished = 0;          // evaluations completed; guarded by mu
  std::vector<GaugeSample> last;  // guarded by mu
};

struct Registry::Entry {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<std::string> label_names;
  std::unique_ptr<CounterFamily> counters;
  std::unique_ptr<GaugeFamily> gauges;
  std::unique_ptr<HistogramFamily> histograms;
  std::shared_ptr<CallbackGaugeHandle::State> callback;
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry::Entry& Registry::FindOrAdd(absl::string_view name, absl::string_view help,
                                     MetricType type, const std::vector<std::string>& label_names) {
  if (!ValidName(name, /*allow_colon=*/true)) Die(absl::StrCat("bad metric name ", name));
  for (const std::string& label : label_names) {
    if (!ValidName(label, /*allow_colon=*/false) || label == "le" ||
        absl::StartsWith(label, "__")) {
      Die(absl::StrCat(name, ": bad label name ", label));
    }
  }
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    Entry& entry = *it->second;
    if (entry.type != type || entry.label_names != label_names || entry.callback != nullptr) {
      Die(absl::StrCat(name, " registered twice with different types or labels"));
    }
    return entry;
  }
  auto entry = std::make_unique<Entry>();
  entry->name = std::string(name);
  entry->help = std::string(help);
  entry->type = type;
  entry->label_names = label_names;
  return *entries_.emplace(entry->name, std::move(entry)).first->second;
}

CounterFamily& Registry::Counter(absl::string_view name, absl::string_view help,
                                 std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = FindOrAdd(name, help, MetricType::kCounter, label_names);
  if (!entry.counters) {
    entry.counters.reset(new CounterFamily(entry.name, entry.help, label_names,
                                           [] { return std::make_unique<telemetry::Counter>(); }));
  }
  return *entry.counters;
}

GaugeFamily& Registry::Gauge(absl::string_view name, absl::string_view help,
                             std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = FindOrAdd(name, help, MetricType::kGauge, label_names);
  if (!entry.gauges) {
    entry.gauges.reset(new GaugeFamily(entry.name, entry.help, label_names,
                                       [] { return std::make_unique<telemetry::Gauge>(); }));
  }
  return *entry.gauges;
}

HistogramFamily& Registry::Histogram(absl::string_view name, absl::string_view help,
                                     std::vector<std::string> label_names,
                                     const std::vector<double>& bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = FindOrAdd(name, help, MetricType::kHistogram, label_names);
  if (!entry.histograms) {
    entry.histograms.reset(new HistogramFamily(entry.name, entry.help, label_names, [bounds] {
      return std::make_unique<telemetry::Histogram>(bounds);
    }));
  }
  return *entry.histograms;
}

CallbackGaugeHandle Registry::CallbackGauge(absl::string_view name, absl::string_view help,
                                            std::vector<std::string> label_names,
                                            std::function<std::vector<GaugeSample>()> callback,
                                            absl::Duration deadline) {
  auto state = std::make_shared<CallbackGaugeHandle::State>();
  state->name = std::string(name);
  state->callback = std::move(callback);
  state->deadline = deadline;
  std::lock_guard<std::mutex> lock(mu_);
  // Several servers in one process (tests) each offer theirs: the first one's is served.
  if (entries_.count(name) > 0) return CallbackGaugeHandle();
  Entry& entry = FindOrAdd(name, help, MetricType::kGauge, label_names);
  entry.callback = state;
  return CallbackGaugeHandle(this, std::move(state));
}

void Registry::RemoveCallback(const std::shared_ptr<CallbackGaugeHandle::State>& state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(state->name);
    if (it != entries_.end() && it->second->callback == state) entries_.erase(it);
  }
  // A callback still running (a scrape gave up on it) may use what its owner is about to free.
  std::unique_lock<std::mutex> lock(state->mu);
  state->changed.wait(lock, [&] { return !state->running; });
}

CallbackGaugeHandle::CallbackGaugeHandle(Registry* registry, std::shared_ptr<State> state)
    : registry_(registry), state_(std::move(state)) {}
CallbackGaugeHandle::~CallbackGaugeHandle() { Reset(); }
CallbackGaugeHandle::CallbackGaugeHandle(CallbackGaugeHandle&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)), state_(std::move(other.state_)) {}
CallbackGaugeHandle& CallbackGaugeHandle::operator=(CallbackGaugeHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    registry_ = std::exchange(other.registry_, nullptr);
    state_ = std::move(other.state_);
  }
  return *this;
}
void CallbackGaugeHandle::Reset() {
  if (registry_ != nullptr && state_ != nullptr) registry_->RemoveCallback(state_);
  registry_ = nullptr;
  state_.reset();
}

namespace {

// Runs the callback on a thread of its own (unless one still runs) and waits for it up to its
// deadline. Returns false when it did not finish in time.
bool EvaluateCallback(const std::shared_ptr<CallbackGaugeHandle::State>& state,
                      std::vector<GaugeSample>* samples) {
  std::unique_lock<std::mutex> lock(state->mu);
  const uint64_t wanted = state->finished + 1;
  if (!state->running) {
    state->running = true;
    std::thread([state] {
      std::vector<GaugeSample> result = state->callback();
      std::lock_guard<std::mutex> lock(state->mu);
      state->last = std::move(result);
      state->running = false;
      ++state->finished;
      state->changed.notify_all();
    }).detach();
  }
  const bool done = state->changed.wait_for(
      lock, std::chrono::microseconds(absl::ToInt64Microseconds(state->deadline)),
      [&] { return state->finished >= wanted; });
  if (done) *samples = state->last;
  return done;
}

}  // namespace

std::string Registry::Scrape() {
  // Copies: a callback family may be unregistered while the scrape runs. The other families
  // are never removed while the registry lives, and each family's own lock guards its children.
  struct Collected {
    Entry entry;
    CounterFamily* counters = nullptr;
    GaugeFamily* gauges = nullptr;
    HistogramFamily* histograms = nullptr;
    std::shared_ptr<CallbackGaugeHandle::State> callback;
  };
  std::vector<Collected> collected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, entry] : entries_) {
      Collected item;
      item.entry.name = entry->name;
      item.entry.help = entry->help;
      item.entry.type = entry->type;
      item.entry.label_names = entry->label_names;
      item.counters = entry->counters.get();
      item.gauges = entry->gauges.get();
      item.histograms = entry->histograms.get();
      item.callback = entry->callback;
      collected.push_back(std::move(item));
    }
  }
  std::string out;
  for (const Collected& item : collected) {
    const Entry& e = item.entry;
    std::vector<GaugeSample> callback_samples;
    if (item.callback && !EvaluateCallback(item.callback, &callback_samples)) {
      std::fprintf(stderr, "telemetry: %s took longer than its deadline; left out of the scrape\n",
                   e.name.c_str());
      DefaultRegistry()
          .Counter("calleval_scrape_callback_timeouts_total",
                   "Callback gauges left out of a scrape because they missed their deadline.",
                   {"metric"})
          .WithLabels({e.name})
          .Increment();
      continue;
    }
    absl::StrAppend(&out, "# HELP ", e.name, " ", EscapeHelp(e.help), "\n# TYPE ", e.name, " ",
                    TypeName(e.type), "\n");
    if (item.callback) {
      for (const GaugeSample& sample : callback_samples) {
        if (sample.labels.size() != e.label_names.size()) continue;
        absl::StrAppend(&out, e.name, LabelBlock(e.label_names, sample.labels), " ",
                        FormatValue(sample.value), "\n");
      }
      continue;
    }
    if (item.counters) {
      std::lock_guard<std::mutex> lock(item.counters->mu_);
      for (const auto& [labels, counter] : item.counters->children_) {
        absl::StrAppend(&out, e.name, LabelBlock(e.label_names, labels), " ",
                        FormatValue(counter->Value()), "\n");
      }
    } else if (item.gauges) {
      std::lock_guard<std::mutex> lock(item.gauges->mu_);
      for (const auto& [labels, gauge] : item.gauges->children_) {
        absl::StrAppend(&out, e.name, LabelBlock(e.label_names, labels), " ",
                        FormatValue(gauge->Value()), "\n");
      }
    } else if (item.histograms) {
      std::lock_guard<std::mutex> lock(item.histograms->mu_);
      for (const auto& [labels, histogram] : item.histograms->children_) {
        const telemetry::Histogram::Snapshot s = histogram->Collect();
        for (size_t i = 0; i <= s.bounds.size(); ++i) {
          const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
          absl::StrAppend(&out, e.name, "_bucket", LabelBlock(e.label_names, labels, "le", le), " ",
                          s.cumulative_counts[i], "\n");
        }
        absl::StrAppend(&out, e.name, "_sum", LabelBlock(e.label_names, labels), " ",
                        FormatValue(s.sum), "\n", e.name, "_count",
                        LabelBlock(e.label_names, labels), " ", s.count, "\n");
      }
    }
  }
  return out;
}

Registry& DefaultRegistry() {
  static auto* registry = new Registry();
  return *registry;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  // The shortest of %.15g..%.17g that reads back as the same double.
  for (int precision = 15; precision <= 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace calleval::telemetry

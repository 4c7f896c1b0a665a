#include "common/lease_heartbeat.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/telemetry.h"

namespace calleval {

std::string LeaseToken(absl::string_view holder) {
  std::string random = HexEncode(RandomBytes(16));
  if (holder.empty()) return random;
  return absl::StrCat(holder, ":", random);
}

std::string LeaseTokenPrefix(absl::string_view holder) { return absl::StrCat(holder, ":"); }

absl::Status ValidateLeaseHolder(absl::string_view holder) {
  if (holder.empty()) return absl::InvalidArgumentError("a lease holder id must not be empty");
  if (holder.size() > 200) return absl::InvalidArgumentError("a lease holder id is too long");
  for (char c : holder) {
    if (c == ':' || absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          absl::StrCat("a lease holder id must not contain ':' or spaces: ", holder));
    }
  }
  return absl::OkStatus();
}

namespace {

// The queue label of a heartbeat's name (the workers name theirs for their log lines).
absl::string_view QueueOfHeartbeat(absl::string_view name) {
  if (name == "scoring") return "analysis";
  if (name == "recording downloader") return "downloads";
  return name;
}

void CountLeaseLost(absl::string_view heartbeat_name) {
  static telemetry::CounterFamily& lost = telemetry::DefaultRegistry().Counter(
      "calleval_leases_lost_total",
      "Leases a worker found taken from it when renewing (expired and claimed by another).",
      {"queue"});
  lost.WithLabels({std::string(QueueOfHeartbeat(heartbeat_name))}).Increment();
}

}  // namespace

void CountLeaseTakeover(absl::string_view queue) {
  static telemetry::CounterFamily& takeovers = telemetry::DefaultRegistry().Counter(
      "calleval_lease_takeovers_total", "Claims that took over a lease another holder let expire.",
      {"queue"});
  takeovers.WithLabels({std::string(queue)}).Increment();
}

void ObserveQueueWait(absl::string_view queue, absl::string_view enqueued_at) {
  static telemetry::HistogramFamily& wait = telemetry::DefaultRegistry().Histogram(
      "calleval_queue_wait_seconds",
      "Time from an item's enqueueing (its row's creation) to a worker's first lease of it.",
      {"queue"}, telemetry::QueueWaitBuckets());
  std::optional<absl::Time> enqueued = ParseTimestamp(enqueued_at);
  if (!enqueued) return;
  wait.WithLabels({std::string(queue)})
      .ObserveDuration(std::max(absl::ZeroDuration(), absl::Now() - *enqueued));
}

LeaseHeartbeat::Held::~Held() { owner_->Remove(entry_.get()); }

LeaseHeartbeat::LeaseHeartbeat(std::string name, absl::Duration interval)
    : name_(std::move(name)), interval_(interval) {
  thread_ = std::thread([this] { Loop(); });
}

absl::Duration LeaseHeartbeat::IntervalFor(absl::Duration lease) {
  return std::max(lease / 3, absl::Milliseconds(100));
}

std::unique_ptr<LeaseHeartbeat::Held> LeaseHeartbeat::Hold(Renew renew,
                                                           std::function<void()> on_lost) {
  auto entry = std::make_shared<Held::Entry>();
  entry->renew = std::move(renew);
  entry->on_lost = std::move(on_lost);
  {
    absl::MutexLock lock(&mu_);
    entries_.push_back(entry);
  }
  return std::unique_ptr<Held>(new Held(this, std::move(entry)));
}

void LeaseHeartbeat::Remove(const Held::Entry* entry) {
  absl::MutexLock lock(&mu_);
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [entry](const auto& e) { return e.get() == entry; }),
                 entries_.end());
}

void LeaseHeartbeat::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LeaseHeartbeat::Loop() {
  while (true) {
    std::vector<std::shared_ptr<Held::Entry>> due;
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), interval_);
      if (stopping_) return;
      due = entries_;
    }
    // Renewed outside the lock: a renewal is a write transaction or an RPC.
    for (const auto& entry : due) {
      if (entry->lost.load()) continue;
      absl::Status renewed = entry->renew();
      if (renewed.ok()) continue;
      if (absl::IsFailedPrecondition(renewed)) {
        CountLeaseLost(name_);
        entry->lost.store(true);
        if (entry->on_lost) entry->on_lost();
      } else {
        LogWarn("lease renewal failed (retried)", {{"worker", name_}, {"error", renewed}});
      }
    }
  }
}

}  // namespace calleval

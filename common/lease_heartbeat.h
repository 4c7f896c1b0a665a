#pragma once

// Keeps the leases a worker pool holds alive (docs/architecture.md "Durability"). Background
// work is a row with a short lease (a token and an expiry); while a worker works on it, one
// heartbeat thread per pool renews every lease the pool holds each `interval` (a third of the
// lease), so a worker that dies stops renewing and its work is taken over once the short lease
// expires. A renewal refused with kFailedPrecondition means the lease was lost (it expired and
// another worker took it, or the row ended): the holder is marked lost, and the worker abandons
// the job quietly (its report would be refused anyway). Other renewal errors (the store or the
// calls role briefly unreachable) are retried at the next beat.
//
// A lease token carries the holder id of the process that took it (LeaseToken), so a restarted
// process can give back at once what its previous life held (the stores' Release*Of methods).

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace calleval {

// A new lease token of `holder`: "<holder>:<32 hex digits>" (just the hex digits without a
// holder).
std::string LeaseToken(absl::string_view holder);
// The prefix every token of `holder` starts with ("<holder>:"); what a restart releases.
std::string LeaseTokenPrefix(absl::string_view holder);
// A holder id must be non-empty and must not contain ':' (the token separator) or whitespace.
absl::Status ValidateLeaseHolder(absl::string_view holder);

class LeaseHeartbeat {
 public:
  // Renews one lease; kFailedPrecondition: the lease is lost.
  using Renew = std::function<absl::Status()>;

  // One held lease; unregisters itself when destroyed.
  class Held {
   public:
    ~Held();
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    // The lease was lost: the job's report would be refused.
    bool lost() const { return entry_->lost.load(); }

   private:
    friend class LeaseHeartbeat;
    struct Entry {
      Renew renew;
      std::function<void()> on_lost;
      std::atomic<bool> lost{false};
    };
    Held(LeaseHeartbeat* owner, std::shared_ptr<Entry> entry)
        : owner_(owner), entry_(std::move(entry)) {}
    LeaseHeartbeat* owner_;
    std::shared_ptr<Entry> entry_;
  };

  // `name` prefixes the log lines ("scoring", "transcription", ...).
  LeaseHeartbeat(std::string name, absl::Duration interval);
  ~LeaseHeartbeat() { Stop(); }
  LeaseHeartbeat(const LeaseHeartbeat&) = delete;
  LeaseHeartbeat& operator=(const LeaseHeartbeat&) = delete;

  // Renews `renew`'s lease every interval until the returned handle is destroyed. `on_lost`
  // (optional) runs on the heartbeat thread when a renewal is refused.
  std::unique_ptr<Held> Hold(Renew renew, std::function<void()> on_lost = nullptr);
  // Ends the thread (leases still held are no longer renewed).
  void Stop();

  absl::Duration interval() const { return interval_; }
  // The interval for leases of `lease`: a third of it (at least 100 ms).
  static absl::Duration IntervalFor(absl::Duration lease);

 private:
  void Loop();
  void Remove(const Held::Entry* entry);

  const std::string name_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<Held::Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Operational counters of the lease queues (docs/operations.md, "Metrics"). `queue` is one of
// analysis, transcription, runs, downloads.
// A claim that took a lease over from a holder whose lease had expired (a dead or stalled
// worker's work).
void CountLeaseTakeover(absl::string_view queue);
// An item's first lease: how long it waited since it was enqueued (`enqueued_at`, the row's
// created_at; one that does not parse is not observed).
void ObserveQueueWait(absl::string_view queue, absl::string_view enqueued_at);

}  // namespace calleval

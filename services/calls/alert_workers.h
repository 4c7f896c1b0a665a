#pragma once

// The workers behind alert rules (docs/api.md §5.11):
//
//  * the evaluator: a call that settles or a run that ends marks its workspace (MarkWorkspace, an
//    insert under a lock: ingestion, scoring and runs never wait for an evaluation); one thread
//    evaluates the dirty workspaces' rules within about a second, and every rule not evaluated for
//    the store's evaluation_interval, so a time window slides and a rule resolves when bad calls
//    age out.
//  * the senders: they lease the outbox's notifications and POST each, signed, to its rule's
//    webhook, bounded (connect and total timeouts, an answer byte cap, no redirects) and under
//    the outbound URL guard, re-checked at connect time.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/polling_workers.h"
#include "common/url_guard.h"
#include "services/calls/alerts_store.h"

namespace calleval::calls {

class AlertWorkers {
 public:
  struct Options {
    UrlGuardOptions url_guard;
    absl::Duration connect_timeout = absl::Seconds(5);
    absl::Duration request_timeout = absl::Seconds(10);
    int64_t max_response_bytes = 64 << 10;
    int senders = 2;
    // How often the evaluator looks for rules due by time; at most the store's interval.
    absl::Duration poll_interval = absl::Seconds(5);
    // CURLOPT_RESOLVE entries, for tests (common/provider_http.h).
    std::vector<std::string> resolve_override;
  };

  AlertWorkers(AlertsStore* store, Options options) : store_(store), options_(std::move(options)) {}
  ~AlertWorkers() { Stop(); }

  void Start();
  void Stop();

  // A call of the workspace settled (its analysis ended) or a run of it ended: its rules are
  // evaluated soon.
  void MarkWorkspace(int64_t workspace_id);

  // One pass of each, for tests that drive them by hand: true when there was work.
  bool EvaluateOnce(absl::Time now);
  bool SendOnce(absl::Time now);

 private:
  AlertsStore* store_;
  Options options_;
  absl::Mutex mu_;
  std::set<int64_t> workspaces_ ABSL_GUARDED_BY(mu_);
  PollingWorkers evaluator_;
  PollingWorkers senders_;
  bool started_ = false;
};

}  // namespace calleval::calls

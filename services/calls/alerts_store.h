#pragma once

// A workspace's alert rules (docs/api.md §5.11), their evaluation and the outbox of their
// notifications. The calls role owns the tables (alert_rules, alert_deliveries,
// alert_delivery_attempts).
//
// Evaluation computes a rule's figure from the calls' rows (the rows stats read, docs/api.md
// §5.7) over its window, steps the damping state machine (alert_rules.h) and writes the new
// state with a conditional UPDATE on the rule's version: when two processes evaluate one rule at
// once, one write matches and the other changes nothing, so a transition is recorded, and its
// notification queued, once. The notification is written in the same transaction as the state,
// so a restart loses none; delivery leases it, POSTs it and records each attempt.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.pb.h"
#include "common/database.h"
#include "common/url_guard.h"
#include "services/calls/alert_rules.h"
#include "services/calls/calls_store.h"
#include "services/calls/stats_store.h"

namespace calleval::calls {

// A notification leased for one attempt.
struct AlertDeliveryJob {
  int64_t id = 0;
  int64_t rule_id = 0;
  std::string event;
  std::string body;
  std::string webhook_url;
  std::string secret;
  int64_t attempt = 1;  // this attempt's number, from 1
};

class AlertsStore {
 public:
  struct Options {
    // The 32 bytes that seal the signing secrets (as integration secrets); empty refuses to
    // create a rule.
    std::string credentials_key;
    UrlGuardOptions url_guard;
    // The workspace's agents, scenarios, custom metrics and runs, asked of their owners.
    AgentLookup agents;
    ScenarioAgentLookup scenarios;
    MetricDefinitions metrics;
    RunCounter runs;
    AlertDamping damping;
    // Every rule is evaluated at least this often (a time window slides without new calls).
    absl::Duration evaluation_interval = absl::Seconds(60);
    // The first retry's delay; later ones are 3, 12, 60, 180 and 360 times it.
    absl::Duration retry_base = absl::Seconds(10);
    int max_attempts = 8;
    // How long a leased notification is kept from other senders.
    absl::Duration delivery_lease = absl::Seconds(30);
    int max_rules_per_workspace = 100;
  };

  AlertsStore(db::Database* db, Options options) : db_(db), options_(std::move(options)) {}

  // 201's rule, with its signing secret (shown in this answer only). 422 validation_failed
  // naming each bad field; 422 when the workspace has max_rules_per_workspace rules.
  absl::StatusOr<v1::AlertRule> Create(int64_t workspace_id,
                                       const v1::CreateAlertRuleRequest& request);
  // 404 for another workspace's rule.
  absl::StatusOr<v1::AlertRule> Get(int64_t workspace_id, int64_t id);
  absl::StatusOr<v1::ListAlertRulesResponse> List(int64_t workspace_id, int page, int per_page);
  absl::Status Delete(int64_t workspace_id, int64_t id);
  // Every attempt to send the rule's notifications, newest first.
  absl::StatusOr<v1::ListAlertDeliveriesResponse> ListDeliveries(int64_t workspace_id, int64_t id,
                                                                 int page, int per_page);

  // The rules to evaluate now: every rule of `workspaces` (where results just arrived) and every
  // rule not evaluated for evaluation_interval, at most `limit`.
  absl::StatusOr<std::vector<int64_t>> DueRules(const std::vector<int64_t>& workspaces,
                                                absl::Time now, int limit);
  // Evaluates one rule; answers the event it queued ("firing", "resolved") or "" when none
  // (no change, or another process recorded this evaluation's change first). A rule deleted
  // meanwhile is not an error.
  absl::StatusOr<std::string> Evaluate(int64_t rule_id, absl::Time now);

  // The oldest notification due, leased for one attempt; nullopt when none is.
  absl::StatusOr<std::optional<AlertDeliveryJob>> LeaseDelivery(absl::Time now);
  // Records the attempt: delivered (a 2xx), or a failure with the HTTP status (0: none came)
  // and the error; a failure is retried after its backoff until max_attempts, then abandoned.
  // Answers the next attempt's time when one is scheduled.
  absl::StatusOr<std::optional<absl::Time>> RecordAttempt(const AlertDeliveryJob& job,
                                                          absl::Time now, bool delivered,
                                                          int http_status,
                                                          const std::string& error);
  // The delay after failed attempt `attempt` (from 1).
  absl::Duration RetryDelay(int64_t attempt) const;

  const Options& options() const { return options_; }

 private:
  db::Database* db_;
  Options options_;
};

}  // namespace calleval::calls

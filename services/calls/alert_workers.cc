#include "services/calls/alert_workers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/provider_http.h"
#include "common/telemetry.h"

namespace calleval::calls {
namespace {

// At most this many rules an evaluation pass; the next pass takes the rest at once.
constexpr int kRulesPerPass = 200;

telemetry::Counter& Deliveries(const char* outcome) {
  static telemetry::CounterFamily& family = telemetry::DefaultRegistry().Counter(
      "calleval_alert_deliveries_total",
      "Attempts to send an alert rule's notification to its webhook, by outcome: delivered "
      "(2xx), retried (failed, another attempt scheduled) or abandoned (failed, no attempt "
      "left).",
      {"outcome"});
  return family.WithLabels({outcome});
}

telemetry::Counter& Transitions(const std::string& event) {
  static telemetry::CounterFamily& family = telemetry::DefaultRegistry().Counter(
      "calleval_alert_transitions_total",
      "Alert rules that started firing or resolved (each queues one notification).", {"event"});
  return family.WithLabels({event});
}

telemetry::Counter& EvaluationErrors() {
  static telemetry::Counter& counter =
      telemetry::DefaultRegistry()
          .Counter("calleval_alert_evaluation_errors_total",
                   "Alert rule evaluations that failed (the rule is tried again later).", {})
          .WithLabels({});
  return counter;
}

}  // namespace

void AlertWorkers::Start() {
  if (started_) return;
  started_ = true;
  const absl::Duration poll =
      std::min(options_.poll_interval, store_->options().evaluation_interval);
  evaluator_.Start(
      1, poll, [this] { return EvaluateOnce(absl::Now()); }, "alert_evaluation");
  senders_.Start(
      std::max(1, options_.senders), std::min(poll, absl::Seconds(1)),
      [this] { return SendOnce(absl::Now()); }, "alert_delivery");
}

void AlertWorkers::Stop() {
  evaluator_.Stop();
  senders_.Stop();
}

void AlertWorkers::MarkWorkspace(int64_t workspace_id) {
  {
    absl::MutexLock lock(&mu_);
    workspaces_.insert(workspace_id);
  }
  if (started_) evaluator_.Notify();
}

bool AlertWorkers::EvaluateOnce(absl::Time now) {
  std::vector<int64_t> workspaces;
  {
    absl::MutexLock lock(&mu_);
    workspaces.assign(workspaces_.begin(), workspaces_.end());
    workspaces_.clear();
  }
  absl::StatusOr<std::vector<int64_t>> due = store_->DueRules(workspaces, now, kRulesPerPass);
  if (!due.ok()) {
    LogWarn("alert rules: could not read the rules due", {{"error", due.status()}});
    EvaluationErrors().Increment();
    // Given back: the next pass tries again.
    absl::MutexLock lock(&mu_);
    workspaces_.insert(workspaces.begin(), workspaces.end());
    return false;
  }
  bool queued = false;
  for (int64_t rule_id : *due) {
    if (evaluator_.stopping()) break;
    absl::StatusOr<std::string> event = store_->Evaluate(rule_id, now);
    if (!event.ok()) {
      EvaluationErrors().Increment();
      LogWarn("alert rule evaluation failed", {{"rule_id", rule_id}, {"error", event.status()}});
      continue;
    }
    if (!event->empty()) {
      Transitions(*event).Increment();
      LogInfo("alert rule changed state", {{"rule_id", rule_id}, {"event", *event}});
      queued = true;
    }
  }
  if (queued && started_) senders_.Notify();
  // A full pass may have left rules behind: ask again at once.
  return static_cast<int>(due->size()) >= kRulesPerPass;
}

bool AlertWorkers::SendOnce(absl::Time now) {
  absl::StatusOr<std::optional<AlertDeliveryJob>> leased = store_->LeaseDelivery(now);
  if (!leased.ok()) {
    LogWarn("alert deliveries: could not lease one", {{"error", leased.status()}});
    return false;
  }
  if (!leased->has_value()) return false;
  const AlertDeliveryJob& job = **leased;
  const int64_t t = absl::ToUnixSeconds(absl::Now());
  ProviderPost post;
  post.url = job.webhook_url;
  post.body = job.body;
  post.content_type = "application/json";
  post.headers = {absl::StrCat("X-Calleval-Signature: ", AlertSignature(job.secret, t, job.body)),
                  absl::StrCat("X-Calleval-Event: ", job.event),
                  absl::StrCat("X-Calleval-Delivery: ", job.id)};
  post.connect_timeout = options_.connect_timeout;
  post.request_timeout = options_.request_timeout;
  post.max_response_bytes = options_.max_response_bytes;
  post.max_attempts = 1;  // the outbox retries, with its own backoff
  post.cancel = senders_.cancel_flag();
  post.label = "alert webhook failed: ";
  post.error_code = "webhook_failed";
  post.cancelled_code = "cancelled";
  // The rule's URL was checked when it was made; checked again now, its resolved address at
  // connect time (DNS may have changed since).
  post.guard = &options_.url_guard;
  post.guard_field = "webhook_url";
  post.resolve_override = options_.resolve_override;
  long http_status = 0;
  post.http_status = &http_status;
  absl::StatusOr<std::string> answer = PostToProvider(post);
  if (!answer.ok() && answer.status().code() == absl::StatusCode::kCancelled) {
    // Shutting down: the lease runs out and another sender (or the next life) sends it.
    return false;
  }
  const bool delivered = answer.ok();
  const std::string error = delivered ? "" : std::string(answer.status().message());
  absl::StatusOr<std::optional<absl::Time>> next =
      store_->RecordAttempt(job, absl::Now(), delivered, static_cast<int>(http_status), error);
  if (!next.ok()) {
    LogWarn("alert deliveries: could not record an attempt",
            {{"delivery_id", job.id}, {"error", next.status()}});
    return true;
  }
  Deliveries(delivered ? "delivered" : (next->has_value() ? "retried" : "abandoned")).Increment();
  if (!delivered) {
    LogWarn("alert webhook delivery failed", {{"rule_id", job.rule_id},
                                              {"delivery_id", job.id},
                                              {"attempt", job.attempt},
                                              {"error", error}});
  }
  return true;
}

}  // namespace calleval::calls

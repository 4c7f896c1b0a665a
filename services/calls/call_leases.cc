// The queues of the calls store: recording downloads, analysis and transcription leases, and
// the refunds a settled call is owed. The records themselves are in calls_store.cc.
#include "services/calls/calls_store.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/lease_heartbeat.h"
#include "common/pagination.h"
#include "common/standard_metrics.h"
#include "common/status_macros.h"
#include "services/calls/call_rules.h"
#include "services/calls/call_waveforms.h"
#include "services/calls/query_rows.h"
#include "services/calls/queue_claims.h"

#include "services/calls/call_rows.h"

namespace calleval::calls {
namespace {

// The workspace and planned metrics of a call holding `token` (else kFailedPrecondition).
struct LeasedCall {
  int64_t workspace_id;
  std::vector<int64_t> planned;
  std::vector<int64_t> costs;  // parallel to `planned`
};
absl::StatusOr<LeasedCall> CheckLease(db::Connection& c, int64_t call_id, absl::string_view token) {
  ASSIGN_OR_RETURN(auto stmt,
                   c.Prepare(absl::StrCat("SELECT workspace_id, analysis_token FROM calls WHERE "
                                          "id = ? AND analysis_status IN ('processing', "
                                          "'computed')",
                                          c.ForUpdate())));
  stmt.Bind(1, call_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row || stmt.IsNull(1) || stmt.Text(1) != token) {
    return absl::FailedPreconditionError(
        absl::StrCat("the analysis lease of call ", call_id, " is no longer held"));
  }
  LeasedCall leased{stmt.Int64(0), {}, {}};
  ASSIGN_OR_RETURN(std::vector<PlannedMetric> plan, ReadPlan(c, call_id));
  for (const PlannedMetric& m : plan) {
    leased.planned.push_back(m.metric_id);
    leased.costs.push_back(m.credit_cost);
  }
  return leased;
}

// Marks a call that settled with planned metrics it did not use (cost more than credits_used)
// as owed their refund: in the settling transaction, so that no crash after it commits can lose
// the refund; ApplyOwedRefunds gives them back through accounts and clears the mark. A metric
// that was never charged (the claim crashed before its reservation) is refunded nothing.
absl::Status MarkRefundsOwed(db::Connection& c, int64_t call_id) {
  ASSIGN_OR_RETURN(auto mark, c.Prepare("UPDATE calls SET refunds_owed = 1 WHERE id = ? AND "
                                        "EXISTS (SELECT 1 FROM call_metrics m WHERE m.call_id = "
                                        "? AND m.plan_order IS NOT NULL AND m.credits_used < "
                                        "m.credit_cost)"));
  mark.Bind(1, call_id).Bind(2, call_id);
  return mark.Run();
}

// A call whose analysis ended failed or skipped is not transcribed (or no longer): a pending
// or running transcription ends failed with `why`, and a running one's report is refused.
absl::Status EndTranscription(db::Connection& c, int64_t call_id, absl::string_view why) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("UPDATE calls SET transcription_status = 'failed', "
                                        "transcription_error = ?, transcription_token = NULL, "
                                        "transcription_lease_until = NULL WHERE id = ? AND "
                                        "transcription_status IN ('pending', 'processing')"));
  stmt.Bind(1, why).Bind(2, call_id);
  return stmt.Run();
}

// The call holding transcription lease `token` (else kFailedPrecondition).
absl::Status CheckTranscriptionLease(db::Connection& c, int64_t call_id,
                                     absl::string_view token) {
  ASSIGN_OR_RETURN(auto stmt,
                   c.Prepare(absl::StrCat("SELECT transcription_token FROM calls WHERE id = ? AND "
                                          "transcription_status = 'processing'",
                                          c.ForUpdate())));
  stmt.Bind(1, call_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row || stmt.IsNull(0) || stmt.Text(0) != token) {
    return absl::FailedPreconditionError(
        absl::StrCat("the transcription lease of call ", call_id, " is no longer held"));
  }
  return absl::OkStatus();
}

// Claims from the queues run READ COMMITTED and take their call with FOR UPDATE SKIP LOCKED
// (database.h), so that workers claiming at once take different calls instead of conflicting
// over the first. Everything else a claim reads to decide what it writes is in the locked row
// or in rows only the holder of that lock writes (the call's call_metrics); credits are
// reserved by accounts, outside the claim (AccountsStore::Reserve locks the workspace).
constexpr db::WriteOptions kClaim{db::Isolation::kReadCommitted};

// The next call of a queue (queue_claims.h): a lease that expired, else the oldest call ready.
// The statement stands on the call's row, which PostgreSQL has locked; a call another worker is
// claiming is passed over (SKIP LOCKED).
absl::StatusOr<std::optional<db::Statement>> NextInQueue(db::Connection& c, absl::string_view queue,
                                                         absl::string_view columns,
                                                         absl::string_view leased,
                                                         absl::string_view ready, int64_t now) {
  for (bool expired_lease : {true, false}) {
    ASSIGN_OR_RETURN(auto next, c.Prepare(absl::StrCat(columns, expired_lease ? leased : ready,
                                                       c.ForUpdateSkipLocked())));
    if (expired_lease) next.Bind(1, now);
    ASSIGN_OR_RETURN(bool found, next.Step());
    if (found) {
      if (expired_lease) CountLeaseTakeover(queue);
      return std::optional<db::Statement>(std::move(next));
    }
  }
  return std::optional<db::Statement>();
}

// "SELECT COUNT(*) FROM calls WHERE ..." from a claim's ready lookup: the same predicate,
// without its columns, order and limit.
std::string CountOf(absl::string_view ready_where) {
  ready_where = ready_where.substr(0, ready_where.find(" ORDER BY"));
  return absl::StrCat("SELECT COUNT(*) FROM calls ", ready_where);
}

}  // namespace

// What LeaseNext found: a lease to hand out (`job`), or a first lease that must reserve its
// credits before it is handed out (`reserve`), and the calls it ended failed on the way.
struct CallsStore::Claim {
  std::optional<AnalysisJob> job;
  struct Reservation {
    int64_t call_id = 0;
    int64_t workspace_id = 0;
    std::string token;
    std::vector<Credits::Charge> charges;
  };
  std::optional<Reservation> reserve;
  std::vector<int64_t> refunds_owed;
};

absl::StatusOr<std::optional<RecordingJob>> CallsStore::ClaimRecordingJob(
    absl::Duration lease, absl::string_view holder) {
  const int64_t now = NowUnixSeconds();
  const std::string token = LeaseToken(holder);
  return db::WriteResult<std::optional<RecordingJob>>(
      *db_, kClaim, [&](db::Connection& c) -> absl::StatusOr<std::optional<RecordingJob>> {
        // An expired lease first, then the oldest recording no one holds.
        for (bool expired_lease : {true, false}) {
          ASSIGN_OR_RETURN(
              auto claim,
              c.Prepare(absl::StrCat(
                  "UPDATE calls SET recording_lease_until = ?, "
                  "recording_token = ?, recording_attempts = "
                  "recording_attempts + 1 WHERE id = (",
                  expired_lease ? queue_claims::kRecordingLeased : queue_claims::kRecordingReady,
                  c.ForUpdateSkipLocked(),
                  ") RETURNING id, recording_url, recording_attempts, created_at")));
          claim.Bind(1, now + absl::ToInt64Seconds(lease)).Bind(2, token);
          if (expired_lease) claim.Bind(3, now);
          ASSIGN_OR_RETURN(bool row, claim.Step());
          if (!row) continue;
          if (expired_lease) CountLeaseTakeover("downloads");
          RecordingJob job{claim.Int64(0), claim.Text(1), static_cast<int>(claim.Int64(2)),
                           token};
          if (job.attempts == 1) ObserveQueueWait("downloads", claim.Text(3));
          // Drain the statement so the UPDATE completes before the transaction commits.
          ASSIGN_OR_RETURN(bool more, claim.Step());
          (void)more;
          return std::optional<RecordingJob>(job);
        }
        return std::optional<RecordingJob>();
      });
}

absl::Status CallsStore::CompleteRecording(int64_t call_id, absl::string_view content_type,
                                           int64_t bytes) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto stmt,
                     c.Prepare("UPDATE calls SET recording_state = 'stored', "
                               "recording_lease_until = NULL, recording_token = NULL, "
                               "recording_content_type = ?, "
                               "recording_bytes = ?, updated_at = ? WHERE id = ? AND "
                               "recording_state = 'pending'"));
    stmt.Bind(1, content_type).Bind(2, bytes).Bind(3, NowTimestamp()).Bind(4, call_id);
    RETURN_IF_ERROR(stmt.Run());
    if (c.Changes() == 0) return NotFoundError(absl::StrCat("pending recording of call ", call_id));
    return absl::OkStatus();
  });
}

absl::Status CallsStore::ReleaseRecording(int64_t call_id) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("UPDATE calls SET recording_lease_until = NULL, "
                                          "recording_token = NULL, recording_attempts = "
                                          "CASE WHEN recording_attempts > 0 THEN "
                                          "recording_attempts - 1 ELSE 0 END WHERE id = ? AND "
                                          "recording_state = 'pending'"));
    stmt.Bind(1, call_id);
    return stmt.Run();
  });
}

absl::Status CallsStore::RetryRecording(int64_t call_id, absl::Duration delay) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("UPDATE calls SET recording_lease_until = ?, "
                                          "recording_token = NULL WHERE id = ? AND "
                                          "recording_state = 'pending'"));
    stmt.Bind(1, NowUnixSeconds() + absl::ToInt64Seconds(delay)).Bind(2, call_id);
    return stmt.Run();
  });
}

absl::Status CallsStore::FailRecording(int64_t call_id, absl::string_view message) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(
        auto stmt,
        c.Prepare("UPDATE calls SET recording_state = 'failed', recording_lease_until = NULL, "
                  "recording_token = NULL, analysis_status = 'failed', transcription_status = CASE WHEN "
                  "transcription_status = 'completed' THEN 'completed' ELSE 'failed' END, "
                  "failure_reason = 'download_failed', failure_message = ?, updated_at = ? "
                  "WHERE id = ? AND recording_state = 'pending'"));
    stmt.Bind(1, message).Bind(2, NowTimestamp()).Bind(3, call_id);
    RETURN_IF_ERROR(stmt.Run());
    if (c.Changes() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(SettlePendingMetrics(c, call_id, "failed"));
    return ApplyToAgentTotals(c, call_id, +1);
  });
}

absl::StatusOr<CallsStore::QueueDepths> CallsStore::CountQueued() {
  return db::ReadResult<QueueDepths>(*db_, [](db::Connection& c) -> absl::StatusOr<QueueDepths> {
    QueueDepths depths;
    const std::pair<absl::string_view, int64_t*> queues[] = {
        {queue_claims::kRecordingReady.substr(queue_claims::kRecordingReady.find("WHERE")),
         &depths.downloads},
        {queue_claims::kTranscriptionReady, &depths.transcription},
        {queue_claims::kAnalysisReady, &depths.analysis}};
    for (const auto& [ready, depth] : queues) {
      ASSIGN_OR_RETURN(auto count, c.Prepare(CountOf(ready)));
      ASSIGN_OR_RETURN(bool row, count.Step());
      *depth = row ? count.Int64(0) : 0;
    }
    return depths;
  });
}

absl::StatusOr<std::optional<AnalysisJob>> CallsStore::LeaseAnalysis(absl::Duration lease,
                                                                     int max_attempts,
                                                                     absl::string_view holder) {
  MaybeSweepOwedRefunds();
  std::optional<AnalysisJob> job;
  while (!job) {
    ASSIGN_OR_RETURN(Claim claim, LeaseNext(lease, max_attempts, holder));
    for (int64_t id : claim.refunds_owed) {
      // Left owed on failure: the next sweep applies it.
      ApplyOwedRefundsOf(id).IgnoreError();
    }
    if (claim.job) {
      job = std::move(claim.job);
      break;
    }
    if (!claim.reserve) return std::nullopt;
    // The reservation runs between the claim and the lease, outside both transactions: the
    // ledger is accounts'. A retry after a crash here finds the charges made and adds none.
    const Claim::Reservation& r = *claim.reserve;
    absl::StatusOr<Credits::Reservation> reserved =
        credits_->Reserve(r.workspace_id, r.call_id, r.charges);
    if (!reserved.ok()) {
      // Accounts cannot answer now: the claim is given back untried and the worker asks again.
      absl::Status give_back = WriteCall([&](db::Connection& c) -> absl::Status {
        ASSIGN_OR_RETURN(auto update,
                         c.Prepare("UPDATE calls SET analysis_token = NULL, analysis_lease_until "
                                   "= 0, analysis_attempts = CASE WHEN analysis_attempts > 0 "
                                   "THEN analysis_attempts - 1 ELSE 0 END WHERE id = ? AND "
                                   "analysis_token = ? AND analysis_status = 'pending'"));
        update.Bind(1, r.call_id).Bind(2, r.token);
        return update.Run();
      });
      (void)give_back;  // if that fails too, the claim expires on its own
      return reserved.status();
    }
    if (!reserved->reserved) {
      // Nothing was charged: the call ends skipped, if the claim is still this one's.
      RETURN_IF_ERROR(WriteCall([&](db::Connection& c) -> absl::Status {
        ASSIGN_OR_RETURN(auto end,
                         c.Prepare("UPDATE calls SET analysis_status = 'skipped', "
                                   "failure_reason = 'insufficient_credits', failure_message = "
                                   "?, analysis_token = NULL, analysis_lease_until = NULL, "
                                   "updated_at = ? WHERE id = ? AND analysis_token = ? AND "
                                   "analysis_status = 'pending'"));
        end.Bind(1, absl::StrCat("scoring this call needs ", reserved->cost,
                                 " credits; the workspace has ", reserved->balance));
        end.Bind(2, NowTimestamp()).Bind(3, r.call_id).Bind(4, r.token);
        RETURN_IF_ERROR(end.Run());
        if (c.Changes() == 0) return absl::OkStatus();
        RETURN_IF_ERROR(SettlePendingMetrics(c, r.call_id, "skipped"));
        RETURN_IF_ERROR(ApplyToAgentTotals(c, r.call_id, +1));
        return EndTranscription(c, r.call_id, "the call's analysis ended skipped");
      }));
      continue;
    }
    ASSIGN_OR_RETURN(job, StartReservedLease(r.call_id, r.token));
  }
  // Outside the write transaction: the definitions and the agent come from other stores.
  const int64_t workspace_id = job->call.client_id();
  std::vector<int64_t> custom_ids;
  for (int64_t id : job->planned_metric_ids) {
    if (FindStandardMetric(id) == nullptr) custom_ids.push_back(id);
  }
  if (!custom_ids.empty() && options_.definitions) {
    ASSIGN_OR_RETURN(job->custom_metrics, options_.definitions(workspace_id, custom_ids));
  }
  job->agent.set_id(job->call.agent_id());
  absl::StatusOr<AgentInfo> agent = agents_(workspace_id, job->call.agent_id());
  if (agent.ok()) {
    job->agent.set_name(agent->name);
    job->agent.set_agent_source(agent->agent_source);
  }
  return job;
}

absl::StatusOr<CallsStore::Claim> CallsStore::LeaseNext(absl::Duration lease, int max_attempts,
                                                        absl::string_view holder) {
  const int64_t now = NowUnixSeconds();
  return db::WriteResult<Claim>(*db_, kClaim, [&](db::Connection& c) -> absl::StatusOr<Claim> {
    Claim claim;  // built afresh: the transaction may run again
    // Calls that cannot be handed out (out of attempts) are settled here and the next one is
    // tried.
    while (true) {
      // An expired lease first (a pending call under a lease is being reserved for; its claim
      // expires like a lease), then the oldest call ready.
      ASSIGN_OR_RETURN(
          auto next, NextInQueue(c, "analysis", queue_claims::kAnalysisColumns,
                                 queue_claims::kAnalysisLeased, queue_claims::kAnalysisReady, now));
      if (!next.has_value()) return claim;
      const int64_t id = next->Int64(0);
      const int64_t workspace_id = next->Int64(1);
      const bool first_lease = next->Text(2) == "pending";
      const int attempts = static_cast<int>(next->Int64(3));
      if (next->Int64(4) == 0) {
        // Stored before the queryable rows and not filled in yet (the start-up backfill runs
        // beside the workers): its plan is read from those rows.
        RETURN_IF_ERROR(BackfillCalls(c, id, 1).status());
      }
      ASSIGN_OR_RETURN(std::vector<PlannedMetric> plan, ReadPlan(c, id));

      if (attempts >= max_attempts) {
        ASSIGN_OR_RETURN(auto end, c.Prepare("UPDATE calls SET analysis_status = 'failed', "
                                             "failure_reason = 'analysis_failed', "
                                             "failure_message = ?, analysis_token = NULL, "
                                             "analysis_lease_until = NULL, updated_at = ? "
                                             "WHERE id = ?"));
        end.Bind(1, absl::StrCat("the analysis did not finish after ", attempts, " attempts"));
        end.Bind(2, NowTimestamp()).Bind(3, id);
        RETURN_IF_ERROR(end.Run());
        RETURN_IF_ERROR(SettlePendingMetrics(c, id, "failed"));
        RETURN_IF_ERROR(MarkRefundsOwed(c, id));
        RETURN_IF_ERROR(ApplyToAgentTotals(c, id, +1));
        RETURN_IF_ERROR(EndTranscription(c, id, "the call's analysis ended failed"));
        claim.refunds_owed.push_back(id);
        continue;
      }
      const std::string token = LeaseToken(holder);
      if (first_lease) {
        // Claimed for the reservation: still pending (so not transcribed), under a token.
        ASSIGN_OR_RETURN(auto claim_stmt,
                         c.Prepare("UPDATE calls SET analysis_token = ?, analysis_lease_until = "
                                   "?, analysis_attempts = analysis_attempts + 1, updated_at = "
                                   "? WHERE id = ?"));
        claim_stmt.Bind(1, token).Bind(2, now + absl::ToInt64Seconds(lease));
        claim_stmt.Bind(3, NowTimestamp()).Bind(4, id);
        RETURN_IF_ERROR(claim_stmt.Run());
        Claim::Reservation& r = claim.reserve.emplace();
        r.call_id = id;
        r.workspace_id = workspace_id;
        r.token = token;
        for (const PlannedMetric& m : plan) r.charges.push_back({m.metric_id, m.credit_cost});
        return claim;
      }
      ASSIGN_OR_RETURN(auto lease_stmt,
                       c.Prepare("UPDATE calls SET analysis_token = ?, analysis_lease_until = ?, "
                                 "analysis_attempts = analysis_attempts + 1, updated_at = ? "
                                 "WHERE id = ?"));
      lease_stmt.Bind(1, token).Bind(2, now + absl::ToInt64Seconds(lease));
      lease_stmt.Bind(3, NowTimestamp()).Bind(4, id);
      RETURN_IF_ERROR(lease_stmt.Run());
      std::vector<int64_t> planned;
      for (const PlannedMetric& m : plan) planned.push_back(m.metric_id);
      ASSIGN_OR_RETURN(claim.job, ReadJob(c, id, token, attempts + 1, std::move(planned)));
      return claim;
    }
  });
}

absl::StatusOr<std::optional<AnalysisJob>> CallsStore::StartReservedLease(int64_t call_id,
                                                                          absl::string_view token) {
  return db::WriteResult<std::optional<AnalysisJob>>(
      *db_, kOneCall, [&](db::Connection& c) -> absl::StatusOr<std::optional<AnalysisJob>> {
        ASSIGN_OR_RETURN(auto start,
                         c.Prepare("UPDATE calls SET analysis_status = 'processing', updated_at "
                                   "= ? WHERE id = ? AND analysis_token = ? AND analysis_status "
                                   "= 'pending' RETURNING analysis_attempts"));
        start.Bind(1, NowTimestamp()).Bind(2, call_id).Bind(3, token);
        ASSIGN_OR_RETURN(bool held, start.Step());
        // The claim expired during the reservation and another worker took the call.
        if (!held) return std::nullopt;
        const int attempts = static_cast<int>(start.Int64(0));
        ASSIGN_OR_RETURN(bool more, start.Step());  // drain: the UPDATE completes
        (void)more;
        ASSIGN_OR_RETURN(std::vector<PlannedMetric> plan, ReadPlan(c, call_id));
        std::vector<int64_t> planned;
        for (const PlannedMetric& m : plan) planned.push_back(m.metric_id);
        ASSIGN_OR_RETURN(AnalysisJob job,
                         ReadJob(c, call_id, std::string(token), attempts, std::move(planned)));
        return std::optional<AnalysisJob>(std::move(job));
      });
}

absl::StatusOr<AnalysisJob> CallsStore::ReadJob(db::Connection& c, int64_t id, std::string token,
                                                int attempts, std::vector<int64_t> planned) {
  AnalysisJob job;
  job.call_id = id;
  job.token = std::move(token);
  job.attempts = attempts;
  job.planned_metric_ids = std::move(planned);
  // The record as a code judge sees it; the job carries its lists separately.
  ASSIGN_OR_RETURN(job.call, ReadCall(c, id, nullptr));
  job.observation_type = job.call.observation_type();
  job.transcript.assign(std::make_move_iterator(job.call.mutable_transcript()->begin()),
                        std::make_move_iterator(job.call.mutable_transcript()->end()));
  job.call.clear_transcript();
  job.call.clear_standard_metrics();
  job.call.clear_metric_results();
  job.metadata = job.call.metadata();
  ASSIGN_OR_RETURN(auto details, c.Prepare("SELECT recording_state, silence_threshold_ms, "
                                           "transcription_error, generated_transcript, "
                                           "audio_results, COALESCE(recording_key, CAST(id AS "
                                           "TEXT)) FROM calls WHERE id = ?"));
  details.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, details.Step());
  if (!row) return InternalError("leased call vanished");
  if (!details.IsNull(0) && details.Text(0) == "stored") job.recording_key = details.Text(5);
  if (!details.IsNull(1)) job.silence_threshold_ms = static_cast<int>(details.Int64(1));
  job.transcription_status = job.call.transcription_status();
  job.transcription_error = details.OptionalText(2).value_or("");
  if (!details.IsNull(3)) {
    v1::StoredTranscript generated;
    generated.ParseFromString(details.Text(3));
    job.generated_transcript.assign(generated.turns().begin(), generated.turns().end());
  }
  job.audio_stage_done = job.call.analysis_status() == "computed";
  if (job.audio_stage_done && !details.IsNull(4)) {
    v1::StoredStandardMetrics audio;
    audio.ParseFromString(details.Text(4));
    job.audio_results.assign(audio.items().begin(), audio.items().end());
  }
  return job;
}

absl::Status CallsStore::ApplyOwedRefundsOf(int64_t call_id) {
  struct Owed {
    int64_t workspace_id = 0;
    std::vector<int64_t> metric_ids;
  };
  ASSIGN_OR_RETURN(std::optional<Owed> owed,
                   db::ReadResult<std::optional<Owed>>(
                       *db_, [&](db::Connection& c) -> absl::StatusOr<std::optional<Owed>> {
                         ASSIGN_OR_RETURN(auto call,
                                          c.Prepare("SELECT workspace_id FROM calls WHERE id = ? "
                                                    "AND refunds_owed = 1"));
                         call.Bind(1, call_id);
                         ASSIGN_OR_RETURN(bool row, call.Step());
                         if (!row) return std::nullopt;
                         Owed out{call.Int64(0), {}};
                         ASSIGN_OR_RETURN(out.metric_ids, UnusedPlannedMetrics(c, call_id));
                         return out;
                       }));
  if (!owed) return absl::OkStatus();
  if (!owed->metric_ids.empty()) {
    RETURN_IF_ERROR(credits_->Refund(owed->workspace_id, call_id, owed->metric_ids));
  }
  // A crash before this clears the mark applies the refund again, which gives nothing twice.
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto clear, c.Prepare("UPDATE calls SET refunds_owed = 0 WHERE id = ?"));
    clear.Bind(1, call_id);
    return clear.Run();
  });
}

absl::StatusOr<int> CallsStore::ApplyOwedRefunds() {
  int applied = 0;
  int64_t after = 0;
  while (true) {
    ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                     db::ReadResult<std::vector<int64_t>>(
                         *db_, [&](db::Connection& c) -> absl::StatusOr<std::vector<int64_t>> {
                           ASSIGN_OR_RETURN(auto owed,
                                            c.Prepare("SELECT id FROM calls WHERE refunds_owed = 1 "
                                                      "AND id > ? ORDER BY id LIMIT 100"));
                           owed.Bind(1, after);
                           std::vector<int64_t> out;
                           while (true) {
                             ASSIGN_OR_RETURN(bool row, owed.Step());
                             if (!row) return out;
                             out.push_back(owed.Int64(0));
                           }
                         }));
    if (ids.empty()) return applied;
    for (int64_t id : ids) {
      RETURN_IF_ERROR(ApplyOwedRefundsOf(id));
      ++applied;
    }
    after = ids.back();
  }
}

void CallsStore::MaybeSweepOwedRefunds() {
  const int64_t now = NowUnixSeconds();
  int64_t due = next_refund_sweep_.load();
  if (now < due) return;
  // One caller sweeps; the others go on leasing.
  if (!next_refund_sweep_.compare_exchange_strong(due,
                                                  now + absl::ToInt64Seconds(kOwedRefundsSweep))) {
    return;
  }
  ApplyOwedRefunds().IgnoreError();  // what fails stays owed for the next sweep
}

absl::Status CallsStore::RecordAnalysis(int64_t call_id, absl::string_view token,
                                        std::optional<double> duration_seconds,
                                        const std::vector<v1::StandardMetricResult>& results,
                                        const std::vector<v1::MetricResult>& metric_results,
                                        const v1::CallWaveform* waveform) {
  int64_t workspace_id = 0;
  RETURN_IF_ERROR(WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(LeasedCall leased, CheckLease(c, call_id, token));
    workspace_id = leased.workspace_id;
    v1::StoredStandardMetrics stored;
    v1::StoredMetricResults stored_custom;
    std::vector<int64_t> completed;
    int64_t credits = 0;
    for (size_t i = 0; i < leased.planned.size(); ++i) {
      const int64_t metric = leased.planned[i];
      const int64_t cost = leased.costs[i];
      // A planned metric the analysis did not produce is a failure, never a silent gap.
      constexpr absl::string_view kMissing = "the analysis produced no result for this metric";
      std::string status;
      if (FindStandardMetric(metric) != nullptr) {
        auto it = absl::c_find_if(
            results, [&](const v1::StandardMetricResult& r) { return r.metric_id() == metric; });
        v1::StandardMetricResult* out = stored.add_items();
        if (it == results.end()) {
          *out = NewStandardMetricResult(metric, "failed");
          out->set_error(std::string(kMissing));
        } else {
          *out = *it;
        }
        out->set_credits_used(out->status() == "completed" ? cost : 0);
        status = out->status();
      } else {
        auto it = absl::c_find_if(
            metric_results, [&](const v1::MetricResult& r) { return r.metric_id() == metric; });
        v1::MetricResult* out = stored_custom.add_items();
        if (it == metric_results.end()) {
          out->set_metric_id(metric);
          out->set_status("failed");
          out->set_error(std::string(kMissing));
        } else {
          *out = *it;
        }
        out->set_credits_used(out->status() == "completed" ? cost : 0);
        status = out->status();
      }
      if (status == "completed") {
        credits += cost;
        completed.push_back(metric);
      }
    }
    ASSIGN_OR_RETURN(
        auto update,
        c.Prepare("UPDATE calls SET analysis_status = 'completed', standard_metrics = ?, "
                  "metric_results = ?, credits_used = ?, duration_seconds = "
                  "COALESCE(duration_seconds, ?), analysis_token = NULL, analysis_lease_until = "
                  "NULL, updated_at = ? WHERE id = ?"));
    update.BindBlob(1, stored.SerializeAsString());
    update.BindBlob(2, stored_custom.SerializeAsString()).Bind(3, credits);
    if (duration_seconds) {
      update.Bind(4, static_cast<int64_t>(std::llround(*duration_seconds)));
    } else {
      update.BindNull(4);
    }
    update.Bind(5, NowTimestamp()).Bind(6, call_id);
    RETURN_IF_ERROR(update.Run());
    RETURN_IF_ERROR(WriteCallResults(c, call_id, {stored.items().begin(), stored.items().end()},
                                     {stored_custom.items().begin(), stored_custom.items().end()}));
    if (waveform != nullptr) RETURN_IF_ERROR(WriteWaveform(c, call_id, *waveform));
    RETURN_IF_ERROR(MarkRefundsOwed(c, call_id));
    return ApplyToAgentTotals(c, call_id, +1);
  }));
  // Once the results are committed; left owed on failure, for the next sweep.
  ApplyOwedRefundsOf(call_id).IgnoreError();
  if (options_.on_settled) options_.on_settled(workspace_id);
  return absl::OkStatus();
}

absl::Status CallsStore::FailAnalysis(int64_t call_id, absl::string_view token,
                                      absl::string_view reason, absl::string_view message) {
  int64_t workspace_id = 0;
  RETURN_IF_ERROR(WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(LeasedCall leased, CheckLease(c, call_id, token));
    workspace_id = leased.workspace_id;
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE calls SET analysis_status = 'failed', failure_reason = ?, "
                               "failure_message = ?, analysis_token = NULL, "
                               "analysis_lease_until = NULL, updated_at = ? WHERE id = ?"));
    update.Bind(1, reason).Bind(2, message).Bind(3, NowTimestamp()).Bind(4, call_id);
    RETURN_IF_ERROR(update.Run());
    RETURN_IF_ERROR(SettlePendingMetrics(c, call_id, "failed"));
    RETURN_IF_ERROR(MarkRefundsOwed(c, call_id));
    RETURN_IF_ERROR(ApplyToAgentTotals(c, call_id, +1));
    return EndTranscription(c, call_id, absl::StrCat("the call's analysis failed: ", reason));
  }));
  ApplyOwedRefundsOf(call_id).IgnoreError();  // like RecordAnalysis
  if (options_.on_settled) options_.on_settled(workspace_id);
  return absl::OkStatus();
}

absl::Status CallsStore::ReleaseAnalysis(int64_t call_id, absl::string_view token) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckLease(c, call_id, token).status());
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE calls SET analysis_token = NULL, analysis_lease_until = 0, "
                               "analysis_attempts = CASE WHEN analysis_attempts > 0 THEN "
                               "analysis_attempts - 1 ELSE 0 END WHERE id = ?"));
    update.Bind(1, call_id);
    return update.Run();
  });
}

absl::Status CallsStore::RecordAudioStage(
    int64_t call_id, absl::string_view token, std::optional<double> duration_seconds,
    const std::vector<v1::StandardMetricResult>& planned_results,
    const std::vector<v1::StandardMetricResult>& audio_results, const v1::CallWaveform* waveform) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(LeasedCall leased, CheckLease(c, call_id, token));
    // What the record shows meanwhile: the planned standard metrics in plan order, those of the
    // transcript stage still pending.
    v1::StoredStandardMetrics shown;
    int64_t credits = 0;
    for (size_t i = 0; i < leased.planned.size(); ++i) {
      const int64_t metric = leased.planned[i];
      if (FindStandardMetric(metric) == nullptr) continue;
      auto it = absl::c_find_if(planned_results, [&](const v1::StandardMetricResult& r) {
        return r.metric_id() == metric;
      });
      v1::StandardMetricResult* out = shown.add_items();
      *out = it != planned_results.end() ? *it : NewStandardMetricResult(metric, "pending");
      out->set_credits_used(out->status() == "completed" ? leased.costs[i] : 0);
      credits += out->credits_used();
    }
    v1::StoredStandardMetrics audio;
    for (const auto& r : audio_results) *audio.add_items() = r;
    ASSIGN_OR_RETURN(
        auto update,
        c.Prepare("UPDATE calls SET analysis_status = 'computed', standard_metrics = ?, "
                  "audio_results = ?, credits_used = ?, duration_seconds = "
                  "COALESCE(duration_seconds, ?), analysis_token = NULL, analysis_lease_until = "
                  "NULL, analysis_attempts = 0, updated_at = ? WHERE id = ?"));
    update.BindBlob(1, shown.SerializeAsString()).BindBlob(2, audio.SerializeAsString());
    update.Bind(3, credits);
    if (duration_seconds) {
      update.Bind(4, static_cast<int64_t>(std::llround(*duration_seconds)));
    } else {
      update.BindNull(4);
    }
    update.Bind(5, NowTimestamp()).Bind(6, call_id);
    RETURN_IF_ERROR(update.Run());
    if (waveform != nullptr) RETURN_IF_ERROR(WriteWaveform(c, call_id, *waveform));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::optional<TranscriptionJob>> CallsStore::LeaseTranscription(
    absl::Duration lease, int max_attempts, absl::string_view holder) {
  const int64_t now = NowUnixSeconds();
  return db::WriteResult<std::optional<TranscriptionJob>>(
      *db_, kClaim, [&](db::Connection& c) -> absl::StatusOr<std::optional<TranscriptionJob>> {
        while (true) {
          ASSIGN_OR_RETURN(auto next,
                           NextInQueue(c, "transcription", queue_claims::kTranscriptionColumns,
                                       queue_claims::kTranscriptionLeased,
                                       queue_claims::kTranscriptionReady, now));
          if (!next.has_value()) return std::nullopt;
          const int64_t id = next->Int64(0);
          const int attempts = static_cast<int>(next->Int64(1));
          if (attempts >= max_attempts) {
            ASSIGN_OR_RETURN(auto end,
                             c.Prepare("UPDATE calls SET transcription_status = 'failed', "
                                       "transcription_error = ?, transcription_token = NULL, "
                                       "transcription_lease_until = NULL, updated_at = ? "
                                       "WHERE id = ?"));
            end.Bind(1, absl::StrCat("the transcription did not finish after ", attempts,
                                     " attempts"));
            end.Bind(2, NowTimestamp()).Bind(3, id);
            RETURN_IF_ERROR(end.Run());
            continue;
          }
          if (attempts == 0) ObserveQueueWait("transcription", next->Text(5));
          TranscriptionJob job;
          job.call_id = id;
          job.token = LeaseToken(holder);
          job.attempts = attempts + 1;
          job.recording_key = next->Text(4);
          job.has_provided_transcript = next->Int64(2) != 0;
          if (!next->IsNull(3)) job.metadata.ParseFromString(next->Text(3));
          ASSIGN_OR_RETURN(auto lease_stmt,
                           c.Prepare("UPDATE calls SET transcription_status = 'processing', "
                                     "transcription_token = ?, transcription_lease_until = ?, "
                                     "transcription_attempts = transcription_attempts + 1, "
                                     "updated_at = ? WHERE id = ?"));
          lease_stmt.Bind(1, job.token).Bind(2, now + absl::ToInt64Seconds(lease));
          lease_stmt.Bind(3, NowTimestamp()).Bind(4, id);
          RETURN_IF_ERROR(lease_stmt.Run());
          return std::optional<TranscriptionJob>(std::move(job));
        }
      });
}

absl::Status CallsStore::RecordTranscription(int64_t call_id, absl::string_view token,
                                             const std::vector<v1::Turn>& transcript) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckTranscriptionLease(c, call_id, token));
    v1::StoredTranscript generated;
    for (const auto& turn : transcript) *generated.add_turns() = turn;
    const std::string blob = generated.SerializeAsString();
    ASSIGN_OR_RETURN(
        auto update,
        c.Prepare("UPDATE calls SET transcription_status = 'completed', generated_transcript = ?, "
                  "transcript = CASE WHEN transcript_source IS NULL THEN ? ELSE transcript END, "
                  "transcript_source = COALESCE(transcript_source, 'generated'), "
                  "transcription_error = NULL, transcription_token = NULL, "
                  "transcription_lease_until = NULL, updated_at = ? WHERE id = ?"));
    update.BindBlob(1, blob).BindBlob(2, blob).Bind(3, NowTimestamp()).Bind(4, call_id);
    return update.Run();
  });
}

absl::Status CallsStore::FailTranscription(int64_t call_id, absl::string_view token,
                                           absl::string_view message) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckTranscriptionLease(c, call_id, token));
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE calls SET transcription_status = 'failed', "
                               "transcription_error = ?, transcription_token = NULL, "
                               "transcription_lease_until = NULL, updated_at = ? WHERE id = ?"));
    update.Bind(1, message).Bind(2, NowTimestamp()).Bind(3, call_id);
    return update.Run();
  });
}

absl::Status CallsStore::ReleaseTranscription(int64_t call_id, absl::string_view token) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckTranscriptionLease(c, call_id, token));
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE calls SET transcription_token = NULL, "
                               "transcription_lease_until = 0, transcription_attempts = "
                               "CASE WHEN transcription_attempts > 0 THEN transcription_attempts - "
                               "1 ELSE 0 END WHERE id = ?"));
    update.Bind(1, call_id);
    return update.Run();
  });
}

absl::Status CallsStore::RenewRecordingLease(int64_t call_id, absl::string_view token,
                                             absl::Duration lease) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE calls SET recording_lease_until = ? WHERE id = ? AND "
                               "recording_token = ? AND recording_state = 'pending'"));
    update.Bind(1, NowUnixSeconds() + absl::ToInt64Seconds(lease)).Bind(2, call_id);
    update.Bind(3, token);
    RETURN_IF_ERROR(update.Run());
    if (c.Changes() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the recording download lease of call ", call_id, " is no longer held"));
    }
    return absl::OkStatus();
  });
}

absl::Status CallsStore::RenewAnalysisLease(int64_t call_id, absl::string_view token,
                                            absl::Duration lease) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE calls SET analysis_lease_until = ? WHERE id = ? AND "
                               "analysis_token = ? AND analysis_status IN ('processing', "
                               "'computed')"));
    update.Bind(1, NowUnixSeconds() + absl::ToInt64Seconds(lease)).Bind(2, call_id);
    update.Bind(3, token);
    RETURN_IF_ERROR(update.Run());
    if (c.Changes() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the analysis lease of call ", call_id, " is no longer held"));
    }
    return absl::OkStatus();
  });
}

absl::Status CallsStore::RenewTranscriptionLease(int64_t call_id, absl::string_view token,
                                                 absl::Duration lease) {
  return WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE calls SET transcription_lease_until = ? WHERE id = ? AND "
                               "transcription_token = ? AND transcription_status = "
                               "'processing'"));
    update.Bind(1, NowUnixSeconds() + absl::ToInt64Seconds(lease)).Bind(2, call_id);
    update.Bind(3, token);
    RETURN_IF_ERROR(update.Run());
    if (c.Changes() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the transcription lease of call ", call_id, " is no longer held"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<int> CallsStore::ReleaseLeasesOf(absl::string_view holder) {
  RETURN_IF_ERROR(ValidateLeaseHolder(holder));
  const std::string prefix = LeaseTokenPrefix(holder);
  return db::WriteResult<int>(*db_, [&](db::Connection& c) -> absl::StatusOr<int> {
    // A prefix compared exactly (no LIKE: a holder id may contain '%' or '_').
    ASSIGN_OR_RETURN(auto analysis,
                     c.Prepare("UPDATE calls SET analysis_token = NULL, analysis_lease_until = 0 "
                               "WHERE analysis_lease_until IS NOT NULL AND analysis_status IN "
                               "('pending', 'processing', 'computed') AND analysis_token IS NOT "
                               "NULL AND substr(analysis_token, 1, length(?)) = ?"));
    analysis.Bind(1, prefix).Bind(2, prefix);
    RETURN_IF_ERROR(analysis.Run());
    int released = static_cast<int>(c.Changes());
    ASSIGN_OR_RETURN(auto transcription,
                     c.Prepare("UPDATE calls SET transcription_token = NULL, "
                               "transcription_lease_until = 0 WHERE transcription_token IS NOT "
                               "NULL AND substr(transcription_token, 1, length(?)) = ? AND "
                               "transcription_status = 'processing'"));
    transcription.Bind(1, prefix).Bind(2, prefix);
    RETURN_IF_ERROR(transcription.Run());
    released += static_cast<int>(c.Changes());
    ASSIGN_OR_RETURN(auto recording,
                     c.Prepare("UPDATE calls SET recording_token = NULL, recording_lease_until = "
                               "NULL WHERE recording_state = 'pending' AND recording_lease_until IS "
                               "NOT NULL AND recording_token IS NOT NULL AND "
                               "substr(recording_token, 1, length(?)) = ?"));
    recording.Bind(1, prefix).Bind(2, prefix);
    RETURN_IF_ERROR(recording.Run());
    released += static_cast<int>(c.Changes());
    return released;
  });
}

}  // namespace calleval::calls

#include "services/runs/runs_store.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/lease_heartbeat.h"
#include "common/pagination.h"
#include "common/status_macros.h"

namespace calleval::runs {
namespace {

constexpr absl::string_view kRunColumns =
    "id, scenario_id, agent_id, batch_run_id, channel, status, call_id, passed, started_at, "
    "ended_at, end_reason, error, created_at, agent_version, platform_version";

v1::Run RunFromRow(const db::Statement& s) {
  v1::Run r;
  r.set_id(s.Int64(0));
  r.set_scenario_id(s.Int64(1));
  r.set_agent_id(s.Int64(2));
  if (auto v = s.OptionalInt64(3)) r.set_batch_run_id(*v);
  r.set_channel(s.Text(4));
  r.set_status(s.Text(5));
  if (auto v = s.OptionalInt64(6)) r.set_call_id(*v);
  if (auto v = s.OptionalInt64(7)) r.set_passed(*v != 0);
  if (auto v = s.OptionalText(8)) r.set_started_at(*v);
  if (auto v = s.OptionalText(9)) r.set_ended_at(*v);
  if (auto v = s.OptionalText(10)) r.set_end_reason(*v);
  if (auto v = s.OptionalText(11)) r.set_error(*v);
  r.set_created_at(s.Text(12));
  if (auto v = s.OptionalText(13)) r.set_version(*v);
  if (auto v = s.OptionalText(14)) r.set_platform_version(*v);
  return r;
}

absl::StatusOr<v1::Run> ReadRun(db::Connection& c, int64_t workspace_id, int64_t id) {
  static const std::string sql =
      absl::StrCat("SELECT ", kRunColumns, " FROM runs WHERE id = ? AND workspace_id = ?");
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
  stmt.Bind(1, id).Bind(2, workspace_id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return NotFoundError(absl::StrCat("run ", id));
  return RunFromRow(stmt);
}

// The channel a run uses: the one asked for, else the seed's default rule.
absl::StatusOr<std::string> ChannelFor(const std::optional<std::string>& asked, bool has_phone) {
  if (!asked) return std::string(has_phone ? "phone" : "web");
  if (*asked != "phone" && *asked != "web" && *asked != "text") {
    return ValidationError("validation_failed", "channel must be phone, web or text",
                           {{"channel", "must be phone, web or text"}});
  }
  return *asked;
}

absl::StatusOr<int64_t> InsertRun(db::Connection& c, int64_t workspace_id, int64_t scenario_id,
                                  int64_t agent_id, std::optional<int64_t> batch,
                                  const std::string& channel, const std::string& now) {
  ASSIGN_OR_RETURN(auto insert,
                   c.Prepare("INSERT INTO runs (workspace_id, scenario_id, agent_id, "
                             "batch_run_id, channel, status, created_at, created_time) VALUES "
                             "(?, ?, ?, ?, ?, 'queued', ?, ?) RETURNING id"));
  insert.Bind(1, workspace_id).Bind(2, scenario_id).Bind(3, agent_id);
  if (batch) {
    insert.Bind(4, *batch);
  } else {
    insert.BindNull(4);
  }
  insert.Bind(5, channel).Bind(6, now);
  const std::optional<absl::Time> created = ParseTimestamp(now);
  insert.Bind(7, created ? absl::ToUnixSeconds(*created) : NowUnixSeconds());
  return insert.RunReturningId();
}

absl::Status CheckToken(db::Connection& c, int64_t run_id, absl::string_view token) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT lease_token FROM runs WHERE id = ? AND "
                                        "status = 'in_progress'"));
  stmt.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row || stmt.IsNull(0) || stmt.Text(0) != token) {
    return absl::FailedPreconditionError(
        absl::StrCat("the lease of run ", run_id, " is no longer held"));
  }
  return absl::OkStatus();
}

// Whether batch `batch_id` may start one more run. Called with the batch's row locked, so
// that claims in one batch take turns: under READ COMMITTED the count in a claim's SELECT may
// miss a run another worker is claiming in the same batch at that moment; this count, a
// statement after the lock, sees that claim's commit.
absl::StatusOr<bool> BatchHasRoom(db::Connection& c, int64_t batch_id) {
  ASSIGN_OR_RETURN(
      auto batch,
      c.Prepare(absl::StrCat("SELECT concurrency FROM batch_runs WHERE id = ?", c.ForUpdate())));
  batch.Bind(1, batch_id);
  ASSIGN_OR_RETURN(bool found, batch.Step());
  if (!found) return false;
  const int64_t concurrency = batch.Int64(0);
  ASSIGN_OR_RETURN(auto running, c.Prepare("SELECT COUNT(*) FROM runs WHERE batch_run_id = ? "
                                           "AND status = 'in_progress'"));
  running.Bind(1, batch_id);
  ASSIGN_OR_RETURN(bool counted, running.Step());
  return counted && running.Int64(0) < concurrency;
}

absl::StatusOr<v1::BatchRun> ReadBatch(db::Connection& c, int64_t workspace_id, int64_t id) {
  ASSIGN_OR_RETURN(auto stmt,
                   c.Prepare("SELECT agent_id, channel, concurrency, created_at, repeat_count, "
                             "baseline_batch_run_id FROM batch_runs WHERE id = ? AND "
                             "workspace_id = ?"));
  stmt.Bind(1, id).Bind(2, workspace_id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return NotFoundError(absl::StrCat("batch run ", id));
  v1::BatchRun batch;
  batch.set_id(id);
  batch.set_agent_id(stmt.Int64(0));
  batch.set_channel(stmt.Text(1));
  batch.set_concurrency(static_cast<int32_t>(stmt.Int64(2)));
  batch.set_created_at(stmt.Text(3));
  batch.set_repeat(static_cast<int32_t>(stmt.Int64(4)));
  if (auto v = stmt.OptionalInt64(5)) batch.set_baseline_batch_run_id(*v);
  ASSIGN_OR_RETURN(auto runs, c.Prepare("SELECT id, status, passed FROM runs WHERE "
                                        "batch_run_id = ? ORDER BY id"));
  runs.Bind(1, id);
  v1::BatchRunSummary& summary = *batch.mutable_summary();
  int queued = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool row, runs.Step());
    if (!row) break;
    batch.add_run_ids(runs.Int64(0));
    const std::string status = runs.Text(1);
    summary.set_total(summary.total() + 1);
    if (status == "queued") ++queued;
    if (status == "completed") {
      summary.set_completed(summary.completed() + 1);
      if (!runs.IsNull(2) && runs.Int64(2) != 0) summary.set_passed(summary.passed() + 1);
    }
    if (status == "failed" || status == "cancelled") summary.set_failed(summary.failed() + 1);
  }
  if (summary.completed() > 0) {
    summary.set_pass_rate(static_cast<double>(summary.passed()) / summary.completed());
  }
  const int finished = summary.completed() + summary.failed();
  batch.set_status(finished == summary.total() ? "completed"
                   : queued == summary.total() ? "queued"
                                               : "in_progress");
  return batch;
}

}  // namespace

// The scenario and the agent are the agents service's: asked before the writing transaction,
// not inside it. What that leaves open, and why it is acceptable: the scenario (or its agent)
// deleted between the question and the insert queues a run of a scenario that is gone. The
// worker ends such a run failed ("scenario N is gone", run_worker.cc) before it places a call,
// so nothing is ingested and no credit is charged; the run stays listed as failed, which is
// what a run queued just before the delete becomes too. A phone number added or removed in
// between only picks the default channel the agent had a moment earlier, as it would for a
// run queued a moment earlier.
absl::StatusOr<v1::Run> RunsStore::CreateRun(int64_t workspace_id, int64_t scenario_id,
                                             const std::optional<std::string>& channel) {
  ASSIGN_OR_RETURN(auto found, scenarios_->ScenarioAgents(workspace_id, {scenario_id}));
  auto scenario = found.find(scenario_id);
  if (scenario == found.end()) return NotFoundError(absl::StrCat("scenario ", scenario_id));
  const ScenarioAgent of = scenario->second;
  ASSIGN_OR_RETURN(std::string chosen, ChannelFor(channel, of.agent_has_phone));
  return db::WriteResult<v1::Run>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Run> {
    ASSIGN_OR_RETURN(int64_t id, InsertRun(c, workspace_id, scenario_id, of.agent_id,
                                           std::nullopt, chosen, NowTimestamp()));
    return ReadRun(c, workspace_id, id);
  });
}

absl::StatusOr<v1::Run> RunsStore::GetRun(int64_t workspace_id, int64_t id) {
  return db::ReadResult<v1::Run>(*db_, [&](db::Connection& c) {
    return ReadRun(c, workspace_id, id);
  });
}

absl::StatusOr<v1::ListRunsResponse> RunsStore::ListRuns(int64_t workspace_id,
                                                         const v1::ListRunsRequest& request) {
  const int page = request.has_page() ? request.page() : 1;
  const int per_page = request.has_per_page() ? request.per_page() : kDefaultPerPage;
  RETURN_IF_ERROR(ValidatePagination(page, per_page));
  return db::ReadResult<v1::ListRunsResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListRunsResponse> {
        // Unset filters match everything: "? = 0 OR column = ?".
        const std::string where =
            "workspace_id = ? AND (? = 0 OR scenario_id = ?) AND (? = 0 OR batch_run_id = ?)";
        const int64_t scenario = request.has_scenario_id() ? request.scenario_id() : 0;
        const int64_t batch = request.has_batch_run_id() ? request.batch_run_id() : 0;
        auto bind = [&](db::Statement& s) {
          s.Bind(1, workspace_id).Bind(2, scenario).Bind(3, scenario).Bind(4, batch).Bind(5, batch);
        };
        ASSIGN_OR_RETURN(auto count,
                         c.Prepare(absl::StrCat("SELECT COUNT(*) FROM runs WHERE ", where)));
        bind(count);
        ASSIGN_OR_RETURN(bool counted, count.Step());
        const int64_t total = counted ? count.Int64(0) : 0;
        ASSIGN_OR_RETURN(auto select,
                         c.Prepare(absl::StrCat("SELECT ", kRunColumns, " FROM runs WHERE ",
                                                where, " ORDER BY id DESC LIMIT ? OFFSET ?")));
        bind(select);
        select.Bind(6, static_cast<int64_t>(per_page));
        select.Bind(7, static_cast<int64_t>(page - 1) * per_page);
        v1::ListRunsResponse response;
        while (true) {
          ASSIGN_OR_RETURN(bool row, select.Step());
          if (!row) break;
          *response.add_data() = RunFromRow(select);
        }
        SetPagination(response.mutable_pagination(), page, per_page, total);
        return response;
      });
}

// The agent and the scenarios are asked before the transaction, as in CreateRun (and with
// the same consequence when one is deleted in between: its runs end failed, uncharged).
absl::StatusOr<v1::BatchRun> RunsStore::CreateBatch(int64_t workspace_id,
                                                    const v1::CreateBatchRunRequest& request) {
  if (!request.has_agent_id()) {
    return ValidationError("validation_failed", "agent_id is required",
                           {{"agent_id", "is required"}});
  }
  absl::StatusOr<bool> has_phone = scenarios_->AgentHasPhone(workspace_id, request.agent_id());
  if (absl::IsNotFound(has_phone.status())) {
    return ValidationError("agent_not_found",
                           absl::StrCat("no agent ", request.agent_id(), " in this workspace"),
                           {{"agent_id", "must name an agent of the workspace"}});
  }
  RETURN_IF_ERROR(has_phone.status());
  std::vector<FieldIssue> issues;
  if (request.scenario_ids_size() == 0) {
    issues.push_back({"scenario_ids", "must list at least one scenario"});
  } else if (request.scenario_ids_size() > kMaxBatchScenarios) {
    issues.push_back({"scenario_ids",
                      absl::StrCat("must list at most ", kMaxBatchScenarios, " scenarios")});
  }
  const int checked = std::min(request.scenario_ids_size(), kMaxBatchScenarios);
  ASSIGN_OR_RETURN(auto scenarios,
                   scenarios_->ScenarioAgents(
                       workspace_id, absl::MakeConstSpan(request.scenario_ids().data(), checked)));
  for (int i = 0; i < checked; ++i) {
    auto scenario = scenarios.find(request.scenario_ids(i));
    if (scenario == scenarios.end()) {
      issues.push_back({absl::StrCat("scenario_ids[", i, "]"),
                        absl::StrCat("no scenario ", request.scenario_ids(i),
                                     " in this workspace")});
    } else if (scenario->second.agent_id != request.agent_id()) {
      issues.push_back({absl::StrCat("scenario_ids[", i, "]"),
                        absl::StrCat("scenario ", request.scenario_ids(i), " belongs to agent ",
                                     scenario->second.agent_id)});
    }
  }
  const int concurrency =
      request.has_concurrency() ? request.concurrency() : kDefaultBatchConcurrency;
  if (concurrency < 1 || concurrency > kMaxBatchConcurrency) {
    issues.push_back({"concurrency", absl::StrCat("must be between 1 and ", kMaxBatchConcurrency)});
  }
  const int repeat = request.has_repeat() ? request.repeat() : 1;
  if (repeat < 1 || repeat > kMaxBatchRepeat) {
    issues.push_back({"repeat", absl::StrCat("must be between 1 and ", kMaxBatchRepeat)});
  } else if (static_cast<int64_t>(repeat) * request.scenario_ids_size() > kMaxBatchRuns) {
    issues.push_back({"repeat", absl::StrCat("scenarios times repeat must be at most ",
                                             kMaxBatchRuns, " runs")});
  }
  std::optional<std::string> asked;
  if (request.has_channel()) asked = request.channel();
  absl::StatusOr<std::string> channel = ChannelFor(asked, *has_phone);
  if (!channel.ok()) issues.push_back({"channel", "must be phone, web or text"});
  if (!issues.empty()) {
    return ValidationError("validation_failed", "invalid batch run", std::move(issues));
  }
  if (request.has_baseline_batch_run_id()) {
    // Batch runs are never deleted, so one found here is still there at the insert.
    absl::Status baseline = GetBatch(workspace_id, request.baseline_batch_run_id()).status();
    if (absl::IsNotFound(baseline)) {
      return ValidationError(
          "batch_run_not_found",
          absl::StrCat("no batch run ", request.baseline_batch_run_id(), " in this workspace"),
          {{"baseline_batch_run_id", "must name a batch run of the workspace"}});
    }
    RETURN_IF_ERROR(baseline);
  }
  return db::WriteResult<v1::BatchRun>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::BatchRun> {
    const std::string now = NowTimestamp();
    ASSIGN_OR_RETURN(auto insert,
                     c.Prepare("INSERT INTO batch_runs (workspace_id, agent_id, channel, "
                               "concurrency, created_at, repeat_count, baseline_batch_run_id) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id"));
    insert.Bind(1, workspace_id).Bind(2, request.agent_id()).Bind(3, *channel);
    insert.Bind(4, static_cast<int64_t>(concurrency)).Bind(5, now);
    insert.Bind(6, static_cast<int64_t>(repeat));
    if (request.has_baseline_batch_run_id()) {
      insert.Bind(7, request.baseline_batch_run_id());
    } else {
      insert.BindNull(7);
    }
    ASSIGN_OR_RETURN(const int64_t batch, insert.RunReturningId());
    // Round by round, so the first runs to finish already cover every scenario.
    for (int round = 0; round < repeat; ++round) {
      for (int64_t scenario : request.scenario_ids()) {
        RETURN_IF_ERROR(
            InsertRun(c, workspace_id, scenario, request.agent_id(), batch, *channel, now)
                .status());
      }
    }
    return ReadBatch(c, workspace_id, batch);
  });
}

absl::StatusOr<v1::BatchRun> RunsStore::GetBatch(int64_t workspace_id, int64_t id) {
  return db::ReadResult<v1::BatchRun>(*db_, [&](db::Connection& c) {
    return ReadBatch(c, workspace_id, id);
  });
}

absl::StatusOr<std::vector<v1::Run>> RunsStore::BatchRuns(int64_t workspace_id, int64_t id) {
  return db::ReadResult<std::vector<v1::Run>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::vector<v1::Run>> {
        RETURN_IF_ERROR(ReadBatch(c, workspace_id, id).status());
        static const std::string sql =
            absl::StrCat("SELECT ", kRunColumns,
                         " FROM runs WHERE batch_run_id = ? AND workspace_id = ? ORDER BY id");
        ASSIGN_OR_RETURN(auto select, c.Prepare(sql));
        select.Bind(1, id).Bind(2, workspace_id);
        std::vector<v1::Run> runs;
        while (true) {
          ASSIGN_OR_RETURN(bool row, select.Step());
          if (!row) break;
          runs.push_back(RunFromRow(select));
        }
        return runs;
      });
}

absl::StatusOr<std::optional<RunJob>> RunsStore::Lease(absl::Duration lease, int max_attempts,
                                                       absl::string_view holder) {
  const int64_t now = NowUnixSeconds();
  // READ COMMITTED, the run taken FOR UPDATE SKIP LOCKED: workers claiming at once take
  // different runs instead of conflicting over the first (database.h).
  return db::WriteResult<std::optional<RunJob>>(
      *db_, db::WriteOptions{db::Isolation::kReadCommitted},
      [&](db::Connection& c) -> absl::StatusOr<std::optional<RunJob>> {
        while (true) {
          // A run whose lease expired first (a dead worker's run does not wait behind the
          // queue), then the oldest queued run; a queued run of a batch waits while the batch
          // has `concurrency` runs in progress. Each lookup reads its own index (schema 16) in
          // the order it claims.
          std::optional<db::Statement> found;
          for (bool expired_lease : {true, false}) {
            ASSIGN_OR_RETURN(
                auto next,
                c.Prepare(absl::StrCat(
                    "SELECT r.id, r.workspace_id, r.scenario_id, r.agent_id, r.channel, "
                    "r.call_id, r.attempts, r.status = 'queued', r.batch_run_id, r.created_at "
                    "FROM runs r ",
                    expired_lease
                        ? "WHERE r.status = 'in_progress' AND r.lease_until <= ? "
                          "ORDER BY r.lease_until, r.id LIMIT 1"
                        : "WHERE r.status = 'queued' AND (r.batch_run_id IS NULL OR (SELECT "
                          "COUNT(*) FROM runs o WHERE o.batch_run_id = r.batch_run_id AND "
                          "o.status = 'in_progress') < (SELECT concurrency FROM batch_runs b "
                          "WHERE b.id = r.batch_run_id)) ORDER BY r.id LIMIT 1",
                    c.ForUpdateSkipLocked())));
            if (expired_lease) next.Bind(1, now);
            ASSIGN_OR_RETURN(bool row, next.Step());
            if (row) {
              if (expired_lease) CountLeaseTakeover("runs");
              found.emplace(std::move(next));
              break;
            }
          }
          if (!found.has_value()) return std::nullopt;
          db::Statement& next = *found;
          // A batch's run is checked again with the batch locked. When the batch filled up
          // after this SELECT's snapshot, the next SELECT, a later snapshot, passes its runs by.
          if (next.Int64(7) != 0 && !next.IsNull(8)) {
            ASSIGN_OR_RETURN(bool room, BatchHasRoom(c, next.Int64(8)));
            if (!room) continue;
          }
          RunJob job;
          job.run_id = next.Int64(0);
          job.workspace_id = next.Int64(1);
          job.scenario_id = next.Int64(2);
          job.agent_id = next.Int64(3);
          job.channel = next.Text(4);
          job.call_id = next.OptionalInt64(5);
          const int attempts = static_cast<int>(next.Int64(6));
          if (attempts >= max_attempts) {
            ASSIGN_OR_RETURN(auto end,
                             c.Prepare("UPDATE runs SET status = 'failed', error = ?, "
                                       "ended_at = ?, lease_token = NULL, lease_until = NULL "
                                       "WHERE id = ?"));
            end.Bind(1, absl::StrCat("the run did not finish after ", attempts, " attempts"));
            end.Bind(2, NowTimestamp()).Bind(3, job.run_id);
            RETURN_IF_ERROR(end.Run());
            continue;
          }
          if (attempts == 0) ObserveQueueWait("runs", next.Text(9));
          job.token = LeaseToken(holder);
          job.attempts = attempts + 1;
          ASSIGN_OR_RETURN(auto lease_stmt,
                           c.Prepare("UPDATE runs SET status = 'in_progress', lease_token = ?, "
                                     "lease_until = ?, attempts = attempts + 1, started_at = "
                                     "COALESCE(started_at, ?) WHERE id = ?"));
          lease_stmt.Bind(1, job.token).Bind(2, now + absl::ToInt64Seconds(lease));
          lease_stmt.Bind(3, NowTimestamp()).Bind(4, job.run_id);
          RETURN_IF_ERROR(lease_stmt.Run());
          return std::optional<RunJob>(std::move(job));
        }
      });
}

absl::StatusOr<int64_t> RunsStore::CountQueued() {
  return db::ReadResult<int64_t>(*db_, [](db::Connection& c) -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(auto count, c.Prepare("SELECT COUNT(*) FROM runs WHERE status = 'queued'"));
    ASSIGN_OR_RETURN(bool row, count.Step());
    return row ? count.Int64(0) : int64_t{0};
  });
}

absl::Status RunsStore::SetCall(int64_t run_id, absl::string_view token, int64_t call_id) {
  return db_->Write([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckToken(c, run_id, token));
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("UPDATE runs SET call_id = ? WHERE id = ?"));
    stmt.Bind(1, call_id).Bind(2, run_id);
    return stmt.Run();
  });
}

absl::Status RunsStore::Renew(int64_t run_id, absl::string_view token, absl::Duration lease) {
  return db_->Write([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckToken(c, run_id, token));
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("UPDATE runs SET lease_until = ? WHERE id = ?"));
    stmt.Bind(1, NowUnixSeconds() + absl::ToInt64Seconds(lease)).Bind(2, run_id);
    return stmt.Run();
  });
}

absl::Status RunsStore::Finish(int64_t run_id, absl::string_view token,
                               const RunOutcome& outcome) {
  return db_->Write([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckToken(c, run_id, token));
    ASSIGN_OR_RETURN(auto stmt,
                     c.Prepare("UPDATE runs SET status = ?, passed = ?, end_reason = ?, "
                               "error = ?, ended_at = ?, lease_token = NULL, lease_until = NULL, "
                               "agent_version = ?, platform_version = ? WHERE id = ?"));
    stmt.Bind(1, outcome.status);
    if (outcome.passed) {
      stmt.Bind(2, static_cast<int64_t>(*outcome.passed ? 1 : 0));
    } else {
      stmt.BindNull(2);
    }
    if (outcome.end_reason.empty()) {
      stmt.BindNull(3);
    } else {
      stmt.Bind(3, outcome.end_reason);
    }
    if (outcome.error.empty()) {
      stmt.BindNull(4);
    } else {
      stmt.Bind(4, outcome.error);
    }
    stmt.Bind(5, NowTimestamp())
        .Bind(6, outcome.agent_version)
        .Bind(7, outcome.platform_version)
        .Bind(8, run_id);
    return stmt.Run();
  });
}

absl::Status RunsStore::Release(int64_t run_id, absl::string_view token) {
  return db_->Write([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckToken(c, run_id, token));
    ASSIGN_OR_RETURN(auto stmt,
                     c.Prepare("UPDATE runs SET lease_token = NULL, lease_until = 0, attempts = "
                               "CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END WHERE id = ?"));
    stmt.Bind(1, run_id);
    return stmt.Run();
  });
}

absl::StatusOr<int> RunsStore::ReleaseLeasesOf(absl::string_view holder) {
  RETURN_IF_ERROR(ValidateLeaseHolder(holder));
  const std::string prefix = LeaseTokenPrefix(holder);
  return db::WriteResult<int>(*db_, [&](db::Connection& c) -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(auto stmt,
                     c.Prepare("UPDATE runs SET lease_token = NULL, lease_until = 0 WHERE "
                               "status = 'in_progress' AND lease_token IS NOT NULL AND "
                               "substr(lease_token, 1, length(?)) = ?"));
    stmt.Bind(1, prefix).Bind(2, prefix);
    RETURN_IF_ERROR(stmt.Run());
    return static_cast<int>(c.Changes());
  });
}

}  // namespace calleval::runs

namespace calleval::runs {

v1::CountRunsRequest ToProto(const RunCountQuery& query) {
  v1::CountRunsRequest request;
  request.set_workspace_id(query.workspace_id);
  if (query.agent_id) request.set_agent_id(*query.agent_id);
  if (query.scenario_id) request.set_scenario_id(*query.scenario_id);
  request.set_from(query.from);
  request.set_to(query.to);
  request.set_width(query.width);
  return request;
}

RunCountQuery FromProto(const v1::CountRunsRequest& request) {
  RunCountQuery query;
  query.workspace_id = request.workspace_id();
  if (request.has_agent_id()) query.agent_id = request.agent_id();
  if (request.has_scenario_id()) query.scenario_id = request.scenario_id();
  query.from = request.from();
  query.to = request.to();
  query.width = request.width();
  return query;
}

v1::RunCountBuckets ToProto(const std::map<int64_t, RunCounts>& counts) {
  v1::RunCountBuckets buckets;
  for (const auto& [index, c] : counts) {
    v1::RunCountBuckets::Bucket* b = buckets.add_buckets();
    b->set_index(index);
    b->set_queued(c.queued);
    b->set_in_progress(c.in_progress);
    b->set_passed(c.passed);
    b->set_failed(c.failed);
    b->set_errored(c.errored);
    b->set_cancelled(c.cancelled);
  }
  return buckets;
}

std::map<int64_t, RunCounts> FromProto(const v1::RunCountBuckets& buckets) {
  std::map<int64_t, RunCounts> counts;
  for (const v1::RunCountBuckets::Bucket& b : buckets.buckets()) {
    counts[b.index()] = RunCounts{b.queued(), b.in_progress(), b.passed(),
                                  b.failed(), b.errored(),     b.cancelled()};
  }
  return counts;
}

absl::StatusOr<std::map<int64_t, RunCounts>> RunsStore::CountRuns(const RunCountQuery& query) {
  return db::ReadResult<std::map<int64_t, RunCounts>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::map<int64_t, RunCounts>> {
        ASSIGN_OR_RETURN(
            auto count,
            c.Prepare(absl::StrCat(
                "SELECT (created_time - ?1) / ?2, status, passed, COUNT(*) FROM runs WHERE "
                "workspace_id = ?3 AND ",
                query.scenario_id.has_value() ? "scenario_id" : "agent_id",
                " = ?4 AND created_time >= ?1 AND created_time < ?5 GROUP BY 1, 2, 3")));
        count.Bind(1, query.from).Bind(2, query.width).Bind(3, query.workspace_id);
        count.Bind(4, query.scenario_id.value_or(query.agent_id.value_or(0)));
        count.Bind(5, query.to);
        std::map<int64_t, RunCounts> out;
        while (true) {
          ASSIGN_OR_RETURN(bool row, count.Step());
          if (!row) break;
          RunCounts& counts = out[count.Int64(0)];
          const std::string status = count.Text(1);
          const int64_t n = count.Int64(3);
          if (status == "queued") {
            counts.queued += n;
          } else if (status == "in_progress") {
            counts.in_progress += n;
          } else if (status == "completed") {
            (count.OptionalInt64(2).value_or(0) != 0 ? counts.passed : counts.failed) += n;
          } else if (status == "failed") {
            counts.errored += n;
          } else if (status == "cancelled") {
            counts.cancelled += n;
          }
        }
        return out;
      });
}

}  // namespace calleval::runs

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
#include "services/calls/query_rows.h"

namespace calleval::calls {
namespace {


constexpr absl::string_view kCallColumns =
    "id, workspace_id, agent_id, call_identifier, observation_type, call_direction, "
    "analysis_status, transcription_status, recording_url, recording_state, duration_seconds, "
    "call_timestamp, call_end_reason, customer_number, tag, label, metadata, transcript, "
    "transcript_source, metric_ids, standard_metrics, metric_results, credits_used, "
    "failure_reason, failure_message, created_at, updated_at";

std::string JoinIds(const std::vector<int64_t>& ids) { return absl::StrJoin(ids, ","); }

// Calls `set` with the column's text unless it is NULL (a template: this runs per column of
// every call read, so no std::function).
template <typename Setter>
void SetOptional(const db::Statement& s, int column, Setter set) {
  if (!s.IsNull(column)) set(s.Text(column));
}

std::vector<int64_t> SplitIds(const std::string& text) {
  std::vector<int64_t> ids;
  for (absl::string_view id : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t value = 0;
    if (absl::SimpleAtoi(id, &value)) ids.push_back(value);
  }
  return ids;
}

v1::Call CallFromRow(const db::Statement& s, const RecordingSigner* signer) {
  v1::Call call;
  call.set_id(s.Int64(0));
  call.set_client_id(s.Int64(1));
  call.set_agent_id(s.Int64(2));
  call.set_call_identifier(s.Text(3));
  call.set_observation_type(s.Text(4));
  call.set_call_direction(s.Text(5));
  call.set_analysis_status(s.Text(6));
  call.set_transcription_status(s.Text(7));
  SetOptional(s, 8, [&](std::string v) { call.set_recording_url(std::move(v)); });
  if (signer != nullptr && !s.IsNull(9) && s.Text(9) == "stored") {
    call.set_presigned_recording_url(signer->Sign(call.id(), absl::Now()));
  }
  if (!s.IsNull(10)) call.set_duration_seconds(s.Int64(10));
  call.set_call_timestamp(s.Text(11));
  SetOptional(s, 12, [&](std::string v) { call.set_call_end_reason(std::move(v)); });
  SetOptional(s, 13, [&](std::string v) { call.set_customer_number(std::move(v)); });
  SetOptional(s, 14, [&](std::string v) { call.set_tag(std::move(v)); });
  SetOptional(s, 15, [&](std::string v) { call.set_label(std::move(v)); });
  call.mutable_metadata()->ParseFromString(s.Text(16));
  if (!s.IsNull(17)) {
    v1::StoredTranscript transcript;
    transcript.ParseFromString(s.Text(17));
    *call.mutable_transcript() = std::move(*transcript.mutable_turns());
  }
  SetOptional(s, 18, [&](std::string v) { call.set_transcript_source(std::move(v)); });
  for (int64_t id : SplitIds(s.Text(19))) call.add_metric_ids(id);
  if (!s.IsNull(20)) {
    v1::StoredStandardMetrics metrics;
    metrics.ParseFromString(s.Text(20));
    *call.mutable_standard_metrics() = std::move(*metrics.mutable_items());
  }
  if (!s.IsNull(21)) {
    v1::StoredMetricResults results;
    results.ParseFromString(s.Text(21));
    *call.mutable_metric_results() = std::move(*results.mutable_items());
  }
  call.set_credits_used(s.Int64(22));
  SetOptional(s, 23, [&](std::string v) { call.set_failure_reason(std::move(v)); });
  SetOptional(s, 24, [&](std::string v) { call.set_failure_message(std::move(v)); });
  call.set_created_at(s.Text(25));
  call.set_updated_at(s.Text(26));
  return call;
}

// The id of the workspace's call named by `key` (docs/api.md §2: digits are tried as the id first).
absl::StatusOr<int64_t> FindCallId(db::Connection& c, int64_t workspace_id, absl::string_view key) {
  int64_t id = 0;
  if (!key.empty() && absl::c_all_of(key, absl::ascii_isdigit) && absl::SimpleAtoi(key, &id)) {
    ASSIGN_OR_RETURN(auto by_id,
                     c.Prepare("SELECT id FROM calls WHERE id = ? AND workspace_id = ?"));
    by_id.Bind(1, id).Bind(2, workspace_id);
    ASSIGN_OR_RETURN(bool found, by_id.Step());
    if (found) return id;
  }
  ASSIGN_OR_RETURN(auto by_identifier, c.Prepare("SELECT id FROM calls WHERE workspace_id = ? "
                                                 "AND call_identifier = ?"));
  by_identifier.Bind(1, workspace_id).Bind(2, key);
  ASSIGN_OR_RETURN(bool found, by_identifier.Step());
  if (!found) return NotFoundError(absl::StrCat("call ", key));
  return by_identifier.Int64(0);
}

absl::StatusOr<v1::Call> ReadCall(db::Connection& c, int64_t id, const RecordingSigner* signer) {
  static const std::string sql = absl::StrCat("SELECT ", kCallColumns, " FROM calls WHERE id = ?");
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
  stmt.Bind(1, id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return NotFoundError(absl::StrCat("call ", id));
  return CallFromRow(stmt, signer);
}

absl::Status ValidatePage(std::optional<int> page, std::optional<int> per_page) {
  return ValidatePagination(page.value_or(1), per_page.value_or(kDefaultPerPage));
}

// The credit cost of each planned metric, in plan order. Calls ingested before costs were
// stored (column NULL) planned only standard metrics, which cost kStandardMetricCost.
std::vector<int64_t> PlannedCosts(const std::vector<int64_t>& planned, const std::string& costs) {
  std::vector<int64_t> out = SplitIds(costs);
  if (out.size() != planned.size()) out.assign(planned.size(), kStandardMetricCost);
  return out;
}

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
// Ingest only inserts: the unique (workspace_id, call_identifier) is what refuses a duplicate,
// so it needs no snapshot of its own. Under SERIALIZABLE, concurrent ingests conflicted on the
// unique index's pages (PostgreSQL locks predicates by page) and most of them ran again.
constexpr db::WriteOptions kIngest{db::Isolation::kReadCommitted};
// The writes of one call's rows (its leases, results, settling, deletion) run READ COMMITTED
// too: each locks the call's row before it reads what it decides on (CheckLease's FOR UPDATE),
// or changes it with one UPDATE whose WHERE decides (PostgreSQL checks the WHERE again on the
// row it locked). Under SERIALIZABLE they conflicted over what every settle shares, the agent's
// hourly totals (agent_hourly_calls), and a call under load lost eight conflicts in a row and
// its analysis failed; under READ COMMITTED those upserts wait for each other's row lock and
// add up.
constexpr db::WriteOptions kOneCall{db::Isolation::kReadCommitted};

// The ingest's INSERT: a duplicate (workspace_id, call_identifier) gives no row back.
constexpr absl::string_view kInsertCall =
    "INSERT INTO calls (workspace_id, agent_id, call_identifier, observation_type, "
    "call_direction, analysis_status, transcription_status, recording_url, recording_state, "
    "duration_seconds, call_timestamp, call_end_reason, customer_number, tag, label, metadata, "
    "transcript, transcript_source, metric_ids, created_at, updated_at, silence_threshold_ms, "
    "call_time, run_id, scenario_id, query_rows) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7, "
    "?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, 1) ON "
    "CONFLICT (workspace_id, call_identifier) DO NOTHING RETURNING id";

// PostgreSQL only: that INSERT and the call's planned metrics (?25 the metric ids, ?26 their
// credit costs, arrays in plan order) in one statement: the rows WritePlannedMetrics writes.
const std::string& InsertCallWithPlan() {
  static const std::string sql = absl::StrCat(
      "WITH new_call AS (", kInsertCall,
      "), plan AS (INSERT INTO call_metrics (call_id, metric_id, credit_cost, status, "
      "plan_order) SELECT new_call.id, p.metric_id, p.credit_cost, 'pending', p.plan_order FROM "
      "new_call, unnest(CAST(?25 AS BIGINT[]), CAST(?26 AS BIGINT[])) WITH ORDINALITY AS "
      "p(metric_id, credit_cost, plan_order) ON CONFLICT (call_id, metric_id) DO NOTHING) "
      "SELECT id FROM new_call");
  return sql;
}

// A PostgreSQL array literal of `ids`: "{1,2,3}".
std::string IdArray(const std::vector<int64_t>& ids) {
  return absl::StrCat("{", absl::StrJoin(ids, ","), "}");
}

// An unknown status or type in a filter is a client mistake, not an empty result.
absl::Status ValidateListFilters(const v1::ListCallsRequest& request) {
  static constexpr absl::string_view kStatuses[] = {"pending",   "processing", "computed",
                                                    "completed", "failed",     "skipped"};
  std::vector<FieldIssue> issues;
  if (request.has_analysis_status() &&
      absl::c_find(kStatuses, request.analysis_status()) == std::end(kStatuses)) {
    issues.push_back({"analysis_status",
                      "must be one of pending, processing, computed, completed, failed, skipped"});
  }
  if (request.has_observation_type() && request.observation_type() != "voice" &&
      request.observation_type() != "text") {
    issues.push_back({"observation_type", "must be one of voice, text"});
  }
  if (issues.empty()) return absl::OkStatus();
  return ValidationError("validation_failed", "invalid filter", std::move(issues));
}

// Writes the queryable rows of up to `batch` calls stored before them (query_rows = 0), or of
// call `only` if it is one of them, from their serialized lists and text columns: the only
// reader of planned_metric_ids and planned_metric_costs. Answers how many it filled in.
absl::StatusOr<int> BackfillCalls(db::Connection& c, std::optional<int64_t> only, int batch) {
  ASSIGN_OR_RETURN(auto missing,
                   c.Prepare(absl::StrCat("SELECT id, analysis_status, planned_metric_ids, "
                                          "planned_metric_costs, standard_metrics, metric_results "
                                          "FROM calls WHERE query_rows = 0",
                                          only ? " AND id = ?" : "", " ORDER BY id LIMIT ?")));
  int next = 1;
  if (only) missing.Bind(next++, *only);
  missing.Bind(next, static_cast<int64_t>(batch));
  struct Old {
    int64_t id;
    std::string status;
    std::vector<int64_t> planned, costs;
    v1::StoredStandardMetrics standard;
    v1::StoredMetricResults custom;
  };
  std::vector<Old> calls;
  while (true) {
    ASSIGN_OR_RETURN(bool row, missing.Step());
    if (!row) break;
    Old& old = calls.emplace_back();
    old.id = missing.Int64(0);
    old.status = missing.Text(1);
    old.planned = SplitIds(missing.Text(2));
    old.costs = PlannedCosts(old.planned, missing.OptionalText(3).value_or(""));
    if (!missing.IsNull(4)) old.standard.ParseFromString(missing.Text(4));
    if (!missing.IsNull(5)) old.custom.ParseFromString(missing.Text(5));
  }
  for (const Old& old : calls) {
    // Marked first: from here on ApplyToAgentTotals counts the call.
    ASSIGN_OR_RETURN(auto mark, c.Prepare("UPDATE calls SET query_rows = 1 WHERE id = ?"));
    mark.Bind(1, old.id);
    RETURN_IF_ERROR(mark.Run());
    RETURN_IF_ERROR(WritePlannedMetrics(c, old.id, old.planned, old.costs));
    if (old.status == "completed") {
      RETURN_IF_ERROR(WriteCallResults(c, old.id,
                                       {old.standard.items().begin(), old.standard.items().end()},
                                       {old.custom.items().begin(), old.custom.items().end()}));
    } else if (IsSettled(old.status)) {
      RETURN_IF_ERROR(SettlePendingMetrics(c, old.id, old.status));
    }
    RETURN_IF_ERROR(ApplyToAgentTotals(c, old.id, +1));
  }
  return static_cast<int>(calls.size());
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

CallsStore::CallsStore(db::Database* db, AgentLookup agents, Options options)
    : db_(db), agents_(std::move(agents)), options_(std::move(options)) {
  credits_ = options_.credits;
  if (credits_ == nullptr) {
    own_accounts_ = std::make_unique<accounts::AccountsStore>(db_);
    own_credits_ = NewStoreCredits(own_accounts_.get());
    credits_ = own_credits_.get();
  }
}

std::string CallsStore::RecordingPath(int64_t call_id) const {
  return absl::StrCat(options_.recordings_dir, "/", call_id);
}

absl::StatusOr<v1::Call> CallsStore::Ingest(int64_t workspace_id,
                                            const v1::IngestCallRequest& request,
                                            const std::string* recorded_wav,
                                            const RunOrigin& origin) {
  const bool recorded = recorded_wav != nullptr;
  RETURN_IF_ERROR(ValidateIngest(request, recorded));
  const std::string observation_type = ObservationTypeOf(request, recorded);
  const bool has_recording = observation_type == "voice";
  if (has_recording && !recorded) {
    absl::Status url = CheckUrlLiteral(request.recording_url(), options_.url_guard);
    if (!url.ok()) {
      // Report the URL guard's reason under the request's field name.
      v1::ErrorInfo info = ErrorInfoOf(url);
      return ValidationError(info.code().empty() ? "url_not_public" : info.code(), url.message(),
                             {{"recording_url", std::string(url.message())}});
    }
  }
  ASSIGN_OR_RETURN(AgentInfo agent, agents_(workspace_id, request.agent_id()));
  std::vector<CustomMetricInfo> custom;
  if (options_.catalog) {
    ASSIGN_OR_RETURN(custom, options_.catalog(workspace_id, request.agent_id()));
  }
  auto find_custom = [&](int64_t id) -> const CustomMetricInfo* {
    auto it = absl::c_find_if(custom, [id](const CustomMetricInfo& m) { return m.id == id; });
    return it == custom.end() ? nullptr : &*it;
  };
  auto disabled = [&](int64_t id) {
    return absl::c_find(agent.disabled_metric_ids, id) != agent.disabled_metric_ids.end();
  };

  const std::vector<int64_t> requested(request.metric_ids().begin(), request.metric_ids().end());
  // A custom metric that does not apply to the agent is "not enabled for the agent" (seed).
  MetricSelection selection = SelectMetrics(
      requested, agent.disabled_metric_ids, has_recording,
      [&](int64_t id) {
        if (FindStandardMetric(id) != nullptr) return true;
        const CustomMetricInfo* m = find_custom(id);
        return m != nullptr && m->applies_to_agent;
      },
      [&](int64_t id) {
        if (const StandardMetricInfo* m = FindStandardMetric(id)) return m->requires_audio;
        const CustomMetricInfo* m = find_custom(id);
        return m != nullptr && m->requires_audio;
      });

  // What the analysis will score: the usable requested ids, else every metric enabled for the
  // agent (standard ones it has not disabled, custom ones that apply to it and that it has not
  // disabled); text calls skip the audio-based ones.
  std::vector<int64_t> planned;
  if (!selection.metric_ids.empty()) {
    planned = selection.metric_ids;
  } else {
    for (const StandardMetricInfo& m : kStandardMetrics) {
      if ((!has_recording && m.requires_audio) || disabled(m.id)) continue;
      planned.push_back(m.id);
    }
    for (const CustomMetricInfo& m : custom) {
      if (!m.applies_to_agent || disabled(m.id) || (!has_recording && m.requires_audio)) continue;
      planned.push_back(m.id);
    }
  }
  // A voice call is transcribed when the transcript is what it lacks, or when
  // transcription_accuracy compares the provided one with the recording; otherwise there is
  // nothing to transcribe and its transcript (the provided one) is complete at ingest.
  const bool transcribe =
      has_recording && (request.transcript_size() == 0 ||
                        absl::c_find(planned, kTranscriptionAccuracyMetricId) != planned.end());
  const char* const transcription_status = transcribe ? "pending" : "completed";
  std::vector<int64_t> planned_costs;
  planned_costs.reserve(planned.size());
  for (int64_t id : planned) {
    const CustomMetricInfo* m = find_custom(id);
    planned_costs.push_back(m != nullptr ? m->credit_cost : kStandardMetricCost);
  }

  std::string metadata = WithoutNulls(request.metadata()).SerializeAsString();
  v1::StoredTranscript transcript;
  *transcript.mutable_turns() = request.transcript();
  std::optional<int64_t> duration;
  if (request.has_duration_seconds()) {
    duration = request.duration_seconds();
  } else if (!has_recording) {
    // A voice call's duration is the decoded length of its recording, known after analysis.
    duration = DurationFromTranscript(request);
  }
  const std::string now = NowTimestamp();
  std::string call_timestamp = now;
  int64_t call_time = NowUnixSeconds();
  if (request.has_call_timestamp()) {
    const absl::Time t = *ParseTimestamp(request.call_timestamp());
    call_timestamp = FormatTimestamp(t);
    call_time = absl::ToUnixSeconds(t);
  }

  // On PostgreSQL the call and its planned metrics are one statement on its own (no BEGIN, no
  // COMMIT): one round trip. A recording stored by the runs role is moved into place inside a
  // transaction, and SQLite's group commit makes the transaction cheap there.
  const bool one_statement = !recorded && db_->backend() == db::Backend::kPostgres;
  constexpr int64_t kDuplicate = 0;  // no identity is 0
  ASSIGN_OR_RETURN(
      int64_t id,
      db::WriteResult<int64_t>(
          *db_, one_statement ? db::WriteOptions{db::Isolation::kSingleStatement} : kIngest,
          [&](db::Connection& c) -> absl::StatusOr<int64_t> {
        ASSIGN_OR_RETURN(auto insert,
                         c.Prepare(one_statement ? absl::string_view(InsertCallWithPlan())
                                                   : kInsertCall));
        insert.Bind(1, workspace_id)
            .Bind(2, request.agent_id())
            .Bind(3, request.call_identifier())
            .Bind(4, observation_type)
            .Bind(5, request.has_call_direction() ? request.call_direction() : "inbound")
            .Bind(6, transcription_status);
        if (recorded) {
          insert.BindNull(7).Bind(8, "stored");
        } else if (has_recording) {
          insert.Bind(7, request.recording_url()).Bind(8, "pending");
        } else {
          insert.BindNull(7).BindNull(8);
        }
        insert.Bind(9, duration).Bind(10, call_timestamp);
        auto optional_text = [&](int index, bool has, const std::string& value) {
          if (has) {
            insert.Bind(index, value);
          } else {
            insert.BindNull(index);
          }
        };
        optional_text(11, request.has_call_end_reason(), request.call_end_reason());
        optional_text(12, request.has_customer_number(), request.customer_number());
        optional_text(13, request.has_tag(), request.tag());
        optional_text(14, request.has_label(), request.label());
        insert.BindBlob(15, metadata);
        if (request.transcript_size() > 0) {
          insert.BindBlob(16, transcript.SerializeAsString()).Bind(17, "provided");
        } else {
          insert.BindNull(16).BindNull(17);
        }
        insert.Bind(18, JoinIds(selection.metric_ids)).Bind(19, now).Bind(20, now);
        // The plan is rows (call_metrics); planned_metric_ids and planned_metric_costs stay
        // NULL, read only for calls stored before those rows (BackfillQueryRows).
        if (agent.silence_threshold_ms) {
          insert.Bind(21, static_cast<int64_t>(*agent.silence_threshold_ms));
        } else {
          insert.BindNull(21);
        }
        insert.Bind(22, call_time);
        insert.Bind(23, origin.run_id).Bind(24, origin.scenario_id);
        // The unique (workspace_id, call_identifier) decides a duplicate, also between two
        // ingests of one identifier at once: no row back means it was there already.
        if (one_statement) {
          insert.Bind(25, IdArray(planned)).Bind(26, IdArray(planned_costs));
        }
        ASSIGN_OR_RETURN(bool inserted, insert.Step());
        if (!inserted) return kDuplicate;
        const int64_t id = insert.Int64(0);
        RETURN_IF_ERROR(insert.Run());
        if (!one_statement) RETURN_IF_ERROR(WritePlannedMetrics(c, id, planned, planned_costs));
        if (recorded) {
          // Moved into place inside the transaction: a failure leaves no call without its file.
          std::error_code ec;
          std::filesystem::rename(*recorded_wav, RecordingPath(id), ec);
          if (ec) {
            ec.clear();
            std::filesystem::copy_file(*recorded_wav, RecordingPath(id),
                                       std::filesystem::copy_options::overwrite_existing, ec);
            if (ec) return InternalError(absl::StrCat("cannot store the recording: ", ec.message()));
            std::filesystem::remove(*recorded_wav, ec);
          }
          const auto bytes = std::filesystem::file_size(RecordingPath(id), ec);
          ASSIGN_OR_RETURN(auto stored,
                           c.Prepare("UPDATE calls SET recording_content_type = 'audio/wav', "
                                     "recording_bytes = ? WHERE id = ?"));
          stored.Bind(1, static_cast<int64_t>(ec ? 0 : bytes)).Bind(2, id);
          RETURN_IF_ERROR(stored.Run());
        }
        return id;
      }));
  if (id == kDuplicate) {
    // The unique (workspace_id, call_identifier) decided it, also between two ingests of one
    // identifier at once: no row back means it was there already.
    absl::StatusOr<int64_t> existing = db::ReadResult<int64_t>(
        *db_, db::ReadOptions{.single_statement = true},
        [&](db::Connection& c) -> absl::StatusOr<int64_t> {
          ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT id FROM calls WHERE workspace_id = ? AND "
                                                "call_identifier = ?"));
          stmt.Bind(1, workspace_id).Bind(2, request.call_identifier());
          ASSIGN_OR_RETURN(bool found, stmt.Step());
          if (!found) return NotFoundError("the call holding the identifier was deleted");
          return stmt.Int64(0);
        });
    return ConflictError(
        "duplicate_call_identifier",
        absl::StrCat("call_identifier ", request.call_identifier(), " was already submitted"),
        {{"call_identifier", existing.ok()
                                 ? absl::StrCat("already submitted as call ", *existing)
                                 : std::string("already submitted")}});
  }

  // The record as ingested, built from what was written (no second read on the hot path).
  v1::Call call;
  call.set_id(id);
  call.set_call_identifier(request.call_identifier());
  call.set_client_id(workspace_id);
  call.set_agent_id(request.agent_id());
  call.set_observation_type(observation_type);
  call.set_call_direction(request.has_call_direction() ? request.call_direction() : "inbound");
  call.set_analysis_status("pending");
  call.set_transcription_status(transcription_status);
  if (has_recording && !recorded) call.set_recording_url(request.recording_url());
  if (recorded && options_.signer != nullptr) {
    call.set_presigned_recording_url(options_.signer->Sign(id, absl::Now()));
  }
  if (duration) call.set_duration_seconds(*duration);
  call.set_call_timestamp(call_timestamp);
  if (request.has_call_end_reason()) call.set_call_end_reason(request.call_end_reason());
  if (request.has_customer_number()) call.set_customer_number(request.customer_number());
  if (request.has_tag()) call.set_tag(request.tag());
  if (request.has_label()) call.set_label(request.label());
  call.mutable_metadata()->ParseFromString(metadata);
  *call.mutable_transcript() = request.transcript();
  if (request.transcript_size() > 0) call.set_transcript_source("provided");
  for (int64_t m : selection.metric_ids) call.add_metric_ids(m);
  for (int64_t m : selection.ignored_metric_ids) call.add_ignored_metric_ids(m);
  call.set_created_at(now);
  call.set_updated_at(now);
  return call;
}

absl::Status CallsStore::WriteCall(const db::Database::WriteFn& fn) {
  return db_->Write(fn, kOneCall);
}

absl::StatusOr<v1::Call> CallsStore::Get(int64_t workspace_id, absl::string_view key) {
  // One statement, no transaction around it: the hot read takes one round trip on PostgreSQL.
  // A key of digits is an id first, else an identifier (as FindCallId decides).
  int64_t id = 0;
  const bool maybe_id =
      !key.empty() && absl::c_all_of(key, absl::ascii_isdigit) && absl::SimpleAtoi(key, &id);
  static const std::string by_id_or_identifier =
      absl::StrCat("SELECT ", kCallColumns,
                   " FROM calls WHERE workspace_id = ?1 AND (id = ?2 OR call_identifier = ?3) "
                   "ORDER BY id = ?2 DESC LIMIT 1");
  static const std::string by_identifier = absl::StrCat(
      "SELECT ", kCallColumns, " FROM calls WHERE workspace_id = ?1 AND call_identifier = ?2");
  return db::ReadResult<v1::Call>(
      *db_, db::ReadOptions{.single_statement = true},
      [&](db::Connection& c) -> absl::StatusOr<v1::Call> {
        ASSIGN_OR_RETURN(auto stmt, c.Prepare(maybe_id ? by_id_or_identifier : by_identifier));
        stmt.Bind(1, workspace_id);
        if (maybe_id) {
          stmt.Bind(2, id).Bind(3, key);
        } else {
          stmt.Bind(2, key);
        }
        ASSIGN_OR_RETURN(bool found, stmt.Step());
        if (!found) return NotFoundError(absl::StrCat("call ", key));
        return CallFromRow(stmt, options_.signer);
      });
}

absl::StatusOr<v1::Call> CallsStore::Update(int64_t workspace_id, absl::string_view key,
                                            std::optional<int64_t> agent_id,
                                            const v1::CallUpdate& update) {
  auto is_set = [&](absl::string_view name) {
    for (const auto& f : update.set_fields()) {
      if (f == name) return true;
    }
    return false;
  };
  auto is_null = [&](absl::string_view name) {
    for (const auto& f : update.null_fields()) {
      if (f == name) return true;
    }
    return false;
  };
  return db::WriteResult<v1::Call>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Call> {
    ASSIGN_OR_RETURN(int64_t id, FindCallId(c, workspace_id, key));
    ASSIGN_OR_RETURN(v1::Call call, ReadCall(c, id, options_.signer));
    if (agent_id && *agent_id != call.agent_id()) {
      return NotFoundError(absl::StrCat("call ", key, " of agent ", *agent_id));
    }
    // Each mutable text field: a value sets it, null clears it, absence keeps it.
    struct TextField {
      absl::string_view name;
      bool has;
      const std::string& value;
      std::function<void(const std::string*)> apply;
    };
    TextField fields[] = {
        {"label", update.has_label(), update.label(),
         [&](const std::string* v) { v ? call.set_label(*v) : call.clear_label(); }},
        {"tag", update.has_tag(), update.tag(),
         [&](const std::string* v) { v ? call.set_tag(*v) : call.clear_tag(); }},
        {"customer_number", update.has_customer_number(), update.customer_number(),
         [&](const std::string* v) {
           v ? call.set_customer_number(*v) : call.clear_customer_number();
         }},
        {"call_end_reason", update.has_call_end_reason(), update.call_end_reason(),
         [&](const std::string* v) {
           v ? call.set_call_end_reason(*v) : call.clear_call_end_reason();
         }},
    };
    for (auto& f : fields) {
      if (f.has) {
        f.apply(&f.value);
      } else if (is_null(f.name)) {
        f.apply(nullptr);
      }
    }
    // A gRPC client sets the field without listing it in set_fields (common/sent_fields.h).
    if (update.has_metadata() || is_set("metadata")) {
      MergeMetadata(update.metadata(), call.mutable_metadata());
    }
    // metadata: null is taken as "no change": deleting keys is done key by key.
    call.set_updated_at(NowTimestamp());
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("UPDATE calls SET label = ?, tag = ?, "
                                          "customer_number = ?, call_end_reason = ?, "
                                          "metadata = ?, updated_at = ? WHERE id = ?"));
    auto text = [](bool has, const std::string& v) {
      return has ? std::optional<std::string>(v) : std::nullopt;
    };
    stmt.Bind(1, text(call.has_label(), call.label()))
        .Bind(2, text(call.has_tag(), call.tag()))
        .Bind(3, text(call.has_customer_number(), call.customer_number()))
        .Bind(4, text(call.has_call_end_reason(), call.call_end_reason()))
        .BindBlob(5, call.metadata().SerializeAsString())
        .Bind(6, call.updated_at())
        .Bind(7, id);
    RETURN_IF_ERROR(stmt.Run());
    return call;
  });
}

absl::StatusOr<v1::ListCallsResponse> CallsStore::List(int64_t workspace_id,
                                                       const v1::ListCallsRequest& request) {
  std::optional<int> page_opt, per_page_opt;
  if (request.has_page()) page_opt = request.page();
  if (request.has_per_page()) per_page_opt = request.per_page();
  RETURN_IF_ERROR(ValidatePage(page_opt, per_page_opt));
  RETURN_IF_ERROR(ValidateListFilters(request));
  const int page = page_opt.value_or(1);
  const int per_page = per_page_opt.value_or(kDefaultPerPage);

  // Filters are fixed in number, so every combination is a distinct cached statement.
  std::string where = "workspace_id = ?";
  if (request.has_agent_id()) where += " AND agent_id = ?";
  if (request.has_analysis_status()) where += " AND analysis_status = ?";
  if (request.has_tag()) where += " AND tag = ?";
  if (request.has_observation_type()) where += " AND observation_type = ?";
  auto bind_filters = [&](db::Statement& s) {
    int i = 1;
    s.Bind(i++, workspace_id);
    if (request.has_agent_id()) s.Bind(i++, request.agent_id());
    if (request.has_analysis_status()) s.Bind(i++, request.analysis_status());
    if (request.has_tag()) s.Bind(i++, request.tag());
    if (request.has_observation_type()) s.Bind(i++, request.observation_type());
    return i;
  };
  return db::ReadResult<v1::ListCallsResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListCallsResponse> {
        v1::ListCallsResponse response;
        ASSIGN_OR_RETURN(auto count,
                         c.Prepare(absl::StrCat("SELECT COUNT(*) FROM calls WHERE ", where)));
        bind_filters(count);
        ASSIGN_OR_RETURN(bool row, count.Step());
        const int64_t total = row ? count.Int64(0) : 0;
        ASSIGN_OR_RETURN(auto select,
                         c.Prepare(absl::StrCat("SELECT ", kCallColumns, " FROM calls WHERE ",
                                                where, " ORDER BY id DESC LIMIT ? OFFSET ?")));
        int next = bind_filters(select);
        select.Bind(next, per_page).Bind(next + 1, static_cast<int64_t>(page - 1) * per_page);
        while (true) {
          ASSIGN_OR_RETURN(bool more, select.Step());
          if (!more) break;
          *response.add_data() = CallFromRow(select, options_.signer);
        }
        SetPagination(response.mutable_pagination(), page, per_page, total);
        return response;
      });
}

absl::StatusOr<int> CallsStore::BackfillQueryRows(int batch) {
  int filled = 0;
  while (true) {
    ASSIGN_OR_RETURN(int done, db::WriteResult<int>(*db_, [&](db::Connection& c) {
                       return BackfillCalls(c, std::nullopt, batch);
                     }));
    filled += done;
    if (done < batch) return filled;
  }
}

absl::Status CallsStore::Delete(int64_t workspace_id, absl::string_view key) {
  // A deleted call's refunds could no longer be found: they are applied first.
  ASSIGN_OR_RETURN(int64_t owed_id, db::ReadResult<int64_t>(*db_, [&](db::Connection& c) {
                     return FindCallId(c, workspace_id, key);
                   }));
  RETURN_IF_ERROR(ApplyOwedRefundsOf(owed_id));
  ASSIGN_OR_RETURN(
      int64_t id,
      db::WriteResult<int64_t>(*db_, kOneCall, [&](db::Connection& c) -> absl::StatusOr<int64_t> {
        ASSIGN_OR_RETURN(int64_t id, FindCallId(c, workspace_id, key));
        // The row locked before what decides the delete is read (kOneCall).
        ASSIGN_OR_RETURN(auto owed, c.Prepare(absl::StrCat(
                                        "SELECT refunds_owed FROM calls WHERE id = ?",
                                        c.ForUpdate())));
        owed.Bind(1, id);
        ASSIGN_OR_RETURN(bool row, owed.Step());
        if (row && owed.Int64(0) != 0) {
          // Settled since the refunds above were applied.
          return absl::UnavailableError(
              absl::StrCat("call ", key, " has refunds being applied; try again"));
        }
        RETURN_IF_ERROR(ApplyToAgentTotals(c, id, -1));
        ASSIGN_OR_RETURN(auto del, c.Prepare("DELETE FROM calls WHERE id = ?"));
        del.Bind(1, id);
        RETURN_IF_ERROR(del.Run());
        return id;
      }));
  std::error_code ignored;
  std::filesystem::remove(RecordingPath(id), ignored);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<RecordingJob>> CallsStore::ClaimRecordingJob(
    absl::Duration lease, absl::string_view holder) {
  const int64_t now = NowUnixSeconds();
  const std::string token = LeaseToken(holder);
  return db::WriteResult<std::optional<RecordingJob>>(
      *db_, kClaim, [&](db::Connection& c) -> absl::StatusOr<std::optional<RecordingJob>> {
        ASSIGN_OR_RETURN(
            auto claim,
            c.Prepare(absl::StrCat(
                "UPDATE calls SET recording_lease_until = ?, recording_token = ?, "
                "recording_attempts = recording_attempts + 1 WHERE id = (SELECT id FROM calls "
                "WHERE recording_state = 'pending' AND (recording_lease_until IS NULL OR "
                "recording_lease_until <= ?) ORDER BY id LIMIT 1",
                c.ForUpdateSkipLocked(), ") RETURNING id, recording_url, recording_attempts")));
        claim.Bind(1, now + absl::ToInt64Seconds(lease)).Bind(2, token).Bind(3, now);
        ASSIGN_OR_RETURN(bool row, claim.Step());
        if (!row) return std::nullopt;
        RecordingJob job{claim.Int64(0), claim.Text(1), static_cast<int>(claim.Int64(2)), token};
        // Drain the statement so the UPDATE completes before the transaction commits.
        ASSIGN_OR_RETURN(bool more, claim.Step());
        (void)more;
        return std::optional<RecordingJob>(job);
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
      // A pending call under a lease is being reserved for; its claim expires like a lease.
      ASSIGN_OR_RETURN(
          auto next,
          c.Prepare(absl::StrCat(
              "SELECT id, workspace_id, analysis_status, analysis_attempts, query_rows FROM "
              "calls WHERE (analysis_status = 'pending' AND "
              "(recording_state IS NULL OR recording_state = 'stored') AND "
              "(analysis_lease_until IS NULL OR analysis_lease_until <= ?)) OR "
              "(analysis_status = 'processing' AND analysis_lease_until <= ?) "
              "OR (analysis_status = 'computed' AND transcription_status IN "
              "('completed', 'failed') AND (analysis_lease_until IS NULL OR "
              "analysis_lease_until <= ?)) ORDER BY id LIMIT 1",
              c.ForUpdateSkipLocked())));
      next.Bind(1, now).Bind(2, now).Bind(3, now);
      ASSIGN_OR_RETURN(bool found, next.Step());
      if (!found) return claim;
      const int64_t id = next.Int64(0);
      const int64_t workspace_id = next.Int64(1);
      const bool first_lease = next.Text(2) == "pending";
      const int attempts = static_cast<int>(next.Int64(3));
      if (next.Int64(4) == 0) {
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
                                           "audio_results FROM calls WHERE id = ?"));
  details.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, details.Step());
  if (!row) return InternalError("leased call vanished");
  if (!details.IsNull(0) && details.Text(0) == "stored") job.recording_path = RecordingPath(id);
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
                                        const std::vector<v1::MetricResult>& metric_results) {
  RETURN_IF_ERROR(WriteCall([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(LeasedCall leased, CheckLease(c, call_id, token));
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
    RETURN_IF_ERROR(MarkRefundsOwed(c, call_id));
    return ApplyToAgentTotals(c, call_id, +1);
  }));
  // Once the results are committed; left owed on failure, for the next sweep.
  ApplyOwedRefundsOf(call_id).IgnoreError();
  return absl::OkStatus();
}

absl::Status CallsStore::FailAnalysis(int64_t call_id, absl::string_view token,
                                      absl::string_view reason, absl::string_view message) {
  RETURN_IF_ERROR(WriteCall([&](db::Connection& c) -> absl::Status {
    RETURN_IF_ERROR(CheckLease(c, call_id, token).status());
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
    const std::vector<v1::StandardMetricResult>& audio_results) {
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
    return update.Run();
  });
}

absl::StatusOr<std::optional<TranscriptionJob>> CallsStore::LeaseTranscription(
    absl::Duration lease, int max_attempts, absl::string_view holder) {
  const int64_t now = NowUnixSeconds();
  return db::WriteResult<std::optional<TranscriptionJob>>(
      *db_, kClaim, [&](db::Connection& c) -> absl::StatusOr<std::optional<TranscriptionJob>> {
        while (true) {
          ASSIGN_OR_RETURN(
              auto next,
              c.Prepare(absl::StrCat(
                  "SELECT id, transcription_attempts, transcript_source IS NOT NULL, "
                  "metadata FROM calls WHERE (transcription_status = 'pending' AND "
                  "recording_state = 'stored' AND analysis_status IN ('processing', "
                  "'computed', 'completed')) OR (transcription_status = 'processing' AND "
                  "transcription_lease_until <= ?) ORDER BY id LIMIT 1",
                  c.ForUpdateSkipLocked())));
          next.Bind(1, now);
          ASSIGN_OR_RETURN(bool found, next.Step());
          if (!found) return std::nullopt;
          const int64_t id = next.Int64(0);
          const int attempts = static_cast<int>(next.Int64(1));
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
          TranscriptionJob job;
          job.call_id = id;
          job.token = LeaseToken(holder);
          job.attempts = attempts + 1;
          job.recording_path = RecordingPath(id);
          job.has_provided_transcript = next.Int64(2) != 0;
          if (!next.IsNull(3)) job.metadata.ParseFromString(next.Text(3));
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
                               "WHERE analysis_token IS NOT NULL AND substr(analysis_token, 1, "
                               "length(?)) = ? AND analysis_status IN ('pending', "
                               "'processing', 'computed')"));
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
                               "NULL WHERE recording_token IS NOT NULL AND "
                               "substr(recording_token, 1, length(?)) = ? AND recording_state = "
                               "'pending'"));
    recording.Bind(1, prefix).Bind(2, prefix);
    RETURN_IF_ERROR(recording.Run());
    released += static_cast<int>(c.Changes());
    return released;
  });
}

absl::StatusOr<RecordingFile> CallsStore::GetRecordingFile(int64_t call_id) {
  return db::ReadResult<RecordingFile>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<RecordingFile> {
        ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT recording_content_type FROM calls WHERE "
                                              "id = ? AND recording_state = 'stored'"));
        stmt.Bind(1, call_id);
        ASSIGN_OR_RETURN(bool row, stmt.Step());
        if (!row) return NotFoundError(absl::StrCat("recording of call ", call_id));
        return RecordingFile{RecordingPath(call_id),
                             stmt.OptionalText(0).value_or("application/octet-stream")};
      });
}

}  // namespace calleval::calls

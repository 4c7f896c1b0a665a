#include "services/calls/call_rows.h"

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

#include "services/calls/calls_store.h"

namespace calleval::calls {
namespace {

// Calls `set` with the column's text unless it is NULL (a template: this runs per column of
// every call read, so no std::function).
template <typename Setter>
void SetOptional(const db::Statement& s, int column, Setter set) {
  if (!s.IsNull(column)) set(s.Text(column));
}

}  // namespace

std::string JoinIds(const std::vector<int64_t>& ids) { return absl::StrJoin(ids, ","); }

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
  SetOptional(s, 27, [&](std::string v) { call.set_version(std::move(v)); });
  SetOptional(s, 28, [&](std::string v) { call.set_platform_version(std::move(v)); });
  return call;
}

// The id of the workspace's call named by `key` (docs/api.md §2: digits are tried as the id first).
CallKeyRead::CallKeyRead(absl::string_view select, absl::string_view alias)
    : by_id_or_identifier_(absl::StrCat(
          select, alias,
          "id = COALESCE((SELECT id FROM calls WHERE id = ?2 AND workspace_id = ?1), (SELECT id "
          "FROM calls WHERE workspace_id = ?1 AND call_identifier = ?3))")),
      by_identifier_(
          absl::StrCat(select, alias, "workspace_id = ?1 AND ", alias, "call_identifier = ?2")) {}

absl::StatusOr<db::Statement> CallKeyRead::Prepare(db::Connection& c, int64_t workspace_id,
                                                   absl::string_view key) const {
  int64_t id = 0;
  const bool maybe_id =
      !key.empty() && absl::c_all_of(key, absl::ascii_isdigit) && absl::SimpleAtoi(key, &id);
  ASSIGN_OR_RETURN(db::Statement stmt, c.Prepare(maybe_id ? by_id_or_identifier_ : by_identifier_));
  stmt.Bind(1, workspace_id);
  if (maybe_id) {
    stmt.Bind(2, id).Bind(3, key);
  } else {
    stmt.Bind(2, key);
  }
  return stmt;
}

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

std::vector<int64_t> PlannedCosts(const std::vector<int64_t>& planned, const std::string& costs) {
  std::vector<int64_t> out = SplitIds(costs);
  if (out.size() != planned.size()) out.assign(planned.size(), kStandardMetricCost);
  return out;
}

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

}  // namespace calleval::calls

#pragma once

// What the calls store's files share (calls_store.cc: the records; call_leases.cc: the queues
// the workers lease from): how a call row is read, and the isolation of one call's writes. Not
// for other services: the calls table is the calls service's (docs/architecture.md).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/calls.pb.h"
#include "common/database.h"
#include "services/calls/recording_signer.h"

namespace calleval::calls {

// The columns CallFromRow reads, in its order.
inline constexpr absl::string_view kCallColumns =
    "id, workspace_id, agent_id, call_identifier, observation_type, call_direction, "
    "analysis_status, transcription_status, recording_url, recording_state, duration_seconds, "
    "call_timestamp, call_end_reason, customer_number, tag, label, metadata, transcript, "
    "transcript_source, metric_ids, standard_metrics, metric_results, credits_used, "
    "failure_reason, failure_message, created_at, updated_at, agent_version, platform_version";

// The writes of one call's rows (its leases, results, settling, deletion) run READ COMMITTED,
// like the queue claims and the ingest: each locks the call's row before it reads what it decides on (CheckLease's FOR UPDATE),
// or changes it with one UPDATE whose WHERE decides (PostgreSQL checks the WHERE again on the
// row it locked). Under SERIALIZABLE they conflicted over what every settle shares, the agent's
// hourly totals (agent_hourly_calls), and a call under load lost eight conflicts in a row and
// its analysis failed; under READ COMMITTED those upserts wait for each other's row lock and
// add up.
inline constexpr db::WriteOptions kOneCall{db::Isolation::kReadCommitted};

// "1,2,3" and back; ids that do not parse are left out.
std::string JoinIds(const std::vector<int64_t>& ids);
std::vector<int64_t> SplitIds(const std::string& text);

// A call from a row of kCallColumns.
v1::Call CallFromRow(const db::Statement& s, const RecordingSigner* signer);

// The id of the workspace's call `key`: an id when it is all digits and names one, else a
// call_identifier; kNotFound when neither does.
absl::StatusOr<int64_t> FindCallId(db::Connection& c, int64_t workspace_id, absl::string_view key);

// One statement reading the workspace's call `key` (the API's call_identifier_or_id: a key of
// digits is an id first, else an identifier, as FindCallId decides), for the hot reads that take
// no transaction. `select` is the statement up to its condition ("SELECT ... WHERE ") and
// `alias` the calls table's ("c." or ""). By id or identifier it is two index lookups, the id's
// first: an OR of the two conditions scanned the workspace's calls on SQLite.
class CallKeyRead {
 public:
  CallKeyRead(absl::string_view select, absl::string_view alias);
  // The statement, prepared and bound; Step() finds no row when there is no such call.
  absl::StatusOr<db::Statement> Prepare(db::Connection& c, int64_t workspace_id,
                                        absl::string_view key) const;

 private:
  std::string by_id_or_identifier_;
  std::string by_identifier_;
};

// The call with id `id`, kNotFound if there is none.
absl::StatusOr<v1::Call> ReadCall(db::Connection& c, int64_t id, const RecordingSigner* signer);

// The credit cost of each planned metric, in plan order. Calls ingested before costs were
// stored (column NULL) planned only standard metrics, which cost kStandardMetricCost.
std::vector<int64_t> PlannedCosts(const std::vector<int64_t>& planned, const std::string& costs);

// Writes the queryable rows of up to `batch` calls stored before them (query_rows = 0), or of
// call `only` if it is one of them, from their serialized lists and text columns: the only
// reader of planned_metric_ids and planned_metric_costs. Answers how many it filled in.
absl::StatusOr<int> BackfillCalls(db::Connection& c, std::optional<int64_t> only, int batch);

}  // namespace calleval::calls

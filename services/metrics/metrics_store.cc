#include "services/metrics/metrics_store.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/errors.h"
#include "common/pagination.h"
#include "common/sent_fields.h"
#include "common/standard_metrics.h"
#include "common/status_macros.h"
#include "services/judges/metric_values.h"
#include "services/metrics/metric_rules.h"

// Decisions at the edges of the metric contract (docs/api.md §4 leaves them open):
//
// - Names are stored trimmed; uniqueness compares the trimmed, Unicode case-folded name
//   (`name_key`) within the workspace and against the twelve standard names.
// - Type-specific fields sent for another metrics_type (phrases on a code_as_judge metric, ...)
//   are ignored and not stored: clients often send one template body for every type. The one
//   exception is enum_values, which changes how results are typed: sent for a result_type other
//   than enum it is a 422 rather than silently dropped.
// - On PUT, stored enum_values of a metric whose result_type changes away from enum are
//   dropped silently (they were not sent), and an evaluation_trigger sent replaces the whole
//   stored trigger (its inner keys do not merge).
// - An evaluation_trigger without `type` is {"type": "always"} when it carries nothing else,
//   otherwise 422; the fields of other trigger types are ignored.
// - One 422 names every problem of a request. Its code is the specific one (duplicate_name,
//   agent_not_found, metrics_type_immutable, metric_not_found) when every issue has that code,
//   otherwise validation_failed.
// - Standard metrics show credit_cost 1 (docs/api.md §9) and created_at/updated_at null.
// - Agents and scenarios are the agents service's (docs/architecture.md, "Who owns which
//   table"): the store asks its AgentDirectory whether the ids a request sends exist, before
//   its own transaction, and keeps links as plain ids. The agents service tells the store when
//   an agent or a scenario is deleted (AgentDeleted, ScenarioDeleted), after that delete has
//   committed; a link whose notice was lost, or that a write checked just before the delete,
//   is left out of every answer (DropDeletedLinks). On PUT, links kept from the stored metric
//   (agent_ids or scenario_ids not sent) are not checked again: a deleted one is not the
//   client's mistake.
// - Entries of an agent's disabled_metric_ids naming a deleted metric stay until the next
//   toggle; ids are never reused, so they are harmless. A toggle checks the metric ids before
//   asking the agents service to store them, so a metric deleted in between can be left there
//   the same way.

namespace calleval::metrics {
namespace {

// The rules of a metric definition (metric_rules.h); this file keeps the SQL.
using rules::ApplyRequest;
using rules::FindStandardKey;
using rules::Fold;
using rules::Issues;
using rules::IsStandardId;
using rules::kAgentNotFound;
using rules::kDuplicateName;
using rules::kMetricNotFound;
using rules::kStandard;
using rules::kTypeImmutable;
using rules::LinkTargets;
using rules::NameKey;
using rules::StandardKeyList;
using rules::Validate;

constexpr int kMaxBulkItems = 100;
constexpr int kDefaultPerPage = 25;
constexpr int kMaxPerPage = 100;
constexpr int64_t kStandardMetricCost = 1;

constexpr absl::string_view kMetricColumns =
    "id, workspace_id, name, metrics_type, result_type, is_global, credit_cost, definition, "
    "created_at, updated_at";

// Asks `directory` about the agent and scenario ids of `fields` (and `extra_agent`, a bulk
// create's agent_id), into `agents` and `scenarios`.
absl::Status LookUpLinks(AgentDirectory& directory, int64_t workspace_id,
                         const v1::MetricFields& fields, std::optional<int64_t> extra_agent,
                         absl::flat_hash_set<int64_t>& agents,
                         absl::flat_hash_set<int64_t>& scenarios) {
  std::vector<int64_t> agent_ids(fields.agent_ids().begin(), fields.agent_ids().end());
  if (extra_agent) agent_ids.push_back(*extra_agent);
  ASSIGN_OR_RETURN(auto found_agents, directory.ExistingAgents(workspace_id, agent_ids));
  agents.insert(found_agents.begin(), found_agents.end());
  const std::vector<int64_t> scenario_ids(fields.scenario_ids().begin(),
                                          fields.scenario_ids().end());
  ASSIGN_OR_RETURN(auto found_scenarios, directory.ExistingScenarios(workspace_id, scenario_ids));
  scenarios.insert(found_scenarios.begin(), found_scenarios.end());
  return absl::OkStatus();
}

absl::StatusOr<bool> CustomMetricInWorkspace(db::Connection& c, int64_t workspace_id, int64_t id) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT 1 FROM metrics WHERE id = ? AND workspace_id = ?"));
  stmt.Bind(1, id).Bind(2, workspace_id);
  return stmt.Step();
}

// The issue when `name_key` is taken in the workspace (by a standard metric or a custom one
// other than `exclude_id`), or nullopt.
absl::StatusOr<std::optional<std::string>> NameTaken(db::Connection& c, int64_t workspace_id,
                                                     const std::string& name_key,
                                                     int64_t exclude_id) {
  for (const auto& m : kStandardMetrics) {
    if (Fold(m.name) == name_key) {
      return absl::StrCat("is the name of standard metric ", m.id, " (", m.name, ")");
    }
  }
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT id FROM metrics WHERE workspace_id = ? AND "
                                        "name_key = ? AND id != ?"));
  stmt.Bind(1, workspace_id).Bind(2, name_key).Bind(3, exclude_id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (found) return absl::StrCat("is already used by metric ", stmt.Int64(0));
  return std::optional<std::string>();
}

// The definition blob: the metric without what the columns and link tables hold.
std::string DefinitionBlob(const v1::Metric& m) {
  v1::Metric d = m;
  d.clear_id();
  d.clear_client_id();
  d.clear_name();
  d.clear_metrics_type();
  d.clear_result_type();
  d.clear_standard_metric_key();
  d.clear_is_custom();
  d.clear_scope();
  d.clear_mark_as_global();
  d.clear_requires_audio();
  d.clear_agent_ids();
  d.clear_scenario_ids();
  d.clear_credit_cost();
  d.clear_created_at();
  d.clear_updated_at();
  return d.SerializeAsString();
}

absl::StatusOr<v1::Metric> MetricFromRow(const db::Statement& s) {
  v1::Metric m;
  if (!m.ParseFromString(s.Text(7))) {
    return InternalError(absl::StrCat("metric ", s.Int64(0), " has a corrupt definition"));
  }
  m.set_id(s.Int64(0));
  m.set_client_id(s.Int64(1));
  m.set_name(s.Text(2));
  m.set_metrics_type(s.Text(3));
  m.set_result_type(s.Text(4));
  m.set_is_custom(true);
  m.set_mark_as_global(s.Int64(5) != 0);
  m.set_scope(m.mark_as_global() ? "global" : "agent");
  m.set_requires_audio(false);
  m.set_credit_cost(s.Int64(6));
  m.set_created_at(s.Text(8));
  m.set_updated_at(s.Text(9));
  if (!m.has_evaluation_trigger()) m.mutable_evaluation_trigger()->set_type("always");
  return m;
}

absl::Status LoadLinks(db::Connection& c, v1::Metric& m) {
  ASSIGN_OR_RETURN(auto agents, c.Prepare("SELECT agent_id FROM metric_agents WHERE metric_id = "
                                          "? ORDER BY agent_id"));
  agents.Bind(1, m.id());
  while (true) {
    ASSIGN_OR_RETURN(bool row, agents.Step());
    if (!row) break;
    m.add_agent_ids(agents.Int64(0));
  }
  ASSIGN_OR_RETURN(auto scenarios, c.Prepare("SELECT scenario_id FROM metric_scenarios WHERE "
                                             "metric_id = ? ORDER BY scenario_id"));
  scenarios.Bind(1, m.id());
  while (true) {
    ASSIGN_OR_RETURN(bool row, scenarios.Step());
    if (!row) break;
    m.add_scenario_ids(scenarios.Int64(0));
  }
  return absl::OkStatus();
}

// Reads every row of `stmt` as a full metric.
absl::Status ReadRows(db::Connection& c, db::Statement& stmt,
                      google::protobuf::RepeatedPtrField<v1::Metric>& out) {
  std::vector<v1::Metric> rows;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(v1::Metric m, MetricFromRow(stmt));
    rows.push_back(std::move(m));
  }
  for (auto& m : rows) {
    RETURN_IF_ERROR(LoadLinks(c, m));
    *out.Add() = std::move(m);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Metric> ReadMetric(db::Connection& c, int64_t workspace_id, int64_t id) {
  static const std::string sql =
      absl::StrCat("SELECT ", kMetricColumns, " FROM metrics WHERE id = ? AND workspace_id = ?");
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
  stmt.Bind(1, id).Bind(2, workspace_id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return NotFoundError(absl::StrCat("metric ", id));
  ASSIGN_OR_RETURN(v1::Metric m, MetricFromRow(stmt));
  RETURN_IF_ERROR(LoadLinks(c, m));
  return m;
}

absl::Status WriteLinks(db::Connection& c, const v1::Metric& m) {
  ASSIGN_OR_RETURN(auto del_agents, c.Prepare("DELETE FROM metric_agents WHERE metric_id = ?"));
  del_agents.Bind(1, m.id());
  RETURN_IF_ERROR(del_agents.Run());
  ASSIGN_OR_RETURN(auto del_scenarios,
                   c.Prepare("DELETE FROM metric_scenarios WHERE metric_id = ?"));
  del_scenarios.Bind(1, m.id());
  RETURN_IF_ERROR(del_scenarios.Run());
  for (int64_t agent : m.agent_ids()) {
    ASSIGN_OR_RETURN(auto ins, c.Prepare("INSERT INTO metric_agents (metric_id, agent_id) "
                                         "VALUES (?, ?)"));
    ins.Bind(1, m.id()).Bind(2, agent);
    RETURN_IF_ERROR(ins.Run());
  }
  for (int64_t scenario : m.scenario_ids()) {
    ASSIGN_OR_RETURN(auto ins, c.Prepare("INSERT INTO metric_scenarios (metric_id, "
                                         "scenario_id) VALUES (?, ?)"));
    ins.Bind(1, m.id()).Bind(2, scenario);
    RETURN_IF_ERROR(ins.Run());
  }
  return absl::OkStatus();
}

// Stores a validated new metric, setting its id and timestamps.
absl::Status InsertMetric(db::Connection& c, int64_t workspace_id, v1::Metric& m) {
  const std::string now = NowTimestamp();
  m.set_created_at(now);
  m.set_updated_at(now);
  ASSIGN_OR_RETURN(auto insert,
                   c.Prepare("INSERT INTO metrics (workspace_id, name, name_key, metrics_type, "
                             "result_type, is_global, credit_cost, definition, created_at, "
                             "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"));
  insert.Bind(1, workspace_id)
      .Bind(2, m.name())
      .Bind(3, NameKey(m.name()))
      .Bind(4, m.metrics_type())
      .Bind(5, m.result_type())
      .Bind(6, static_cast<int64_t>(m.mark_as_global() ? 1 : 0))
      .Bind(7, m.credit_cost())
      .BindBlob(8, DefinitionBlob(m))
      .Bind(9, now)
      .Bind(10, now);
  ASSIGN_OR_RETURN(const int64_t id, insert.RunReturningId());
  m.set_id(id);
  return WriteLinks(c, m);
}

// The stored metric as the fields of a request, the base a PUT merges into.
v1::MetricFields FieldsOf(const v1::Metric& m) {
  v1::MetricFields f;
  f.set_name(m.name());
  if (m.has_description()) f.set_description(m.description());
  f.set_metrics_type(m.metrics_type());
  f.set_result_type(m.result_type());
  *f.mutable_enum_values() = m.enum_values();
  if (m.has_llm_instructions()) f.set_llm_instructions(m.llm_instructions());
  if (m.has_judge_samples()) f.set_judge_samples(m.judge_samples());
  f.set_mark_as_global(m.mark_as_global());
  *f.mutable_agent_ids() = m.agent_ids();
  *f.mutable_scenario_ids() = m.scenario_ids();
  *f.mutable_evaluation_trigger() = m.evaluation_trigger();
  *f.mutable_structured_output() = m.structured_output();
  if (m.has_code_snippet()) f.set_code_snippet(m.code_snippet());
  *f.mutable_phrases() = m.phrases();
  if (m.has_match()) f.set_match(m.match());
  if (m.has_speaker()) f.set_speaker(m.speaker());
  if (m.has_case_sensitive()) f.set_case_sensitive(m.case_sensitive());
  *f.mutable_permitted_options() = m.permitted_options();
  *f.mutable_forbidden_options() = m.forbidden_options();
  f.set_credit_cost(m.credit_cost());
  return f;
}

v1::Metric StandardMetric(int64_t workspace_id, const StandardMetricInfo& info) {
  v1::Metric m;
  m.set_id(info.id);
  m.set_client_id(workspace_id);
  m.set_name(std::string(info.name));
  m.set_metrics_type(std::string(kStandard));
  m.set_result_type(std::string(info.result_type));
  m.set_standard_metric_key(std::string(info.key));
  m.set_is_custom(false);
  m.set_scope("global");
  m.set_mark_as_global(true);
  m.set_requires_audio(info.requires_audio);
  m.mutable_evaluation_trigger()->set_type("always");
  m.set_credit_cost(kStandardMetricCost);
  return m;
}

// ",1,5,7," : a list a row's id is looked up in with LIKE '%,<id>,%' (portable SQL for a
// parameter holding a set).
std::string DelimitedIds(const std::set<int64_t>& ids) {
  return absl::StrCat(",", absl::StrJoin(ids, ","), ",");
}

// A LIKE pattern matching names that contain `text` ('\' escapes the wildcards).
std::string ContainsPattern(absl::string_view text) {
  std::string pattern = "%";
  for (char ch : text) {
    if (ch == '%' || ch == '_' || ch == '\\') pattern += '\\';
    pattern += ch;
  }
  return pattern + "%";
}

}  // namespace

MetricsStore::MetricsStore(db::Database* db, AgentDirectory* agents) : db_(db), agents_(agents) {}

template <typename Metrics>
absl::Status MetricsStore::DropDeletedLinks(int64_t workspace_id, Metrics& metrics) {
  std::vector<int64_t> agent_ids, scenario_ids;
  for (const v1::Metric& m : metrics) {
    agent_ids.insert(agent_ids.end(), m.agent_ids().begin(), m.agent_ids().end());
    scenario_ids.insert(scenario_ids.end(), m.scenario_ids().begin(), m.scenario_ids().end());
  }
  if (agent_ids.empty() && scenario_ids.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto agents, agents_->ExistingAgents(workspace_id, agent_ids));
  ASSIGN_OR_RETURN(auto scenarios, agents_->ExistingScenarios(workspace_id, scenario_ids));
  auto keep_existing = [](google::protobuf::RepeatedField<int64_t>& ids,
                          const absl::flat_hash_set<int64_t>& existing) {
    ids.erase(
        std::remove_if(ids.begin(), ids.end(), [&](int64_t id) { return !existing.contains(id); }),
        ids.end());
  };
  for (v1::Metric& m : metrics) {
    keep_existing(*m.mutable_agent_ids(), agents);
    keep_existing(*m.mutable_scenario_ids(), scenarios);
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::flat_hash_set<int64_t>> MetricsStore::ExistingCustom(
    int64_t workspace_id, absl::Span<const int64_t> ids) {
  return ExistingCustomMetrics(*db_, workspace_id, ids);
}

absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingCustomMetrics(db::Database& db,
                                                                   int64_t workspace_id,
                                                                   absl::Span<const int64_t> ids) {
  absl::flat_hash_set<int64_t> found;
  if (ids.empty()) return found;
  RETURN_IF_ERROR(db.Read([&](db::Connection& c) -> absl::Status {
    for (int64_t id : ids) {
      if (found.contains(id)) continue;
      ASSIGN_OR_RETURN(auto stmt,
                       c.Prepare("SELECT 1 FROM metrics WHERE id = ? AND workspace_id = ?"));
      stmt.Bind(1, id).Bind(2, workspace_id);
      ASSIGN_OR_RETURN(bool exists, stmt.Step());
      if (exists) found.insert(id);
    }
    return absl::OkStatus();
  }));
  return found;
}

// A notice is acted on only once the agents service confirms the id names nothing: on SQLite
// the newest agent's (or scenario's) id is handed out again after it is deleted, so a notice
// that arrives late (over gRPC, after a new agent took the id and was linked) must not take
// the new agent's links. Those it leaves are the stale links every reader already ignores
// while their agent is gone; nothing a client stored is ever deleted for an agent that exists.
absl::Status MetricsStore::AgentDeleted(int64_t workspace_id, int64_t agent_id) {
  ASSIGN_OR_RETURN(auto existing, agents_->ExistingAgents(workspace_id, {agent_id}));
  if (existing.contains(agent_id)) return absl::OkStatus();
  return db_->Write([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto del, c.Prepare("DELETE FROM metric_agents WHERE agent_id = ? AND "
                                         "metric_id IN (SELECT id FROM metrics WHERE "
                                         "workspace_id = ?)"));
    del.Bind(1, agent_id).Bind(2, workspace_id);
    return del.Run();
  });
}

absl::Status MetricsStore::ScenarioDeleted(int64_t workspace_id, int64_t scenario_id) {
  ASSIGN_OR_RETURN(auto existing, agents_->ExistingScenarios(workspace_id, {scenario_id}));
  if (existing.contains(scenario_id)) return absl::OkStatus();  // as in AgentDeleted
  return db_->Write([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto del, c.Prepare("DELETE FROM metric_scenarios WHERE scenario_id = ? AND "
                                         "metric_id IN (SELECT id FROM metrics WHERE "
                                         "workspace_id = ?)"));
    del.Bind(1, scenario_id).Bind(2, workspace_id);
    return del.Run();
  });
}

absl::StatusOr<v1::ListMetricsResponse> MetricsStore::List(int64_t workspace_id,
                                                           const v1::ListMetricsRequest& request) {
  const int page = request.has_page() ? request.page() : 1;
  const int per_page = request.has_per_page() ? request.per_page() : kDefaultPerPage;
  Issues issues;
  if (page < 1) issues.Add("page", "must be at least 1");
  if (per_page < 1 || per_page > kMaxPerPage) {
    issues.Add("per_page", absl::StrCat("must be between 1 and ", kMaxPerPage));
  }
  if (!issues.empty()) return std::move(issues).ToStatus();

  // With an agent: 404 when it is not in the workspace (the agent is the path's subject, not a
  // body field); what it disabled is left out of every list.
  std::optional<int64_t> agent_id;
  std::set<int64_t> disabled;
  if (request.has_agent_id()) {
    ASSIGN_OR_RETURN(std::vector<int64_t> disabled_ids,
                     agents_->DisabledMetrics(workspace_id, request.agent_id()));
    agent_id = request.agent_id();
    disabled.insert(disabled_ids.begin(), disabled_ids.end());
  }
  const std::string search = request.has_search() ? NameKey(request.search()) : "";

  v1::ListMetricsResponse response;
  for (const auto& info : kStandardMetrics) {
    if (!search.empty() && Fold(info.name).find(search) == std::string::npos) continue;
    if (disabled.count(info.id)) continue;
    *response.add_standard_metrics() = StandardMetric(workspace_id, info);
  }

  // ?1 workspace, ?2 name pattern ('%' = all), ?3 disabled ids (",1,5,"), ?4 agent (NULL =
  // any; global metrics apply to every agent and do not take it).
  constexpr absl::string_view kFilter =
      " FROM metrics WHERE workspace_id = ?1 AND name_key LIKE ?2 ESCAPE '\\' AND ?3 NOT LIKE "
      "'%,' || id || ',%' AND ";
  static const std::string count_sql =
      absl::StrCat("SELECT COUNT(*)", kFilter,
                   "is_global = 0 AND (CAST(?4 AS BIGINT) IS NULL OR id IN (SELECT metric_id FROM "
                   "metric_agents WHERE "
                   "agent_id = ?4))");
  static const std::string page_sql =
      absl::StrCat("SELECT ", kMetricColumns, kFilter,
                   "is_global = 0 AND (CAST(?4 AS BIGINT) IS NULL OR id IN (SELECT metric_id FROM "
                   "metric_agents WHERE "
                   "agent_id = ?4)) ORDER BY id DESC LIMIT ?5 OFFSET ?6");
  static const std::string global_sql =
      absl::StrCat("SELECT ", kMetricColumns, kFilter, "is_global = 1 ORDER BY id DESC");
  const std::string pattern = ContainsPattern(search);
  const std::string disabled_ids = DelimitedIds(disabled);
  auto bind = [&](db::Statement& s) {
    s.Bind(1, workspace_id).Bind(2, pattern).Bind(3, disabled_ids);
  };

  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto count, c.Prepare(count_sql));
    bind(count);
    count.Bind(4, agent_id);
    ASSIGN_OR_RETURN(bool row, count.Step());
    const int64_t total = row ? count.Int64(0) : 0;

    ASSIGN_OR_RETURN(auto data, c.Prepare(page_sql));
    bind(data);
    data.Bind(4, agent_id).Bind(5, per_page).Bind(6, static_cast<int64_t>(page - 1) * per_page);
    RETURN_IF_ERROR(ReadRows(c, data, *response.mutable_data()));

    ASSIGN_OR_RETURN(auto global, c.Prepare(global_sql));
    bind(global);
    RETURN_IF_ERROR(ReadRows(c, global, *response.mutable_global_metrics()));

    SetPagination(response.mutable_pagination(), page, per_page, total);
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(DropDeletedLinks(workspace_id, *response.mutable_data()));
  RETURN_IF_ERROR(DropDeletedLinks(workspace_id, *response.mutable_global_metrics()));
  return response;
}

absl::StatusOr<v1::Metric> MetricsStore::Create(int64_t workspace_id,
                                                const v1::MetricFields& fields) {
  v1::MetricFields merged;
  const bool enum_sent = ApplyRequest(fields, /*keep_type=*/false, merged);
  absl::flat_hash_set<int64_t> agents, scenarios;
  RETURN_IF_ERROR(LookUpLinks(*agents_, workspace_id, merged, std::nullopt, agents, scenarios));
  return db::WriteResult<v1::Metric>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Metric> {
    Issues issues;
    v1::Metric metric;
    RETURN_IF_ERROR(
        Validate({&agents, &scenarios}, workspace_id, merged, enum_sent, issues, metric));
    if (!metric.name().empty()) {
      ASSIGN_OR_RETURN(auto taken, NameTaken(c, workspace_id, NameKey(metric.name()), 0));
      if (taken) issues.Add("name", *taken, kDuplicateName);
    }
    if (!issues.empty()) return std::move(issues).ToStatus();
    RETURN_IF_ERROR(InsertMetric(c, workspace_id, metric));
    return metric;
  });
}

absl::StatusOr<v1::Metric> MetricsStore::CheckNew(int64_t workspace_id,
                                                  const v1::MetricFields& fields) {
  v1::MetricFields merged;
  const bool enum_sent = ApplyRequest(fields, /*keep_type=*/false, merged);
  absl::flat_hash_set<int64_t> agents, scenarios;
  RETURN_IF_ERROR(LookUpLinks(*agents_, workspace_id, merged, std::nullopt, agents, scenarios));
  return db::ReadResult<v1::Metric>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Metric> {
    Issues issues;
    v1::Metric metric;
    RETURN_IF_ERROR(
        Validate({&agents, &scenarios}, workspace_id, merged, enum_sent, issues, metric));
    if (!metric.name().empty()) {
      ASSIGN_OR_RETURN(auto taken, NameTaken(c, workspace_id, NameKey(metric.name()), 0));
      if (taken) issues.Add("name", *taken, kDuplicateName);
    }
    if (!issues.empty()) return std::move(issues).ToStatus();
    return metric;
  });
}

absl::StatusOr<v1::Metric> MetricsStore::Get(int64_t workspace_id, int64_t id) {
  if (const StandardMetricInfo* info = FindStandardMetric(id)) {
    return StandardMetric(workspace_id, *info);
  }
  ASSIGN_OR_RETURN(
      v1::Metric metric,
      db::ReadResult<v1::Metric>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Metric> {
        return ReadMetric(c, workspace_id, id);
      }));
  std::array<v1::Metric, 1> one = {std::move(metric)};
  RETURN_IF_ERROR(DropDeletedLinks(workspace_id, one));
  return std::move(one[0]);
}

absl::StatusOr<v1::Metric> MetricsStore::Update(int64_t workspace_id, int64_t id,
                                                const v1::MetricFields& fields) {
  if (IsStandardId(id)) {
    return ForbiddenError("standard_metric", "standard metrics cannot be changed");
  }
  // Only the links the request sends are checked; those kept from the stored metric are not.
  const SentKeys sent(fields);
  absl::flat_hash_set<int64_t> agents, scenarios;
  RETURN_IF_ERROR(LookUpLinks(*agents_, workspace_id, fields, std::nullopt, agents, scenarios));
  LinkTargets targets;
  if (sent.Set("agent_ids", fields.agent_ids_size() > 0) || sent.Null("agent_ids")) {
    targets.agents = &agents;
  }
  if (sent.Set("scenario_ids", fields.scenario_ids_size() > 0) || sent.Null("scenario_ids")) {
    targets.scenarios = &scenarios;
  }
  ASSIGN_OR_RETURN(
      v1::Metric updated,
      db::WriteResult<v1::Metric>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Metric> {
        ASSIGN_OR_RETURN(v1::Metric stored, ReadMetric(c, workspace_id, id));
        Issues issues;
        // metrics_type may be sent back unchanged (a client PUTs what it got), never changed or
        // removed.
        if (sent.Set("metrics_type", fields.has_metrics_type()) &&
            fields.metrics_type() != stored.metrics_type()) {
          issues.Add("metrics_type",
                     absl::StrCat("cannot be changed (the metric is ", stored.metrics_type(), ")"),
                     kTypeImmutable);
        } else if (sent.Null("metrics_type")) {
          issues.Add("metrics_type",
                     absl::StrCat("cannot be removed (the metric is ", stored.metrics_type(), ")"),
                     kTypeImmutable);
        }
        v1::MetricFields merged = FieldsOf(stored);
        const bool enum_sent = ApplyRequest(fields, /*keep_type=*/true, merged);
        v1::Metric metric;
        RETURN_IF_ERROR(Validate(targets, workspace_id, merged, enum_sent, issues, metric));
        if (!metric.name().empty()) {
          ASSIGN_OR_RETURN(auto taken, NameTaken(c, workspace_id, NameKey(metric.name()), id));
          if (taken) issues.Add("name", *taken, kDuplicateName);
        }
        if (!issues.empty()) return std::move(issues).ToStatus();

        metric.set_id(id);
        metric.set_created_at(stored.created_at());
        metric.set_updated_at(NowTimestamp());
        ASSIGN_OR_RETURN(auto update,
                         c.Prepare("UPDATE metrics SET name = ?, name_key = ?, result_type = ?, "
                                   "is_global = ?, credit_cost = ?, definition = ?, updated_at = ? "
                                   "WHERE id = ? AND workspace_id = ?"));
        update.Bind(1, metric.name())
            .Bind(2, NameKey(metric.name()))
            .Bind(3, metric.result_type())
            .Bind(4, static_cast<int64_t>(metric.mark_as_global() ? 1 : 0))
            .Bind(5, metric.credit_cost())
            .BindBlob(6, DefinitionBlob(metric))
            .Bind(7, metric.updated_at())
            .Bind(8, id)
            .Bind(9, workspace_id);
        RETURN_IF_ERROR(update.Run());
        RETURN_IF_ERROR(WriteLinks(c, metric));
        return metric;
      }));
  std::array<v1::Metric, 1> one = {std::move(updated)};
  RETURN_IF_ERROR(DropDeletedLinks(workspace_id, one));
  return std::move(one[0]);
}

absl::Status MetricsStore::Delete(int64_t workspace_id, int64_t id) {
  if (IsStandardId(id)) {
    return ForbiddenError("standard_metric", "standard metrics cannot be deleted");
  }
  return db_->Write([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto del, c.Prepare("DELETE FROM metrics WHERE id = ? AND workspace_id = ?"));
    del.Bind(1, id).Bind(2, workspace_id);
    RETURN_IF_ERROR(del.Run());
    if (c.Changes() == 0) return NotFoundError(absl::StrCat("metric ", id));
    // The link rows also cascade; deleting them here does not depend on foreign_keys being on.
    v1::Metric gone;
    gone.set_id(id);
    return WriteLinks(c, gone);
  });
}

absl::StatusOr<v1::BulkCreateMetricsResponse> MetricsStore::BulkCreate(
    int64_t workspace_id, const v1::BulkCreateMetricsBody& body) {
  Issues issues;
  if (body.metrics_size() == 0) {
    issues.Add("metrics", "must not be empty");
  } else if (body.metrics_size() > kMaxBulkItems) {
    issues.Add("metrics", absl::StrCat("must have at most ", kMaxBulkItems, " items"));
  }
  if (!issues.empty()) return std::move(issues).ToStatus();

  std::vector<v1::MetricFields> merged(body.metrics_size());
  std::vector<bool> enum_sent(body.metrics_size());
  absl::flat_hash_set<int64_t> agents, scenarios;
  for (int i = 0; i < body.metrics_size(); ++i) {
    enum_sent[i] = ApplyRequest(body.metrics(i), /*keep_type=*/false, merged[i]);
    std::optional<int64_t> body_agent;
    if (i == 0 && body.has_agent_id()) body_agent = body.agent_id();
    RETURN_IF_ERROR(LookUpLinks(*agents_, workspace_id, merged[i], body_agent, agents, scenarios));
  }
  if (body.metrics_size() == 0 && body.has_agent_id()) {
    RETURN_IF_ERROR(LookUpLinks(*agents_, workspace_id, v1::MetricFields(), body.agent_id(), agents,
                                scenarios));
  }
  return db::WriteResult<v1::BulkCreateMetricsResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::BulkCreateMetricsResponse> {
        Issues issues;
        if (body.has_agent_id()) {
          const bool found = agents.contains(body.agent_id());
          if (!found) {
            issues.Add("agent_id",
                       absl::StrCat("no agent ", body.agent_id(), " in workspace ", workspace_id),
                       kAgentNotFound);
          }
        }
        // Every item is checked before anything is stored, so one 422 lists all problems.
        // body.agent_id is checked once above and joined to each item only afterwards.
        std::vector<v1::Metric> metrics(body.metrics_size());
        for (int i = 0; i < body.metrics_size(); ++i) {
          issues.set_prefix(absl::StrCat("metrics[", i, "]."));
          RETURN_IF_ERROR(Validate({&agents, &scenarios}, workspace_id, merged[i], enum_sent[i],
                                   issues, metrics[i]));
        }
        issues.set_prefix("");
        if (!issues.empty()) return std::move(issues).ToStatus();

        v1::BulkCreateMetricsResponse response;
        std::set<std::string> created_keys;
        for (v1::Metric& metric : metrics) {
          const std::string key = NameKey(metric.name());
          ASSIGN_OR_RETURN(auto taken, NameTaken(c, workspace_id, key, 0));
          if (taken || created_keys.count(key)) {
            auto* skipped = response.add_skipped();
            skipped->set_name(metric.name());
            skipped->set_reason(std::string(kDuplicateName));
            continue;
          }
          if (body.has_agent_id()) {
            auto* ids = metric.mutable_agent_ids();
            if (std::find(ids->begin(), ids->end(), body.agent_id()) == ids->end()) {
              ids->Add(body.agent_id());
              std::sort(ids->begin(), ids->end());
            }
          }
          RETURN_IF_ERROR(InsertMetric(c, workspace_id, metric));
          created_keys.insert(key);
          *response.add_created() = metric;
        }
        return response;
      });
}

absl::StatusOr<v1::ListUsableMetricsResponse> MetricsStore::ListUsable(
    int64_t workspace_id, std::optional<int64_t> agent_id) {
  std::set<int64_t> disabled;
  if (agent_id) {
    ASSIGN_OR_RETURN(std::vector<int64_t> disabled_ids,
                     agents_->DisabledMetrics(workspace_id, *agent_id));
    disabled.insert(disabled_ids.begin(), disabled_ids.end());
  }
  v1::ListUsableMetricsResponse response;
  for (const auto& info : kStandardMetrics) {
    v1::UsableMetric* row = response.add_data();
    row->set_id(info.id);
    row->set_name(std::string(info.name));
    row->set_metrics_type(std::string(kStandard));
    row->set_standard_metric_key(std::string(info.key));
    row->set_requires_audio(info.requires_audio);
    row->set_enabled(!disabled.count(info.id));
  }
  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    // Without an agent every custom metric; with one, those that apply to it.
    ASSIGN_OR_RETURN(
        auto stmt,
        c.Prepare("SELECT id, name, metrics_type FROM metrics WHERE workspace_id = "
                  "?1 AND (CAST(?2 AS BIGINT) IS NULL OR is_global = 1 OR id IN (SELECT metric_id "
                  "FROM metric_agents WHERE agent_id = ?2)) ORDER BY id"));
    stmt.Bind(1, workspace_id).Bind(2, agent_id);
    while (true) {
      ASSIGN_OR_RETURN(bool more, stmt.Step());
      if (!more) break;
      v1::UsableMetric* row = response.add_data();
      row->set_id(stmt.Int64(0));
      row->set_name(stmt.Text(1));
      row->set_metrics_type(stmt.Text(2));
      row->set_requires_audio(false);
      row->set_enabled(!disabled.count(row->id()));
    }
    return absl::OkStatus();
  }));
  return response;
}

absl::StatusOr<v1::IngestCatalog> MetricsStore::Catalog(int64_t workspace_id, int64_t agent_id) {
  // One statement: every ingest reads the catalog, so this read is on the hot path.
  return db::ReadResult<v1::IngestCatalog>(
      *db_, db::kSingleStatementRead, [&](db::Connection& c) -> absl::StatusOr<v1::IngestCatalog> {
        ASSIGN_OR_RETURN(
            auto stmt, c.Prepare("SELECT id, credit_cost, (is_global = 1 OR EXISTS (SELECT 1 FROM "
                                 "metric_agents WHERE metric_id = metrics.id AND agent_id = ?2)) "
                                 "FROM metrics WHERE workspace_id = ?1 ORDER BY id"));
        stmt.Bind(1, workspace_id).Bind(2, agent_id);
        v1::IngestCatalog catalog;
        while (true) {
          ASSIGN_OR_RETURN(bool more, stmt.Step());
          if (!more) break;
          v1::IngestCatalog::Entry* e = catalog.add_entries();
          e->set_id(stmt.Int64(0));
          e->set_credit_cost(stmt.Int64(1));
          e->set_requires_audio(false);
          e->set_applies_to_agent(stmt.Int64(2) != 0);
        }
        return catalog;
      });
}

absl::StatusOr<std::vector<v1::Metric>> MetricsStore::Definitions(int64_t workspace_id,
                                                                  const std::vector<int64_t>& ids) {
  // In the order of `ids`, each id once; ids that name no metric of the workspace are left out.
  return db::ReadResult<std::vector<v1::Metric>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::vector<v1::Metric>> {
        std::vector<v1::Metric> out;
        std::set<int64_t> seen;
        for (int64_t id : ids) {
          if (!seen.insert(id).second) continue;
          if (const StandardMetricInfo* info = FindStandardMetric(id)) {
            out.push_back(StandardMetric(workspace_id, *info));
            continue;
          }
          absl::StatusOr<v1::Metric> m = ReadMetric(c, workspace_id, id);
          if (m.ok()) {
            out.push_back(*std::move(m));
          } else if (m.status().code() != absl::StatusCode::kNotFound) {
            return m.status();
          }
        }
        return out;
      });
}

absl::StatusOr<v1::AgentStandardMetrics> MetricsStore::SetStandardToggles(
    int64_t workspace_id, int64_t agent_id, const std::vector<std::string>& disabled_keys) {
  Issues issues;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < disabled_keys.size(); ++i) {
    const StandardMetricInfo* info = FindStandardKey(disabled_keys[i]);
    if (info == nullptr) {
      issues.Add(absl::StrCat("disabled_metric_keys[", i, "]"),
                 absl::StrCat("is not a standard metric key (", StandardKeyList(), ")"));
    } else {
      ids.push_back(info->id);
    }
  }
  // The body is judged once the agent is known to exist: an unknown agent is 404 first.
  if (!issues.empty()) {
    RETURN_IF_ERROR(agents_->DisabledMetrics(workspace_id, agent_id).status());
    return std::move(issues).ToStatus();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> list,
                   agents_->ReplaceDisabledMetrics(workspace_id, agent_id,
                                                   AgentDirectory::MetricKind::kStandard, ids));
  const std::set<int64_t> disabled(list.begin(), list.end());
  v1::AgentStandardMetrics response;
  response.set_agent_id(agent_id);
  for (const auto& info : kStandardMetrics) {
    if (disabled.count(info.id)) {
      response.add_disabled_metric_keys(std::string(info.key));
    } else {
      response.add_enabled_metric_keys(std::string(info.key));
    }
  }
  return response;
}

absl::StatusOr<v1::AgentLlmMetrics> MetricsStore::SetCustomToggles(
    int64_t workspace_id, int64_t agent_id, const std::vector<int64_t>& disabled_ids) {
  // The ids are this store's to check; the list is the agents service's to store. A metric
  // deleted in between stays listed, harmlessly (ids are never reused).
  auto check = [&](db::Connection& c) -> absl::Status {
    Issues issues;
    for (size_t i = 0; i < disabled_ids.size(); ++i) {
      const int64_t id = disabled_ids[i];
      const std::string field = absl::StrCat("disabled_llm_metric_ids[", i, "]");
      if (IsStandardId(id)) {
        issues.Add(field,
                   absl::StrCat("metric ", id,
                                " is a standard metric; use PUT /api/v1/agents/{agent_id}/"
                                "standard_metrics"),
                   kMetricNotFound);
        continue;
      }
      ASSIGN_OR_RETURN(bool found, CustomMetricInWorkspace(c, workspace_id, id));
      if (!found) {
        issues.Add(field, absl::StrCat("no custom metric ", id, " in workspace ", workspace_id),
                   kMetricNotFound);
      }
    }
    return issues.empty() ? absl::OkStatus() : std::move(issues).ToStatus();
  };
  // An unknown agent is 404 before the body is judged.
  if (absl::Status invalid = db_->Read(check); !invalid.ok()) {
    RETURN_IF_ERROR(agents_->DisabledMetrics(workspace_id, agent_id).status());
    return invalid;
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> list,
                   agents_->ReplaceDisabledMetrics(
                       workspace_id, agent_id, AgentDirectory::MetricKind::kCustom, disabled_ids));
  v1::AgentLlmMetrics response;
  response.set_agent_id(agent_id);
  for (int64_t id : list) {
    if (!IsStandardId(id)) response.add_disabled_llm_metric_ids(id);
  }
  return response;
}

}  // namespace calleval::metrics

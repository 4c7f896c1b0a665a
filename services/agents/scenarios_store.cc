#include "services/agents/scenarios_store.h"

#include <set>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/errors.h"
#include "common/pagination.h"
#include "common/sent_fields.h"
#include "common/standard_metrics.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/agents/agents_store.h"

namespace calleval::agents {
namespace {

constexpr absl::string_view kColumns =
    "id, workspace_id, agent_id, name, persona, goal, expected_outcome, caller_script, "
    "max_turns, max_duration_seconds, language_id, metric_ids, created_at, updated_at, "
    "source_call_id";

v1::Scenario FromRow(const db::Statement& s) {
  v1::Scenario out;
  out.set_id(s.Int64(0));
  out.set_client_id(s.Int64(1));
  out.set_agent_id(s.Int64(2));
  out.set_name(s.Text(3));
  if (auto v = s.OptionalText(4)) out.set_persona(*v);
  if (auto v = s.OptionalText(5)) out.set_goal(*v);
  if (auto v = s.OptionalText(6)) out.set_expected_outcome(*v);
  for (const auto& line : nlohmann::json::parse(s.Text(7), nullptr, false)) {
    if (line.is_string()) out.add_caller_script(line.get<std::string>());
  }
  out.set_max_turns(static_cast<int32_t>(s.Int64(8)));
  if (auto v = s.OptionalInt64(9)) out.set_max_duration_seconds(static_cast<int32_t>(*v));
  if (auto v = s.OptionalInt64(10)) out.set_language_id(*v);
  for (const auto& id : nlohmann::json::parse(s.Text(11), nullptr, false)) {
    if (id.is_number_integer()) out.add_metric_ids(id.get<int64_t>());
  }
  out.set_created_at(s.Text(12));
  out.set_updated_at(s.Text(13));
  if (auto v = s.OptionalInt64(14)) out.set_source_call_id(*v);
  return out;
}

absl::StatusOr<v1::Scenario> Read(db::Connection& c, int64_t workspace_id, int64_t id) {
  static const std::string sql =
      absl::StrCat("SELECT ", kColumns, " FROM scenarios WHERE id = ? AND workspace_id = ?");
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
  stmt.Bind(1, id).Bind(2, workspace_id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return NotFoundError(absl::StrCat("scenario ", id));
  return FromRow(stmt);
}

absl::StatusOr<bool> Exists(db::Connection& c, const char* sql, int64_t a, int64_t b) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
  stmt.Bind(1, a).Bind(2, b);
  return stmt.Step();
}

// Merges the sent keys of `f` into `s` (null clears or restores the default).
void Merge(const v1::ScenarioFields& f, v1::Scenario& s) {
  const SentKeys sent(f);
  if (sent.Set("agent_id", f.has_agent_id())) s.set_agent_id(f.agent_id());
  if (sent.Null("agent_id")) s.set_agent_id(0);
  if (sent.Set("name", f.has_name())) s.set_name(f.name());
  if (sent.Null("name")) s.clear_name();
  auto text = [&](absl::string_view key, bool has, const std::string& value, auto set,
                  auto clear) {
    if (sent.Set(key, has)) {
      set(value);
    } else if (sent.Null(key)) {
      clear();
    }
  };
  text("persona", f.has_persona(), f.persona(), [&](auto v) { s.set_persona(v); },
       [&] { s.clear_persona(); });
  text("goal", f.has_goal(), f.goal(), [&](auto v) { s.set_goal(v); }, [&] { s.clear_goal(); });
  text("expected_outcome", f.has_expected_outcome(), f.expected_outcome(),
       [&](auto v) { s.set_expected_outcome(v); }, [&] { s.clear_expected_outcome(); });
  if (sent.Set("caller_script", f.caller_script_size() > 0)) {
    *s.mutable_caller_script() = f.caller_script();
  } else if (sent.Null("caller_script")) {
    s.clear_caller_script();
  }
  if (sent.Set("max_turns", f.has_max_turns())) s.set_max_turns(f.max_turns());
  if (sent.Null("max_turns")) s.set_max_turns(kDefaultMaxTurns);
  if (sent.Set("max_duration_seconds", f.has_max_duration_seconds())) {
    s.set_max_duration_seconds(f.max_duration_seconds());
  } else if (sent.Null("max_duration_seconds")) {
    s.clear_max_duration_seconds();
  }
  if (sent.Set("language_id", f.has_language_id())) {
    s.set_language_id(f.language_id());
  } else if (sent.Null("language_id")) {
    s.clear_language_id();
  }
  if (sent.Set("metric_ids", f.metric_ids_size() > 0)) {
    *s.mutable_metric_ids() = f.metric_ids();
  } else if (sent.Null("metric_ids")) {
    s.clear_metric_ids();
  }
  // Free text sent empty means "none".
  if (s.has_persona() && IsBlank(s.persona())) s.clear_persona();
  if (s.has_goal() && IsBlank(s.goal())) s.clear_goal();
  if (s.has_expected_outcome() && IsBlank(s.expected_outcome())) s.clear_expected_outcome();
}

// The ids of `s` the metrics service is asked about: positive ids that are not standard
// metrics (the others are decided here).
std::vector<int64_t> CustomMetricIds(const v1::Scenario& s) {
  std::vector<int64_t> ids;
  for (int64_t id : s.metric_ids()) {
    if (id > 0 && FindStandardMetric(id) == nullptr) ids.push_back(id);
  }
  return ids;
}

// What the metrics service answered about a scenario's custom metric ids, before the writing
// transaction: which of the `asked` ids name a metric of the workspace.
struct MetricAnswer {
  absl::flat_hash_set<int64_t> asked;
  absl::flat_hash_set<int64_t> existing;

  bool Covers(const v1::Scenario& s) const {
    return absl::c_all_of(CustomMetricIds(s), [&](int64_t id) { return asked.contains(id); });
  }
};

absl::StatusOr<MetricAnswer> AskAboutMetrics(MetricDirectory& metrics, int64_t workspace_id,
                                             const v1::Scenario& s) {
  MetricAnswer answer;
  const std::vector<int64_t> ids = CustomMetricIds(s);
  answer.asked.insert(ids.begin(), ids.end());
  if (ids.empty()) return answer;  // a scenario of standard metrics needs no other service
  ASSIGN_OR_RETURN(answer.existing, metrics.ExistingMetrics(workspace_id, ids));
  return answer;
}

// Every rule of the merged scenario, all problems at once. The agent is checked first and
// alone: a scenario for an agent that is not there is 422 agent_not_found. Custom metric ids
// are judged by `metrics`, which must cover them.
absl::Status Validate(db::Connection& c, int64_t workspace_id, const MetricAnswer& metrics,
                      v1::Scenario& s) {
  if (s.agent_id() <= 0) {
    return ValidationError("validation_failed", "agent_id is required",
                           {{"agent_id", "is required"}});
  }
  ASSIGN_OR_RETURN(bool agent, Exists(c, "SELECT 1 FROM agents WHERE id = ? AND workspace_id = ?",
                                      s.agent_id(), workspace_id));
  if (!agent) {
    return ValidationError("agent_not_found",
                           absl::StrCat("no agent ", s.agent_id(), " in this workspace"),
                           {{"agent_id", "must name an agent of the workspace"}});
  }
  std::vector<FieldIssue> issues;
  if (IsBlank(s.name())) {
    issues.push_back({"name", "is required"});
  } else if (CharLength(s.name()) > kMaxNameLength) {
    issues.push_back({"name", absl::StrCat("must be at most ", kMaxNameLength, " characters")});
  }
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"persona", &s.persona()},
                                   {"goal", &s.goal()},
                                   {"expected_outcome", &s.expected_outcome()}}) {
    if (CharLength(*value) > kMaxScenarioTextLength) {
      issues.push_back({key, absl::StrCat("must be at most ", kMaxScenarioTextLength,
                                          " characters")});
    }
  }
  if (s.caller_script_size() > kMaxCallerScriptLines) {
    issues.push_back({"caller_script",
                      absl::StrCat("must have at most ", kMaxCallerScriptLines, " lines")});
  }
  for (int i = 0; i < s.caller_script_size(); ++i) {
    const std::string field = absl::StrCat("caller_script[", i, "]");
    if (IsBlank(s.caller_script(i))) {
      issues.push_back({field, "must not be empty"});
    } else if (CharLength(s.caller_script(i)) > kMaxCallerLineLength) {
      issues.push_back({field, absl::StrCat("must be at most ", kMaxCallerLineLength,
                                            " characters")});
    }
  }
  // Someone has to know what the caller wants: the script, or the LLM playing the goal.
  if (s.caller_script_size() == 0 && !s.has_goal()) {
    issues.push_back({"goal", "is required when caller_script is not given"});
  }
  if (s.max_turns() < 1 || s.max_turns() > kMaxTurns) {
    issues.push_back({"max_turns", absl::StrCat("must be between 1 and ", kMaxTurns)});
  }
  if (s.has_max_duration_seconds() &&
      (s.max_duration_seconds() < 1 || s.max_duration_seconds() > kMaxCallDurationSeconds)) {
    issues.push_back({"max_duration_seconds",
                      absl::StrCat("must be between 1 and ", kMaxCallDurationSeconds)});
  }
  if (s.has_language_id()) {
    ASSIGN_OR_RETURN(auto lang, c.Prepare("SELECT 1 FROM languages WHERE id = ?"));
    lang.Bind(1, s.language_id());
    ASSIGN_OR_RETURN(bool known, lang.Step());
    if (!known) {
      issues.push_back({"language_id", absl::StrCat("no language ", s.language_id(),
                                                    " (see GET /api/v1/languages)")});
    }
  }
  std::set<int64_t> seen;
  std::vector<int64_t> metric_ids;
  bool unknown_metric = false;
  for (int i = 0; i < s.metric_ids_size(); ++i) {
    const int64_t id = s.metric_ids(i);
    const bool known = FindStandardMetric(id) != nullptr || metrics.existing.contains(id);
    if (!known) {
      issues.push_back({absl::StrCat("metric_ids[", i, "]"),
                        absl::StrCat("no metric ", id, " in this workspace")});
      unknown_metric = true;
    } else if (seen.insert(id).second) {
      metric_ids.push_back(id);
    }
  }
  s.mutable_metric_ids()->Assign(metric_ids.begin(), metric_ids.end());
  if (issues.empty()) return absl::OkStatus();
  std::vector<std::string> parts;
  for (const auto& i : issues) parts.push_back(absl::StrCat(*i.field, " ", i.issue));
  // An unknown metric alone says so in its code, as on metric routes.
  const bool only_metrics = unknown_metric && absl::c_all_of(issues, [](const FieldIssue& i) {
    return i.field->rfind("metric_ids[", 0) == 0;
  });
  return ValidationError(only_metrics ? "metric_not_found" : "validation_failed",
                         absl::StrJoin(parts, "; "), std::move(issues));
}

void Bind(db::Statement& stmt, const v1::Scenario& s) {
  auto optional_text = [&](int index, bool has, const std::string& v) {
    if (has) {
      stmt.Bind(index, v);
    } else {
      stmt.BindNull(index);
    }
  };
  stmt.Bind(1, s.agent_id()).Bind(2, s.name());
  optional_text(3, s.has_persona(), s.persona());
  optional_text(4, s.has_goal(), s.goal());
  optional_text(5, s.has_expected_outcome(), s.expected_outcome());
  stmt.Bind(6, nlohmann::json(std::vector<std::string>(s.caller_script().begin(),
                                                       s.caller_script().end()))
                   .dump());
  stmt.Bind(7, static_cast<int64_t>(s.max_turns()));
  if (s.has_max_duration_seconds()) {
    stmt.Bind(8, static_cast<int64_t>(s.max_duration_seconds()));
  } else {
    stmt.BindNull(8);
  }
  if (s.has_language_id()) {
    stmt.Bind(9, s.language_id());
  } else {
    stmt.BindNull(9);
  }
  stmt.Bind(10, nlohmann::json(std::vector<int64_t>(s.metric_ids().begin(), s.metric_ids().end()))
                    .dump());
  stmt.Bind(11, s.updated_at());
}

}  // namespace

absl::StatusOr<v1::Scenario> ScenariosStore::Create(int64_t workspace_id,
                                                    const v1::ScenarioFields& fields,
                                                    std::optional<int64_t> source_call_id) {
  v1::Scenario merged;
  merged.set_client_id(workspace_id);
  merged.set_max_turns(kDefaultMaxTurns);
  Merge(fields, merged);
  ASSIGN_OR_RETURN(const MetricAnswer metrics, AskAboutMetrics(*metrics_, workspace_id, merged));
  return db::WriteResult<v1::Scenario>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Scenario> {
    v1::Scenario s = merged;
    RETURN_IF_ERROR(Validate(c, workspace_id, metrics, s));
    s.set_created_at(NowTimestamp());
    s.set_updated_at(s.created_at());
    ASSIGN_OR_RETURN(auto insert,
                     c.Prepare("INSERT INTO scenarios (agent_id, name, persona, goal, "
                               "expected_outcome, caller_script, max_turns, "
                               "max_duration_seconds, language_id, metric_ids, updated_at, "
                               "workspace_id, created_at, source_call_id) VALUES (?, ?, ?, ?, ?, "
                               "?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"));
    Bind(insert, s);
    insert.Bind(12, workspace_id).Bind(13, s.created_at()).Bind(14, source_call_id);
    ASSIGN_OR_RETURN(const int64_t id, insert.RunReturningId());
    s.set_id(id);
    if (source_call_id) s.set_source_call_id(*source_call_id);
    return s;
  });
}

absl::StatusOr<v1::Scenario> ScenariosStore::Get(int64_t workspace_id, int64_t id) {
  return db::ReadResult<v1::Scenario>(*db_, [&](db::Connection& c) {
    return Read(c, workspace_id, id);
  });
}

absl::StatusOr<v1::Scenario> ScenariosStore::Update(int64_t workspace_id, int64_t id,
                                                    const v1::ScenarioFields& patch) {
  // The metric ids are asked about before the transaction, from the scenario as read just
  // before it. Should a concurrent update have changed the stored ids in between (the patch
  // keeps them), the transaction finds ids it has no answer for and the update starts over.
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    ASSIGN_OR_RETURN(v1::Scenario expected, Get(workspace_id, id));
    Merge(patch, expected);
    ASSIGN_OR_RETURN(const MetricAnswer metrics,
                     AskAboutMetrics(*metrics_, workspace_id, expected));
    bool answered = true;
    absl::StatusOr<v1::Scenario> updated = db::WriteResult<v1::Scenario>(
        *db_, [&](db::Connection& c) -> absl::StatusOr<v1::Scenario> {
          ASSIGN_OR_RETURN(v1::Scenario s, Read(c, workspace_id, id));
          Merge(patch, s);
          answered = metrics.Covers(s);
          if (!answered) return absl::AbortedError("the scenario's metric ids changed");
          RETURN_IF_ERROR(Validate(c, workspace_id, metrics, s));
          s.set_updated_at(NowTimestamp());
          ASSIGN_OR_RETURN(
              auto update,
              c.Prepare("UPDATE scenarios SET agent_id = ?, name = ?, persona = ?, "
                        "goal = ?, expected_outcome = ?, caller_script = ?, max_turns = ?, "
                        "max_duration_seconds = ?, language_id = ?, metric_ids = ?, "
                        "updated_at = ? WHERE id = ? AND workspace_id = ?"));
          Bind(update, s);
          update.Bind(12, id).Bind(13, workspace_id);
          RETURN_IF_ERROR(update.Run());
          return s;
        });
    if (answered) return updated;
  }
  return absl::UnavailableError(
      absl::StrCat("scenario ", id, " kept changing while it was updated; try again"));
}

absl::Status ScenariosStore::Delete(int64_t workspace_id, int64_t id) {
  return db_->Write([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto del,
                     c.Prepare("DELETE FROM scenarios WHERE id = ? AND workspace_id = ?"));
    del.Bind(1, id).Bind(2, workspace_id);
    RETURN_IF_ERROR(del.Run());
    if (c.Changes() == 0) return NotFoundError(absl::StrCat("scenario ", id));
    return absl::OkStatus();
  });
}

absl::StatusOr<absl::flat_hash_set<int64_t>> ScenariosStore::Existing(
    int64_t workspace_id, absl::Span<const int64_t> ids) {
  absl::flat_hash_set<int64_t> found;
  if (ids.empty()) return found;
  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    for (int64_t id : ids) {
      if (found.contains(id)) continue;
      ASSIGN_OR_RETURN(
          bool exists,
          Exists(c, "SELECT 1 FROM scenarios WHERE id = ? AND workspace_id = ?", id, workspace_id));
      if (exists) found.insert(id);
    }
    return absl::OkStatus();
  }));
  return found;
}

absl::StatusOr<absl::flat_hash_map<int64_t, ScenarioCallee>> ScenariosStore::Callees(
    int64_t workspace_id, absl::Span<const int64_t> ids) {
  absl::flat_hash_map<int64_t, ScenarioCallee> found;
  if (ids.empty()) return found;
  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    for (int64_t id : ids) {
      if (found.contains(id)) continue;
      ASSIGN_OR_RETURN(auto stmt,
                       c.Prepare("SELECT s.agent_id, a.phone_number IS NOT NULL FROM scenarios s "
                                 "JOIN agents a ON a.id = s.agent_id WHERE s.id = ? AND "
                                 "s.workspace_id = ?"));
      stmt.Bind(1, id).Bind(2, workspace_id);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (row) found[id] = ScenarioCallee{stmt.Int64(0), stmt.Int64(1) != 0};
    }
    return absl::OkStatus();
  }));
  return found;
}

absl::StatusOr<v1::ListScenariosResponse> ScenariosStore::List(
    int64_t workspace_id, const v1::ListScenariosRequest& request) {
  const int page = request.has_page() ? request.page() : 1;
  const int per_page = request.has_per_page() ? request.per_page() : kDefaultPerPage;
  RETURN_IF_ERROR(ValidatePagination(page, per_page));
  return db::ReadResult<v1::ListScenariosResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListScenariosResponse> {
        const std::string where = request.has_agent_id()
                                      ? "workspace_id = ? AND agent_id = ?"
                                      : "workspace_id = ? AND ? = 0";
        const int64_t agent = request.has_agent_id() ? request.agent_id() : 0;
        ASSIGN_OR_RETURN(auto count,
                         c.Prepare(absl::StrCat("SELECT COUNT(*) FROM scenarios WHERE ", where)));
        count.Bind(1, workspace_id).Bind(2, agent);
        ASSIGN_OR_RETURN(bool counted, count.Step());
        const int64_t total = counted ? count.Int64(0) : 0;
        ASSIGN_OR_RETURN(auto select,
                         c.Prepare(absl::StrCat("SELECT ", kColumns, " FROM scenarios WHERE ",
                                                where, " ORDER BY id DESC LIMIT ? OFFSET ?")));
        select.Bind(1, workspace_id).Bind(2, agent).Bind(3, static_cast<int64_t>(per_page));
        select.Bind(4, static_cast<int64_t>(page - 1) * per_page);
        v1::ListScenariosResponse response;
        while (true) {
          ASSIGN_OR_RETURN(bool row, select.Step());
          if (!row) break;
          *response.add_data() = FromRow(select);
        }
        SetPagination(response.mutable_pagination(), page, per_page, total);
        return response;
      });
}

}  // namespace calleval::agents

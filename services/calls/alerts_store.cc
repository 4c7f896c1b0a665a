#include "services/calls/alerts_store.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/pagination.h"
#include "common/status_macros.h"
#include "services/calls/call_figures.h"

namespace calleval::calls {
namespace {

constexpr char kRuleColumns[] =
    "id, workspace_id, name, agent_id, scenario_id, figure, op, threshold, window_text, "
    "min_samples, webhook_url, format, state, streak, streak_time, streak_mark, resolved_time, "
    "last_value, last_checked_at, version, created_at, sealed_secret FROM alert_rules ";

// A rule's row.
struct RuleRow {
  v1::AlertRule rule;
  int64_t workspace_id = 0;
  AlertState state;
  int64_t version = 0;
  std::string sealed_secret;
};

RuleRow ReadRule(const db::Statement& row) {
  RuleRow r;
  v1::AlertRule& rule = r.rule;
  rule.set_id(row.Int64(0));
  r.workspace_id = row.Int64(1);
  rule.set_name(row.Text(2));
  if (!row.IsNull(3)) rule.set_agent_id(row.Int64(3));
  if (!row.IsNull(4)) rule.set_scenario_id(row.Int64(4));
  rule.set_figure(row.Text(5));
  rule.set_op(row.Text(6));
  rule.set_threshold(row.Double(7));
  rule.set_window(row.Text(8));
  rule.set_min_samples(row.Int64(9));
  rule.set_webhook_url(row.Text(10));
  rule.set_format(row.Text(11));
  rule.set_state(row.Text(12));
  r.state.state = row.Text(12);
  r.state.streak = static_cast<int>(row.Int64(13));
  r.state.streak_time = row.Int64(14);
  r.state.streak_mark = row.Int64(15);
  r.state.resolved_time = row.Int64(16);
  if (!row.IsNull(17)) rule.set_last_value(row.Double(17));
  if (!row.IsNull(18)) rule.set_last_checked_at(row.Text(18));
  r.version = row.Int64(19);
  rule.set_created_at(row.Text(20));
  if (!row.IsNull(21)) r.sealed_secret = row.Text(21);
  return r;
}

// What a sealed secret is bound to: its rule, so a blob copied to another row does not open.
std::string SealContext(int64_t rule_id) { return absl::StrCat("alert_rule ", rule_id); }

absl::Status RuleNotFound(int64_t id) {
  return MakeError(absl::StatusCode::kNotFound, "alert_rule_not_found",
                   absl::StrCat("alert rule ", id, " not found"));
}

// Reads the workspace's rule; NOT_FOUND when it is not there (or another workspace's).
absl::StatusOr<RuleRow> LoadRule(db::Connection& c, int64_t workspace_id, int64_t id) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(absl::StrCat("SELECT ", kRuleColumns,
                                                     "WHERE id = ? AND workspace_id = ?")));
  stmt.Bind(1, id).Bind(2, workspace_id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return RuleNotFound(id);
  return ReadRule(stmt);
}

// The rule as a notification names it (no webhook URL: the receiver knows its own).
nlohmann::json RuleJson(const v1::AlertRule& rule) {
  nlohmann::json j = {{"id", rule.id()},
                      {"name", rule.name()},
                      {"agent_id", nullptr},
                      {"scenario_id", nullptr},
                      {"figure", rule.figure()},
                      {"op", rule.op()},
                      {"threshold", rule.threshold()},
                      {"window", rule.window()},
                      {"min_samples", rule.min_samples()},
                      {"state", rule.state()}};
  if (rule.has_agent_id()) j["agent_id"] = rule.agent_id();
  if (rule.has_scenario_id()) j["scenario_id"] = rule.scenario_id();
  return j;
}

// A figure over a window: its value (nullopt when there is nothing to compute it from), the
// samples it was computed from, and the newest sample's id (what tells new evidence from old).
struct FigureValue {
  std::optional<double> value;
  int64_t samples = 0;
  int64_t newest = 0;
};

// Statement text and parameters, numbered as they are added.
struct Query {
  std::string sql;
  std::vector<int64_t> ints;

  std::string Int(int64_t v) {
    ints.push_back(v);
    return absl::StrCat("?", ints.size());
  }
};

}  // namespace

absl::StatusOr<v1::AlertRule> AlertsStore::Create(int64_t workspace_id,
                                                  const v1::CreateAlertRuleRequest& request) {
  std::vector<FieldIssue> issues;
  auto add = [&issues](const absl::Status& status) {
    if (status.ok()) return;
    const v1::ErrorInfo info = ErrorInfoOf(status);
    if (info.details().empty()) {
      issues.push_back({"", std::string(status.message())});
      return;
    }
    for (const auto& d : info.details()) issues.push_back({d.field(), d.issue()});
  };
  if (!request.has_name() || request.name().empty()) {
    issues.push_back({"name", "is required"});
  } else if (request.name().size() > 200) {
    issues.push_back({"name", "must be at most 200 characters"});
  }
  std::optional<AlertFigure> figure;
  if (!request.has_figure()) {
    issues.push_back({"figure", "is required"});
  } else {
    auto parsed = ParseAlertFigure(request.figure());
    if (parsed.ok()) {
      figure = *parsed;
    } else {
      add(parsed.status());
    }
  }
  if (!request.has_op()) {
    issues.push_back({"op", "is required"});
  } else {
    add(CheckAlertOp(request.op()));
  }
  if (!request.has_threshold()) {
    issues.push_back({"threshold", "is required"});
  } else if (!std::isfinite(request.threshold())) {
    issues.push_back({"threshold", "must be a finite number"});
  }
  std::optional<AlertWindow> window;
  if (!request.has_window()) {
    issues.push_back({"window", "is required"});
  } else {
    auto parsed = ParseAlertWindow(request.window());
    if (parsed.ok()) {
      window = *parsed;
    } else {
      add(parsed.status());
    }
  }
  if (window.has_value() && figure.has_value() && window->count > 0 &&
      figure->kind == AlertFigure::Kind::kPassRate) {
    // Runs are the runs role's: it counts them per time range, not as "the last n".
    issues.push_back({"window", "pass_rate takes a duration window (<n>m, <n>h or <n>d)"});
  }
  int64_t min_samples = window.has_value() && window->count > 0 ? window->count : 10;
  if (request.has_min_samples()) {
    if (request.min_samples() < 1 || request.min_samples() > 10000) {
      issues.push_back({"min_samples", "must be between 1 and 10000"});
    } else if (window.has_value() && window->count > 0 && request.min_samples() > window->count) {
      issues.push_back({"min_samples", "must be at most the window's count of calls"});
    } else {
      min_samples = request.min_samples();
    }
  }
  const std::string format = request.has_format() ? request.format() : "json";
  if (format != "json" && format != "slack") {
    issues.push_back({"format", "must be json or slack"});
  }
  if (request.has_agent_id() && request.has_scenario_id()) {
    issues.push_back({"scenario_id", "a rule watches an agent or a scenario, not both"});
  }
  if (!request.has_webhook_url() || request.webhook_url().empty()) {
    issues.push_back({"webhook_url", "is required"});
  } else {
    auto parsed = CheckAndParseUrl(request.webhook_url(), options_.url_guard, "webhook_url");
    if (!parsed.ok()) {
      add(parsed.status());
    } else if (parsed->scheme != "https" && !parsed->allowed_host) {
      // Plain http only to the hosts the installation allows (tests' local receivers).
      issues.push_back({"webhook_url", "must be an https URL"});
    }
  }
  if (!issues.empty()) {
    return ValidationError("validation_failed", "invalid alert rule", std::move(issues));
  }
  // References: the workspace's own agent, scenario and metric.
  if (request.has_agent_id()) {
    if (!options_.agents) return InternalError("alert rules: no agent lookup");
    RETURN_IF_ERROR(options_.agents(workspace_id, request.agent_id()).status());
  }
  if (request.has_scenario_id()) {
    if (!options_.scenarios) return InternalError("alert rules: no scenario lookup");
    absl::Status found = options_.scenarios(workspace_id, request.scenario_id()).status();
    if (found.code() == absl::StatusCode::kNotFound) {
      return ValidationError("scenario_not_found",
                             absl::StrCat("scenario ", request.scenario_id(), " not found"),
                             {{"scenario_id", "is not a scenario of the workspace"}});
    }
    RETURN_IF_ERROR(found);
  }
  if (figure->kind == AlertFigure::Kind::kMetricOutcome) {
    if (!options_.metrics) return InternalError("alert rules: no metric lookup");
    ASSIGN_OR_RETURN(std::vector<v1::Metric> metrics,
                     options_.metrics(workspace_id, {figure->metric_id}));
    if (metrics.empty()) {
      return ValidationError(
          "validation_failed", absl::StrCat("metric ", figure->metric_id, " not found"),
          {{"figure",
            absl::StrCat("metric ", figure->metric_id, " is not a metric of the workspace")}});
    }
  }
  if (options_.credentials_key.size() != 32) {
    return InternalError("alert rule secrets cannot be stored: no credentials key");
  }
  const std::string secret = absl::StrCat("whsec_", Base64Url(RandomBytes(24)));
  return db::WriteResult<v1::AlertRule>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::AlertRule> {
        ASSIGN_OR_RETURN(auto count,
                         c.Prepare("SELECT COUNT(*) FROM alert_rules WHERE workspace_id = ?"));
        count.Bind(1, workspace_id);
        ASSIGN_OR_RETURN(bool row, count.Step());
        if (row && count.Int64(0) >= options_.max_rules_per_workspace) {
          return ValidationError(
              "alert_rule_limit",
              absl::StrCat("a workspace has at most ", options_.max_rules_per_workspace,
                           " alert rules"),
              {{"", absl::StrCat("the workspace already has ", count.Int64(0), " alert rules")}});
        }
        const std::string now = NowTimestamp();
        ASSIGN_OR_RETURN(
            auto insert,
            c.Prepare("INSERT INTO alert_rules (workspace_id, name, agent_id, scenario_id, "
                      "figure, op, threshold, window_text, min_samples, webhook_url, format, "
                      "state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                      "'insufficient_data', ?) RETURNING id"));
        insert.Bind(1, workspace_id)
            .Bind(2, request.name())
            .Bind(3, request.has_agent_id() ? std::optional<int64_t>(request.agent_id())
                                            : std::nullopt)
            .Bind(4, request.has_scenario_id() ? std::optional<int64_t>(request.scenario_id())
                                               : std::nullopt)
            .Bind(5, request.figure())
            .Bind(6, request.op())
            .Bind(7, request.threshold())
            .Bind(8, request.window())
            .Bind(9, min_samples)
            .Bind(10, request.webhook_url())
            .Bind(11, format)
            .Bind(12, now);
        ASSIGN_OR_RETURN(int64_t id, insert.RunReturningId());
        ASSIGN_OR_RETURN(auto seal,
                         c.Prepare("UPDATE alert_rules SET sealed_secret = ? WHERE id = ?"));
        seal.BindBlob(1, Seal(options_.credentials_key, secret, SealContext(id))).Bind(2, id);
        RETURN_IF_ERROR(seal.Run());
        ASSIGN_OR_RETURN(RuleRow stored, LoadRule(c, workspace_id, id));
        stored.rule.set_secret(secret);
        return stored.rule;
      });
}

absl::StatusOr<v1::AlertRule> AlertsStore::Get(int64_t workspace_id, int64_t id) {
  return db::ReadResult<v1::AlertRule>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::AlertRule> {
        ASSIGN_OR_RETURN(RuleRow row, LoadRule(c, workspace_id, id));
        return row.rule;
      });
}

absl::StatusOr<v1::ListAlertRulesResponse> AlertsStore::List(int64_t workspace_id, int page,
                                                             int per_page) {
  RETURN_IF_ERROR(ValidatePagination(page, per_page));
  return db::ReadResult<v1::ListAlertRulesResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListAlertRulesResponse> {
        v1::ListAlertRulesResponse out;
        ASSIGN_OR_RETURN(auto count,
                         c.Prepare("SELECT COUNT(*) FROM alert_rules WHERE workspace_id = ?"));
        count.Bind(1, workspace_id);
        ASSIGN_OR_RETURN(bool row, count.Step());
        const int64_t total = row ? count.Int64(0) : 0;
        ASSIGN_OR_RETURN(auto stmt,
                         c.Prepare(absl::StrCat("SELECT ", kRuleColumns,
                                                "WHERE workspace_id = ? ORDER BY id DESC "
                                                "LIMIT ? OFFSET ?")));
        stmt.Bind(1, workspace_id)
            .Bind(2, static_cast<int64_t>(per_page))
            .Bind(3, static_cast<int64_t>(page - 1) * per_page);
        while (true) {
          ASSIGN_OR_RETURN(bool more, stmt.Step());
          if (!more) break;
          *out.add_data() = ReadRule(stmt).rule;
        }
        SetPagination(out.mutable_pagination(), page, per_page, total);
        return out;
      });
}

absl::Status AlertsStore::Delete(int64_t workspace_id, int64_t id) {
  return db_->Write([&](db::Connection& c) -> absl::Status {
    // The outbox and the attempts go with the rule (ON DELETE CASCADE needs SQLite's foreign
    // keys on, so they are deleted by name).
    ASSIGN_OR_RETURN(auto owned, c.Prepare("SELECT id FROM alert_rules WHERE id = ? AND "
                                           "workspace_id = ?"));
    owned.Bind(1, id).Bind(2, workspace_id);
    ASSIGN_OR_RETURN(bool found, owned.Step());
    if (!found) return RuleNotFound(id);
    for (const char* sql : {"DELETE FROM alert_delivery_attempts WHERE rule_id = ?",
                            "DELETE FROM alert_deliveries WHERE rule_id = ?",
                            "DELETE FROM alert_rules WHERE id = ?"}) {
      ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
      stmt.Bind(1, id);
      RETURN_IF_ERROR(stmt.Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::ListAlertDeliveriesResponse> AlertsStore::ListDeliveries(int64_t workspace_id,
                                                                            int64_t id, int page,
                                                                            int per_page) {
  RETURN_IF_ERROR(ValidatePagination(page, per_page));
  return db::ReadResult<v1::ListAlertDeliveriesResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListAlertDeliveriesResponse> {
        RETURN_IF_ERROR(LoadRule(c, workspace_id, id).status());
        v1::ListAlertDeliveriesResponse out;
        ASSIGN_OR_RETURN(auto count, c.Prepare("SELECT COUNT(*) FROM alert_delivery_attempts "
                                               "WHERE rule_id = ?"));
        count.Bind(1, id);
        ASSIGN_OR_RETURN(bool row, count.Step());
        const int64_t total = row ? count.Int64(0) : 0;
        ASSIGN_OR_RETURN(
            auto stmt,
            c.Prepare("SELECT id, delivery_id, event, attempt, attempted_at, http_status, error, "
                      "next_retry_at, delivered FROM alert_delivery_attempts WHERE rule_id = ? "
                      "ORDER BY id DESC LIMIT ? OFFSET ?"));
        stmt.Bind(1, id)
            .Bind(2, static_cast<int64_t>(per_page))
            .Bind(3, static_cast<int64_t>(page - 1) * per_page);
        while (true) {
          ASSIGN_OR_RETURN(bool more, stmt.Step());
          if (!more) break;
          v1::AlertDelivery* d = out.add_data();
          d->set_id(stmt.Int64(0));
          d->set_delivery_id(stmt.Int64(1));
          d->set_event(stmt.Text(2));
          d->set_attempt(stmt.Int64(3));
          d->set_attempted_at(stmt.Text(4));
          if (!stmt.IsNull(5)) d->set_http_status(stmt.Int64(5));
          if (!stmt.IsNull(6)) d->set_error(stmt.Text(6));
          if (!stmt.IsNull(7)) d->set_next_retry_at(stmt.Text(7));
          d->set_delivered(stmt.Int64(8) != 0);
        }
        SetPagination(out.mutable_pagination(), page, per_page, total);
        return out;
      });
}

absl::StatusOr<std::vector<int64_t>> AlertsStore::DueRules(const std::vector<int64_t>& workspaces,
                                                           absl::Time now, int limit) {
  const int64_t stale = absl::ToUnixSeconds(now - options_.evaluation_interval);
  return db::ReadResult<std::vector<int64_t>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::vector<int64_t>> {
        std::vector<int64_t> ids;
        for (int64_t workspace_id : workspaces) {
          ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT id FROM alert_rules WHERE "
                                                "workspace_id = ? ORDER BY id LIMIT ?"));
          stmt.Bind(1, workspace_id).Bind(2, static_cast<int64_t>(limit));
          while (true) {
            ASSIGN_OR_RETURN(bool more, stmt.Step());
            if (!more) break;
            ids.push_back(stmt.Int64(0));
          }
        }
        ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT id FROM alert_rules WHERE checked_time <= ? "
                                              "ORDER BY checked_time, id LIMIT ?"));
        stmt.Bind(1, stale).Bind(2, static_cast<int64_t>(limit));
        while (true) {
          ASSIGN_OR_RETURN(bool more, stmt.Step());
          if (!more) break;
          ids.push_back(stmt.Int64(0));
        }
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        if (static_cast<int>(ids.size()) > limit) ids.resize(limit);
        return ids;
      });
}

absl::StatusOr<std::string> AlertsStore::Evaluate(int64_t rule_id, absl::Time now) {
  // The rule as it stands, read without a lock: the write below changes it only if no one
  // else did meanwhile.
  std::optional<RuleRow> loaded;
  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto stmt, c.Prepare(absl::StrCat("SELECT ", kRuleColumns, "WHERE id = ?")));
    stmt.Bind(1, rule_id);
    ASSIGN_OR_RETURN(bool found, stmt.Step());
    if (found) loaded = ReadRule(stmt);
    return absl::OkStatus();
  }));
  if (!loaded.has_value()) return std::string();
  const RuleRow& row = *loaded;
  const v1::AlertRule& rule = row.rule;
  ASSIGN_OR_RETURN(AlertFigure figure, ParseAlertFigure(rule.figure()));
  ASSIGN_OR_RETURN(AlertWindow window, ParseAlertWindow(rule.window()));
  const int64_t now_s = absl::ToUnixSeconds(now);

  FigureValue value;
  if (figure.kind == AlertFigure::Kind::kPassRate) {
    // Runs are counted by their owner, over the window as one bucket.
    if (options_.runs) {
      runs::RunCountQuery query;
      query.workspace_id = row.workspace_id;
      if (rule.has_agent_id()) query.agent_id = rule.agent_id();
      if (rule.has_scenario_id()) query.scenario_id = rule.scenario_id();
      query.from = now_s - window.seconds;
      query.width = window.seconds + 1;
      query.to = query.from + query.width;
      ASSIGN_OR_RETURN(auto counted, options_.runs(query));
      int64_t passed = 0, failed = 0;
      for (const auto& [bucket, counts] : counted) {
        passed += counts.passed;
        failed += counts.failed;
      }
      value.samples = passed + failed;
      // No run ids here: the counts themselves tell new evidence from old.
      value.newest = passed * 1000003 + failed;
      if (value.samples > 0) {
        value.value = static_cast<double>(passed) / static_cast<double>(value.samples);
      }
    }
  } else {
    // The window's calls: settled ones of the workspace (and the rule's agent or scenario),
    // since the window's start or the last `count` of them.
    Query q;
    std::string filter =
        absl::StrCat("c.workspace_id = ", q.Int(row.workspace_id),
                     " AND c.analysis_status IN ('completed', 'failed', 'skipped')");
    if (rule.has_agent_id()) absl::StrAppend(&filter, " AND c.agent_id = ", q.Int(rule.agent_id()));
    if (rule.has_scenario_id()) {
      absl::StrAppend(&filter, " AND c.scenario_id = ", q.Int(rule.scenario_id()));
    }
    if (window.seconds > 0) {
      absl::StrAppend(&filter, " AND c.call_time >= ", q.Int(now_s - window.seconds));
    }
    const int64_t limit = window.count > 0 ? window.count : int64_t{1} << 40;
    const std::string with =
        absl::StrCat("WITH w AS (SELECT c.id, c.analysis_status FROM calls c WHERE ", filter,
                     " ORDER BY c.call_time DESC, c.id DESC LIMIT ", q.Int(limit), ") ");
    RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
      auto prepare = [&](const std::string& sql,
                         const std::vector<int64_t>& extra_ints) -> absl::StatusOr<db::Statement> {
        ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
        for (size_t i = 0; i < q.ints.size(); ++i) stmt.Bind(static_cast<int>(i + 1), q.ints[i]);
        for (size_t i = 0; i < extra_ints.size(); ++i) {
          stmt.Bind(static_cast<int>(q.ints.size() + i + 1), extra_ints[i]);
        }
        return stmt;
      };
      const std::string next = absl::StrCat("?", q.ints.size() + 1);
      const std::string after = absl::StrCat("?", q.ints.size() + 2);
      switch (figure.kind) {
        case AlertFigure::Kind::kCallsFailedRate: {
          ASSIGN_OR_RETURN(
              auto stmt,
              prepare(absl::StrCat(with,
                                   "SELECT COUNT(*), CAST(COALESCE(SUM(CASE WHEN analysis_status "
                                   "= 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT), "
                                   "CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM w"),
                      {}));
          ASSIGN_OR_RETURN(bool found, stmt.Step());
          if (found) {
            value.samples = stmt.Int64(0);
            value.newest = stmt.Int64(2);
            if (value.samples > 0) {
              value.value = static_cast<double>(stmt.Int64(1)) / static_cast<double>(value.samples);
            }
          }
          return absl::OkStatus();
        }
        case AlertFigure::Kind::kMetricOutcome: {
          // The outcome is text: compared in SQL through a bound parameter after the ints.
          ASSIGN_OR_RETURN(
              auto stmt,
              prepare(absl::StrCat(
                          with, "SELECT COUNT(*), CAST(COALESCE(SUM(CASE WHEN m.outcome = ", after,
                          " THEN 1 ELSE 0 END), 0) AS BIGINT), "
                          "CAST(COALESCE(MAX(w.id), 0) AS BIGINT) FROM w JOIN "
                          "call_metrics m ON m.call_id = w.id WHERE m.metric_id = ",
                          next, " AND m.outcome IS NOT NULL"),
                      {figure.metric_id}));
          stmt.Bind(static_cast<int>(q.ints.size() + 2), figure.outcome);
          ASSIGN_OR_RETURN(bool found, stmt.Step());
          if (found) {
            value.samples = stmt.Int64(0);
            value.newest = stmt.Int64(2);
            if (value.samples > 0) {
              value.value = static_cast<double>(stmt.Int64(1)) / static_cast<double>(value.samples);
            }
          }
          return absl::OkStatus();
        }
        default:
          break;
      }
      // Latency: the calls with latency turns are the samples; the percentiles are merged from
      // their histograms as stats merge them.
      ASSIGN_OR_RETURN(
          auto stmt,
          prepare(absl::StrCat(
                      with,
                      "SELECT COUNT(*), CAST(COALESCE(SUM(f.latency_turns), 0) AS BIGINT), "
                      "CAST(COALESCE(SUM(COALESCE(f.latency_mean_ms, 0) * f.latency_turns), 0) "
                      "AS DOUBLE PRECISION), CAST(COALESCE(MAX(w.id), 0) AS BIGINT) FROM w JOIN "
                      "call_figures f ON f.call_id = w.id WHERE f.latency_turns > 0"),
                  {}));
      ASSIGN_OR_RETURN(bool found, stmt.Step());
      if (!found || stmt.Int64(0) == 0) return absl::OkStatus();
      value.samples = stmt.Int64(0);
      value.newest = stmt.Int64(3);
      const int64_t turns = stmt.Int64(1);
      if (figure.kind == AlertFigure::Kind::kLatencyMean) {
        if (turns > 0) value.value = stmt.Double(2) / static_cast<double>(turns);
        return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(auto bins,
                       prepare(absl::StrCat(with,
                                            "SELECT b.bin, CAST(SUM(b.turns) AS BIGINT) FROM w "
                                            "JOIN call_latency_bins b ON b.call_id = w.id "
                                            "GROUP BY b.bin"),
                               {}));
      LatencyHistogram histogram;
      while (true) {
        ASSIGN_OR_RETURN(bool more, bins.Step());
        if (!more) break;
        histogram[static_cast<int>(bins.Int64(0))] += bins.Int64(1);
      }
      value.value = HistogramPercentile(
          histogram, figure.kind == AlertFigure::Kind::kLatencyP50 ? 50.0 : 95.0);
      return absl::OkStatus();
    }));
  }

  std::optional<bool> holds;
  if (value.samples >= rule.min_samples() && value.value.has_value()) {
    holds = AlertConditionHolds(rule.op(), *value.value, rule.threshold());
  }
  const AlertStep step = StepAlert(row.state, holds, value.newest, now_s, options_.damping);
  const std::string checked_at = FormatTimestamp(now);

  return db::WriteResult<std::string>(*db_, [&](db::Connection& c) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(
        auto update,
        c.Prepare("UPDATE alert_rules SET state = ?, streak = ?, streak_time = ?, "
                  "streak_mark = ?, resolved_time = ?, last_value = ?, last_samples = ?, "
                  "last_checked_at = ?, checked_time = ?, version = version + 1 "
                  "WHERE id = ? AND version = ?"));
    update.Bind(1, step.next.state)
        .Bind(2, static_cast<int64_t>(step.next.streak))
        .Bind(3, step.next.streak_time)
        .Bind(4, step.next.streak_mark)
        .Bind(5, step.next.resolved_time)
        .Bind(6, value.value)
        .Bind(7, value.samples)
        .Bind(8, checked_at)
        .Bind(9, now_s)
        .Bind(10, rule_id)
        .Bind(11, row.version);
    RETURN_IF_ERROR(update.Run());
    // Another evaluation wrote first: its result stands, and this one's is dropped.
    if (c.Changes() == 0 || step.event.empty()) return std::string();
    v1::AlertRule now_rule = rule;
    now_rule.set_state(step.next.state);
    AlertNotice notice;
    notice.event = step.event;
    notice.rule = RuleJson(now_rule);
    notice.value = value.value;
    notice.threshold = rule.threshold();
    notice.samples = value.samples;
    notice.window = rule.window();
    notice.at = checked_at;
    ASSIGN_OR_RETURN(
        auto insert,
        c.Prepare("INSERT INTO alert_deliveries (rule_id, event, body, state, due_time, "
                  "created_at) VALUES (?, ?, ?, 'pending', ?, ?)"));
    insert.Bind(1, rule_id)
        .Bind(2, step.event)
        .Bind(3, AlertBody(rule.format(), notice))
        .Bind(4, now_s)
        .Bind(5, checked_at);
    RETURN_IF_ERROR(insert.Run());
    return step.event;
  });
}

absl::StatusOr<std::optional<AlertDeliveryJob>> AlertsStore::LeaseDelivery(absl::Time now) {
  const int64_t now_s = absl::ToUnixSeconds(now);
  db::WriteOptions claim;
  claim.isolation = db::Isolation::kReadCommitted;
  std::optional<AlertDeliveryJob> job;
  std::string sealed;
  RETURN_IF_ERROR(db_->Write(
      [&](db::Connection& c) -> absl::Status {
        job.reset();
        ASSIGN_OR_RETURN(
            auto pick,
            c.Prepare(absl::StrCat("SELECT id, rule_id, event, body, attempts FROM "
                                   "alert_deliveries WHERE state = 'pending' AND due_time <= ? "
                                   "ORDER BY due_time, id LIMIT 1",
                                   c.ForUpdateSkipLocked())));
        pick.Bind(1, now_s);
        ASSIGN_OR_RETURN(bool found, pick.Step());
        if (!found) return absl::OkStatus();
        AlertDeliveryJob j;
        j.id = pick.Int64(0);
        j.rule_id = pick.Int64(1);
        j.event = pick.Text(2);
        j.body = pick.Text(3);
        j.attempt = pick.Int64(4) + 1;
        // The lease: the row is due again only when a sender that took it died.
        ASSIGN_OR_RETURN(auto lease,
                         c.Prepare("UPDATE alert_deliveries SET attempts = ?, due_time = ?, "
                                   "lease_until = ? WHERE id = ?"));
        const int64_t until = now_s + absl::ToInt64Seconds(options_.delivery_lease);
        lease.Bind(1, j.attempt).Bind(2, until).Bind(3, until).Bind(4, j.id);
        RETURN_IF_ERROR(lease.Run());
        ASSIGN_OR_RETURN(auto rule, c.Prepare("SELECT webhook_url, sealed_secret FROM "
                                              "alert_rules WHERE id = ?"));
        rule.Bind(1, j.rule_id);
        ASSIGN_OR_RETURN(bool has_rule, rule.Step());
        if (!has_rule) return absl::OkStatus();
        j.webhook_url = rule.Text(0);
        sealed = rule.IsNull(1) ? "" : rule.Text(1);
        job = std::move(j);
        return absl::OkStatus();
      },
      claim));
  if (!job.has_value()) return job;
  if (options_.credentials_key.size() != 32 || sealed.empty()) {
    return InternalError("alert rule secret cannot be read: no credentials key");
  }
  ASSIGN_OR_RETURN(job->secret,
                   Unseal(options_.credentials_key, sealed, SealContext(job->rule_id)));
  return job;
}

absl::Duration AlertsStore::RetryDelay(int64_t attempt) const {
  // 10 s, 30 s, 2 min, 10 min, 30 min, 1 h, 1 h with the default base.
  static constexpr int64_t kFactors[] = {1, 3, 12, 60, 180, 360};
  const int64_t i = std::min<int64_t>(std::max<int64_t>(attempt, 1), 6) - 1;
  return options_.retry_base * kFactors[i];
}

absl::StatusOr<std::optional<absl::Time>> AlertsStore::RecordAttempt(const AlertDeliveryJob& job,
                                                                     absl::Time now, bool delivered,
                                                                     int http_status,
                                                                     const std::string& error) {
  std::optional<absl::Time> next;
  if (!delivered && job.attempt < options_.max_attempts) next = now + RetryDelay(job.attempt);
  const std::string state = delivered ? "delivered" : (next ? "pending" : "abandoned");
  RETURN_IF_ERROR(db_->Write([&](db::Connection& c) -> absl::Status {
    // Only the holder of this attempt's lease records it.
    ASSIGN_OR_RETURN(auto update, c.Prepare("UPDATE alert_deliveries SET state = ?, due_time = ?, "
                                            "lease_until = NULL WHERE id = ? AND attempts = ? AND "
                                            "state = 'pending'"));
    update.Bind(1, state)
        .Bind(2, next ? absl::ToUnixSeconds(*next) : absl::ToUnixSeconds(now))
        .Bind(3, job.id)
        .Bind(4, job.attempt);
    RETURN_IF_ERROR(update.Run());
    if (c.Changes() == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        auto insert,
        c.Prepare("INSERT INTO alert_delivery_attempts (delivery_id, rule_id, event, attempt, "
                  "attempted_at, http_status, error, next_retry_at, delivered) VALUES (?, ?, ?, "
                  "?, ?, ?, ?, ?, ?)"));
    insert.Bind(1, job.id)
        .Bind(2, job.rule_id)
        .Bind(3, job.event)
        .Bind(4, job.attempt)
        .Bind(5, FormatTimestamp(now))
        .Bind(6, http_status > 0 ? std::optional<int64_t>(http_status) : std::nullopt)
        .Bind(7, error.empty() ? std::nullopt : std::optional<std::string>(error))
        .Bind(8, next ? std::optional<std::string>(FormatTimestamp(*next)) : std::nullopt)
        .Bind(9, int64_t{delivered ? 1 : 0});
    return insert.Run();
  }));
  return next;
}

}  // namespace calleval::calls

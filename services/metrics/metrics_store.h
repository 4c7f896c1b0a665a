#pragma once

// Metric definitions of a workspace (docs/metrics.md, §4): the twelve standard metrics every
// installation has, and the workspace's custom metrics (custom_evaluation, phrase checks,
// permitted options, code as judge) with their agents, triggers and structured_output rules.
// Also the agent toggles, which edit the agent's disabled_metric_ids.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "calleval/v1/metrics.pb.h"
#include "common/database.h"
#include "common/standard_metrics.h"
#include "services/agents/deletion_listener.h"
#include "services/metrics/agent_directory.h"

namespace calleval::metrics {

// Custom metric ids start at kFirstCustomMetricId (common/standard_metrics.h).
using ::calleval::kFirstCustomMetricId;

// Default credit costs (docs/api.md §9); a metric's credit_cost overrides them.
inline constexpr int64_t kDeterministicMetricCost = 1;  // phrase, options, code
inline constexpr int64_t kLlmMetricCost = 2;            // custom_evaluation

// Of `ids`, those that name a custom metric of the workspace in `db` (MetricsStore::ExistingCustom;
// free, so the in-process MetricDirectory the scenarios store is built with needs no MetricsStore,
// which is itself built with the agents side's directory).
absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingCustomMetrics(db::Database& db,
                                                                   int64_t workspace_id,
                                                                   absl::Span<const int64_t> ids);

// Agents and scenarios belong to the agents service: the store asks `agents` whether those a
// metric names exist, and is told (as a DeletionListener) when they are deleted.
class MetricsStore final : public agents::DeletionListener {
 public:
  MetricsStore(db::Database* db, AgentDirectory* agents);

  // GET /api/v1/metrics. With agent_id (404 when not an agent of the workspace) only what
  // applies to that agent and is not disabled by it; `search` filters all three lists by name
  // (case-insensitive substring); `data` is paginated (page, per_page 1..100, else 422).
  absl::StatusOr<v1::ListMetricsResponse> List(int64_t workspace_id,
                                               const v1::ListMetricsRequest& request);
  // Validates and stores a custom metric; 422 with field-level details.
  absl::StatusOr<v1::Metric> Create(int64_t workspace_id, const v1::MetricFields& fields);
  // Validates `fields` as Create would, name uniqueness included, without saving anything.
  absl::StatusOr<v1::Metric> CheckNew(int64_t workspace_id, const v1::MetricFields& fields);
  // Standard ids (1–12) answer the standard metric; another workspace's metric is 404.
  absl::StatusOr<v1::Metric> Get(int64_t workspace_id, int64_t id);
  // Keys sent replace the stored ones, keys omitted are kept, keys sent as null are cleared;
  // the merged metric is validated as on create. A different metrics_type: 422; standard: 403.
  absl::StatusOr<v1::Metric> Update(int64_t workspace_id, int64_t id,
                                    const v1::MetricFields& fields);
  // Standard: 403.
  absl::Status Delete(int64_t workspace_id, int64_t id);
  // Creates each valid metric whose name is new (names compare case-insensitively, also
  // against the standard metrics and earlier items of the same request); duplicates are
  // skipped with reason duplicate_name. Any invalid item fails the whole request with 422
  // (fields prefixed "metrics[i].") and nothing is created.
  absl::StatusOr<v1::BulkCreateMetricsResponse> BulkCreate(int64_t workspace_id,
                                                           const v1::BulkCreateMetricsBody& body);

  // GET /api/public/v1/metrics: every metric usable in metric_ids. With an agent: the standard
  // metrics and the custom metrics that apply to it, `enabled` false for those it disabled.
  absl::StatusOr<v1::ListUsableMetricsResponse> ListUsable(int64_t workspace_id,
                                                           std::optional<int64_t> agent_id);

  // For call ingest (in this process, or through Metrics/GetIngestCatalog): every custom metric
  // of the workspace, with whether it applies to the agent (the agent is in agent_ids or the
  // metric is global; whether the agent disabled it is the caller's business).
  absl::StatusOr<v1::IngestCatalog> Catalog(int64_t workspace_id, int64_t agent_id);
  // For scoring: the definitions (as Get returns them, standard ids included) of those `ids`
  // that still exist in the workspace, in the order of `ids`, each once.
  absl::StatusOr<std::vector<v1::Metric>> Definitions(int64_t workspace_id,
                                                      const std::vector<int64_t>& ids);

  // Of `ids`, those that name a custom metric of the workspace (for the agents service, which
  // keeps metric ids in scenarios; services/agents/metric_directory.h).
  absl::StatusOr<absl::flat_hash_set<int64_t>> ExistingCustom(int64_t workspace_id,
                                                              absl::Span<const int64_t> ids);

  // PUT /agents/{id}/standard_metrics: the standard part of the agent's disabled_metric_ids
  // becomes exactly `disabled_keys` (unknown key: 422); custom entries are kept.
  absl::StatusOr<v1::AgentStandardMetrics> SetStandardToggles(
      int64_t workspace_id, int64_t agent_id, const std::vector<std::string>& disabled_keys);
  // PUT /agents/{id}/llm_metrics: the custom part becomes exactly `disabled_ids` (each must be
  // a custom metric of the workspace, else 422); standard entries are kept.
  absl::StatusOr<v1::AgentLlmMetrics> SetCustomToggles(int64_t workspace_id, int64_t agent_id,
                                                       const std::vector<int64_t>& disabled_ids);

  // The agent or scenario is deleted: metrics no longer name it. Idempotent, and a no-op for
  // ids of another workspace and for an id the agents service says exists (again).
  absl::Status AgentDeleted(int64_t workspace_id, int64_t agent_id) override;
  absl::Status ScenarioDeleted(int64_t workspace_id, int64_t scenario_id) override;

 private:
  // Leaves out of each metric's agent_ids and scenario_ids those that no longer exist: links
  // whose deletion notice was lost.
  template <typename Metrics>
  absl::Status DropDeletedLinks(int64_t workspace_id, Metrics& metrics);

  db::Database* db_;
  AgentDirectory* agents_;
};

}  // namespace calleval::metrics

#pragma once

// The Metrics service: definitions, listings and toggles (the store), validate_code and
// test_code (the sandbox), generate (the LLM). Its handlers, one per RPC, are listed in its
// method table (metrics_methods.h), which serves them on gRPC and at the edge
// (common/method_table.h).

#include <functional>
#include <string>

#include "absl/types/span.h"
#include "calleval/v1/calls.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "common/llm_client.h"
#include "common/method_table.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
#include "services/accounts/request_guard.h"
#include "services/judges/sandbox.h"
#include "services/metrics/metric_generator.h"
#include "services/metrics/metrics_store.h"

namespace calleval::metrics {

// A call of the workspace by id (test_code runs against it); NotFound when there is none.
using CallLookup = std::function<absl::StatusOr<v1::Call>(int64_t workspace_id, int64_t call_id)>;
// The agent of a call as a code judge sees it.
using JobAgentLookup =
    std::function<absl::StatusOr<v1::JobAgent>(int64_t workspace_id, int64_t agent_id)>;
// What metric generation reads of an agent; NotFound when it is not in the workspace.
using AgentBriefLookup =
    std::function<absl::StatusOr<AgentBrief>(int64_t workspace_id, int64_t agent_id)>;

class MetricsService {
 public:
  using Api = v1::Metrics;
  static absl::Span<const MethodEntry<MetricsService>> Methods();

  struct Dependencies {
    MetricsStore* store = nullptr;
    accounts::Authenticator* authenticator = nullptr;
    ThreadPool* pool = nullptr;
    // Bounded pools for code runs (validate_code, test_code) and generation: a full one sheds
    // the request with 503 overloaded. Null: those run on `pool`.
    ThreadPool* sandbox_pool = nullptr;
    ThreadPool* llm_pool = nullptr;
    // Null when the installation has no sandbox: validate_code and test_code answer 503.
    const judges::PythonSandbox* sandbox = nullptr;
    CallLookup calls;
    JobAgentLookup agents;
    // Null without an LLM provider: generate answers 503 llm_unavailable.
    LlmClient* llm = nullptr;
    AgentBriefLookup agent_briefs;
    // Admits the internal methods (ExistingMetrics, AgentDeleted, ScenarioDeleted,
    // GetMetricDefinitions) for calls carrying it (common/internal_credential.h); empty, they
    // refuse every call.
    std::string internal_credential;
  };
  explicit MetricsService(Dependencies deps)
      : deps_(std::move(deps)), guard_(deps_.authenticator, deps_.internal_credential) {}

  ThreadPool* pool() const { return deps_.pool; }
  // The bounded pools of the slow methods (null: pool()).
  ThreadPool* sandbox_pool() const { return deps_.sandbox_pool; }
  ThreadPool* llm_pool() const { return deps_.llm_pool; }
  const RequestGuard& guard() const { return guard_; }

  // The handlers: the caller's workspace is context.workspace_id.
  absl::Status ListMetrics(const RequestContext& context, const v1::ListMetricsRequest& request,
                           v1::ListMetricsResponse* response);
  absl::Status CreateMetric(const RequestContext& context, const v1::CreateMetricRequest& request,
                            v1::Metric* response);
  absl::Status GetMetric(const RequestContext& context, const v1::GetMetricRequest& request,
                         v1::Metric* response);
  absl::Status UpdateMetric(const RequestContext& context, const v1::UpdateMetricRequest& request,
                            v1::Metric* response);
  absl::Status DeleteMetric(const RequestContext& context, const v1::DeleteMetricRequest& request,
                            google::protobuf::Empty* response);
  absl::Status GenerateMetrics(const RequestContext& context,
                               const v1::GenerateMetricsRequest& request,
                               v1::GenerateMetricsResponse* response);
  absl::Status BulkCreateMetrics(const RequestContext& context,
                                 const v1::BulkCreateMetricsRequest& request,
                                 v1::BulkCreateMetricsResponse* response);
  absl::Status ValidateCode(const RequestContext& context, const v1::ValidateCodeRequest& request,
                            v1::ValidateCodeResponse* response);
  absl::Status TestCode(const RequestContext& context, const v1::TestCodeRequest& request,
                        v1::TestCodeResponse* response);
  absl::Status SetAgentStandardMetrics(const RequestContext& context,
                                       const v1::SetAgentStandardMetricsRequest& request,
                                       v1::AgentStandardMetrics* response);
  absl::Status SetAgentLlmMetrics(const RequestContext& context,
                                  const v1::SetAgentLlmMetricsRequest& request,
                                  v1::AgentLlmMetrics* response);
  absl::Status ListUsableMetrics(const RequestContext& context,
                                 const v1::ListUsableMetricsRequest& request,
                                 v1::ListUsableMetricsResponse* response);

  // Internal: what the agents service asks and tells the metrics store when it runs in another
  // process (services/metrics/grpc_metrics_clients.h; metrics_service_internal.cc).
  absl::Status ExistingMetrics(const RequestContext& context,
                               const v1::ExistingIdsRequest& request, v1::ExistingIds* response);
  absl::Status AgentDeleted(const RequestContext& context, const v1::AgentDeletedRequest& request,
                            google::protobuf::Empty* response);
  absl::Status ScenarioDeleted(const RequestContext& context,
                               const v1::ScenarioDeletedRequest& request,
                               google::protobuf::Empty* response);
  // Asked by the calls service in another process on every ingest.
  absl::Status GetIngestCatalog(const RequestContext& context,
                                const v1::GetIngestCatalogRequest& request,
                                v1::IngestCatalog* response);
  // For the runs workers in other processes: the definitions of metrics of the workspace.
  absl::Status GetMetricDefinitions(const RequestContext& context,
                                    const v1::GetMetricDefinitionsRequest& request,
                                    v1::MetricDefinitions* response);

 private:
  Dependencies deps_;
  const accounts::ApiKeyGuard guard_;
};

}  // namespace calleval::metrics

#pragma once

// gRPC adapter of the Metrics service: authenticates, resolves the workspace, calls the store
// (definitions, listings, toggles) or the sandbox (validate_code, test_code).

#include <functional>
#include <string>

#include "calleval/v1/calls.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "common/llm_client.h"
#include "common/thread_pool.h"
#include "services/accounts/authenticator.h"
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

class MetricsService final : public v1::Metrics::CallbackService {
 public:
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
    // Opens the internal methods (ExistingMetrics, AgentDeleted, ScenarioDeleted) to calls
    // carrying it (common/internal_credential.h); empty, they refuse every call.
    std::string internal_credential;
  };
  explicit MetricsService(Dependencies deps) : deps_(std::move(deps)) {}

  grpc::ServerUnaryReactor* ListMetrics(grpc::CallbackServerContext* context,
                                        const v1::ListMetricsRequest* request,
                                        v1::ListMetricsResponse* response) override;
  grpc::ServerUnaryReactor* CreateMetric(grpc::CallbackServerContext* context,
                                         const v1::CreateMetricRequest* request,
                                         v1::Metric* response) override;
  grpc::ServerUnaryReactor* GetMetric(grpc::CallbackServerContext* context,
                                      const v1::GetMetricRequest* request,
                                      v1::Metric* response) override;
  grpc::ServerUnaryReactor* UpdateMetric(grpc::CallbackServerContext* context,
                                         const v1::UpdateMetricRequest* request,
                                         v1::Metric* response) override;
  grpc::ServerUnaryReactor* DeleteMetric(grpc::CallbackServerContext* context,
                                         const v1::DeleteMetricRequest* request,
                                         google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* GenerateMetrics(grpc::CallbackServerContext* context,
                                            const v1::GenerateMetricsRequest* request,
                                            v1::GenerateMetricsResponse* response) override;
  grpc::ServerUnaryReactor* BulkCreateMetrics(grpc::CallbackServerContext* context,
                                              const v1::BulkCreateMetricsRequest* request,
                                              v1::BulkCreateMetricsResponse* response) override;
  grpc::ServerUnaryReactor* ValidateCode(grpc::CallbackServerContext* context,
                                         const v1::ValidateCodeRequest* request,
                                         v1::ValidateCodeResponse* response) override;
  grpc::ServerUnaryReactor* TestCode(grpc::CallbackServerContext* context,
                                     const v1::TestCodeRequest* request,
                                     v1::TestCodeResponse* response) override;
  grpc::ServerUnaryReactor* SetAgentStandardMetrics(
      grpc::CallbackServerContext* context, const v1::SetAgentStandardMetricsRequest* request,
      v1::AgentStandardMetrics* response) override;
  grpc::ServerUnaryReactor* SetAgentLlmMetrics(grpc::CallbackServerContext* context,
                                               const v1::SetAgentLlmMetricsRequest* request,
                                               v1::AgentLlmMetrics* response) override;
  grpc::ServerUnaryReactor* ListUsableMetrics(grpc::CallbackServerContext* context,
                                              const v1::ListUsableMetricsRequest* request,
                                              v1::ListUsableMetricsResponse* response) override;

  // Internal: for the agents service in another process (services/metrics/grpc_metrics_clients.h);
  // answered by the store (metrics_service_internal.cc).
  grpc::ServerUnaryReactor* ExistingMetrics(grpc::CallbackServerContext* context,
                                            const v1::ExistingIdsRequest* request,
                                            v1::ExistingIds* response) override;
  grpc::ServerUnaryReactor* AgentDeleted(grpc::CallbackServerContext* context,
                                         const v1::AgentDeletedRequest* request,
                                         google::protobuf::Empty* response) override;
  grpc::ServerUnaryReactor* ScenarioDeleted(grpc::CallbackServerContext* context,
                                            const v1::ScenarioDeletedRequest* request,
                                            google::protobuf::Empty* response) override;

  // The handlers, independent of the transport (see calls_service.h).
  absl::Status HandleListMetrics(const std::string& authorization,
                                 const v1::ListMetricsRequest& request,
                                 v1::ListMetricsResponse* response);
  absl::Status HandleCreateMetric(const std::string& authorization,
                                  const v1::CreateMetricRequest& request, v1::Metric* response);
  absl::Status HandleGetMetric(const std::string& authorization,
                               const v1::GetMetricRequest& request, v1::Metric* response);
  absl::Status HandleUpdateMetric(const std::string& authorization,
                                  const v1::UpdateMetricRequest& request, v1::Metric* response);
  absl::Status HandleDeleteMetric(const std::string& authorization,
                                  const v1::DeleteMetricRequest& request,
                                  google::protobuf::Empty* response);
  absl::Status HandleGenerateMetrics(const std::string& authorization,
                                     const v1::GenerateMetricsRequest& request,
                                     v1::GenerateMetricsResponse* response);
  absl::Status HandleBulkCreateMetrics(const std::string& authorization,
                                       const v1::BulkCreateMetricsRequest& request,
                                       v1::BulkCreateMetricsResponse* response);
  absl::Status HandleValidateCode(const std::string& authorization,
                                  const v1::ValidateCodeRequest& request,
                                  v1::ValidateCodeResponse* response);
  absl::Status HandleTestCode(const std::string& authorization, const v1::TestCodeRequest& request,
                              v1::TestCodeResponse* response);
  absl::Status HandleSetAgentStandardMetrics(const std::string& authorization,
                                             const v1::SetAgentStandardMetricsRequest& request,
                                             v1::AgentStandardMetrics* response);
  absl::Status HandleSetAgentLlmMetrics(const std::string& authorization,
                                        const v1::SetAgentLlmMetricsRequest& request,
                                        v1::AgentLlmMetrics* response);
  absl::Status HandleListUsableMetrics(const std::string& authorization,
                                       const v1::ListUsableMetricsRequest& request,
                                       v1::ListUsableMetricsResponse* response);

 private:
  Dependencies deps_;
};

}  // namespace calleval::metrics

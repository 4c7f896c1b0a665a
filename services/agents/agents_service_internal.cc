// The Agents service's internal methods: what the other services ask of the agents and
// scenarios tables when the agents role runs in another process. Each answers through the same
// in-process directory a process with both roles uses, so the two paths cannot drift. The
// method table admits only the installation's credential (Access::kInternal).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "services/agents/agents_service.h"
#include "services/agents/in_process_agent_directory.h"
#include "services/agents/in_process_run_agents.h"
#include "services/agents/in_process_scenario_directory.h"
#include "services/runs/run_queue.h"

namespace calleval::agents {
namespace {

void SetIds(const absl::flat_hash_set<int64_t>& ids, v1::ExistingIds* response) {
  response->mutable_ids()->Add(ids.begin(), ids.end());
}

}  // namespace

absl::Status AgentsService::ExistingAgents(const RequestContext& /*context*/,
                                           const v1::ExistingIdsRequest& request,
                                           v1::ExistingIds* response) {
  ASSIGN_OR_RETURN(auto existing, store_->Existing(request.workspace_id(), request.ids()));
  SetIds(existing, response);
  return absl::OkStatus();
}

absl::Status AgentsService::ExistingScenarios(const RequestContext& /*context*/,
                                              const v1::ExistingIdsRequest& request,
                                              v1::ExistingIds* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  ASSIGN_OR_RETURN(auto existing, scenarios->Existing(request.workspace_id(), request.ids()));
  SetIds(existing, response);
  return absl::OkStatus();
}

absl::Status AgentsService::GetDisabledMetrics(const RequestContext& /*context*/,
                                               const v1::GetDisabledMetricsRequest& request,
                                               v1::DisabledMetrics* response) {
  InProcessAgentDirectory directory(store_, scenarios_);
  ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                   directory.DisabledMetrics(request.workspace_id(), request.agent_id()));
  response->mutable_metric_ids()->Add(ids.begin(), ids.end());
  return absl::OkStatus();
}

absl::Status AgentsService::ReplaceDisabledMetrics(const RequestContext& /*context*/,
                                                   const v1::ReplaceDisabledMetricsRequest& request,
                                                   v1::DisabledMetrics* response) {
  InProcessAgentDirectory directory(store_, scenarios_);
  ASSIGN_OR_RETURN(
      std::vector<int64_t> ids,
      directory.ReplaceDisabledMetrics(
          request.workspace_id(), request.agent_id(),
          request.standard() ? metrics::AgentDirectory::MetricKind::kStandard
                             : metrics::AgentDirectory::MetricKind::kCustom,
          std::vector<int64_t>(request.metric_ids().begin(), request.metric_ids().end())));
  response->mutable_metric_ids()->Add(ids.begin(), ids.end());
  return absl::OkStatus();
}

absl::Status AgentsService::GetScenarioAgents(const RequestContext& /*context*/,
                                              const v1::ExistingIdsRequest& request,
                                              v1::ScenarioAgents* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  InProcessScenarioDirectory directory(store_, scenarios);
  ASSIGN_OR_RETURN(auto found, directory.ScenarioAgents(request.workspace_id(), request.ids()));
  for (const auto& [scenario_id, of] : found) {
    v1::ScenarioAgents::Entry* entry = response->add_scenarios();
    entry->set_scenario_id(scenario_id);
    entry->set_agent_id(of.agent_id);
    entry->set_agent_has_phone(of.agent_has_phone);
  }
  return absl::OkStatus();
}

absl::Status AgentsService::GetAgentPhone(const RequestContext& /*context*/,
                                          const v1::GetAgentPhoneRequest& request,
                                          v1::AgentPhone* response) {
  ASSIGN_OR_RETURN(bool has_phone,
                   store_->HasPhoneNumber(request.workspace_id(), request.agent_id()));
  response->set_has_phone(has_phone);
  return absl::OkStatus();
}

absl::Status AgentsService::GetCallAgent(const RequestContext& /*context*/,
                                         const v1::GetCallAgentRequest& request,
                                         v1::CallAgent* response) {
  ASSIGN_OR_RETURN(*response, store_->GetCallAgent(request.workspace_id(), request.agent_id()));
  return absl::OkStatus();
}

absl::Status AgentsService::CountRuns(const RequestContext& /*context*/,
                                      const v1::CountRunsRequest& request,
                                      v1::RunCountBuckets* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  ASSIGN_OR_RETURN(auto counts, runs->CountRuns(runs::FromProto(request)));
  *response = runs::ToProto(counts);
  return absl::OkStatus();
}

absl::Status AgentsService::GetRunScenario(const RequestContext& /*context*/,
                                           const v1::WorkspaceItemRequest& request,
                                           v1::Scenario* response) {
  InProcessRunAgents run_agents(store_, scenarios_);
  ASSIGN_OR_RETURN(*response, run_agents.GetScenario(request.workspace_id(), request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::GetRunAgent(const RequestContext& /*context*/,
                                        const v1::WorkspaceItemRequest& request,
                                        v1::Agent* response) {
  InProcessRunAgents run_agents(store_, scenarios_);
  ASSIGN_OR_RETURN(*response, run_agents.GetAgent(request.workspace_id(), request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::GetAgentWebChannel(const RequestContext& /*context*/,
                                               const v1::WorkspaceItemRequest& request,
                                               v1::AgentWebChannel* response) {
  InProcessRunAgents run_agents(store_, scenarios_);
  ASSIGN_OR_RETURN(std::optional<WebChannel> channel,
                   run_agents.GetWebChannel(request.workspace_id(), request.id()));
  ASSIGN_OR_RETURN(*response, WebChannelToProto(channel));
  return absl::OkStatus();
}

absl::Status AgentsService::GetRunIntegration(const RequestContext& /*context*/,
                                              const v1::RunIntegrationRequest& request,
                                              v1::RunIntegration* response) {
  ASSIGN_OR_RETURN(IntegrationsStore * integrations, Integrations());
  InProcessRunAgents run_agents(store_, scenarios_, integrations);
  ASSIGN_OR_RETURN(std::optional<IntegrationSettings> settings,
                   run_agents.GetIntegration(request.workspace_id(), request.provider()));
  ASSIGN_OR_RETURN(*response, IntegrationToProto(settings));
  return absl::OkStatus();
}

absl::Status AgentsService::LeaseRun(const RequestContext& /*context*/,
                                     const v1::LeaseRunRequest& request,
                                     v1::LeaseRunResponse* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * store, Runs());
  runs::StoreRunQueue queue(store);
  ASSIGN_OR_RETURN(std::optional<runs::RunJob> job,
                   queue.Lease(absl::Seconds(std::max(1, request.lease_seconds())),
                               std::max(1, request.max_attempts()), request.holder()));
  if (job) *response->mutable_run() = runs::ToProto(*job);
  return absl::OkStatus();
}

absl::Status AgentsService::RenewRunLease(const RequestContext& /*context*/,
                                          const v1::RenewRunLeaseRequest& request,
                                          google::protobuf::Empty* /*response*/) {
  ASSIGN_OR_RETURN(runs::RunsStore * store, Runs());
  return runs::StoreRunQueue(store).Renew(request.run_id(), request.token(),
                                          absl::Seconds(std::max(1, request.lease_seconds())));
}

absl::Status AgentsService::SetRunCall(const RequestContext& /*context*/,
                                       const v1::SetRunCallRequest& request,
                                       google::protobuf::Empty* /*response*/) {
  ASSIGN_OR_RETURN(runs::RunsStore * store, Runs());
  return runs::StoreRunQueue(store).SetCall(request.run_id(), request.token(), request.call_id());
}

absl::Status AgentsService::FinishRun(const RequestContext& /*context*/,
                                      const v1::FinishRunRequest& request,
                                      google::protobuf::Empty* /*response*/) {
  ASSIGN_OR_RETURN(runs::RunsStore * store, Runs());
  if (request.status() != "completed" && request.status() != "failed") {
    return absl::InvalidArgumentError(
        absl::StrCat("a run ends completed or failed, not ", request.status()));
  }
  runs::RunOutcome outcome{request.status(), std::nullopt, request.end_reason(), request.error()};
  if (request.has_passed()) outcome.passed = request.passed();
  if (request.has_agent_version()) outcome.agent_version = request.agent_version();
  if (request.has_platform_version()) outcome.platform_version = request.platform_version();
  return runs::StoreRunQueue(store).Finish(request.run_id(), request.token(), outcome);
}

absl::Status AgentsService::ReleaseRun(const RequestContext& /*context*/,
                                       const v1::ReleaseRunRequest& request,
                                       google::protobuf::Empty* /*response*/) {
  ASSIGN_OR_RETURN(runs::RunsStore * store, Runs());
  return runs::StoreRunQueue(store).Release(request.run_id(), request.token());
}

absl::Status AgentsService::ReleaseRunLeasesOf(const RequestContext& /*context*/,
                                               const v1::ReleaseRunLeasesOfRequest& request,
                                               v1::ReleaseRunLeasesOfResponse* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * store, Runs());
  ASSIGN_OR_RETURN(int released, runs::StoreRunQueue(store).ReleaseLeasesOf(request.holder()));
  response->set_released(released);
  return absl::OkStatus();
}

absl::Status AgentsService::HandlePlatformEvent(const RequestContext& /*context*/,
                                                const v1::PlatformEventRequest& request,
                                                v1::PlatformEventResponse* response) {
  if (platform_events_ == nullptr) {
    return absl::UnavailableError("platform events are not handled by this process");
  }
  ASSIGN_OR_RETURN(*response, platform_events_->Handle(request));
  return absl::OkStatus();
}

}  // namespace calleval::agents

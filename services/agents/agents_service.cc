#include "services/agents/agents_service.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "services/agents/agents_methods.h"
#include "services/agents/replay.h"

namespace calleval::agents {
namespace {

// The delete has committed and is the client's answer whatever the listener says: a notice
// that fails leaves links that readers ignore (services/agents/deletion_listener.h).
void ReportFailedNotice(const absl::Status& status, absl::string_view what, int64_t id) {
  if (status.ok()) return;
  LogWarn(absl::StrCat(what, " is deleted, but telling the metrics service failed"),
          {{"id", id}, {"error", status}});
}

}  // namespace

absl::Span<const MethodEntry<AgentsService>> AgentsService::Methods() { return kAgentsMethods; }

absl::Status AgentsService::CreateAgent(const RequestContext& context,
                                        const v1::AgentFields& request, v1::Agent* response) {
  const int64_t workspace_id = context.workspace_id;
  if (platform_pull_) {
    v1::AgentFields pulled = request;
    RETURN_IF_ERROR(platform_pull_->IntoCreate(workspace_id, pulled));
    ASSIGN_OR_RETURN(*response, store_->Create(workspace_id, pulled));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*response, store_->Create(workspace_id, request));
  return absl::OkStatus();
}

absl::Status AgentsService::GetAgent(const RequestContext& context,
                                     const v1::GetAgentRequest& request, v1::Agent* response) {
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, store_->Get(workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::UpdateAgent(const RequestContext& context,
                                        const v1::UpdateAgentRequest& request,
                                        v1::Agent* response) {
  const int64_t workspace_id = context.workspace_id;
  if (platform_pull_) {
    v1::AgentFields pulled = request.agent();
    RETURN_IF_ERROR(platform_pull_->IntoUpdate(workspace_id, request.id(), pulled));
    ASSIGN_OR_RETURN(*response, store_->Update(workspace_id, request.id(), pulled));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*response, store_->Update(workspace_id, request.id(), request.agent()));
  return absl::OkStatus();
}

absl::Status AgentsService::DeleteAgent(const RequestContext& context,
                                        const v1::DeleteAgentRequest& request,
                                        google::protobuf::Empty* response) {
  const int64_t workspace_id = context.workspace_id;
  RETURN_IF_ERROR(store_->Delete(workspace_id, request.id()));
  if (deletion_listener_ != nullptr) {
    ReportFailedNotice(deletion_listener_->AgentDeleted(workspace_id, request.id()), "agent",
                       request.id());
  }
  return absl::OkStatus();
}

absl::Status AgentsService::ListAgents(const RequestContext& context,
                                       const v1::ListAgentsRequest& request,
                                       v1::ListAgentsResponse* response) {
  const int64_t workspace_id = context.workspace_id;
  const int page = request.has_page() ? request.page() : 1;
  const int per_page = request.has_per_page() ? request.per_page() : kDefaultPerPage;
  ASSIGN_OR_RETURN(*response, store_->List(workspace_id, page, per_page));
  return absl::OkStatus();
}

absl::Status AgentsService::ListLanguages(const RequestContext& context,
                                          const v1::ListLanguagesRequest& request,
                                          v1::ListLanguagesResponse* response) {
  ASSIGN_OR_RETURN(*response, store_->ListLanguages());
  return absl::OkStatus();
}

absl::StatusOr<IntegrationsStore*> AgentsService::Integrations() {
  if (integrations_ == nullptr) {
    return absl::UnavailableError("integration settings are not served here");
  }
  return integrations_;
}

absl::Status AgentsService::ListIntegrations(const RequestContext& context,
                                             const v1::ListIntegrationsRequest& request,
                                             v1::ListIntegrationsResponse* response) {
  ASSIGN_OR_RETURN(IntegrationsStore * integrations, Integrations());
  ASSIGN_OR_RETURN(*response, integrations->List(context.workspace_id));
  return absl::OkStatus();
}

absl::Status AgentsService::GetIntegration(const RequestContext& context,
                                           const v1::IntegrationRequest& request,
                                           v1::Integration* response) {
  ASSIGN_OR_RETURN(IntegrationsStore * integrations, Integrations());
  ASSIGN_OR_RETURN(*response, integrations->Get(context.workspace_id, request.provider()));
  return absl::OkStatus();
}

absl::Status AgentsService::ReplaceIntegration(const RequestContext& context,
                                               const v1::WriteIntegrationRequest& request,
                                               v1::Integration* response) {
  ASSIGN_OR_RETURN(IntegrationsStore * integrations, Integrations());
  ASSIGN_OR_RETURN(*response, integrations->Write(context.workspace_id, request.provider(),
                                                  request.settings(), /*replace=*/true));
  return absl::OkStatus();
}

absl::Status AgentsService::UpdateIntegration(const RequestContext& context,
                                              const v1::WriteIntegrationRequest& request,
                                              v1::Integration* response) {
  ASSIGN_OR_RETURN(IntegrationsStore * integrations, Integrations());
  ASSIGN_OR_RETURN(*response, integrations->Write(context.workspace_id, request.provider(),
                                                  request.settings(), /*replace=*/false));
  return absl::OkStatus();
}

absl::Status AgentsService::DeleteIntegration(const RequestContext& context,
                                              const v1::IntegrationRequest& request,
                                              google::protobuf::Empty* response) {
  ASSIGN_OR_RETURN(IntegrationsStore * integrations, Integrations());
  return integrations->Delete(context.workspace_id, request.provider());
}

absl::StatusOr<ScenariosStore*> AgentsService::Scenarios() {
  if (scenarios_ == nullptr) return absl::UnavailableError("scenarios are not served here");
  return scenarios_;
}

absl::Status AgentsService::CreateScenario(const RequestContext& context,
                                           const v1::ScenarioFields& request,
                                           v1::Scenario* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, scenarios->Create(workspace_id, request));
  return absl::OkStatus();
}

absl::Status AgentsService::GetScenario(const RequestContext& context,
                                        const v1::GetScenarioRequest& request,
                                        v1::Scenario* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, scenarios->Get(workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::UpdateScenario(const RequestContext& context,
                                           const v1::UpdateScenarioRequest& request,
                                           v1::Scenario* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, scenarios->Update(workspace_id, request.id(), request.scenario()));
  return absl::OkStatus();
}

absl::Status AgentsService::DeleteScenario(const RequestContext& context,
                                           const v1::DeleteScenarioRequest& request,
                                           google::protobuf::Empty* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  const int64_t workspace_id = context.workspace_id;
  RETURN_IF_ERROR(scenarios->Delete(workspace_id, request.id()));
  if (deletion_listener_ != nullptr) {
    ReportFailedNotice(deletion_listener_->ScenarioDeleted(workspace_id, request.id()), "scenario",
                       request.id());
  }
  return absl::OkStatus();
}

absl::Status AgentsService::ListScenarios(const RequestContext& context,
                                          const v1::ListScenariosRequest& request,
                                          v1::ListScenariosResponse* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, scenarios->List(workspace_id, request));
  return absl::OkStatus();
}

absl::Status AgentsService::ReplayCall(const RequestContext& context,
                                       const v1::ReplayCallRequest& request,
                                       v1::Scenario* response) {
  ASSIGN_OR_RETURN(ScenariosStore * scenarios, Scenarios());
  if (!replay_calls_) return absl::UnavailableError("replays are not served here");
  const int64_t workspace_id = context.workspace_id;
  const std::string mode = request.has_mode() ? request.mode() : "script";
  if (mode != "script" && mode != "persona") {
    return ValidationError("validation_failed", "invalid replay request",
                           {{"mode", "must be script or persona"}});
  }
  // A call of another workspace is not found, like any other read of it.
  ASSIGN_OR_RETURN(v1::Call call, replay_calls_(workspace_id, request.id()));
  if (call.agent_id() == 0) {
    return ValidationError("validation_failed", "the call has no agent to replay it against",
                           {{"agent_id", absl::StrCat("call ", call.id(), " has no agent")}});
  }
  MaskOptions masking;
  if (integrations_ != nullptr) {
    absl::StatusOr<v1::Integration> privacy = integrations_->Get(workspace_id, "privacy");
    if (privacy.ok()) {
      masking = MaskOptionsFrom(privacy->settings());
    } else if (privacy.status().code() != absl::StatusCode::kNotFound) {
      return privacy.status();
    }
  }
  const std::vector<std::string> lines = CallerLines(call, masking);
  if (lines.empty()) {
    return ValidationError("validation_failed", "the call has no caller lines to replay",
                           {{"transcript", "has no turn with role User"}});
  }
  v1::ScenarioFields fields;
  fields.set_agent_id(call.agent_id());
  fields.set_name(request.has_name() && !request.name().empty()
                      ? request.name()
                      : absl::StrCat("Replay of call ", call.call_identifier()));
  if (mode == "script") {
    for (const std::string& line : lines) fields.add_caller_script(line);
  } else {
    if (llm_ == nullptr) {
      return MakeError(absl::StatusCode::kUnavailable, "llm_unavailable",
                       "no LLM provider is configured (CALLEVAL_LLM_BASE_URL)");
    }
    ASSIGN_OR_RETURN(WrittenPersona written, WritePersona(*llm_, lines));
    fields.set_persona(written.persona);
    fields.set_goal(written.goal);
    // Enough turns for the caller to say as much as the original did, and a little more.
    fields.set_max_turns(static_cast<int32_t>(std::min<size_t>(lines.size() * 2 + 2, 50)));
  }
  for (int64_t id : FailingMetricIds(call)) fields.add_metric_ids(id);
  ASSIGN_OR_RETURN(*response, scenarios->Create(workspace_id, fields, call.id()));
  return absl::OkStatus();
}

absl::StatusOr<runs::RunsStore*> AgentsService::Runs() {
  if (runs_ == nullptr) return absl::UnavailableError("runs are not served here");
  return runs_;
}

absl::Status AgentsService::RunScenario(const RequestContext& context,
                                        const v1::RunScenarioRequest& request, v1::Run* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  const int64_t workspace_id = context.workspace_id;
  std::optional<std::string> channel;
  if (request.has_channel()) channel = request.channel();
  ASSIGN_OR_RETURN(*response, runs->CreateRun(workspace_id, request.id(), channel));
  if (on_run_queued_) on_run_queued_();
  return absl::OkStatus();
}

absl::Status AgentsService::GetRun(const RequestContext& context, const v1::GetRunRequest& request,
                                   v1::Run* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, runs->GetRun(workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::ListRuns(const RequestContext& context,
                                     const v1::ListRunsRequest& request,
                                     v1::ListRunsResponse* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, runs->ListRuns(workspace_id, request));
  return absl::OkStatus();
}

absl::Status AgentsService::CreateBatchRun(const RequestContext& context,
                                           const v1::CreateBatchRunRequest& request,
                                           v1::BatchRun* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, runs->CreateBatch(workspace_id, request));
  if (on_run_queued_) on_run_queued_();
  return absl::OkStatus();
}

absl::Status AgentsService::GetBatchRun(const RequestContext& context,
                                        const v1::GetBatchRunRequest& request,
                                        v1::BatchRun* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  const int64_t workspace_id = context.workspace_id;
  ASSIGN_OR_RETURN(*response, runs->GetBatch(workspace_id, request.id()));
  return absl::OkStatus();
}

absl::Status AgentsService::GetBatchRunComparison(const RequestContext& context,
                                                  const v1::GetBatchRunComparisonRequest& request,
                                                  v1::BatchRunComparison* response) {
  ASSIGN_OR_RETURN(runs::RunsStore * runs, Runs());
  if (comparison_calls_ == nullptr) {
    return absl::UnavailableError("batch comparisons are not served here");
  }
  std::optional<int64_t> baseline;
  if (request.has_baseline_batch_run_id()) baseline = request.baseline_batch_run_id();
  ASSIGN_OR_RETURN(*response,
                   runs::CompareBatchRuns(*runs, *comparison_calls_, comparison_definitions_,
                                          context.workspace_id, request.id(), baseline));
  return absl::OkStatus();
}

}  // namespace calleval::agents

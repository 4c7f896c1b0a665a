#include "services/metrics/metrics_service.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "services/judges/code_context.h"
#include "services/judges/metric_values.h"
#include "services/metrics/metrics_methods.h"

namespace calleval::metrics {
namespace {

// The longest snippet validate_code and test_code accept (the same bound as a stored metric).
constexpr size_t kMaxCodeBytes = 100000;
// generate: how many definitions by default and at most, and the extra context's size.
constexpr int kDefaultGenerated = 3;
constexpr int kMaxGenerated = 10;
constexpr size_t kMaxContextBytes = 10000;

// 503: the sandbox's own message already says what is missing.
absl::Status SandboxUnavailable(absl::string_view message) {
  return MakeError(absl::StatusCode::kUnavailable, "sandbox_unavailable", message);
}
constexpr absl::string_view kNoSandbox = "the code sandbox is unavailable: not configured";

void CheckCode(const std::string* code, bool has, std::vector<FieldIssue>* issues) {
  if (!has || code->empty()) {
    issues->push_back({"code", "is required"});
  } else if (code->size() > kMaxCodeBytes) {
    issues->push_back({"code", absl::StrCat("must be at most ", kMaxCodeBytes, " bytes")});
  }
}

absl::Status ValidateTestBody(const v1::TestCodeBody& body) {
  std::vector<FieldIssue> issues;
  CheckCode(&body.code(), body.has_code(), &issues);
  if (!body.has_call_observation_id()) {
    issues.push_back({"call_observation_id", "is required"});
  }
  static constexpr absl::string_view kResultTypes[] = {"boolean", "rating", "enum", "numeric"};
  if (body.has_result_type() && std::find(std::begin(kResultTypes), std::end(kResultTypes),
                                          body.result_type()) == std::end(kResultTypes)) {
    issues.push_back({"result_type", "must be one of boolean, rating, enum, numeric"});
  }
  if (body.result_type() == "enum" && body.enum_values_size() == 0) {
    issues.push_back({"enum_values", "is required when result_type is enum"});
  }
  std::vector<std::string> enum_values(body.enum_values().begin(), body.enum_values().end());
  for (FieldIssue& issue : judges::ValidateStructuredOutput(body.structured_output(),
                                                            body.result_type(), enum_values)) {
    issues.push_back(std::move(issue));
  }
  if (issues.empty()) return absl::OkStatus();
  return ValidationError("validation_failed", "invalid test_code request", std::move(issues));
}

// The LLM metrics of a call, which a code judge reads as context['metric_results'].
std::vector<v1::MetricResult> LlmResults(const v1::Call& call) {
  std::vector<v1::MetricResult> out;
  for (const v1::MetricResult& r : call.metric_results()) {
    if (r.metrics_type() == "custom_evaluation") out.push_back(r);
  }
  return out;
}

}  // namespace

absl::Span<const MethodEntry<MetricsService>> MetricsService::Methods() { return kMetricsMethods; }

absl::Status MetricsService::ListMetrics(const RequestContext& context,
                                         const v1::ListMetricsRequest& request,
                                         v1::ListMetricsResponse* response) {
  const int64_t workspace = context.workspace_id;
  ASSIGN_OR_RETURN(*response, deps_.store->List(workspace, request));
  return absl::OkStatus();
}

absl::Status MetricsService::CreateMetric(const RequestContext& context,
                                          const v1::CreateMetricRequest& request,
                                          v1::Metric* response) {
  const int64_t workspace = context.workspace_id;
  ASSIGN_OR_RETURN(*response, deps_.store->Create(workspace, request.metric()));
  return absl::OkStatus();
}

absl::Status MetricsService::GetMetric(const RequestContext& context,
                                       const v1::GetMetricRequest& request, v1::Metric* response) {
  const int64_t workspace = context.workspace_id;
  ASSIGN_OR_RETURN(*response, deps_.store->Get(workspace, request.id()));
  return absl::OkStatus();
}

absl::Status MetricsService::UpdateMetric(const RequestContext& context,
                                          const v1::UpdateMetricRequest& request,
                                          v1::Metric* response) {
  const int64_t workspace = context.workspace_id;
  ASSIGN_OR_RETURN(*response, deps_.store->Update(workspace, request.id(), request.metric()));
  return absl::OkStatus();
}

absl::Status MetricsService::DeleteMetric(const RequestContext& context,
                                          const v1::DeleteMetricRequest& request,
                                          google::protobuf::Empty* response) {
  const int64_t workspace = context.workspace_id;
  return deps_.store->Delete(workspace, request.id());
}

absl::Status MetricsService::GenerateMetrics(const RequestContext& context,
                                             const v1::GenerateMetricsRequest& request,
                                             v1::GenerateMetricsResponse* response) {
  const int64_t workspace = context.workspace_id;
  const v1::GenerateMetricsBody& body = request.body();
  std::vector<FieldIssue> issues;
  if (!body.has_agent_id()) issues.push_back({"agent_id", "is required"});
  const int count = body.has_number_of_metrics() ? body.number_of_metrics() : kDefaultGenerated;
  if (count < 1 || count > kMaxGenerated) {
    issues.push_back({"number_of_metrics", absl::StrCat("must be between 1 and ", kMaxGenerated)});
  }
  if (body.additional_context().size() > kMaxContextBytes) {
    issues.push_back(
        {"additional_context", absl::StrCat("must be at most ", kMaxContextBytes, " bytes")});
  }
  if (!issues.empty()) {
    return ValidationError("validation_failed", "invalid generate request", std::move(issues));
  }
  absl::StatusOr<AgentBrief> agent = deps_.agent_briefs(workspace, body.agent_id());
  if (!agent.ok()) {
    if (agent.status().code() != absl::StatusCode::kNotFound) return agent.status();
    return ValidationError(
        "agent_not_found", absl::StrCat("agent ", body.agent_id(), " not found"),
        {{"agent_id", absl::StrCat("no agent ", body.agent_id(), " in workspace ", workspace)}});
  }
  if (deps_.llm == nullptr) {
    return MakeError(absl::StatusCode::kUnavailable, "llm_unavailable",
                     "no LLM provider is configured (CALLEVAL_LLM_BASE_URL)");
  }
  // Existing names are given to the model to avoid; whatever it still repeats is dropped.
  v1::ListMetricsRequest all;
  all.set_per_page(100);
  std::vector<std::string> names;
  for (int page = 1;; ++page) {
    all.set_page(page);
    ASSIGN_OR_RETURN(v1::ListMetricsResponse listed, deps_.store->List(workspace, all));
    if (page == 1) {
      for (const v1::Metric& m : listed.standard_metrics()) names.push_back(m.name());
      for (const v1::Metric& m : listed.global_metrics()) names.push_back(m.name());
    }
    for (const v1::Metric& m : listed.data()) names.push_back(m.name());
    if (page >= listed.pagination().total_pages()) break;
  }
  // A second round asks for what the first did not deliver.
  for (int round = 0; round < 2 && response->metrics_size() < count; ++round) {
    ASSIGN_OR_RETURN(std::vector<v1::MetricFields> proposals,
                     ProposeMetrics(*deps_.llm, *agent, count - response->metrics_size(),
                                    body.additional_context(), names));
    for (v1::MetricFields& fields : proposals) {
      if (response->metrics_size() >= count) break;
      fields.add_agent_ids(body.agent_id());
      // Validated like a create, names unique against the workspace and this answer.
      absl::StatusOr<v1::Metric> checked = deps_.store->CheckNew(workspace, fields);
      if (!checked.ok()) continue;
      const std::string key = absl::AsciiStrToLower(checked->name());
      bool repeated = false;
      for (const std::string& n : names) repeated = repeated || absl::AsciiStrToLower(n) == key;
      if (repeated) continue;
      names.push_back(checked->name());
      v1::GeneratedMetric* out = response->add_metrics();
      out->set_name(checked->name());
      if (checked->has_description()) out->set_description(checked->description());
      out->set_metrics_type(checked->metrics_type());
      out->set_result_type(checked->result_type());
      *out->mutable_enum_values() = checked->enum_values();
      out->set_llm_instructions(checked->llm_instructions());
      *out->mutable_agent_ids() = checked->agent_ids();
    }
  }
  return absl::OkStatus();
}

absl::Status MetricsService::BulkCreateMetrics(const RequestContext& context,
                                               const v1::BulkCreateMetricsRequest& request,
                                               v1::BulkCreateMetricsResponse* response) {
  const int64_t workspace = context.workspace_id;
  ASSIGN_OR_RETURN(*response, deps_.store->BulkCreate(workspace, request.body()));
  return absl::OkStatus();
}

absl::Status MetricsService::ValidateCode(const RequestContext& context,
                                          const v1::ValidateCodeRequest& request,
                                          v1::ValidateCodeResponse* response) {
  std::vector<FieldIssue> issues;
  CheckCode(&request.body().code(), request.body().has_code(), &issues);
  if (!issues.empty()) {
    return ValidationError("validation_failed", "invalid validate_code request", std::move(issues));
  }
  if (deps_.sandbox == nullptr) return SandboxUnavailable(kNoSandbox);
  absl::StatusOr<judges::CodeValidation> validation =
      deps_.sandbox->Validate(request.body().code());
  if (!validation.ok()) return SandboxUnavailable(validation.status().message());
  response->set_valid(validation->valid);
  for (const judges::CodeIssue& issue : validation->errors) {
    v1::CodeIssue* out = response->add_errors();
    if (issue.line) out->set_line(*issue.line);
    if (issue.column) out->set_column(*issue.column);
    out->set_message(issue.message);
  }
  return absl::OkStatus();
}

absl::Status MetricsService::TestCode(const RequestContext& context,
                                      const v1::TestCodeRequest& request,
                                      v1::TestCodeResponse* response) {
  const int64_t workspace = context.workspace_id;
  const v1::TestCodeBody& body = request.body();
  RETURN_IF_ERROR(ValidateTestBody(body));
  absl::StatusOr<v1::Call> call = deps_.calls(workspace, body.call_observation_id());
  if (!call.ok()) {
    if (call.status().code() != absl::StatusCode::kNotFound) return call.status();
    return ValidationError(
        "call_not_found", absl::StrCat("call ", body.call_observation_id(), " not found"),
        {{"call_observation_id",
          absl::StrCat("no call ", body.call_observation_id(), " in workspace ", workspace)}});
  }
  if (deps_.sandbox == nullptr) return SandboxUnavailable(kNoSandbox);
  v1::JobAgent agent;
  agent.set_id(call->agent_id());
  if (deps_.agents) {
    absl::StatusOr<v1::JobAgent> found = deps_.agents(workspace, call->agent_id());
    if (found.ok()) agent = *found;
  }
  const nlohmann::json code_context = judges::BuildCodeContext(
      *call, {call->transcript().begin(), call->transcript().end()},
      {call->standard_metrics().begin(), call->standard_metrics().end()}, LlmResults(*call), agent);
  absl::StatusOr<judges::CodeRun> run = deps_.sandbox->Run(body.code(), code_context);
  if (!run.ok()) return SandboxUnavailable(run.status().message());

  v1::TestedCall* tested = response->mutable_call();
  tested->set_id(call->id());
  tested->set_identifier(call->call_identifier());
  if (call->has_duration_seconds()) tested->set_duration(call->duration_seconds());
  response->set_execution_time_ms(absl::ToDoubleMilliseconds(run->elapsed));
  response->set_explanation(run->explanation);
  *response->mutable_result() = run->result;
  if (!run->result.has_null_value() &&
      run->result.kind_case() == google::protobuf::Value::KIND_NOT_SET) {
    response->mutable_result()->set_null_value(google::protobuf::NULL_VALUE);
  }

  std::optional<judges::CodeError> error = run->error;
  if (!error && !run->result_set) {
    error = judges::CodeError{"ResultNotSet", "the code never set metric['result']", std::nullopt};
  }
  if (!error && body.has_result_type()) {
    std::vector<std::string> enum_values(body.enum_values().begin(), body.enum_values().end());
    absl::Status typed = judges::CheckResultValue(run->result, body.result_type(), enum_values);
    if (!typed.ok()) error = judges::CodeError{"ResultTypeError", std::string(typed.message()), {}};
  }
  if (error) {
    v1::CodeError* out = response->mutable_error();
    out->set_type(error->type);
    out->set_message(error->message);
    if (error->line) out->set_line(*error->line);
    return absl::OkStatus();
  }
  response->set_metric_result(judges::MetricResultText(run->result));
  if (auto outcome = judges::ClassifyOutcome(run->result, body.structured_output())) {
    *response->mutable_structured_output() = *outcome;
  }
  return absl::OkStatus();
}

absl::Status MetricsService::SetAgentStandardMetrics(
    const RequestContext& context, const v1::SetAgentStandardMetricsRequest& request,
    v1::AgentStandardMetrics* response) {
  const int64_t workspace = context.workspace_id;
  const auto& keys = request.body().disabled_metric_keys();
  ASSIGN_OR_RETURN(*response, deps_.store->SetStandardToggles(
                                  workspace, request.agent_id(),
                                  std::vector<std::string>(keys.begin(), keys.end())));
  return absl::OkStatus();
}

absl::Status MetricsService::SetAgentLlmMetrics(const RequestContext& context,
                                                const v1::SetAgentLlmMetricsRequest& request,
                                                v1::AgentLlmMetrics* response) {
  const int64_t workspace = context.workspace_id;
  const auto& ids = request.body().disabled_llm_metric_ids();
  ASSIGN_OR_RETURN(*response,
                   deps_.store->SetCustomToggles(workspace, request.agent_id(),
                                                 std::vector<int64_t>(ids.begin(), ids.end())));
  return absl::OkStatus();
}

absl::Status MetricsService::ListUsableMetrics(const RequestContext& context,
                                               const v1::ListUsableMetricsRequest& request,
                                               v1::ListUsableMetricsResponse* response) {
  const int64_t workspace = context.workspace_id;
  std::optional<int64_t> agent_id;
  if (request.has_agent_id()) agent_id = request.agent_id();
  ASSIGN_OR_RETURN(*response, deps_.store->ListUsable(workspace, agent_id));
  return absl::OkStatus();
}

}  // namespace calleval::metrics

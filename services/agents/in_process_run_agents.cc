#include "services/agents/in_process_run_agents.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace calleval::agents {
namespace {

absl::Status CopyStrings(const nlohmann::json& from, const char* what,
                         google::protobuf::Map<std::string, std::string>* to) {
  for (const auto& [key, value] : from.items()) {
    if (!value.is_string()) {
      return absl::InternalError(absl::StrCat("the ", what, " ", key, " is not a string"));
    }
    (*to)[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

nlohmann::json ObjectOf(const google::protobuf::Map<std::string, std::string>& from) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : from) out[key] = value;
  return out;
}

}  // namespace

absl::StatusOr<v1::Scenario> InProcessRunAgents::GetScenario(int64_t workspace_id,
                                                             int64_t scenario_id) {
  if (scenarios_ == nullptr) return absl::UnavailableError("scenarios are not served here");
  return scenarios_->Get(workspace_id, scenario_id);
}

absl::StatusOr<v1::Agent> InProcessRunAgents::GetAgent(int64_t workspace_id, int64_t agent_id) {
  return agents_->Get(workspace_id, agent_id);
}

absl::StatusOr<std::optional<WebChannel>> InProcessRunAgents::GetWebChannel(int64_t workspace_id,
                                                                            int64_t agent_id) {
  return agents_->GetWebChannel(workspace_id, agent_id);
}

absl::StatusOr<std::optional<IntegrationSettings>> InProcessRunAgents::GetIntegration(
    int64_t workspace_id, absl::string_view provider) {
  if (integrations_ == nullptr) {
    return absl::UnavailableError("integration settings are not served here");
  }
  RETURN_IF_ERROR(CheckProvider(provider));
  absl::StatusOr<IntegrationSettings> settings =
      integrations_->GetWithSecrets(workspace_id, provider);
  if (settings.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
  if (!settings.ok()) return settings.status();
  return *std::move(settings);
}

absl::StatusOr<v1::RunIntegration> IntegrationToProto(
    const std::optional<IntegrationSettings>& settings) {
  v1::RunIntegration out;
  if (!settings.has_value()) return out;
  out.set_present(true);
  out.set_provider(settings->provider);
  // The fields are JSON (caller_numbers is a list): carried as a Struct, parsed from the JSON
  // text so numbers, lists and nested objects keep their shape.
  if (const auto parsed = google::protobuf::util::JsonStringToMessage(settings->fields.dump(),
                                                                      out.mutable_fields());
      !parsed.ok()) {
    return absl::InternalError(absl::StrCat("the ", settings->provider,
                                            " settings cannot be carried: ", parsed.ToString()));
  }
  if (absl::Status s =
          CopyStrings(settings->secrets, "integration's secret", out.mutable_secrets());
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<std::optional<IntegrationSettings>> IntegrationFromProto(
    const v1::RunIntegration& integration) {
  if (!integration.present()) return std::nullopt;
  IntegrationSettings out;
  out.provider = integration.provider();
  std::string fields;
  if (const auto printed =
          google::protobuf::util::MessageToJsonString(integration.fields(), &fields);
      !printed.ok()) {
    return absl::InternalError(
        absl::StrCat("the ", out.provider, " settings cannot be read: ", printed.ToString()));
  }
  out.fields = nlohmann::json::parse(fields, nullptr, /*allow_exceptions=*/false);
  if (!out.fields.is_object()) {
    return absl::InternalError(absl::StrCat("the ", out.provider, " settings are not an object"));
  }
  out.secrets = ObjectOf(integration.secrets());
  for (const auto& [key, value] : integration.secrets()) out.secrets_set.push_back(key);
  return out;
}

absl::StatusOr<v1::AgentWebChannel> WebChannelToProto(const std::optional<WebChannel>& channel) {
  v1::AgentWebChannel out;
  if (!channel.has_value()) return out;
  out.set_present(true);
  if (absl::Status s = CopyStrings(channel->fields, "web channel's field", out.mutable_fields());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CopyStrings(channel->credentials, "web channel's credential", out.mutable_credentials());
      !s.ok()) {
    return s;
  }
  return out;
}

std::optional<WebChannel> WebChannelFromProto(const v1::AgentWebChannel& channel) {
  if (!channel.present()) return std::nullopt;
  WebChannel out;
  out.fields = ObjectOf(channel.fields());
  out.credentials = ObjectOf(channel.credentials());
  return out;
}

}  // namespace calleval::agents

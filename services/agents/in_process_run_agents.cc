#include "services/agents/in_process_run_agents.h"

#include "absl/strings/str_cat.h"

namespace calleval::agents {
namespace {

absl::Status CopyStrings(const nlohmann::json& from, const char* what,
                         google::protobuf::Map<std::string, std::string>* to) {
  for (const auto& [key, value] : from.items()) {
    if (!value.is_string()) {
      return absl::InternalError(
          absl::StrCat("the web channel's ", what, " ", key, " is not a string"));
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

absl::StatusOr<v1::AgentWebChannel> WebChannelToProto(const std::optional<WebChannel>& channel) {
  v1::AgentWebChannel out;
  if (!channel.has_value()) return out;
  out.set_present(true);
  if (absl::Status s = CopyStrings(channel->fields, "field", out.mutable_fields()); !s.ok()) {
    return s;
  }
  if (absl::Status s = CopyStrings(channel->credentials, "credential", out.mutable_credentials());
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

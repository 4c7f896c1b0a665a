#include "services/agents/platform_pull.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/errors.h"
#include "common/sent_fields.h"
#include "common/status_macros.h"
#include "services/agents/agent_rules.h"

namespace calleval::agents {
namespace {

// Drops `key` from a request's sent and null keys (the pull replaces what it said).
void Unsend(v1::AgentFields& fields, const std::string& key) {
  for (auto* list : {fields.mutable_set_fields(), fields.mutable_null_fields()}) {
    list->erase(std::remove(list->begin(), list->end(), key), list->end());
  }
}

std::string PlatformName(const std::string& source) {
  return source == rules::kExternalVapi ? "Vapi" : "Retell";
}

std::string ProviderOf(const std::string& source) {
  return source == rules::kExternalVapi ? "vapi" : "retell";
}

}  // namespace

std::optional<int64_t> LanguageIdFor(const std::string& code,
                                     const v1::ListLanguagesResponse& languages) {
  const std::string wanted = absl::StrReplaceAll(absl::AsciiStrToLower(code), {{"_", "-"}});
  if (wanted.empty()) return std::nullopt;
  for (const v1::Language& l : languages.data()) {
    if (absl::AsciiStrToLower(l.code()) == wanted) return l.id();
  }
  if (wanted.find('-') == std::string::npos) {
    for (const v1::Language& l : languages.data()) {
      if (absl::StartsWith(absl::AsciiStrToLower(l.code()), wanted + "-")) return l.id();
    }
  }
  return std::nullopt;
}

absl::Status PlatformPull::IntoCreate(int64_t workspace_id, v1::AgentFields& fields) const {
  rules::AgentRecord merged;
  rules::Issues issues;
  const bool source_known = rules::ApplyFields(fields, merged, issues);
  // A request with problems is refused by the store's validation, with all of them.
  if (!source_known || !issues.empty() || !rules::IsExternal(merged.agent_source) ||
      !merged.assistant_id || IsBlank(*merged.assistant_id)) {
    return absl::OkStatus();
  }
  std::string web_key;
  if (merged.web_channel) web_key = merged.web_channel->credentials.value("platform_api_key", "");
  return Pull(workspace_id, merged.agent_source, *merged.assistant_id, web_key, fields);
}

absl::Status PlatformPull::IntoUpdate(int64_t workspace_id, int64_t agent_id,
                                      v1::AgentFields& fields) const {
  absl::StatusOr<v1::Agent> stored = store_->Get(workspace_id, agent_id);
  if (!stored.ok()) return absl::OkStatus();  // the update answers for it
  rules::AgentRecord merged;
  merged.agent_source = stored->agent_source();
  if (stored->has_assistant_id()) merged.assistant_id = stored->assistant_id();
  ASSIGN_OR_RETURN(std::optional<WebChannel> channel,
                   store_->GetWebChannel(workspace_id, agent_id));
  merged.web_channel = std::move(channel);
  rules::Issues issues;
  const bool source_known = rules::ApplyFields(fields, merged, issues);
  if (!source_known || !issues.empty() || !rules::IsExternal(merged.agent_source) ||
      !merged.assistant_id || IsBlank(*merged.assistant_id)) {
    return absl::OkStatus();
  }
  const bool became_external = merged.agent_source != stored->agent_source();
  const bool sent_assistant = SentKeys(fields).Set("assistant_id", fields.has_assistant_id());
  if (!became_external && !sent_assistant) return absl::OkStatus();
  std::string web_key;
  if (merged.web_channel) web_key = merged.web_channel->credentials.value("platform_api_key", "");
  return Pull(workspace_id, merged.agent_source, *merged.assistant_id, web_key, fields);
}

absl::Status PlatformPull::Pull(int64_t workspace_id, const std::string& source,
                                const std::string& assistant_id, const std::string& web_key,
                                v1::AgentFields& fields) const {
  const std::string platform = PlatformName(source);
  const std::string provider = ProviderOf(source);
  // The agent's own key wins over the workspace's (docs/api.md §5.8).
  std::string key = web_key;
  std::string key_field = "web_channel.platform_api_key";
  if (key.empty() && integrations_ != nullptr) {
    absl::StatusOr<IntegrationSettings> settings =
        integrations_->GetWithSecrets(workspace_id, provider);
    if (settings.ok()) {
      key = settings->secrets.value("api_key", "");
      key_field = absl::StrCat("integrations.", provider, ".api_key");
    } else if (settings.status().code() != absl::StatusCode::kNotFound) {
      return settings.status();
    }
  }
  if (key.empty()) return absl::OkStatus();  // pulled at the run's start, once a key is set

  const std::string& url = source == rules::kExternalVapi ? urls_.vapi : urls_.retell;
  absl::StatusOr<PlatformAgent> pulled = source == rules::kExternalVapi
                                             ? PullVapiAssistant(url, key, assistant_id)
                                             : PullRetellAgent(url, key, assistant_id);
  if (!pulled.ok()) {
    const std::string message(pulled.status().message());
    switch (pulled.status().code()) {
      case absl::StatusCode::kUnauthenticated:
        return FieldError(key_field, absl::StrCat("was refused by ", platform, ": ", message),
                          "platform_refused");
      case absl::StatusCode::kNotFound:
        return FieldError(
            "assistant_id",
            absl::StrCat("names no ", source == rules::kExternalVapi ? "assistant" : "agent",
                         " the key can read on ", platform, ": ", message),
            "platform_refused");
      case absl::StatusCode::kResourceExhausted:
      case absl::StatusCode::kFailedPrecondition:
        return ValidationError(
            "platform_refused",
            absl::StrCat(platform, " refused to give assistant_id ", assistant_id, ": ", message),
            {{std::string("assistant_id"), message}});
      default:
        return MakeError(absl::StatusCode::kUnavailable, "platform_unavailable",
                         absl::StrCat(platform, " could not be asked for assistant_id ",
                                      assistant_id, "; try again later: ", message));
    }
  }

  // The platform's values replace what the request said of them.
  if (!pulled->instructions.empty()) {
    fields.set_instructions(pulled->instructions);
    Unsend(fields, "instructions");
  }
  fields.clear_first_message();
  Unsend(fields, "first_message");
  Unsend(fields, "opening_message");
  v1::OpeningMessage* opening = fields.mutable_opening_message();
  opening->set_mode(pulled->opening_mode);
  opening->set_text(pulled->opening_text);  // empty: none
  if (!pulled->language.empty()) {
    ASSIGN_OR_RETURN(v1::ListLanguagesResponse languages, store_->ListLanguages());
    if (std::optional<int64_t> id = LanguageIdFor(pulled->language, languages)) {
      fields.set_language_id(*id);
      Unsend(fields, "language_id");
    }
  }
  return absl::OkStatus();
}

}  // namespace calleval::agents

#include "services/agents/integrations_store.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/status_macros.h"

namespace calleval::agents {
namespace {

constexpr char kColumns[] =
    "fields, secrets_set, sealed_secrets, created_at, updated_at FROM integration_settings "
    "WHERE workspace_id = ? AND provider = ?";

// What a sealed blob is bound to: the row, so a blob copied to another row does not open.
std::string SealContext(int64_t workspace_id, absl::string_view provider) {
  return absl::StrCat("integration ", workspace_id, " ", provider);
}

absl::Status NotConfigured(int64_t workspace_id, absl::string_view provider) {
  return MakeError(absl::StatusCode::kNotFound, "integration_not_found",
                   absl::StrCat("workspace ", workspace_id, " has no ", provider,
                                " integration settings"));
}

// Reads the row into `settings` (secrets still sealed, in `sealed`); false when there is none.
absl::StatusOr<bool> ReadRow(db::Connection& c, int64_t workspace_id, absl::string_view provider,
                             IntegrationSettings* settings, std::string* sealed,
                             absl::string_view lock = "") {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(absl::StrCat("SELECT ", kColumns, lock)));
  stmt.Bind(1, workspace_id).Bind(2, provider);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return false;
  settings->provider = std::string(provider);
  nlohmann::json fields = nlohmann::json::parse(stmt.Text(0), nullptr, false);
  if (fields.is_object()) settings->fields = std::move(fields);
  nlohmann::json names = nlohmann::json::parse(stmt.Text(1), nullptr, false);
  settings->secrets_set.clear();
  if (names.is_array()) {
    for (const auto& name : names) {
      if (name.is_string()) settings->secrets_set.push_back(name.get<std::string>());
    }
  }
  *sealed = stmt.IsNull(2) ? "" : stmt.Text(2);
  settings->created_at = stmt.Text(3);
  settings->updated_at = stmt.Text(4);
  return true;
}

absl::Status UnsealSecrets(const std::string& key, int64_t workspace_id, const std::string& sealed,
                    IntegrationSettings* settings) {
  settings->secrets = nlohmann::json::object();
  if (sealed.empty()) return absl::OkStatus();
  if (key.size() != 32) {
    return InternalError("integration secrets cannot be read: no credentials key");
  }
  ASSIGN_OR_RETURN(std::string plain,
                   calleval::Unseal(key, sealed, SealContext(workspace_id, settings->provider)));
  nlohmann::json secrets = nlohmann::json::parse(plain, nullptr, false);
  if (secrets.is_object()) settings->secrets = std::move(secrets);
  return absl::OkStatus();
}

v1::Integration ToProto(const IntegrationSettings& settings) {
  v1::Integration out;
  out.set_provider(settings.provider);
  *out.mutable_settings() = IntegrationResponse(settings);
  out.set_created_at(settings.created_at);
  out.set_updated_at(settings.updated_at);
  return out;
}

}  // namespace

absl::StatusOr<v1::Integration> IntegrationsStore::Get(int64_t workspace_id,
                                                       absl::string_view provider) {
  RETURN_IF_ERROR(CheckProvider(provider));
  return db::ReadResult<v1::Integration>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::Integration> {
        IntegrationSettings settings;
        std::string sealed;
        ASSIGN_OR_RETURN(bool found, ReadRow(c, workspace_id, provider, &settings, &sealed));
        if (!found) return NotConfigured(workspace_id, provider);
        return ToProto(settings);
      });
}

absl::StatusOr<v1::ListIntegrationsResponse> IntegrationsStore::List(int64_t workspace_id) {
  return db::ReadResult<v1::ListIntegrationsResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListIntegrationsResponse> {
        v1::ListIntegrationsResponse out;
        for (absl::string_view provider : kIntegrationProviders) {
          IntegrationSettings settings;
          std::string sealed;
          ASSIGN_OR_RETURN(bool found, ReadRow(c, workspace_id, provider, &settings, &sealed));
          if (found) *out.add_data() = ToProto(settings);
        }
        return out;
      });
}

absl::StatusOr<v1::Integration> IntegrationsStore::Write(int64_t workspace_id,
                                                         absl::string_view provider,
                                                         const google::protobuf::Struct& body,
                                                         bool replace) {
  RETURN_IF_ERROR(CheckProvider(provider));
  return db::WriteResult<v1::Integration>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::Integration> {
        IntegrationSettings settings;
        settings.provider = std::string(provider);
        std::string sealed;
        ASSIGN_OR_RETURN(bool found, ReadRow(c, workspace_id, provider, &settings, &sealed,
                                             c.ForUpdate()));
        if (found && !replace) {
          RETURN_IF_ERROR(UnsealSecrets(credentials_key_, workspace_id, sealed, &settings));
        }
        rules::Issues issues;
        ApplyIntegration(body, replace, &settings, issues);
        if (issues.empty()) ValidateIntegration(&settings, issues);
        if (!issues.empty()) return std::move(issues).ToStatus();

        settings.secrets_set.clear();
        for (const std::string& name : SecretKeys(provider)) {
          if (settings.secrets.contains(name)) settings.secrets_set.push_back(name);
        }
        std::optional<std::string> sealed_secrets;
        if (!settings.secrets_set.empty()) {
          if (credentials_key_.size() != 32) {
            return InternalError("integration secrets cannot be stored: no credentials key");
          }
          sealed_secrets = Seal(credentials_key_, settings.secrets.dump(),
                                SealContext(workspace_id, provider));
        }
        settings.updated_at = NowTimestamp();
        if (!found) settings.created_at = settings.updated_at;
        ASSIGN_OR_RETURN(
            auto upsert,
            c.Prepare("INSERT INTO integration_settings (workspace_id, provider, fields, "
                      "secrets_set, sealed_secrets, created_at, updated_at) VALUES (?, ?, ?, ?, "
                      "?, ?, ?) ON CONFLICT (workspace_id, provider) DO UPDATE SET fields = "
                      "excluded.fields, secrets_set = excluded.secrets_set, sealed_secrets = "
                      "excluded.sealed_secrets, updated_at = excluded.updated_at"));
        upsert.Bind(1, workspace_id)
            .Bind(2, provider)
            .Bind(3, settings.fields.dump())
            .Bind(4, nlohmann::json(settings.secrets_set).dump());
        if (sealed_secrets) {
          upsert.BindBlob(5, *sealed_secrets);
        } else {
          upsert.BindNull(5);
        }
        upsert.Bind(6, settings.created_at).Bind(7, settings.updated_at);
        RETURN_IF_ERROR(upsert.Run());
        return ToProto(settings);
      });
}

absl::Status IntegrationsStore::Delete(int64_t workspace_id, absl::string_view provider) {
  RETURN_IF_ERROR(CheckProvider(provider));
  return db_->Write([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("DELETE FROM integration_settings WHERE "
                                          "workspace_id = ? AND provider = ?"));
    stmt.Bind(1, workspace_id).Bind(2, provider);
    RETURN_IF_ERROR(stmt.Run());
    if (c.Changes() == 0) return NotConfigured(workspace_id, provider);
    return absl::OkStatus();
  });
}

absl::StatusOr<IntegrationSettings> IntegrationsStore::GetWithSecrets(int64_t workspace_id,
                                                                      absl::string_view provider) {
  RETURN_IF_ERROR(CheckProvider(provider));
  return db::ReadResult<IntegrationSettings>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<IntegrationSettings> {
        IntegrationSettings settings;
        std::string sealed;
        ASSIGN_OR_RETURN(bool found, ReadRow(c, workspace_id, provider, &settings, &sealed));
        if (!found) return NotConfigured(workspace_id, provider);
        RETURN_IF_ERROR(UnsealSecrets(credentials_key_, workspace_id, sealed, &settings));
        return settings;
      });
}

}  // namespace calleval::agents

#pragma once

// A workspace's integration settings (docs/api.md §5.8): one row per workspace and provider,
// the secrets sealed with the installation's credentials key (AES-256-GCM, bound to the row)
// like an agent's web channel credentials. The agents role owns the table.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/agents.pb.h"
#include "common/database.h"
#include "services/agents/integrations.h"

namespace calleval::agents {

class IntegrationsStore {
 public:
  // `credentials_key`: the 32 bytes that seal the secrets; empty refuses every write of one.
  IntegrationsStore(db::Database* db, std::string credentials_key)
      : db_(db), credentials_key_(std::move(credentials_key)) {}

  // NOT_FOUND `unknown_provider` for a provider that is not one, `integration_not_found` when
  // the workspace has no settings for it.
  absl::StatusOr<v1::Integration> Get(int64_t workspace_id, absl::string_view provider);
  // Every provider the workspace has settings for, in kIntegrationProviders' order.
  absl::StatusOr<v1::ListIntegrationsResponse> List(int64_t workspace_id);
  // PUT (`replace`) or PATCH; the merged settings are validated (422 `validation_failed` naming
  // every field) and stored in one write transaction.
  absl::StatusOr<v1::Integration> Write(int64_t workspace_id, absl::string_view provider,
                                        const google::protobuf::Struct& body, bool replace);
  absl::Status Delete(int64_t workspace_id, absl::string_view provider);

  // The settings with their secrets in the clear, for the roles that dial the provider or
  // check its webhooks; never answered by a public method.
  absl::StatusOr<IntegrationSettings> GetWithSecrets(int64_t workspace_id,
                                                     absl::string_view provider);

 private:
  db::Database* db_;
  std::string credentials_key_;
};

}  // namespace calleval::agents

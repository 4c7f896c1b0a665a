#include "services/runs/media_events.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"

namespace calleval::runs {

absl::StatusOr<std::string> MediaPayload(const nlohmann::json& event, absl::string_view dialect) {
  const nlohmann::json* payload = nullptr;
  if (event.is_object()) {
    auto media = event.find("media");
    if (media != event.end() && media->is_object()) {
      auto found = media->find("payload");
      if (found != media->end() && found->is_string()) payload = &*found;
    }
  }
  if (payload == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(dialect, " media event without media.payload"));
  }
  std::optional<std::string> bytes = Base64Decode(payload->get_ref<const std::string&>());
  if (!bytes) {
    return absl::InvalidArgumentError(absl::StrCat(dialect, " media.payload is not base64"));
  }
  return *std::move(bytes);
}

std::string JsonString(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace calleval::runs

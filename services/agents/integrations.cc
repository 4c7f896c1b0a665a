#include "services/agents/integrations.h"

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crypto.h"
#include "common/errors.h"

namespace calleval::agents {
namespace {

enum class Kind { kText, kSecret, kNumbers, kUrl, kFlag, kKeys };

struct Key {
  absl::string_view name;
  Kind kind;
  bool required;
};

// The keys of each provider (docs/api.md §5.8). LiveKit's are those the room transport falls back on
// when an agent's web channel has no room credentials (docs/channels.md).
std::vector<Key> KeysOf(absl::string_view provider) {
  if (provider == "twilio") {
    return {{"account_sid", Kind::kText, true},
            {"auth_token", Kind::kSecret, true},
            {"caller_numbers", Kind::kNumbers, false}};
  }
  if (provider == "telnyx") {
    return {{"api_key", Kind::kSecret, true},
            {"connection_id", Kind::kText, false},
            {"public_key", Kind::kText, false},
            {"caller_numbers", Kind::kNumbers, false}};
  }
  if (provider == "plivo") {
    return {{"auth_id", Kind::kText, true},
            {"auth_token", Kind::kSecret, true},
            {"caller_numbers", Kind::kNumbers, false}};
  }
  // Vapi's API key drives its agents; its webhook secret alone is enough to receive production
  // events, so neither is required on its own (ValidateIntegration wants one of them).
  if (provider == "vapi") {
    return {{"api_key", Kind::kSecret, false}, {"webhook_secret", Kind::kSecret, false}};
  }
  if (provider == "retell") return {{"api_key", Kind::kSecret, true}};
  if (provider == "livekit") {
    return {{"server_url", Kind::kUrl, true},
            {"api_key", Kind::kText, true},
            {"api_secret", Kind::kSecret, true}};
  }
  // What a replay masks in the caller's lines (services/agents/replay.h); each flag defaults
  // to true.
  if (provider == "privacy") {
    return {{"mask_phone_numbers", Kind::kFlag, false},
            {"mask_emails", Kind::kFlag, false},
            {"mask_card_numbers", Kind::kFlag, false},
            {"mask_metadata_keys", Kind::kKeys, false}};
  }
  return {};
}

constexpr size_t kMaxTextLength = 512;

std::string Field(absl::string_view key) { return std::string(key); }

bool HasControlCharacters(absl::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

void CheckText(const Key& key, const std::string& provider, const std::string& value,
               rules::Issues& issues) {
  const size_t max = key.kind == Kind::kSecret ? kMaxCredentialLength : kMaxTextLength;
  if (value.empty()) {
    issues.Add(Field(key.name), "must not be empty");
  } else if (value.size() > max) {
    issues.Add(Field(key.name), absl::StrCat("must be at most ", max, " characters"));
  } else if (HasControlCharacters(value)) {
    issues.Add(Field(key.name), "must not contain control characters");
  } else if (provider == "twilio" && key.name == "account_sid") {
    // Twilio's account SIDs are "AC" and 32 hexadecimal digits; anything else is a paste of
    // the wrong value (an API key SK..., the auth token).
    const bool hex = value.size() == 34 && absl::StartsWith(value, "AC") &&
                     std::all_of(value.begin() + 2, value.end(), [](char c) {
                       return absl::ascii_isxdigit(static_cast<unsigned char>(c));
                     });
    if (!hex) issues.Add(Field(key.name), "must be AC followed by 32 hexadecimal digits");
  } else if (provider == "telnyx" && key.name == "public_key") {
    // The portal's "Public Key" that verifies Telnyx's Ed25519 webhook signatures.
    std::optional<std::string> bytes = Base64Decode(value);
    if (!bytes || bytes->size() != 32) {
      issues.Add(Field(key.name), "must be the 32-byte Ed25519 public key in base64");
    }
  }
}

}  // namespace

absl::Status CheckProvider(absl::string_view provider) {
  for (absl::string_view p : kIntegrationProviders) {
    if (p == provider) return absl::OkStatus();
  }
  return MakeError(absl::StatusCode::kNotFound, "unknown_provider",
                   absl::StrCat("no integration provider '", provider, "': one of ",
                                absl::StrJoin(kIntegrationProviders, ", ")));
}

std::vector<std::string> SecretKeys(absl::string_view provider) {
  std::vector<std::string> keys;
  for (const Key& key : KeysOf(provider)) {
    if (key.kind == Kind::kSecret) keys.emplace_back(key.name);
  }
  return keys;
}

void ApplyIntegration(const google::protobuf::Struct& body, bool replace,
                      IntegrationSettings* settings, rules::Issues& issues) {
  if (replace) {
    settings->fields = nlohmann::json::object();
    settings->secrets = nlohmann::json::object();
  }
  for (const Key& key : KeysOf(settings->provider)) {
    auto sent = body.fields().find(std::string(key.name));
    if (sent == body.fields().end()) continue;
    const google::protobuf::Value& value = sent->second;
    nlohmann::json& target = key.kind == Kind::kSecret ? settings->secrets : settings->fields;
    const std::string name(key.name);
    if (value.has_null_value()) {
      target.erase(name);
      continue;
    }
    if (key.kind == Kind::kFlag) {
      if (!value.has_bool_value()) {
        issues.Add(name, "must be true or false");
      } else {
        target[name] = value.bool_value();
      }
      continue;
    }
    if (key.kind != Kind::kNumbers && key.kind != Kind::kKeys) {
      if (!value.has_string_value()) {
        issues.Add(name, "must be a string");
      } else {
        target[name] = value.string_value();
      }
      continue;
    }
    if (!value.has_list_value()) {
      issues.Add(name, key.kind == Kind::kKeys ? "must be an array of strings"
                                               : "must be an array of E.164 numbers");
      continue;
    }
    nlohmann::json numbers = nlohmann::json::array();
    const auto& list = value.list_value().values();
    for (int i = 0; i < list.size(); ++i) {
      if (!list[i].has_string_value()) {
        issues.Add(absl::StrCat(name, "[", i, "]"), "must be a string");
      } else {
        numbers.push_back(list[i].string_value());
      }
    }
    target[name] = std::move(numbers);
  }
}

void ValidateIntegration(IntegrationSettings* settings, rules::Issues& issues) {
  const std::string& provider = settings->provider;
  for (const Key& key : KeysOf(provider)) {
    const std::string name(key.name);
    const nlohmann::json& source = key.kind == Kind::kSecret ? settings->secrets : settings->fields;
    if (!source.contains(name)) {
      if (key.required) issues.Add(name, absl::StrCat("is required for ", provider));
      continue;
    }
    if (key.kind == Kind::kFlag) continue;
    if (key.kind == Kind::kKeys) {
      const nlohmann::json& raw = source[name];
      if (raw.size() > static_cast<size_t>(kMaxCallerNumbers)) {
        issues.Add(name, absl::StrCat("holds at most ", kMaxCallerNumbers, " keys"));
        continue;
      }
      for (size_t i = 0; i < raw.size(); ++i) {
        const std::string item = raw[i].get<std::string>();
        if (item.empty() || item.size() > kMaxTextLength || HasControlCharacters(item)) {
          issues.Add(absl::StrCat(name, "[", i, "]"),
                     absl::StrCat("must be 1 to ", kMaxTextLength,
                                  " characters without control characters"));
        }
      }
      continue;
    }
    if (key.kind == Kind::kNumbers) {
      const nlohmann::json& raw = source[name];
      if (raw.size() > static_cast<size_t>(kMaxCallerNumbers)) {
        issues.Add(name, absl::StrCat("holds at most ", kMaxCallerNumbers, " numbers"));
        continue;
      }
      std::vector<std::string> normalized;
      for (size_t i = 0; i < raw.size(); ++i) {
        auto phone = rules::NormalizePhone(raw[i].get<std::string>(), issues,
                                           absl::StrCat(name, "[", i, "]"));
        if (phone) normalized.push_back(std::move(phone->first));
      }
      rules::Deduplicate(normalized);
      settings->fields[name] = normalized;
      continue;
    }
    const std::string value = source[name].get<std::string>();
    if (key.kind == Kind::kUrl) {
      if (value.size() > static_cast<size_t>(kMaxWebChannelUrlLength)) {
        issues.Add(name, absl::StrCat("must be at most ", kMaxWebChannelUrlLength, " characters"));
        continue;
      }
      // LiveKit's server URL: the service calls its API (https) and its signalling (wss). Where
      // it may point is checked when it is dialled (docs/api.md §8), as for every outbound URL.
      const std::string lower = absl::AsciiStrToLower(value);
      const bool scheme = absl::StartsWith(lower, "wss://") || absl::StartsWith(lower, "ws://") ||
                          absl::StartsWith(lower, "https://") ||
                          absl::StartsWith(lower, "http://");
      if (!scheme || value.find_first_of(" \t\r\n") != std::string::npos) {
        issues.Add(name, "must be a ws, wss, http or https URL");
      }
      continue;
    }
    CheckText(key, provider, value, issues);
  }
  if (provider == "vapi" && settings->secrets.empty()) {
    issues.Add("api_key", "or webhook_secret is required for vapi");
  }
}

google::protobuf::Struct IntegrationResponse(const IntegrationSettings& settings) {
  google::protobuf::Struct out;
  auto& fields = *out.mutable_fields();
  for (const Key& key : KeysOf(settings.provider)) {
    const std::string name(key.name);
    if (key.kind == Kind::kSecret) {
      const bool set = std::find(settings.secrets_set.begin(), settings.secrets_set.end(),
                                 name) != settings.secrets_set.end();
      fields[name + "_set"].set_bool_value(set);
      continue;
    }
    if (!settings.fields.contains(name)) {
      if (key.kind == Kind::kNumbers || key.kind == Kind::kKeys) fields[name].mutable_list_value();
      else fields[name].set_null_value(google::protobuf::NULL_VALUE);
      continue;
    }
    const nlohmann::json& value = settings.fields[name];
    if (value.is_array()) {
      auto* list = fields[name].mutable_list_value();
      for (const auto& number : value) list->add_values()->set_string_value(number.get<std::string>());
    } else if (value.is_string()) {
      fields[name].set_string_value(value.get<std::string>());
    } else if (value.is_boolean()) {
      fields[name].set_bool_value(value.get<bool>());
    }
  }
  return out;
}

}  // namespace calleval::agents

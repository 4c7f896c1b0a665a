#pragma once

// The rules of an agent's fields (docs/api.md §5), as pure functions over the stored form: how
// a request merges into an agent, phone numbers in E.164, and the limits on text. The agents
// store (agents_store.cc) keeps the SQL, the validation that reads the languages table, and the
// sealing of web channel credentials.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/agents.pb.h"
#include "common/errors.h"
#include "services/agents/agents_store.h"
#include "services/agents/web_channel.h"

namespace calleval::agents::rules {

inline constexpr absl::string_view kInternal = "internal";
inline constexpr absl::string_view kExternalVapi = "external_vapi";
inline constexpr absl::string_view kExternalRetell = "external_retell";
inline constexpr absl::string_view kAgentSpeaksFirst = "agent_speaks_first";
inline constexpr absl::string_view kUserSpeaksFirst = "user_speaks_first";
inline constexpr absl::string_view kInbound = "inbound";
inline constexpr absl::string_view kOutbound = "outbound";

// An agent as stored, in plain C++ values. Request values are merged into it before
// validation, so fields may hold not-yet-validated input until the store's Validate() has run.
struct AgentRecord {
  int64_t id = 0;
  int64_t workspace_id = 0;
  std::optional<std::string> name;
  std::optional<std::string> phone_number;
  std::optional<std::string> telephony_carrier;
  std::string agent_source = std::string(kInternal);
  std::optional<std::string> assistant_id;
  std::vector<std::string> call_directions = {std::string(kInbound)};
  std::optional<int64_t> language_id;
  std::optional<std::string> instructions;
  std::string opening_mode = std::string(kAgentSpeaksFirst);
  std::optional<std::string> opening_text;
  int64_t opening_delay_ms = 0;
  int64_t max_call_duration_seconds = kDefaultMaxCallDurationSeconds;
  std::vector<int64_t> disabled_metric_ids;
  std::optional<int64_t> silence_threshold_ms;
  std::optional<std::string> model;
  std::optional<std::string> voice;
  // The workspace's version label; each run and call records it.
  std::optional<std::string> version;
  std::string created_at;
  std::string updated_at;
  // The web channel (null for phone-only agents). Its credentials are plaintext only between
  // unsealing for a PATCH and sealing for the write; `credentials_set` names the stored ones.
  std::optional<WebChannel> web_channel;
  std::vector<std::string> credentials_set;
  std::string sealed_credentials;  // as stored
};

// Whether an agent of this source is hosted on a third-party platform (Vapi, Retell).
bool IsExternal(absl::string_view source);

// Field problems of one request, all reported at once.
class Issues {
 public:
  void Add(std::string field, std::string issue) {
    issues_.push_back({std::move(field), std::move(issue)});
  }
  bool empty() const { return issues_.empty(); }

  // One 422 naming every problem; the message reads "<field> <issue>" for each.
  absl::Status ToStatus() && {
    std::vector<std::string> parts;
    parts.reserve(issues_.size());
    for (const auto& i : issues_) parts.push_back(absl::StrCat(*i.field, " ", i.issue));
    std::string message =
        parts.size() == 1
            ? parts[0]
            : absl::StrCat(parts.size(), " fields are invalid: ", absl::StrJoin(parts, "; "));
    return ValidationError("validation_failed", message, std::move(issues_));
  }

 private:
  std::vector<FieldIssue> issues_;
};

// Merges a request into `record`: keys sent with a value replace, keys sent as null clear
// (nullable fields) or restore the default, other keys keep the stored value. Required fields
// sent as null become missing and are reported by Validate(). Returns whether the agent's
// source is known (see ApplySource).
bool ApplyFields(const v1::AgentFields& f, AgentRecord& record, Issues& issues);

// An issue for `field` when `value` is longer than `max` characters.
void CheckLength(absl::string_view field, const std::optional<std::string>& value, size_t max,
                 Issues& issues);

// The normalized E.164 form and its country calling code, or an issue for `field`.
std::optional<std::pair<std::string, int>> NormalizePhone(absl::string_view raw, Issues& issues,
                                                          absl::string_view field = "phone_number");

// Drops later duplicates, keeping the first of each value in place.
template <typename T>
void Deduplicate(std::vector<T>& values) {
  std::set<T> seen;
  values.erase(std::remove_if(values.begin(), values.end(),
                              [&](const T& v) { return !seen.insert(v).second; }),
               values.end());
}

}  // namespace calleval::agents::rules

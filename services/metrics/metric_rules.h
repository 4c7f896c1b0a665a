#pragma once

// The rules of a custom metric definition (docs/metrics.md, docs/api.md §4), as pure functions:
// what a request may send, how it merges into a stored metric, and what makes it valid. The
// metrics store (metrics_store.cc) keeps the SQL and asks these; the edge cases it decided are
// listed at the top of metrics_store.cc.

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/metrics.pb.h"
#include "common/errors.h"
#include "common/standard_metrics.h"

namespace calleval::metrics::rules {

inline constexpr absl::string_view kStandard = "standard";
inline constexpr absl::string_view kCustomEvaluation = "custom_evaluation";
inline constexpr absl::string_view kPhraseCheck = "specific_text_/_phrase_check";
inline constexpr absl::string_view kOptionsCheck = "permitted_options_check";
inline constexpr absl::string_view kCodeAsJudge = "code_as_judge";

inline constexpr absl::string_view kValidationFailed = "validation_failed";
inline constexpr absl::string_view kDuplicateName = "duplicate_name";
inline constexpr absl::string_view kAgentNotFound = "agent_not_found";
inline constexpr absl::string_view kMetricNotFound = "metric_not_found";
inline constexpr absl::string_view kTypeImmutable = "metrics_type_immutable";

// Unicode case folding, so "ÉTAT" and "état" are the same name.
std::string Fold(absl::string_view s);
// What names are compared on: trimmed and case-folded.
std::string NameKey(absl::string_view name);

bool IsStandardId(int64_t id);
const StandardMetricInfo* FindStandardKey(absl::string_view key);
// The standard metric keys, comma-separated, for messages.
std::string StandardKeyList();

// Field problems of one request. `prefix` names the item being checked ("metrics[2]." in a
// bulk create).
class Issues {
 public:
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

  void Add(absl::string_view field, std::string issue, absl::string_view code = kValidationFailed) {
    issues_.push_back({absl::StrCat(prefix_, field), std::move(issue)});
    codes_.insert(std::string(code));
  }
  void Add(FieldIssue issue) {
    issues_.push_back({absl::StrCat(prefix_, issue.field.value_or("")), std::move(issue.issue)});
    codes_.insert(std::string(kValidationFailed));
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
    const std::string code = codes_.size() == 1 ? *codes_.begin() : std::string(kValidationFailed);
    return ValidationError(code, message, std::move(issues_));
  }

 private:
  std::string prefix_;
  std::vector<FieldIssue> issues_;
  std::set<std::string> codes_;
};

// Merges `request` into `merged`: keys sent replace (an empty list clears), keys sent as null
// are cleared (so the default applies again, or a required field becomes missing), other keys
// keep their value. metrics_type is left alone when `keep_type`. Returns whether the request
// carried enum_values.
bool ApplyRequest(const v1::MetricFields& request, bool keep_type, v1::MetricFields& merged);

// Which of the agents and scenarios a request names exist, as the agents service answered
// before the write. A null set: the ids are kept from the stored metric and not checked again.
struct LinkTargets {
  const absl::flat_hash_set<int64_t>* agents = nullptr;
  const absl::flat_hash_set<int64_t>* scenarios = nullptr;
};

// Checks the merged metric `m` against every rule of a custom metric and builds the metric it
// describes into `out` (everything but id, client_id and the timestamps). Problems go to
// `issues`; name uniqueness is the caller's (it differs between create and bulk create).
absl::Status Validate(const LinkTargets& targets, int64_t workspace_id, const v1::MetricFields& m,
                      bool enum_values_sent, Issues& issues, v1::Metric& out);

}  // namespace calleval::metrics::rules

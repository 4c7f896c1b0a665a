#include "services/calls/call_rules.h"

#include <cmath>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errors.h"

namespace calleval::calls {
namespace {

constexpr absl::string_view kRoles[] = {"AI Assistant", "User", "Function Call",
                                        "Function Call Result"};

bool IsRole(const std::string& role) {
  for (auto r : kRoles) {
    if (role == r) return true;
  }
  return false;
}

}  // namespace

absl::Status ValidateIngest(const v1::IngestCallRequest& request, bool recorded) {
  std::vector<FieldIssue> issues;
  std::string code = "validation_failed";
  auto add = [&](std::string field, std::string issue) {
    issues.push_back({std::move(field), std::move(issue)});
  };

  if (!request.has_call_identifier()) {
    add("call_identifier", "is required");
  } else if (request.call_identifier().empty() ||
             request.call_identifier().size() > kMaxCallIdentifierLength) {
    add("call_identifier", "must be 1 to 255 characters");
  }
  if (!request.has_agent_id()) {
    add("agent_id", "is required");
  } else if (request.agent_id() <= 0) {
    add("agent_id", "must be a positive integer");
  }
  const bool has_recording =
      recorded || (request.has_recording_url() && !request.recording_url().empty());
  if (request.has_recording_url() && request.recording_url().empty()) {
    add("recording_url", "must not be empty");
  }
  if (!has_recording && request.transcript_size() == 0) {
    code = "recording_or_transcript_required";
    add("recording_url", "either recording_url or a non-empty transcript is required");
  }
  if (request.has_observation_type()) {
    const auto& type = request.observation_type();
    if (type != "voice" && type != "text") {
      add("observation_type", "must be one of voice, text");
    } else if (type == "text" && has_recording) {
      add("observation_type", "a text observation cannot have a recording_url");
    }
  }
  if (request.has_call_direction() && request.call_direction() != "inbound" &&
      request.call_direction() != "outbound") {
    add("call_direction", "must be one of inbound, outbound");
  }
  if (request.has_duration_seconds() && request.duration_seconds() < 0) {
    add("duration_seconds", "must not be negative");
  }
  if (request.has_call_timestamp() && !ParseTimestamp(request.call_timestamp())) {
    add("call_timestamp", "must be an ISO 8601 date-time, for example 2026-11-22T10:15:00Z");
  }
  for (int i = 0; i < request.metric_ids_size(); ++i) {
    if (request.metric_ids(i) <= 0) {
      add(absl::StrCat("metric_ids[", i, "]"), "must be a positive integer");
    }
  }
  if (request.transcript_size() > static_cast<int>(kMaxTranscriptTurns)) {
    add("transcript", absl::StrCat("must have at most ", kMaxTranscriptTurns, " turns"));
  } else {
    for (int i = 0; i < request.transcript_size(); ++i) {
      const v1::Turn& turn = request.transcript(i);
      const std::string at = absl::StrCat("transcript[", i, "]");
      if (!IsRole(turn.role())) {
        if (code == "validation_failed") code = "invalid_role";
        add(at + ".role", "must be one of AI Assistant, User, Function Call, Function Call Result");
      }
      if (turn.has_start_time() && (turn.start_time() < 0 || !std::isfinite(turn.start_time()))) {
        add(at + ".start_time", "must be a non-negative number of seconds");
      }
      if (turn.has_end_time() && (turn.end_time() < 0 || !std::isfinite(turn.end_time()))) {
        add(at + ".end_time", "must be a non-negative number of seconds");
      }
      if (turn.has_start_time() && turn.has_end_time() && turn.end_time() < turn.start_time()) {
        add(at + ".end_time", "must not be before start_time");
      }
    }
  }
  if (issues.empty()) return absl::OkStatus();
  std::string message = issues.size() == 1 ? absl::StrCat(*issues[0].field, " ", issues[0].issue)
                                           : absl::StrCat(issues.size(), " fields are invalid");
  return ValidationError(code, message, std::move(issues));
}

std::string ObservationTypeOf(const v1::IngestCallRequest& request, bool recorded) {
  return recorded || (request.has_recording_url() && !request.recording_url().empty()) ? "voice"
                                                                                       : "text";
}

std::optional<int64_t> DurationFromTranscript(const v1::IngestCallRequest& request) {
  std::optional<double> last;
  for (const v1::Turn& turn : request.transcript()) {
    if (turn.has_end_time()) last = std::max(last.value_or(0.0), turn.end_time());
  }
  if (!last) return std::nullopt;
  return static_cast<int64_t>(std::llround(*last));
}

void MergeMetadata(const google::protobuf::Struct& patch, google::protobuf::Struct* stored) {
  auto* fields = stored->mutable_fields();
  for (const auto& [key, value] : patch.fields()) {
    if (value.kind_case() == google::protobuf::Value::kNullValue) {
      fields->erase(key);
    } else {
      (*fields)[key] = value;
    }
  }
}

google::protobuf::Struct WithoutNulls(const google::protobuf::Struct& metadata) {
  google::protobuf::Struct out;
  MergeMetadata(metadata, &out);
  return out;
}

absl::StatusOr<ListFilters> ParseListFilters(const v1::ListCallsRequest& request) {
  static constexpr absl::string_view kAnalysisStatuses[] = {
      "pending", "processing", "computed", "completed", "failed", "skipped"};
  static constexpr absl::string_view kTranscriptionStatuses[] = {"pending", "processing",
                                                                 "completed", "failed"};
  std::vector<FieldIssue> issues;
  ListFilters filters;
  // An unknown status or type in a filter is a client mistake, not an empty result.
  if (request.has_analysis_status() &&
      !absl::c_linear_search(kAnalysisStatuses, request.analysis_status())) {
    issues.push_back({"analysis_status",
                      "must be one of pending, processing, computed, completed, failed, skipped"});
  }
  if (request.has_transcription_status() &&
      !absl::c_linear_search(kTranscriptionStatuses, request.transcription_status())) {
    issues.push_back(
        {"transcription_status", "must be one of pending, processing, completed, failed"});
  }
  if (request.has_observation_type() && request.observation_type() != "voice" &&
      request.observation_type() != "text") {
    issues.push_back({"observation_type", "must be one of voice, text"});
  }
  auto instant = [&](bool has, const std::string& text, const char* field,
                     std::optional<int64_t>* out) {
    if (!has) return;
    std::optional<absl::Time> t = ParseTimestamp(text);
    if (!t.has_value()) {
      issues.push_back(
          {field, "must be an RFC 3339 date-time, for example 2026-11-22T10:15:00Z"});
      return;
    }
    *out = CeilUnixSeconds(*t);
  };
  instant(request.has_call_timestamp_from(), request.call_timestamp_from(), "call_timestamp_from",
          &filters.call_time_from);
  instant(request.has_call_timestamp_to(), request.call_timestamp_to(), "call_timestamp_to",
          &filters.call_time_to);
  if (request.has_search() && absl::StrContains(request.search(), '\0')) {
    // PostgreSQL's text holds no NUL, and libpq sends a text parameter only up to its first
    // one: the pattern would silently end there on that backend and not on SQLite.
    issues.push_back({"search", "must not contain a NUL character"});
  } else if (request.has_search()) {
    filters.search_prefix = request.search();
    const std::string& text = request.search();
    int64_t id = 0;
    // Digits only: "+5" or " 5" are identifiers to look for, not ids. Too many digits for an id
    // (it would not parse) can still start an identifier.
    if (!text.empty() && absl::c_all_of(text, absl::ascii_isdigit) &&
        absl::SimpleAtoi(text, &id)) {
      filters.search_id = id;
    }
  }
  if (!issues.empty()) {
    return ValidationError("validation_failed", "invalid filter", std::move(issues));
  }
  return filters;
}

int64_t CeilUnixSeconds(absl::Time t) {
  const int64_t floor = absl::ToUnixSeconds(t);
  return absl::FromUnixSeconds(floor) < t ? floor + 1 : floor;
}

std::string LikePrefixPattern(absl::string_view prefix) {
  std::string pattern;
  pattern.reserve(prefix.size() + 1);
  for (char ch : prefix) {
    if (ch == '%' || ch == '_' || ch == '\\') pattern += '\\';
    pattern += ch;
  }
  pattern += '%';
  return pattern;
}

std::string GlobPrefixPattern(absl::string_view prefix) {
  std::string pattern;
  pattern.reserve(prefix.size() + 1);
  for (char ch : prefix) {
    if (ch == '*' || ch == '?' || ch == '[') {
      // GLOB has no escape character: a class of one matches the character itself.
      absl::StrAppend(&pattern, "[", absl::string_view(&ch, 1), "]");
    } else {
      pattern += ch;
    }
  }
  pattern += '*';
  return pattern;
}

}  // namespace calleval::calls

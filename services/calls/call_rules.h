#pragma once

// The rules of call ingest and update (docs/api.md §2 and the seed's Calls section) as pure
// functions, so they are unit-tested without a database or a server.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.pb.h"
#include "google/protobuf/struct.pb.h"

namespace calleval::calls {

inline constexpr size_t kMaxTranscriptTurns = 10000;
inline constexpr size_t kMaxCallIdentifierLength = 255;

// Field-level validation of an ingest request that needs nothing but the request itself:
// required keys, enums, roles, timings, sizes. All problems are reported at once (422).
// recording_url is checked separately against the URL guard.
// `recorded`: the service made the recording itself (a run's call), so none is fetched.
absl::Status ValidateIngest(const v1::IngestCallRequest& request, bool recorded = false);

// "voice" when the call has a recording, "text" otherwise (the seed: a transcript without a
// recording is stored as text automatically).
std::string ObservationTypeOf(const v1::IngestCallRequest& request, bool recorded = false);

// duration_seconds when not given: the last transcript turn's end_time, rounded; nullopt when
// there is none (a voice call learns its duration from the decoded audio).
std::optional<int64_t> DurationFromTranscript(const v1::IngestCallRequest& request);

// Applies a metadata patch: keys with a value are added or overwritten, keys sent as null are
// deleted, keys not sent are kept.
void MergeMetadata(const google::protobuf::Struct& patch, google::protobuf::Struct* stored);

// A copy of `metadata` without its null-valued top-level keys (null means "no value").
google::protobuf::Struct WithoutNulls(const google::protobuf::Struct& metadata);

// The filters of a call listing (docs/api.md §2.9) beyond plain equalities, as the query needs
// them. Unset members do not filter.
struct ListFilters {
  std::optional<int64_t> call_time_from;  // call_time >= it (Unix seconds)
  std::optional<int64_t> call_time_to;    // call_time < it (Unix seconds)
  std::optional<std::string> search_prefix;  // call_identifier starts with it
  std::optional<int64_t> search_id;          // or the call's id is it (an all-digit search)
};

// Checks every filter of a listing at once (an unknown status or type, a timestamp that is not
// RFC 3339: 422 naming each) and resolves the timestamps and the search.
absl::StatusOr<ListFilters> ParseListFilters(const v1::ListCallsRequest& request);

// The first whole second at or after `t`. Calls are timed in whole seconds, so "at or after
// 10:15:00.5" is "from 10:15:01", and "before 10:15:00.5" is "before 10:15:01".
int64_t CeilUnixSeconds(absl::Time t);

// LIKE and GLOB patterns matching the strings that start with `prefix`, every character of it
// taken literally: LIKE's % and _ (and the escape character \) escaped with \ (for
// `LIKE ? ESCAPE '\'`), GLOB's *, ? and [ each as a one-character class.
std::string LikePrefixPattern(absl::string_view prefix);
std::string GlobPrefixPattern(absl::string_view prefix);

// Which of the requested metric_ids can be scored (seed rules for metric_ids).
struct MetricSelection {
  std::vector<int64_t> metric_ids;          // to score; empty means "every enabled metric"
  std::vector<int64_t> ignored_metric_ids;  // in the order given
};

// `known` says whether an id names a metric of the workspace; `disabled` lists the agent's
// disabled metric ids; `requires_audio` says whether a metric needs a recording.
template <typename Known, typename RequiresAudio>
MetricSelection SelectMetrics(const std::vector<int64_t>& requested,
                              const std::vector<int64_t>& disabled, bool has_recording, Known known,
                              RequiresAudio requires_audio) {
  MetricSelection out;
  for (int64_t id : requested) {
    bool usable = known(id);
    for (int64_t d : disabled) usable = usable && d != id;
    if (usable && !has_recording && requires_audio(id)) usable = false;
    bool seen = false;
    for (int64_t s : out.metric_ids) seen = seen || s == id;
    if (usable) {
      if (!seen) out.metric_ids.push_back(id);
    } else {
      out.ignored_metric_ids.push_back(id);
    }
  }
  if (out.metric_ids.empty() && !requested.empty()) {
    // No id can be scored: score as if metric_ids had been omitted, and report all of them.
    out.ignored_metric_ids = requested;
  }
  return out;
}

}  // namespace calleval::calls

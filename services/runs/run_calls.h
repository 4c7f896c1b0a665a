#pragma once

// What the runs workers ask the calls service, which owns the calls table: ingest a run's
// conversation as a call, and read a call back while it is scored; and what a batch run's
// comparison reads of its runs' calls. Answered by the calls store
// of this process (calls::InProcessRunCalls) when the calls role runs here, by the Calls
// service's internal methods otherwise (calls::NewGrpcRunCalls).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "calleval/v1/calls.pb.h"

namespace calleval::runs {

// Where a call comes from: the run that made it (a scenario's stats count the calls of its
// runs; 0 for none), and the voice platform's version of the external agent that took it, as the
// platform reported it (Retell's agent_version). Never from the call's own fields: a client
// pushing a call could claim any.
struct RunCallOrigin {
  int64_t run_id = 0;
  int64_t scenario_id = 0;
  std::optional<std::string> platform_version = std::nullopt;
};

// A run's recording, put in the installation's blob store by the runs worker itself (under
// kRunRecordingPrefix): the calls service records the key, the bytes never travel to it.
struct RunRecording {
  std::string key;
  std::string content_type;
  int64_t bytes = 0;
};

// Run recordings' keys start with this; the calls service refuses any other key.
inline constexpr char kRunRecordingPrefix[] = "runs/";

class RunCalls {
 public:
  virtual ~RunCalls() = default;

  // Stores the run's call: a voice call whose recording is stored already when `recording` is
  // given (the calls service deletes that object when the call is not stored), else a text
  // call. AlreadyExists when the call_identifier is taken (a run resumed after its ingest).
  virtual absl::StatusOr<v1::Call> Ingest(int64_t workspace_id,
                                          const v1::IngestCallRequest& request,
                                          const RunCallOrigin& origin,
                                          const std::optional<RunRecording>& recording) = 0;
  // An all-digit key is tried as the integer id first, then as a call_identifier.
  virtual absl::StatusOr<v1::Call> Get(int64_t workspace_id, const std::string& id_or_key) = 0;
  // What the workspace's calls among `call_ids` were scored (their custom metrics' results and
  // the voice calls' mean latency), for a batch run's comparison; ids the workspace does not
  // have are left out. The order is the order asked.
  virtual absl::StatusOr<v1::CallFiguresList> Figures(int64_t workspace_id,
                                                      const std::vector<int64_t>& call_ids) = 0;
};

}  // namespace calleval::runs

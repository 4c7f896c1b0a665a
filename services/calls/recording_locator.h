#pragma once

// Where a call's recording is stored, asked by the edge when it serves a presigned link whose
// signature it has verified (the link names the call; no workspace is checked). From the calls
// store when the calls role runs in the edge's process, else from Calls/GetRecordingLocation.

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "services/calls/calls_store.h"

namespace calleval::calls {

// NOT_FOUND when the call has no stored recording.
using RecordingLocator = std::function<absl::StatusOr<StoredRecording>(int64_t call_id)>;

RecordingLocator StoreRecordingLocator(CallsStore* calls);
// Over the Calls service's internal GetRecordingLocation, on a channel that carries the
// installation's internal credential (CreateInternalChannel).
RecordingLocator NewGrpcRecordingLocator(std::shared_ptr<grpc::Channel> calls);

}  // namespace calleval::calls

#pragma once

// absl::Status <-> grpc::Status. The ErrorInfo payload (common/errors.h) travels the gRPC way:
// the binary error details (trailer grpc-status-details-bin) are a google.rpc.Status with the
// call's code and message, and the ErrorInfo packed in `details` as a google.protobuf.Any, so
// grpcurl and other gRPC clients read them, and the payload survives a hop between processes.

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace calleval {

// A code's name as gRPC spells it ("NOT_FOUND"), as the log and the calleval_grpc_* metrics
// carry it.
absl::string_view GrpcCodeName(grpc::StatusCode code);

grpc::Status ToGrpcStatus(const absl::Status& status);
// Tolerant: details that are not a google.rpc.Status of the call's code (a peer from before
// google.rpc.Status, which sent the bare ErrorInfo) still yield the ErrorInfo when they parse
// as one; anything else is dropped, keeping code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace calleval

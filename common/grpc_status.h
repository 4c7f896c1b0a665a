#pragma once

// absl::Status <-> grpc::Status, keeping the ErrorInfo payload (common/errors.h) in the gRPC
// status' binary error_details so it survives a hop between processes.

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace calleval {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace calleval

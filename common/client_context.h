#pragma once

// The context of an outbound internal gRPC call: every one carries a deadline, so a peer that
// accepts the connection and never answers fails the question in time instead of hanging the
// request that asked.

#include <grpcpp/client_context.h>

#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace calleval {

inline std::unique_ptr<grpc::ClientContext> ContextWithin(absl::Duration deadline) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  return context;
}

}  // namespace calleval

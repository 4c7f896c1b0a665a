#pragma once

// Operational metrics of the gRPC services a process serves (docs/operations.md, "Metrics"):
// calls by method and status code, and their latency. A server interceptor, so every service
// of the builder is covered whatever adapter serves it.

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace calleval {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewGrpcMetricsInterceptorFactory();

}  // namespace calleval

#pragma once

// The log on the gRPC side (docs/operations.md, "Logs"): a server interceptor that gives every
// call a usable request id and logs how the call ended, a client interceptor that carries the
// request id of the thread's work on to the roles it calls, and gRPC's own messages routed into
// the log so that stderr holds nothing else.

#include <grpcpp/server_context.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>

namespace calleval {

// Logs each call when its status is sent: method, code, latency_ms and request_id, at debug
// when OK, info for the codes a caller causes (INVALID_ARGUMENT, NOT_FOUND, ...), warn for the
// others. A call whose x-request-id metadata is missing or not usable (IsUsableRequestId) gets
// a new id in its place before the handler sees the metadata.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewCallLogInterceptorFactory();

// Adds CurrentRequestId() (when there is one) to the x-request-id metadata of every call made
// on a channel it is installed on.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewRequestIdClientInterceptorFactory();

// The call's usable x-request-id metadata, or empty.
std::string RequestIdOf(const grpc::ServerContextBase& context);

// gRPC's own lines (gpr_log, shown at GRPC_VERBOSITY and above: errors by default) become log
// lines with component=grpc.
void RouteGrpcLogsToLog();

}  // namespace calleval

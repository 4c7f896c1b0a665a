#pragma once

// What the runs workers ask the calls service when it runs in another process: the Calls
// service's internal IngestRunCall and GetWorkspaceCall (proto/calleval/v1/calls.proto), on a
// channel that carries the installation's internal credential (CreateInternalChannel). The
// in-process twin is InProcessRunCalls; cmd/calleval/server_roles.cc picks one by whether the
// calls role runs in the process.

#include <grpcpp/channel.h>

#include <memory>

#include "absl/time/time.h"
#include "services/runs/run_calls.h"

namespace calleval::calls {

// Every call waits at most this long: an ingest is one insert on the calls role, a read one row.
inline constexpr absl::Duration kCallsCallDeadline = absl::Seconds(10);

std::unique_ptr<runs::RunCalls> NewGrpcRunCalls(std::shared_ptr<grpc::Channel> calls,
                                                absl::Duration deadline = kCallsCallDeadline);

}  // namespace calleval::calls

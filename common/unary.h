#pragma once

// How a unary call of the gRPC callback API runs: inline, on a pool, or on a bounded pool that
// sheds. Services do not call these themselves: their method tables do (common/method_table.h).

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/method_execution.h"
#include "common/thread_pool.h"

namespace calleval {

// Runs `work` (returning absl::Status) on `pool` and finishes the RPC with its status. Store
// work may block on SQLite's group commit, so it never runs on gRPC's own threads.
template <typename Work>
grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* context, ThreadPool* pool,
                                   Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  pool->Schedule(
      [reactor, work = std::move(work)]() mutable { reactor->Finish(ToGrpcStatus(work())); });
  return reactor;
}

// RunUnary on a bounded pool (ThreadPool with a queue bound): when its queue is full the call
// fails at once, UNAVAILABLE with the error code "overloaded" (the edge answers 503 with
// Retry-After), instead of waiting behind slow work without limit.
template <typename Work>
grpc::ServerUnaryReactor* RunUnaryOrShed(grpc::CallbackServerContext* context, ThreadPool* pool,
                                         absl::string_view method, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!pool->TrySchedule([reactor, work]() mutable { reactor->Finish(ToGrpcStatus(work())); })) {
    reactor->Finish(ToGrpcStatus(
        MakeError(absl::StatusCode::kUnavailable, "overloaded",
                  absl::StrCat("too many ", method, " requests in progress; retry later"))));
  }
  return reactor;
}

// Runs `work` on the calling gRPC thread and finishes the RPC. For short reads only (a SQLite
// point read takes tens of microseconds): moving them to a pool would cost more than they do.
template <typename Work>
grpc::ServerUnaryReactor* RunUnaryInline(grpc::CallbackServerContext* context, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(work()));
  return reactor;
}

// Runs `work` as `execution` says: inline, or on `pool` (RunUnary).
template <typename Work>
grpc::ServerUnaryReactor* RunUnaryAs(grpc::CallbackServerContext* context, Execution execution,
                                     ThreadPool* pool, Work work) {
  if (Resolved(execution) == Execution::kInline) return RunUnaryInline(context, std::move(work));
  return RunUnary(context, pool, std::move(work));
}

}  // namespace calleval

#pragma once

// Helpers for the thin gRPC adapters of every service (gRPC callback API).

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/internal_credential.h"
#include "common/method_execution.h"
#include "common/thread_pool.h"

namespace calleval {

// The caller's Authorization metadata ("Bearer ..."), or empty.
inline std::string AuthorizationOf(const grpc::CallbackServerContext* context) {
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return {};
  return std::string(it->second.data(), it->second.size());
}

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

// Runs `work` as `execution` says: inline, or on `pool` (RunUnary). The adapters take the
// execution from their service's table (common/method_execution.h), as the edge does.
template <typename Work>
grpc::ServerUnaryReactor* RunUnaryAs(grpc::CallbackServerContext* context, Execution execution,
                                     ThreadPool* pool, Work work) {
  if (execution == Execution::kInline) return RunUnaryInline(context, std::move(work));
  return RunUnary(context, pool, std::move(work));
}

// RunUnary for an internal method (one without an HTTP route, called only by the installation's
// own processes): a call without the internal credential fails UNAUTHENTICATED and `work`
// never runs.
template <typename Work>
grpc::ServerUnaryReactor* RunInternalUnary(grpc::CallbackServerContext* context, ThreadPool* pool,
                                           absl::string_view credential, Work work) {
  if (absl::Status denied = CheckInternalCredential(*context, credential); !denied.ok()) {
    return RunUnaryInline(context, [&denied] { return denied; });
  }
  return RunUnary(context, pool, std::move(work));
}

// RunUnaryInline for an internal method.
template <typename Work>
grpc::ServerUnaryReactor* RunInternalUnaryInline(grpc::CallbackServerContext* context,
                                                 absl::string_view credential, Work work) {
  if (absl::Status denied = CheckInternalCredential(*context, credential); !denied.ok()) {
    return RunUnaryInline(context, [&denied] { return denied; });
  }
  return RunUnaryInline(context, std::move(work));
}

}  // namespace calleval

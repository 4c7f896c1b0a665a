#include "edge/direct_invoker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"

namespace calleval::edge {

void DirectInvoker::Register(const google::protobuf::MethodDescriptor* method, Dispatch dispatch,
                             Handler handler, ThreadPool* pool) {
  handlers_[method] = Entry{dispatch, std::move(handler), pool != nullptr ? pool : pool_};
}

void DirectInvoker::Invoke(const google::protobuf::MethodDescriptor* method,
                           std::unique_ptr<google::protobuf::Message> request,
                           const CallContext& context, Done done) {
  auto it = handlers_.find(method);
  if (it == handlers_.end()) {
    if (fallback_ != nullptr) {
      fallback_->Invoke(method, std::move(request), context, std::move(done));
      return;
    }
    done(absl::UnavailableError(absl::StrCat("no backend for ", method->full_name())), nullptr);
    return;
  }
  const Entry& entry = it->second;
  auto run = [&entry, method, request = std::move(request), authorization = context.authorization,
              request_id = context.request_id, done]() mutable {
    // What the handler logs names the request, as it would in a role reached over gRPC.
    ScopedLogContext log_context(request_id);
    std::unique_ptr<google::protobuf::Message> response(
        google::protobuf::MessageFactory::generated_factory()
            ->GetPrototype(method->output_type())
            ->New());
    absl::Status status = entry.handler(authorization, *request, response.get());
    done(status, status.ok() ? std::move(response) : nullptr);
  };
  if (entry.dispatch == Dispatch::kInline) {
    run();
    return;
  }
  // ThreadPool takes copyable tasks; the request is move-only.
  auto task = std::make_shared<decltype(run)>(std::move(run));
  if (!entry.pool->TrySchedule([task] { (*task)(); })) {
    done(MakeError(absl::StatusCode::kUnavailable, "overloaded",
                   absl::StrCat("too many ", method->name(), " requests in progress; retry later")),
         nullptr);
  }
}

}  // namespace calleval::edge

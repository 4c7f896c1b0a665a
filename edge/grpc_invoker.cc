#include "edge/grpc_invoker.h"

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "google/protobuf/dynamic_message.h"

namespace calleval::edge {
namespace {

// Everything one call needs until its completion callback runs.
struct PendingCall {
  grpc::ClientContext context;
  std::unique_ptr<google::protobuf::Message> request;
  std::unique_ptr<google::protobuf::Message> response;
  std::string method_path;
  MethodInvoker::Done done;
};

}  // namespace

GrpcInvoker::GrpcInvoker(std::map<std::string, std::shared_ptr<grpc::Channel>> channels,
                         absl::Duration deadline)
    : deadline_(deadline) {
  for (auto& [service, channel] : channels) stubs_[service] = std::make_unique<Stub>(channel);
}

void GrpcInvoker::Invoke(const google::protobuf::MethodDescriptor* method,
                         std::unique_ptr<google::protobuf::Message> request,
                         const CallContext& context, Done done) {
  auto stub = stubs_.find(method->service()->full_name());
  if (stub == stubs_.end()) {
    done(absl::UnavailableError(
             absl::StrCat("no backend configured for ", method->service()->full_name())),
         nullptr);
    return;
  }
  auto* call = new PendingCall;
  call->request = std::move(request);
  call->response.reset(google::protobuf::MessageFactory::generated_factory()
                           ->GetPrototype(method->output_type())
                           ->New());
  call->method_path = absl::StrCat("/", method->service()->full_name(), "/", method->name());
  call->done = std::move(done);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  if (!context.authorization.empty()) {
    call->context.AddMetadata("authorization", context.authorization);
  }
  if (!context.request_id.empty()) call->context.AddMetadata("x-request-id", context.request_id);
  stub->second->UnaryCall(&call->context, call->method_path, grpc::StubOptions(),
                          call->request.get(), call->response.get(), [call](grpc::Status status) {
                            std::unique_ptr<PendingCall> owned(call);
                            absl::Status result = FromGrpcStatus(status);
                            owned->done(result, result.ok() ? std::move(owned->response) : nullptr);
                          });
}

}  // namespace calleval::edge

#pragma once

// MethodInvoker over gRPC: serializes the transcoded request and calls the method on the
// channel of the service that owns it (an in-process channel when the role runs in the same
// process, a remote one otherwise).

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <map>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "edge/method_invoker.h"

namespace calleval::edge {

class GrpcInvoker : public MethodInvoker {
 public:
  // `channels` maps a full service name ("calleval.v1.Calls") to its channel.
  GrpcInvoker(std::map<std::string, std::shared_ptr<grpc::Channel>> channels,
              absl::Duration deadline);

  void Invoke(const google::protobuf::MethodDescriptor* method,
              std::unique_ptr<google::protobuf::Message> request, const CallContext& context,
              Done done) override;

 private:
  using Stub = grpc::TemplatedGenericStub<google::protobuf::Message, google::protobuf::Message>;
  std::map<std::string, std::unique_ptr<Stub>> stubs_;
  absl::Duration deadline_;
};

}  // namespace calleval::edge

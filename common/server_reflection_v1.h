#pragma once

// grpc.reflection.v1.ServerReflection. gRPC 1.51's reflection plugin serves only v1alpha;
// newer tools (grpcurl, Postman, grpcui) ask v1 first. This answers v1 from the same generated
// descriptor pool, listing the services the server really registered.

#include <grpcpp/impl/server_builder_option.h>

#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "grpc/reflection/v1/reflection.pb.h"

namespace calleval {

// The answer to one reflection request: files from `pool` (each with the files it imports), or
// an error_response. `services` lists the server's services; null while it is being built.
grpc::reflection::v1::ServerReflectionResponse AnswerReflection(
    const grpc::reflection::v1::ServerReflectionRequest& request,
    const google::protobuf::DescriptorPool& pool, const std::vector<std::string>* services);

// Adds the v1 service to a server: builder.SetOption(ServerReflectionV1()).
std::unique_ptr<grpc::ServerBuilderOption> ServerReflectionV1();

}  // namespace calleval

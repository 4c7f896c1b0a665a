#pragma once

// The calleval protos as a serialized google.protobuf.FileDescriptorSet with source info (their
// comments) and every import, made by protoc at build time. The generated descriptor pool keeps
// no comments; the OpenAPI document takes its descriptions from this set.

#include <string_view>

namespace calleval::edge {

std::string_view ProtoDocsDescriptorSet();

}  // namespace calleval::edge

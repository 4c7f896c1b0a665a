#pragma once

// Request ids (docs/operations.md, "Request ids"): the edge takes the client's X-Request-Id when
// it is usable, else makes one, answers with it and passes it on in the gRPC metadata of every
// call it makes; gRPC servers and internal clients carry it on the same way, so every log line
// of one request, in whichever process, names the same id.

#include <string>

#include "absl/strings/string_view.h"

namespace calleval {

// The HTTP header and the gRPC metadata key (lower case, as gRPC wants it).
inline constexpr char kRequestIdKey[] = "x-request-id";
inline constexpr size_t kMaxRequestIdBytes = 128;

// A request id from outside is kept only when it is 1 to 128 characters of letters, digits and
// - _ . : / + = @ (UUIDs, trace ids, base64): nothing that could end a log line, quote or
// split a field, or look like another field. Anything else is replaced with a new id.
bool IsUsableRequestId(absl::string_view id);

// 24 random lower-case hex digits.
std::string NewRequestId();

}  // namespace calleval

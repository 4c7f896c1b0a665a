#pragma once

// Descriptor-driven JSON <-> protobuf codec for the public API (docs/api.md §1).
//
// Protobuf's own JSON utilities do not fit the contract: they print int64 as strings, cannot
// tell an explicit null from an absent key, and print unset fields inconsistently. This codec
// walks the descriptors itself.
//
// Parsing (JSON -> message):
//  - the body must be a JSON object (else 400 "malformed_json"); invalid JSON, invalid UTF-8,
//    nesting deeper than max_depth: 400 "malformed_json";
//  - keys are the proto field names (snake_case); unknown keys are ignored;
//  - a field of the wrong JSON type, a non-integral or out-of-range number for an integer
//    field, a null inside an array: 422 "invalid_type" with the field path in details
//    (for example "transcript[2].start_time");
//  - null for a field leaves it unset; top-level keys sent as null are recorded in a
//    `repeated string null_fields` field and keys sent with a value in `set_fields`, when the
//    message declares them (see proto/calleval/v1/common.proto);
//  - google.protobuf.Struct / Value / ListValue take any JSON and keep nulls.
//
// Printing (message -> JSON):
//  - every field in declaration order, keys are proto field names;
//  - int32/int64/uint are JSON numbers; doubles print as numbers (NaN/Inf as null);
//  - singular fields with presence that are unset, and unset message fields, print null;
//    repeated fields print [] (null when empty and marked [(calleval.v1.null_when_empty) =
//    true]), maps {}; fields marked [(calleval.v1.omit_empty) = true] are left out when unset
//    or empty; `null_fields` and `set_fields` are never printed.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace calleval::edge {

struct JsonParseOptions {
  int max_depth = 64;
  // Values (scalars, objects, arrays) in one body; more is 413 "body_too_large". A transcript
  // of the 10,000 turns ingest allows takes about 100,000.
  size_t max_values = 500000;
};

// Parses a request body into `message` (which is cleared first). Errors carry an ErrorInfo
// payload (common/errors.h): 400 for malformed input, 422 for type errors.
absl::Status ParseJsonBody(std::string_view body, google::protobuf::Message* message,
                           const JsonParseOptions& options = {});

// Sets a field named by a path binding or a query parameter from its text form: integers and
// doubles are parsed ("42"), bools accept true/false/1/0, repeated fields append. `field_path`
// may be dotted ("update.label"). Unknown names are ignored (returns OK). A value that does not
// parse as the field's type: 422 "invalid_type" naming the parameter.
absl::Status SetFieldFromString(std::string_view field_path, std::string_view value,
                                google::protobuf::Message* message);

// Prints `message` as docs/api.md §1 JSON.
std::string PrintJson(const google::protobuf::Message& message);
// One field of `message` as a JSON value (a repeated field as an array): the answer of a route
// with `response_body`.
std::string PrintJsonField(const google::protobuf::Message& message,
                           const google::protobuf::FieldDescriptor* field);

}  // namespace calleval::edge

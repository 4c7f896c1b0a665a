#pragma once

// OpenAPI 3.0.3 description of the public API, generated from the same route table the server
// uses, so the document cannot drift from what is served.
//
// Schemas follow the JSON codec's printing rules (edge/json_codec.h): int64 is an integer (never a
// string), fields with presence and message fields are nullable, omit_empty fields may be absent,
// Struct is an object, Value is any JSON, null_fields / set_fields never appear. Components are
// keyed by the message's full name ("calleval.v1.Call"); `ErrorResponse` is the error body of
// docs/api.md §1.
//
// Response schemas list every printed field as required (the codec writes them all, null where
// unset). Request bodies require what validation requires ((required_in_body) in the protos),
// except at the top of PATCH and PUT bodies, where only the keys sent change. A message used in
// both directions gets a second component for requests, named with an "Input" suffix; a merge
// body with required fields gets one with an "Update" suffix. (allowed), (format) and (example)
// field options give enums, formats and examples; descriptions come from the protos' comments
// (edge/proto_docs.h).

#include <string>
#include <string_view>

#include "edge/route_table.h"

namespace calleval::edge {

// The document as JSON text. Besides the routed methods it lists the routes the edge answers
// itself (GET /healthz, /readyz, /openapi.json, /recordings/{id}), which need no bearer key.
// `public_base_url` is the one server; without one it is "/" (the host that served the document).
std::string BuildOpenApi(const RouteTable& routes, std::string_view title, std::string_view version,
                         std::string_view public_base_url = "");

}  // namespace calleval::edge

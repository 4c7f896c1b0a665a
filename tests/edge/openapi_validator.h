#pragma once

// Checks JSON values against the schemas of calleval's OpenAPI document, for the subset of
// OpenAPI 3.0 schema keywords the document uses: $ref, type, nullable, enum, format (date-time,
// int32), minimum, required, properties, additionalProperties, items, allOf and oneOf.
//
// Stricter than JSON Schema in one way, on purpose: an object property that the schema does not
// list is an error unless additionalProperties allows it, so a field the service prints but the
// document does not describe fails too.

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace calleval::testing {

// Every mismatch of `value` against `schema` (a schema object of `doc`, possibly a $ref), each
// as "<JSON path>: <problem>". Empty when the value conforms.
std::vector<std::string> ValidateSchema(const nlohmann::json& doc, const nlohmann::json& schema,
                                        const nlohmann::json& value);

// The schema of the JSON body of `status` in `method` `path_template` ("get",
// "/api/v1/agents/{id}"), following a components.responses $ref and falling back to "default".
// Null when the document has no JSON body for that answer.
nlohmann::json ResponseSchema(const nlohmann::json& doc, const std::string& path_template,
                              const std::string& method, int status);

// True for an RFC 3339 date-time ("2026-11-22T10:15:00Z", "2026-11-22T10:15:00.123+02:00").
bool IsDateTime(const std::string& text);

}  // namespace calleval::testing

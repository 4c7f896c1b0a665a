#include "edge/openapi.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "calleval/v1/common.pb.h"
#include "nlohmann/json.hpp"

namespace calleval::edge {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using Json = nlohmann::ordered_json;

constexpr char kSchemaPrefix[] = "#/components/schemas/";
constexpr char kJson[] = "application/json";

std::string Ref(const std::string& full_name) { return kSchemaPrefix + full_name; }

bool IsWellKnown(const Descriptor* message, const char* name) {
  return message->full_name() == name;
}

class SchemaBuilder {
 public:
  explicit SchemaBuilder(Json* schemas) : schemas_(*schemas) {}

  // Adds `message` and everything reachable from it to components.schemas; returns a schema
  // that refers to it (well-known types are inlined).
  Json MessageSchema(const Descriptor* message) {
    if (IsWellKnown(message, "google.protobuf.Struct")) {
      return Json{{"type", "object"}, {"additionalProperties", true}};
    }
    if (IsWellKnown(message, "google.protobuf.Value")) return Json::object();
    if (IsWellKnown(message, "google.protobuf.ListValue")) {
      return Json{{"type", "array"}, {"items", Json::object()}};
    }
    if (IsWellKnown(message, "google.protobuf.Empty")) return Json{{"type", "object"}};
    AddComponent(message);
    return Json{{"$ref", Ref(message->full_name())}};
  }

  // The schema of a field as the codec prints it.
  Json FieldSchema(const FieldDescriptor* field) {
    if (field->is_map()) {
      return Json{{"type", "object"},
                  {"additionalProperties", ElementSchema(field->message_type()->map_value())}};
    }
    if (field->is_repeated()) return Json{{"type", "array"}, {"items", ElementSchema(field)}};
    Json schema = ElementSchema(field);
    const bool omit_empty = field->options().GetExtension(calleval::v1::omit_empty);
    if (field->has_presence() && !omit_empty) {
      if (schema.contains("$ref")) {
        // $ref siblings are ignored in OpenAPI 3.0; wrap to say "or null".
        Json wrapped = Json{{"allOf", Json::array({schema})}};
        wrapped["nullable"] = true;
        return wrapped;
      }
      schema["nullable"] = true;
    }
    return schema;
  }

  // The schema of one value of the field (ignoring repeated).
  Json ElementSchema(const FieldDescriptor* field) {
    switch (field->type()) {
      case FieldDescriptor::TYPE_INT32:
      case FieldDescriptor::TYPE_SINT32:
      case FieldDescriptor::TYPE_SFIXED32:
        return Json{{"type", "integer"}, {"format", "int32"}};
      case FieldDescriptor::TYPE_UINT32:
      case FieldDescriptor::TYPE_FIXED32:
        return Json{{"type", "integer"}, {"format", "int64"}, {"minimum", 0}};
      case FieldDescriptor::TYPE_INT64:
      case FieldDescriptor::TYPE_SINT64:
      case FieldDescriptor::TYPE_SFIXED64:
        return Json{{"type", "integer"}, {"format", "int64"}};
      case FieldDescriptor::TYPE_UINT64:
      case FieldDescriptor::TYPE_FIXED64:
        return Json{{"type", "integer"}, {"format", "int64"}, {"minimum", 0}};
      case FieldDescriptor::TYPE_DOUBLE:
        return Json{{"type", "number"}, {"format", "double"}};
      case FieldDescriptor::TYPE_FLOAT:
        return Json{{"type", "number"}, {"format", "float"}};
      case FieldDescriptor::TYPE_BOOL:
        return Json{{"type", "boolean"}};
      case FieldDescriptor::TYPE_STRING:
        return Json{{"type", "string"}};
      case FieldDescriptor::TYPE_BYTES:
        return Json{{"type", "string"}, {"format", "byte"}};
      case FieldDescriptor::TYPE_ENUM: {
        Json values = Json::array();
        const auto* type = field->enum_type();
        for (int i = 0; i < type->value_count(); ++i) values.push_back(type->value(i)->name());
        return Json{{"type", "string"}, {"enum", std::move(values)}};
      }
      case FieldDescriptor::TYPE_MESSAGE:
      case FieldDescriptor::TYPE_GROUP:
        return MessageSchema(field->message_type());
    }
    return Json::object();
  }

 private:
  void AddComponent(const Descriptor* message) {
    const std::string& name = message->full_name();
    if (schemas_.contains(name)) return;
    // Reserve the name first so recursive messages terminate.
    schemas_[name] = Json::object();
    Json properties = Json::object();
    for (int i = 0; i < message->field_count(); ++i) {
      const FieldDescriptor* field = message->field(i);
      if (field->name() == "null_fields" || field->name() == "set_fields") continue;
      properties[field->name()] = FieldSchema(field);
    }
    Json schema = Json{{"type", "object"}, {"properties", std::move(properties)}};
    schemas_[name] = std::move(schema);
  }

  Json& schemas_;
};

const FieldDescriptor* ResolveField(const Descriptor* message, std::string_view path) {
  const FieldDescriptor* field = nullptr;
  while (true) {
    size_t dot = path.find('.');
    field = message->FindFieldByName(std::string(path.substr(0, dot)));
    if (field == nullptr || dot == std::string_view::npos) return field;
    message = field->message_type();
    if (message == nullptr) return nullptr;
    path.remove_prefix(dot + 1);
  }
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

const char* StatusDescription(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    default:
      return "Success";
  }
}

Json ErrorResponseRef(const char* name) {
  return Json{{"$ref", std::string("#/components/responses/") + name}};
}

// Named error responses, all with the SPEC §1 error body.
Json ErrorResponses() {
  Json responses = Json::object();
  auto add = [&responses](const char* name, const char* description) {
    responses[name] =
        Json{{"description", description},
             {"content", Json{{kJson, Json{{"schema", Json{{"$ref", Ref("ErrorResponse")}}}}}}}};
  };
  add("BadRequest", "Malformed JSON, invalid UTF-8 or a body that is not a JSON object");
  add("Unauthorized", "Missing or unknown API key");
  add("Forbidden", "Workspace not accessible or operation forbidden");
  add("NotFound", "No such resource");
  add("PayloadTooLarge", "Request body over the limit");
  add("UnprocessableEntity", "Validation failed");
  add("TooManyRequests", "Rate limit exceeded; see Retry-After");
  add("ServiceUnavailable", "A dependency the request needs is unavailable");
  add("Error", "Error");
  return responses;
}

Json LocalOperation(const char* operation_id, const char* summary) {
  Json op = Json::object();
  op["operationId"] = operation_id;
  op["summary"] = summary;
  op["tags"] = Json::array({"Service"});
  op["security"] = Json::array();
  return op;
}

void AddLocalRoutes(Json& paths) {
  Json any_json = Json{{kJson, Json{{"schema", Json{{"type", "object"}}}}}};

  Json healthz = LocalOperation("Service_Healthz", "Liveness probe");
  healthz["responses"] = Json{{"200", Json{{"description", "Serving"}, {"content", any_json}}}};
  paths["/healthz"] = Json{{"get", std::move(healthz)}};

  Json readyz = LocalOperation("Service_Readyz", "Readiness probe");
  readyz["responses"] = Json{{"200", Json{{"description", "Ready"}, {"content", any_json}}},
                             {"503", ErrorResponseRef("ServiceUnavailable")}};
  paths["/readyz"] = Json{{"get", std::move(readyz)}};

  Json openapi = LocalOperation("Service_OpenApi", "This document");
  openapi["responses"] =
      Json{{"200", Json{{"description", "OpenAPI 3.0.3"}, {"content", any_json}}}};
  paths["/openapi.json"] = Json{{"get", std::move(openapi)}};

  Json recording =
      LocalOperation("Service_GetRecording", "A stored recording through its presigned link");
  recording["parameters"] = Json::array({
      Json{{"name", "id"},
           {"in", "path"},
           {"required", true},
           {"schema", Json{{"type", "integer"}, {"format", "int64"}}}},
      Json{{"name", "expires"},
           {"in", "query"},
           {"required", true},
           {"schema", Json{{"type", "integer"}, {"format", "int64"}}}},
      Json{{"name", "signature"},
           {"in", "query"},
           {"required", true},
           {"schema", Json{{"type", "string"}}}},
  });
  recording["responses"] = Json{
      {"200",
       Json{{"description", "The recording's bytes with their original content type"},
            {"content",
             Json{{"audio/*", Json{{"schema", Json{{"type", "string"}, {"format", "binary"}}}}}}}}},
      {"403", ErrorResponseRef("Forbidden")},
      {"404", ErrorResponseRef("NotFound")}};
  paths["/recordings/{id}"] = Json{{"get", std::move(recording)}};
}

}  // namespace

std::string BuildOpenApi(const RouteTable& routes, std::string_view title,
                         std::string_view version) {
  Json doc = Json::object();
  doc["openapi"] = "3.0.3";
  doc["info"] = Json{{"title", std::string(title)}, {"version", std::string(version)}};

  Json schemas = Json::object();
  SchemaBuilder builder(&schemas);
  Json paths = Json::object();
  Json tags = Json::array();
  absl::flat_hash_map<std::string, int> operation_ids;

  for (const auto& route : routes.routes()) {
    const auto* method = route->method_descriptor;
    const Descriptor* input = method->input_type();
    const std::string& service = method->service()->name();
    if (std::find_if(tags.begin(), tags.end(),
                     [&](const Json& t) { return t["name"] == service; }) == tags.end()) {
      tags.push_back(Json{{"name", service}});
    }

    Json op = Json::object();
    std::string operation_id = service + "_" + method->name();
    if (int n = ++operation_ids[operation_id]; n > 1) operation_id += "_" + std::to_string(n);
    op["operationId"] = operation_id;
    op["summary"] = method->name();
    op["tags"] = Json::array({service});

    Json parameters = Json::array();
    for (const PathSegment& segment : route->segments) {
      if (!segment.is_variable) continue;
      const FieldDescriptor* field = ResolveField(input, segment.field_path);
      parameters.push_back(Json{{"name", segment.field_path},
                                {"in", "path"},
                                {"required", true},
                                {"schema", builder.ElementSchema(field)}});
    }
    for (const FieldDescriptor* field : route->query_fields) {
      Json schema = field->is_repeated()
                        ? Json{{"type", "array"}, {"items", builder.ElementSchema(field)}}
                        : builder.ElementSchema(field);
      parameters.push_back(
          Json{{"name", field->name()}, {"in", "query"}, {"required", false}, {"schema", schema}});
    }
    if (!parameters.empty()) op["parameters"] = std::move(parameters);

    if (route->body_kind != BodyKind::kNone) {
      const Descriptor* body =
          route->body_kind == BodyKind::kWhole ? input : route->body_field->message_type();
      op["requestBody"] =
          Json{{"required", true},
               {"content", Json{{kJson, Json{{"schema", builder.MessageSchema(body)}}}}}};
    }

    Json responses = Json::object();
    const std::string success = std::to_string(route->success_status);
    if (route->empty_response) {
      responses[success] = Json{{"description", StatusDescription(204)}};
    } else {
      responses[success] =
          Json{{"description", StatusDescription(route->success_status)},
               {"content",
                Json{{kJson, Json{{"schema", route->response_body_field != nullptr
                                                 ? builder.FieldSchema(route->response_body_field)
                                                 : builder.MessageSchema(method->output_type())}}}}}};
    }
    if (route->body_kind != BodyKind::kNone) responses["400"] = ErrorResponseRef("BadRequest");
    responses["401"] = ErrorResponseRef("Unauthorized");
    responses["403"] = ErrorResponseRef("Forbidden");
    responses["404"] = ErrorResponseRef("NotFound");
    if (route->body_kind != BodyKind::kNone) {
      responses["413"] = ErrorResponseRef("PayloadTooLarge");
    }
    responses["422"] = ErrorResponseRef("UnprocessableEntity");
    responses["429"] = ErrorResponseRef("TooManyRequests");
    responses["503"] = ErrorResponseRef("ServiceUnavailable");
    responses["default"] = ErrorResponseRef("Error");
    op["responses"] = std::move(responses);

    paths[route->path_template][Lower(HttpMethodName(route->method))] = std::move(op);
  }
  AddLocalRoutes(paths);
  tags.push_back(Json{{"name", "Service"}});

  builder.MessageSchema(calleval::v1::ErrorResponse::descriptor());
  schemas["ErrorResponse"] =
      Json{{"$ref", Ref(calleval::v1::ErrorResponse::descriptor()->full_name())}};

  doc["tags"] = std::move(tags);
  doc["paths"] = std::move(paths);
  doc["components"] =
      Json{{"schemas", std::move(schemas)},
           {"responses", ErrorResponses()},
           {"securitySchemes", Json{{"bearerAuth", Json{{"type", "http"}, {"scheme", "bearer"}}}}}};
  doc["security"] = Json::array({Json{{"bearerAuth", Json::array()}}});
  return doc.dump(2);
}

}  // namespace calleval::edge

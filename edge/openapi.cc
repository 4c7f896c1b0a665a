#include "edge/openapi.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "calleval/v1/common.pb.h"
#include "edge/proto_docs.h"
#include "google/protobuf/descriptor.pb.h"
#include "nlohmann/json.hpp"

namespace calleval::edge {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::MethodDescriptor;
using google::protobuf::ServiceDescriptor;
using google::protobuf::SourceLocation;
using Json = nlohmann::ordered_json;

constexpr char kSchemaPrefix[] = "#/components/schemas/";
constexpr char kJson[] = "application/json";
constexpr char kExampleTimestamp[] = "2026-11-22T10:15:00Z";
// Examples stop descending here (a message reached again deeper shows as {}).
constexpr int kMaxExampleDepth = 4;

std::string Ref(const std::string& full_name) { return kSchemaPrefix + full_name; }

bool IsWellKnown(const Descriptor* message, const char* name) {
  return message->full_name() == name;
}

bool IsBookkeeping(const FieldDescriptor* field) {
  return field->name() == "null_fields" || field->name() == "set_fields";
}

bool OmitEmpty(const FieldDescriptor* field) {
  return field->options().GetExtension(calleval::v1::omit_empty);
}

bool NullWhenEmpty(const FieldDescriptor* field) {
  return field->options().GetExtension(calleval::v1::null_when_empty);
}

bool RequiredInBody(const FieldDescriptor* field) {
  return field->options().GetExtension(calleval::v1::required_in_body);
}

// Comment text as one paragraph per blank-line-separated block.
std::string CleanComment(const std::string& text) {
  std::vector<std::string> paragraphs(1);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) {
      if (!paragraphs.back().empty()) paragraphs.emplace_back();
      continue;
    }
    if (!paragraphs.back().empty()) paragraphs.back() += ' ';
    paragraphs.back().append(line.data(), line.size());
  }
  if (paragraphs.back().empty()) paragraphs.pop_back();
  return absl::StrJoin(paragraphs, "\n\n");
}

std::string LocationText(const SourceLocation& location) {
  std::string text = CleanComment(location.leading_comments);
  std::string trailing = CleanComment(location.trailing_comments);
  if (!trailing.empty()) text = text.empty() ? trailing : text + "\n\n" + trailing;
  return text;
}

// The protos' comments, looked up by full name in the embedded descriptor set.
class ProtoComments {
 public:
  ProtoComments() {
    google::protobuf::FileDescriptorSet set;
    const std::string_view bytes = ProtoDocsDescriptorSet();
    if (!set.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
    // protoc writes imports first, so each file's dependencies are already built.
    for (const auto& file : set.file()) pool_.BuildFile(file);
  }

  template <typename T>
  std::string Of(const T* descriptor) const {
    const T* documented = Find(descriptor);
    SourceLocation location;
    if (documented == nullptr || !documented->GetSourceLocation(&location)) return "";
    return LocationText(location);
  }

  // The comment above the `syntax` line: what the whole file is about.
  std::string OfFile(const FileDescriptor* file) const {
    const FileDescriptor* documented = pool_.FindFileByName(file->name());
    SourceLocation location;
    constexpr int kSyntaxFieldNumber = 12;  // FileDescriptorProto.syntax
    if (documented == nullptr || !documented->GetSourceLocation({kSyntaxFieldNumber}, &location)) {
      return "";
    }
    return LocationText(location);
  }

 private:
  const Descriptor* Find(const Descriptor* d) const {
    return pool_.FindMessageTypeByName(d->full_name());
  }
  const FieldDescriptor* Find(const FieldDescriptor* d) const {
    const Descriptor* message = Find(d->containing_type());
    return message == nullptr ? nullptr : message->FindFieldByName(d->name());
  }
  const ServiceDescriptor* Find(const ServiceDescriptor* d) const {
    return pool_.FindServiceByName(d->full_name());
  }
  const MethodDescriptor* Find(const MethodDescriptor* d) const {
    return pool_.FindMethodByName(d->full_name());
  }

  DescriptorPool pool_;
};

const ProtoComments& Comments() {
  static const ProtoComments* const comments = new ProtoComments();
  return *comments;
}

// Where a message appears: in answers, in request bodies, or as the top of a PATCH / PUT body.
enum class Usage { kResponse, kBody, kMergeBody };

// Every message an answer of the routes can contain.
void CollectResponseMessages(const Descriptor* message,
                             absl::flat_hash_set<const Descriptor*>* out) {
  if (!out->insert(message).second) return;
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    if (field->message_type() == nullptr) continue;
    const Descriptor* type = field->is_map() ? field->message_type()->map_value()->message_type()
                                             : field->message_type();
    if (type != nullptr) CollectResponseMessages(type, out);
  }
}

class SchemaBuilder {
 public:
  SchemaBuilder(Json* schemas, absl::flat_hash_set<const Descriptor*> response_messages)
      : schemas_(*schemas), response_messages_(std::move(response_messages)) {}

  // Adds `message` and everything reachable from it to components.schemas; returns a schema
  // that refers to it (well-known types are inlined).
  Json MessageSchema(const Descriptor* message, Usage usage) {
    if (IsWellKnown(message, "google.protobuf.Struct")) {
      return Json{{"type", "object"}, {"additionalProperties", true}};
    }
    if (IsWellKnown(message, "google.protobuf.Value")) {
      // No type: any JSON value, null included.
      return Json{{"description", "Any JSON value."}};
    }
    if (IsWellKnown(message, "google.protobuf.ListValue")) {
      return Json{{"type", "array"}, {"items", Json::object()}};
    }
    if (IsWellKnown(message, "google.protobuf.Empty")) return Json{{"type", "object"}};
    const std::string name = ComponentName(message, usage);
    AddComponent(message, usage, name);
    return Json{{"$ref", Ref(name)}};
  }

  // The schema of a field as the codec prints it.
  Json FieldSchema(const FieldDescriptor* field, Usage usage) {
    const Usage inner = usage == Usage::kMergeBody ? Usage::kBody : usage;
    Json schema;
    if (field->is_map()) {
      schema =
          Json{{"type", "object"},
               {"additionalProperties", ElementSchema(field->message_type()->map_value(), inner)}};
    } else if (field->is_repeated()) {
      schema = Json{{"type", "array"}, {"items", ElementSchema(field, inner)}};
      if (NullWhenEmpty(field)) schema["nullable"] = true;
    } else {
      schema = ElementSchema(field, inner);
      if (field->has_presence() && !OmitEmpty(field) && schema.contains("type")) {
        schema["nullable"] = true;
        // In OpenAPI 3.0 an enum lists null itself for a nullable field to accept it.
        if (schema.contains("enum")) schema["enum"].push_back(nullptr);
      } else if (field->has_presence() && !OmitEmpty(field) && schema.contains("$ref")) {
        // $ref siblings are ignored in OpenAPI 3.0, and nullable needs a type: wrap.
        schema = Json{{"type", "object"}, {"nullable", true}, {"allOf", Json::array({schema})}};
      }
    }
    std::string description = Comments().Of(field);
    if (!description.empty()) {
      if (schema.contains("$ref")) schema = Json{{"allOf", Json::array({schema})}};
      if (schema.contains("description")) {
        description += "\n\n" + schema["description"].get<std::string>();
      }
      schema["description"] = std::move(description);
    }
    return schema;
  }

  // The schema of one value of the field (ignoring repeated).
  Json ElementSchema(const FieldDescriptor* field, Usage usage) {
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
      case FieldDescriptor::TYPE_STRING: {
        Json schema = Json{{"type", "string"}};
        const auto& options = field->options();
        if (const std::string& format = options.GetExtension(calleval::v1::format);
            !format.empty()) {
          schema["format"] = format;
        }
        if (options.ExtensionSize(calleval::v1::allowed) > 0) {
          Json values = Json::array();
          for (int i = 0; i < options.ExtensionSize(calleval::v1::allowed); ++i) {
            values.push_back(options.GetExtension(calleval::v1::allowed, i));
          }
          schema["enum"] = std::move(values);
        }
        return schema;
      }
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
        return MessageSchema(field->message_type(), usage);
    }
    return Json::object();
  }

  // A JSON value of `message` as the service would take (bodies: the required fields and those
  // with an (example)) or give it (answers: every printed field).
  Json MessageExample(const Descriptor* message, Usage usage, int depth = 0) {
    if (IsWellKnown(message, "google.protobuf.Struct")) return Json::object();
    if (IsWellKnown(message, "google.protobuf.Value")) return "any JSON";
    if (IsWellKnown(message, "google.protobuf.ListValue")) return Json::array();
    Json example = Json::object();
    if (depth > kMaxExampleDepth) return example;
    for (int i = 0; i < message->field_count(); ++i) {
      const FieldDescriptor* field = message->field(i);
      if (IsBookkeeping(field)) continue;
      const bool has_example = field->options().HasExtension(calleval::v1::example);
      if (usage == Usage::kResponse ? (OmitEmpty(field) && !has_example)
                                    : !(RequiredInBody(field) || has_example)) {
        continue;
      }
      example[field->name()] = FieldExample(field, usage, depth);
    }
    return example;
  }

  Json FieldExample(const FieldDescriptor* field, Usage usage, int depth) {
    const std::string& text = field->options().GetExtension(calleval::v1::example);
    if (!text.empty()) {
      Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded()) return parsed;
    }
    if (field->is_map()) return Json::object();
    if (field->is_repeated()) {
      if (field->message_type() != nullptr && depth >= kMaxExampleDepth) return Json::array();
      return Json::array({ElementExample(field, usage, depth)});
    }
    return ElementExample(field, usage, depth);
  }

  // The schema name of `message` where it is used as `usage`.
  std::string ComponentName(const Descriptor* message, Usage usage) const {
    std::string name = message->full_name();
    if (usage == Usage::kResponse) return name;
    if (response_messages_.contains(message)) name += "Input";
    if (usage == Usage::kMergeBody && HasRequiredField(message)) name += "Update";
    return name;
  }

 private:
  static bool HasRequiredField(const Descriptor* message) {
    for (int i = 0; i < message->field_count(); ++i) {
      if (RequiredInBody(message->field(i))) return true;
    }
    return false;
  }

  Json ElementExample(const FieldDescriptor* field, Usage usage, int depth) {
    const auto& options = field->options();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        return 1;
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        return 1.5;
      case FieldDescriptor::CPPTYPE_BOOL:
        return true;
      case FieldDescriptor::CPPTYPE_ENUM:
        return field->enum_type()->value(0)->name();
      case FieldDescriptor::CPPTYPE_STRING:
        if (options.ExtensionSize(calleval::v1::allowed) > 0) {
          return options.GetExtension(calleval::v1::allowed, 0);
        }
        if (options.GetExtension(calleval::v1::format) == "date-time") return kExampleTimestamp;
        return field->name();
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return MessageExample(field->message_type(),
                              usage == Usage::kResponse ? usage : Usage::kBody, depth + 1);
    }
    return nullptr;
  }

  void AddComponent(const Descriptor* message, Usage usage, const std::string& name) {
    if (schemas_.contains(name)) return;
    // Reserve the name first so recursive messages terminate.
    schemas_[name] = Json::object();
    Json properties = Json::object();
    Json required = Json::array();
    for (int i = 0; i < message->field_count(); ++i) {
      const FieldDescriptor* field = message->field(i);
      if (IsBookkeeping(field)) continue;
      properties[field->name()] = FieldSchema(field, usage);
      const bool is_required = usage == Usage::kResponse ? !OmitEmpty(field)
                               : usage == Usage::kBody   ? RequiredInBody(field)
                                                         : false;
      if (is_required) required.push_back(field->name());
    }
    Json schema = Json{{"type", "object"}};
    if (std::string description = Comments().Of(message); !description.empty()) {
      schema["description"] = std::move(description);
    }
    if (!required.empty()) schema["required"] = std::move(required);
    schema["properties"] = std::move(properties);
    schemas_[name] = std::move(schema);
  }

  Json& schemas_;
  const absl::flat_hash_set<const Descriptor*> response_messages_;
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

// Named error responses, all with the error body of docs/api.md §1 and an example of it.
Json ErrorResponses() {
  Json responses = Json::object();
  auto add = [&responses](const char* name, const char* description, int status, const char* code,
                          const char* message) {
    Json example = Json{{"error", Json{{"status", status},
                                       {"code", code},
                                       {"message", message},
                                       {"details", Json::array()}}}};
    if (status == 422) {
      example["error"]["details"].push_back(
          Json{{"field", "call_identifier"}, {"issue", "is required"}});
    }
    responses[name] =
        Json{{"description", description},
             {"content", Json{{kJson, Json{{"schema", Json{{"$ref", Ref("ErrorResponse")}}},
                                           {"example", std::move(example)}}}}}};
  };
  add("BadRequest", "Malformed JSON, invalid UTF-8 or a body that is not a JSON object", 400,
      "malformed_json", "the request body must be a JSON object");
  add("Unauthorized", "Missing or unknown API key", 401, "unauthenticated",
      "missing or unknown API key");
  add("Forbidden", "Workspace not accessible or operation forbidden", 403, "forbidden",
      "workspace not accessible");
  add("NotFound", "No such resource", 404, "not_found", "call not found");
  add("PayloadTooLarge", "Request body over the limit", 413, "payload_too_large",
      "request body too large");
  add("UnprocessableEntity", "Validation failed", 422, "validation_failed",
      "call_identifier is required");
  add("TooManyRequests", "Rate limit exceeded; see Retry-After", 429, "rate_limited",
      "rate limit exceeded; retry in 1 s");
  add("ServiceUnavailable", "A dependency the request needs is unavailable", 503, "unavailable",
      "not ready");
  add("Error", "Error", 500, "internal", "internal error");
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
  auto json_content = [](Json example) {
    return Json{
        {kJson, Json{{"schema", Json{{"type", "object"}}}, {"example", std::move(example)}}}};
  };

  Json healthz = LocalOperation("Service_Healthz", "Liveness probe");
  healthz["responses"] = Json{
      {"200", Json{{"description", "Serving"}, {"content", json_content({{"status", "ok"}})}}}};
  paths["/healthz"] = Json{{"get", std::move(healthz)}};

  Json readyz = LocalOperation("Service_Readyz", "Readiness probe");
  readyz["responses"] = Json{
      {"200", Json{{"description", "Ready"}, {"content", json_content({{"status", "ready"}})}}},
      {"503", ErrorResponseRef("ServiceUnavailable")}};
  paths["/readyz"] = Json{{"get", std::move(readyz)}};

  Json openapi = LocalOperation("Service_OpenApi", "This document");
  openapi["responses"] = Json{{"200", Json{{"description", "OpenAPI 3.0.3"},
                                           {"content", json_content({{"openapi", "3.0.3"}})}}}};
  paths["/openapi.json"] = Json{{"get", std::move(openapi)}};

  Json recording =
      LocalOperation("Service_GetRecording", "A stored recording through its presigned link");
  recording["parameters"] = Json::array({
      Json{{"name", "id"},
           {"in", "path"},
           {"required", true},
           {"schema", Json{{"type", "integer"}, {"format", "int64"}}},
           {"example", 1}},
      Json{{"name", "expires"},
           {"in", "query"},
           {"required", true},
           {"description", "Unix time after which the link no longer works"},
           {"schema", Json{{"type", "integer"}, {"format", "int64"}}},
           {"example", 1795000000}},
      Json{{"name", "signature"},
           {"in", "query"},
           {"required", true},
           {"schema", Json{{"type", "string"}}},
           {"example", "3f2a"}},
  });
  recording["responses"] = Json{
      {"200",
       Json{{"description", "The recording's bytes with their original content type"},
            {"content",
             Json{{"audio/*", Json{{"schema", Json{{"type", "string"}, {"format", "binary"}}}}}}}}},
      {"403", ErrorResponseRef("Forbidden")},
      {"404", ErrorResponseRef("NotFound")},
      {"503", ErrorResponseRef("ServiceUnavailable")}};
  paths["/recordings/{id}"] = Json{{"get", std::move(recording)}};

  // The voice platforms' webhooks (docs/api.md §5.9): the platform's own signature instead of a
  // key, over the raw body, which is the platform's event as it sends it.
  const Json outcome_schema = Json{
      {"type", "object"},
      {"required", Json::array({"outcome", "call_ids"})},
      {"properties",
       Json{{"outcome",
             Json{{"type", "string"}, {"enum", Json::array({"stored", "duplicate", "ignored"})}}},
            {"call_ids", Json{{"type", "array"},
                              {"items", Json{{"type", "integer"}, {"format", "int64"}}}}}}}};
  struct Platform {
    const char* path;
    const char* operation_id;
    const char* summary;
    const char* description;
    Json example;
  };
  const Platform platforms[] = {
      {"/api/public/v1/integrations/vapi/events", "Service_VapiEvents",
       "A Vapi server message (end-of-call-report makes a call)",
       "Verified by the workspace's vapi webhook_secret, sent as X-Vapi-Secret, as "
       "Authorization: Bearer, or as an HMAC-SHA256 signature (X-Vapi-Signature or X-Signature, "
       "with X-Timestamp). The event's call.assistantId names the agent.",
       Json{{"message",
             Json{{"type", "end-of-call-report"},
                  {"endedReason", "customer-ended-call"},
                  {"cost", 0.12},
                  {"call", Json{{"id", "c1"}, {"assistantId", "asst-1"}}},
                  {"artifact",
                   Json{{"stereoRecordingUrl", "https://storage.vapi.ai/c1-stereo.wav"},
                        {"messages", Json::array({Json{{"role", "bot"},
                                                       {"message", "Hello!"},
                                                       {"secondsFromStart", 0.5},
                                                       {"duration", 900}}})}}}}}}},
      {"/api/public/v1/integrations/retell/events", "Service_RetellEvents",
       "A Retell webhook (call_analyzed makes a call)",
       "Verified by x-retell-signature: v=<unix ms>,d=<hex HMAC-SHA256 of the body followed by "
       "the timestamp, keyed with the workspace's retell api_key>, within 5 minutes. The event's "
       "call.agent_id names the agent.",
       Json{{"event", "call_analyzed"},
            {"call", Json{{"call_id", "c1"},
                          {"agent_id", "agent_1"},
                          {"recording_multi_channel_url", "https://retell.example/c1.wav"},
                          {"disconnection_reason", "user_hangup"},
                          {"transcript_object",
                           Json::array({Json{{"role", "agent"},
                                             {"content", "Hello!"},
                                             {"words", Json::array({Json{{"word", "Hello!"},
                                                                         {"start", 0.5},
                                                                         {"end", 1.4}}})}}})}}}}},
  };
  for (const Platform& platform : platforms) {
    Json op = LocalOperation(platform.operation_id, platform.summary);
    op["description"] = platform.description;
    op["requestBody"] = Json{
        {"required", true},
        {"content", Json{{kJson, Json{{"schema", Json{{"type", "object"}}},
                                      {"example", platform.example}}}}}};
    op["responses"] = Json{
        {"200", Json{{"description",
                      "Acknowledged: the call stored, already stored (a redelivery), or an event "
                      "that makes none"},
                     {"content", Json{{kJson, Json{{"schema", outcome_schema},
                                                   {"example", Json{{"outcome", "stored"},
                                                                    {"call_ids", {42}}}}}}}}}},
        {"400", ErrorResponseRef("BadRequest")},
        {"401", ErrorResponseRef("Unauthorized")},
        {"413", ErrorResponseRef("PayloadTooLarge")},
        {"422", ErrorResponseRef("UnprocessableEntity")},
        {"503", ErrorResponseRef("ServiceUnavailable")}};
    paths[platform.path] = Json{{"post", std::move(op)}};
  }
}

std::string Summary(const MethodDescriptor* method) {
  // "IngestCall" -> "Ingest call".
  std::string out;
  for (char c : method->name()) {
    if (absl::ascii_isupper(c) && !out.empty()) {
      out += ' ';
      c = absl::ascii_tolower(c);
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string BuildOpenApi(const RouteTable& routes, std::string_view title, std::string_view version,
                         std::string_view public_base_url) {
  Json doc = Json::object();
  doc["openapi"] = "3.0.3";
  doc["info"] = Json{{"title", std::string(title)},
                     {"version", std::string(version)},
                     {"description",
                      "Scores voice and text calls of AI agents. Every answer is JSON; every "
                      "field of a response object is present, null where it has no value."}};
  doc["servers"] = Json::array(
      {Json{{"url", public_base_url.empty() ? std::string("/") : std::string(public_base_url)}}});

  absl::flat_hash_set<const Descriptor*> response_messages;
  for (const auto& route : routes.routes()) {
    CollectResponseMessages(route->method_descriptor->output_type(), &response_messages);
  }
  CollectResponseMessages(calleval::v1::ErrorResponse::descriptor(), &response_messages);

  Json schemas = Json::object();
  SchemaBuilder builder(&schemas, std::move(response_messages));
  Json paths = Json::object();
  Json tags = Json::array();
  absl::flat_hash_map<std::string, int> operation_ids;

  for (const auto& route : routes.routes()) {
    const auto* method = route->method_descriptor;
    const Descriptor* input = method->input_type();
    const std::string& service = method->service()->name();
    if (std::find_if(tags.begin(), tags.end(),
                     [&](const Json& t) { return t["name"] == service; }) == tags.end()) {
      std::string description = Comments().Of(method->service());
      if (description.empty()) description = Comments().OfFile(method->file());
      tags.push_back(Json{{"name", service}, {"description", description}});
    }

    Json op = Json::object();
    std::string operation_id = service + "_" + method->name();
    if (int n = ++operation_ids[operation_id]; n > 1) operation_id += "_" + std::to_string(n);
    op["operationId"] = operation_id;
    op["summary"] = Summary(method);
    if (std::string description = Comments().Of(method); !description.empty()) {
      op["description"] = std::move(description);
    }
    op["tags"] = Json::array({service});

    Json parameters = Json::array();
    for (const PathSegment& segment : route->segments) {
      if (!segment.is_variable) continue;
      const FieldDescriptor* field = ResolveField(input, segment.field_path);
      Json parameter = Json{{"name", segment.field_path},
                            {"in", "path"},
                            {"required", true},
                            {"schema", builder.ElementSchema(field, Usage::kBody)}};
      parameter["example"] = field->cpp_type() == FieldDescriptor::CPPTYPE_STRING
                                 ? Json("call-0001")
                                 : builder.FieldExample(field, Usage::kBody, 0);
      parameters.push_back(std::move(parameter));
    }
    for (const FieldDescriptor* field : route->query_fields) {
      Json schema =
          field->is_repeated()
              ? Json{{"type", "array"}, {"items", builder.ElementSchema(field, Usage::kBody)}}
              : builder.ElementSchema(field, Usage::kBody);
      Json parameter = Json{{"name", field->name()}, {"in", "query"}, {"required", false}};
      if (std::string description = Comments().Of(field); !description.empty()) {
        parameter["description"] = std::move(description);
      }
      parameter["schema"] = std::move(schema);
      parameters.push_back(std::move(parameter));
    }
    if (!parameters.empty()) op["parameters"] = std::move(parameters);

    if (route->body_kind != BodyKind::kNone) {
      const Descriptor* body =
          route->body_kind == BodyKind::kWhole ? input : route->body_field->message_type();
      // PATCH and PUT merge what is sent into what is stored: nothing at the top is required.
      const Usage usage = route->method == HttpMethod::kPost ? Usage::kBody : Usage::kMergeBody;
      op["requestBody"] =
          Json{{"required", true},
               {"content", Json{{kJson, Json{{"schema", builder.MessageSchema(body, usage)},
                                             {"example", builder.MessageExample(body, usage)}}}}}};
    }

    Json responses = Json::object();
    const std::string success = std::to_string(route->success_status);
    if (route->empty_response) {
      responses[success] = Json{{"description", StatusDescription(204)}};
    } else {
      Json schema;
      Json example;
      if (route->response_body_field != nullptr) {
        schema = builder.FieldSchema(route->response_body_field, Usage::kResponse);
        example = builder.FieldExample(route->response_body_field, Usage::kResponse, 0);
      } else {
        schema = builder.MessageSchema(method->output_type(), Usage::kResponse);
        example = builder.MessageExample(method->output_type(), Usage::kResponse);
      }
      responses[success] = Json{
          {"description", StatusDescription(route->success_status)},
          {"content",
           Json{{kJson, Json{{"schema", std::move(schema)}, {"example", std::move(example)}}}}}};
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
  tags.push_back(Json{{"name", "Service"},
                      {"description",
                       "Probes, this document and presigned recording links; no "
                       "API key needed."}});

  builder.MessageSchema(calleval::v1::ErrorResponse::descriptor(), Usage::kResponse);
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

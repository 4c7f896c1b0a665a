#include "tests/edge/openapi_validator.h"

#include <cmath>
#include <regex>

#include "absl/strings/str_cat.h"

namespace calleval::testing {
namespace {

using Json = nlohmann::json;

class Validator {
 public:
  explicit Validator(const Json& doc) : doc_(doc) {}

  void Check(const Json& schema, const Json& value, const std::string& path, int depth = 0) {
    if (depth > 64) return Fail(path, "schema nesting too deep (a $ref cycle?)");
    if (!schema.is_object()) return Fail(path, "schema is not an object");
    if (schema.contains("$ref")) {
      const Json* target = Resolve(schema["$ref"].get<std::string>());
      if (target == nullptr) return Fail(path, "dangling " + schema["$ref"].dump());
      return Check(*target, value, path, depth + 1);
    }
    if (value.is_null()) {
      // No type: any value, null included. Otherwise null needs nullable.
      if (schema.value("nullable", false) || !HasShape(schema)) return;
      return Fail(path, "null where the schema is not nullable");
    }
    if (schema.contains("allOf")) {
      for (const Json& part : schema["allOf"]) Check(part, value, path, depth + 1);
    }
    if (schema.contains("oneOf")) {
      int matches = 0;
      for (const Json& part : schema["oneOf"]) {
        Validator probe(doc_);
        probe.Check(part, value, path, depth + 1);
        if (probe.errors_.empty()) ++matches;
      }
      if (matches != 1) Fail(path, absl::StrCat("matches ", matches, " oneOf schemas, not 1"));
    }
    if (schema.contains("enum")) {
      bool found = false;
      for (const Json& allowed : schema["enum"]) found = found || allowed == value;
      if (!found) Fail(path, absl::StrCat(value.dump(), " is not one of ", schema["enum"].dump()));
    }
    if (!schema.contains("type")) return;
    const std::string type = schema["type"].get<std::string>();
    if (type == "object") {
      if (!value.is_object()) return Fail(path, "expected an object, got " + value.dump());
      CheckObject(schema, value, path, depth);
    } else if (type == "array") {
      if (!value.is_array()) return Fail(path, "expected an array, got " + value.dump());
      if (schema.contains("items")) {
        for (size_t i = 0; i < value.size(); ++i) {
          Check(schema["items"], value[i], absl::StrCat(path, "[", i, "]"), depth + 1);
        }
      }
    } else if (type == "string") {
      if (!value.is_string()) return Fail(path, "expected a string, got " + value.dump());
      if (schema.value("format", "") == "date-time" && !IsDateTime(value.get<std::string>())) {
        Fail(path, value.dump() + " is not an RFC 3339 date-time");
      }
    } else if (type == "integer") {
      if (!value.is_number_integer()) return Fail(path, "expected an integer, got " + value.dump());
      if (schema.value("format", "") == "int32" &&
          (value.get<int64_t>() < INT32_MIN || value.get<int64_t>() > INT32_MAX)) {
        Fail(path, value.dump() + " is out of int32 range");
      }
      CheckMinimum(schema, value.get<double>(), path);
    } else if (type == "number") {
      if (!value.is_number()) return Fail(path, "expected a number, got " + value.dump());
      CheckMinimum(schema, value.get<double>(), path);
    } else if (type == "boolean") {
      if (!value.is_boolean()) return Fail(path, "expected a boolean, got " + value.dump());
    } else {
      Fail(path, "unknown schema type " + type);
    }
  }

  std::vector<std::string> errors_;

 private:
  static bool HasShape(const Json& schema) {
    return schema.contains("type") || schema.contains("allOf") || schema.contains("oneOf") ||
           schema.contains("enum");
  }

  void CheckObject(const Json& schema, const Json& value, const std::string& path, int depth) {
    if (schema.contains("required")) {
      for (const Json& name : schema["required"]) {
        if (!value.contains(name.get<std::string>())) {
          Fail(path, "missing required property " + name.get<std::string>());
        }
      }
    }
    const Json properties = schema.value("properties", Json::object());
    const Json additional = schema.value("additionalProperties", Json(false));
    // A schema that only composes (allOf) leaves the property check to its parts.
    const bool closed = schema.contains("properties") || schema.contains("additionalProperties");
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string at = path + "." + it.key();
      if (properties.contains(it.key())) {
        Check(properties[it.key()], it.value(), at, depth + 1);
      } else if (additional.is_object()) {
        Check(additional, it.value(), at, depth + 1);
      } else if (closed && additional != true) {
        Fail(at, "property not in the schema");
      }
    }
  }

  void CheckMinimum(const Json& schema, double value, const std::string& path) {
    if (schema.contains("minimum") && value < schema["minimum"].get<double>()) {
      Fail(path, absl::StrCat(value, " is below the minimum ", schema["minimum"].dump()));
    }
  }

  const Json* Resolve(const std::string& ref) const {
    if (ref.rfind("#/", 0) != 0) return nullptr;
    // Component names hold dots, never '/' or '~', so the pointer is the ref's tail.
    Json::json_pointer pointer(ref.substr(1));
    return doc_.contains(pointer) ? &doc_[pointer] : nullptr;
  }

  void Fail(const std::string& path, const std::string& problem) {
    errors_.push_back(path + ": " + problem);
  }

  const Json& doc_;
};

}  // namespace

std::vector<std::string> ValidateSchema(const Json& doc, const Json& schema, const Json& value) {
  Validator validator(doc);
  validator.Check(schema, value, "$");
  return validator.errors_;
}

Json ResponseSchema(const Json& doc, const std::string& path_template, const std::string& method,
                    int status) {
  const Json::json_pointer op_pointer =
      Json::json_pointer("/paths") / path_template / method / "responses";
  if (!doc.contains(op_pointer)) return nullptr;
  const Json& responses = doc[op_pointer];
  const std::string code = std::to_string(status);
  Json response = responses.contains(code)        ? responses[code]
                  : responses.contains("default") ? responses["default"]
                                                  : Json();
  if (response.is_object() && response.contains("$ref")) {
    const std::string ref = response["$ref"].get<std::string>();
    Json::json_pointer pointer(ref.substr(1));
    response = doc.contains(pointer) ? doc[pointer] : Json();
  }
  const Json::json_pointer schema_pointer("/content/application~1json/schema");
  if (!response.is_object() || !response.contains(schema_pointer)) return nullptr;
  return response[schema_pointer];
}

bool IsDateTime(const std::string& text) {
  static const std::regex kDateTime(
      R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60))"
      R"((\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))");
  return std::regex_match(text, kDateTime);
}

}  // namespace calleval::testing

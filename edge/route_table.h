#pragma once

// The edge's immutable route table, built once at start-up from the methods' google.api.http
// annotations (in the spirit of Envoy's grpc_json_transcoder): a bad annotation fails Build(),
// never a request. Match() runs per request and does not allocate for ordinary paths.
//
// Supported annotation subset: get/post/put/patch/delete patterns; templates made of literal
// segments and single-segment variables `{field}` / `{field.sub}`; body "" (none), "*" (the whole
// request message) or the name of a top-level message field; additional_bindings (one level).
// `response_body` may name a top-level field of the response: the answer is that field alone
// (a repeated field answers a JSON array).
// Everything else (`{name=**}`, `*`, custom verbs, custom methods) is rejected.
//
// Method options read: calleval.v1.http_success_status (default 200); a method returning
// google.protobuf.Empty answers 204 without a body.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"

namespace calleval::edge {

enum class HttpMethod : uint8_t { kGet = 0, kPost, kPut, kPatch, kDelete };
inline constexpr int kHttpMethodCount = 5;

// "GET", "POST", ... for a method.
std::string_view HttpMethodName(HttpMethod method);
// The method for an upper-case name, or false when it is not one of the five.
bool ParseHttpMethod(std::string_view name, HttpMethod* method);

enum class BodyKind : uint8_t {
  kNone,   // no body; every non-path top-level field may come from the query string
  kWhole,  // body "*": the JSON body is the whole request message
  kField,  // body "<field>": the JSON body is that top-level message field
};

// One segment of a path template.
struct PathSegment {
  std::string literal;     // when !is_variable
  std::string field_path;  // when is_variable: "id" or "update.id"
  bool is_variable = false;
};

struct Route {
  HttpMethod method = HttpMethod::kGet;
  std::string path_template;  // as annotated, e.g. "/api/v1/agents/{id}"
  const google::protobuf::MethodDescriptor* method_descriptor = nullptr;
  std::vector<PathSegment> segments;
  BodyKind body_kind = BodyKind::kNone;
  // The body field when body_kind == kField.
  const google::protobuf::FieldDescriptor* body_field = nullptr;
  // Top-level request fields that the query string may set: scalars and repeated scalars not
  // bound by the path and not the body; empty for body "*". Never null_fields / set_fields.
  std::vector<const google::protobuf::FieldDescriptor*> query_fields;
  int success_status = 200;
  bool empty_response = false;  // returns google.protobuf.Empty: 204, no body
  // The response field printed as the whole answer (HttpRule.response_body), or null.
  const google::protobuf::FieldDescriptor* response_body_field = nullptr;
  size_t index = 0;             // position in RouteTable::routes()
};

// A path variable bound by Match(): the field path and its percent-decoded value.
struct PathBinding {
  std::string_view field_path;  // points into the Route
  std::string value;
};

struct RouteMatch {
  enum class Result : uint8_t { kFound, kNotFound, kMethodNotAllowed };
  Result result = Result::kNotFound;
  const Route* route = nullptr;  // when kFound
  absl::InlinedVector<PathBinding, 2> bindings;
  // When kMethodNotAllowed: the Allow header value, e.g. "GET, PATCH, DELETE".
  std::string_view allow;
};

class RouteTable {
 public:
  // Builds the table from every method with a google.api.http option; methods without one get
  // no route. Fails (kInvalidArgument) on a malformed template, a variable or body naming a
  // field that does not exist or has the wrong kind, an unsupported pattern, or two routes with
  // the same method and path shape.
  static absl::StatusOr<RouteTable> Build(
      const std::vector<const google::protobuf::ServiceDescriptor*>& services);

  RouteTable(RouteTable&&) noexcept;
  RouteTable& operator=(RouteTable&&) noexcept;
  ~RouteTable();

  // Matches `path` (no query string, not yet percent-decoded). Literal segments take priority
  // over variables. 405 (kMethodNotAllowed) when some route has the path but not the method.
  RouteMatch Match(HttpMethod method, std::string_view path) const;
  // The same for a method name; an unknown method on a known path is 405.
  RouteMatch Match(std::string_view method, std::string_view path) const;

  // Routes in the order the services and methods were given.
  const std::vector<std::unique_ptr<Route>>& routes() const { return routes_; }

 private:
  struct Node;

  RouteTable();

  std::vector<std::unique_ptr<Route>> routes_;
  std::unique_ptr<Node> root_;
};

// Percent-decodes `in` ("%2F" -> "/"); with `plus_as_space` (query strings) '+' becomes ' '.
// Malformed escapes are kept as they are.
void PercentDecode(std::string_view in, bool plus_as_space, std::string* out);

}  // namespace calleval::edge

#include "edge/route_table.h"

#include <array>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "calleval/v1/common.pb.h"
#include "google/api/annotations.pb.h"
#include "google/api/http.pb.h"

namespace calleval::edge {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::MethodDescriptor;

constexpr std::string_view kMethodNames[kHttpMethodCount] = {"GET", "POST", "PUT", "PATCH",
                                                             "DELETE"};
constexpr std::string_view kEmptyType = "google.protobuf.Empty";

// Allow header values for every subset of the five methods, indexed by bit mask.
const std::array<std::string, 1 << kHttpMethodCount>& AllowStrings() {
  static const auto* strings = [] {
    auto* table = new std::array<std::string, 1 << kHttpMethodCount>();
    for (int mask = 0; mask < (1 << kHttpMethodCount); ++mask) {
      std::string& s = (*table)[mask];
      for (int m = 0; m < kHttpMethodCount; ++m) {
        if ((mask & (1 << m)) == 0) continue;
        if (!s.empty()) s += ", ";
        s.append(kMethodNames[m].data(), kMethodNames[m].size());
      }
    }
    return table;
  }();
  return *strings;
}

absl::Status BuildError(const MethodDescriptor* method, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("google.api.http of ", method->full_name(), ": ", what));
}

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsIdentifierChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Resolves a dotted field path on `message` for a path variable: every component but the last
// a singular message field, the last a singular scalar or enum.
absl::Status ResolveVariableField(const MethodDescriptor* method, const Descriptor* message,
                                  std::string_view field_path) {
  const Descriptor* current = message;
  std::vector<absl::string_view> parts = absl::StrSplit(Absl(field_path), '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* field = current->FindFieldByName(std::string(parts[i]));
    if (field == nullptr) {
      return BuildError(method, absl::StrCat("path variable {", Absl(field_path), "}: ",
                                             current->full_name(), " has no field ", parts[i]));
    }
    if (field->is_repeated()) {
      return BuildError(
          method, absl::StrCat("path variable {", Absl(field_path), "} names a repeated field"));
    }
    const bool last = i + 1 == parts.size();
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (last && is_message) {
      return BuildError(
          method, absl::StrCat("path variable {", Absl(field_path), "} names a message field"));
    }
    if (!last && !is_message) {
      return BuildError(method, absl::StrCat("path variable {", Absl(field_path), "}: ", parts[i],
                                             " is not a message field"));
    }
    if (!last) current = field->message_type();
  }
  return absl::OkStatus();
}

bool IsValidLiteral(std::string_view segment) {
  for (char c : segment) {
    switch (c) {
      case '{':
      case '}':
      case '*':
      case ':':
      case '=':
      case '?':
      case '#':
      case ' ':
      case '%':
        return false;
      default:
        if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
          return false;
        }
    }
  }
  return true;
}

bool IsValidFieldPath(std::string_view path) {
  if (path.empty() || path.front() == '.' || path.back() == '.') return false;
  char previous = 0;
  for (char c : path) {
    if (c == '.' && previous == '.') return false;
    if (c != '.' && !IsIdentifierChar(c)) return false;
    previous = c;
  }
  return true;
}

absl::Status ParseTemplate(const MethodDescriptor* method, std::string_view path_template,
                           std::vector<PathSegment>* segments) {
  if (path_template.empty() || path_template.front() != '/') {
    return BuildError(method,
                      absl::StrCat("path \"", Absl(path_template), "\" does not start with '/'"));
  }
  std::string_view rest = path_template.substr(1);
  if (rest.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(Absl(rest), '/')) {
    std::string_view segment(part.data(), part.size());
    PathSegment parsed;
    if (segment.empty()) {
      return BuildError(method,
                        absl::StrCat("path \"", Absl(path_template), "\" has an empty segment"));
    }
    if (segment.front() == '{') {
      if (segment.size() < 3 || segment.back() != '}' ||
          !IsValidFieldPath(segment.substr(1, segment.size() - 2))) {
        return BuildError(
            method, absl::StrCat("path \"", Absl(path_template), "\": unsupported variable \"",
                                 part, "\" (only {field} and {field.sub})"));
      }
      parsed.is_variable = true;
      parsed.field_path = std::string(segment.substr(1, segment.size() - 2));
      for (const PathSegment& earlier : *segments) {
        if (earlier.is_variable && earlier.field_path == parsed.field_path) {
          return BuildError(method, absl::StrCat("path \"", Absl(path_template), "\" binds {",
                                                 parsed.field_path, "} twice"));
        }
      }
      absl::Status status = ResolveVariableField(method, method->input_type(), parsed.field_path);
      if (!status.ok()) return status;
    } else {
      if (!IsValidLiteral(segment)) {
        return BuildError(method, absl::StrCat("path \"", Absl(path_template),
                                               "\": unsupported segment \"", part, "\""));
      }
      parsed.literal = std::string(segment);
    }
    segments->push_back(std::move(parsed));
  }
  return absl::OkStatus();
}

bool IsQueryCandidate(const FieldDescriptor* field) {
  if (field->is_map() || field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) return false;
  return field->name() != "null_fields" && field->name() != "set_fields";
}

// Splits a request path into segments; false when it does not start with '/'.
bool SplitPath(std::string_view path, absl::InlinedVector<std::string_view, 12>* segments) {
  if (path.empty() || path.front() != '/') return false;
  path.remove_prefix(1);
  if (path.empty()) return true;
  while (true) {
    size_t slash = path.find('/');
    if (slash == std::string_view::npos) {
      segments->push_back(path);
      return true;
    }
    segments->push_back(path.substr(0, slash));
    path.remove_prefix(slash + 1);
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

struct RouteTable::Node {
  // Literal children; fan-out is small, so a linear scan beats hashing.
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> literals;
  std::unique_ptr<Node> variable;
  std::array<const Route*, kHttpMethodCount> by_method{};
  uint8_t method_mask = 0;

  Node* LiteralChild(std::string_view segment) const {
    for (const auto& [literal, child] : literals) {
      if (literal == segment) return child.get();
    }
    return nullptr;
  }
};

std::string_view HttpMethodName(HttpMethod method) {
  return kMethodNames[static_cast<int>(method)];
}

bool ParseHttpMethod(std::string_view name, HttpMethod* method) {
  for (int m = 0; m < kHttpMethodCount; ++m) {
    if (kMethodNames[m] == name) {
      *method = static_cast<HttpMethod>(m);
      return true;
    }
  }
  return false;
}

void PercentDecode(std::string_view in, bool plus_as_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%' && i + 2 < in.size()) {
      int hi = HexValue(in[i + 1]);
      int lo = HexValue(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out->push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out->push_back(plus_as_space && c == '+' ? ' ' : c);
  }
}

RouteTable::RouteTable() : root_(std::make_unique<Node>()) {}
RouteTable::RouteTable(RouteTable&&) noexcept = default;
RouteTable& RouteTable::operator=(RouteTable&&) noexcept = default;
RouteTable::~RouteTable() = default;

absl::StatusOr<RouteTable> RouteTable::Build(
    const std::vector<const google::protobuf::ServiceDescriptor*>& services) {
  RouteTable table;

  // Adds the route for one HttpRule (the method's own or an additional binding).
  auto add_rule = [&table](const MethodDescriptor* method, const google::api::HttpRule& rule,
                           bool nested) -> absl::Status {
    auto route = std::make_unique<Route>();
    route->method_descriptor = method;
    const std::string* path = nullptr;
    switch (rule.pattern_case()) {
      case google::api::HttpRule::kGet:
        route->method = HttpMethod::kGet;
        path = &rule.get();
        break;
      case google::api::HttpRule::kPost:
        route->method = HttpMethod::kPost;
        path = &rule.post();
        break;
      case google::api::HttpRule::kPut:
        route->method = HttpMethod::kPut;
        path = &rule.put();
        break;
      case google::api::HttpRule::kPatch:
        route->method = HttpMethod::kPatch;
        path = &rule.patch();
        break;
      case google::api::HttpRule::kDelete:
        route->method = HttpMethod::kDelete;
        path = &rule.delete_();
        break;
      case google::api::HttpRule::kCustom:
        return BuildError(method, "custom HTTP methods are not supported");
      default:
        return BuildError(method, "no HTTP method pattern");
    }
    if (nested && rule.additional_bindings_size() > 0) {
      return BuildError(method, "additional_bindings may not nest");
    }
    if (!rule.response_body().empty()) {
      route->response_body_field = method->output_type()->FindFieldByName(rule.response_body());
      if (route->response_body_field == nullptr) {
        return BuildError(method, absl::StrCat("response_body names no field of ",
                                               method->output_type()->full_name()));
      }
    }
    route->path_template = *path;
    absl::Status status = ParseTemplate(method, *path, &route->segments);
    if (!status.ok()) return status;

    const Descriptor* input = method->input_type();
    if (rule.body().empty()) {
      route->body_kind = BodyKind::kNone;
    } else if (rule.body() == "*") {
      route->body_kind = BodyKind::kWhole;
    } else {
      const FieldDescriptor* field = input->FindFieldByName(rule.body());
      if (field == nullptr) {
        return BuildError(method, absl::StrCat("body \"", rule.body(), "\": ", input->full_name(),
                                               " has no such field"));
      }
      if (field->is_repeated() || field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
        return BuildError(
            method, absl::StrCat("body \"", rule.body(), "\" must name a singular message field"));
      }
      route->body_kind = BodyKind::kField;
      route->body_field = field;
    }
    if (route->body_kind != BodyKind::kNone &&
        (route->method == HttpMethod::kGet || route->method == HttpMethod::kDelete)) {
      return BuildError(
          method, absl::StrCat(Absl(HttpMethodName(route->method)), " routes cannot take a body"));
    }

    const bool has_status = method->options().HasExtension(calleval::v1::http_success_status);
    const int declared = method->options().GetExtension(calleval::v1::http_success_status);
    route->empty_response = method->output_type()->full_name() == kEmptyType;
    if (route->empty_response) {
      if (has_status && declared != 204) {
        return BuildError(method, "a method returning google.protobuf.Empty answers 204");
      }
      route->success_status = 204;
    } else {
      route->success_status = has_status ? declared : 200;
      if (route->success_status < 200 || route->success_status > 299 ||
          route->success_status == 204) {
        return BuildError(method, absl::StrCat("http_success_status ", route->success_status,
                                               " is not a 2xx status with a body"));
      }
    }

    if (route->body_kind != BodyKind::kWhole) {
      for (int i = 0; i < input->field_count(); ++i) {
        const FieldDescriptor* field = input->field(i);
        if (field == route->body_field || !IsQueryCandidate(field)) continue;
        bool bound = false;
        for (const PathSegment& segment : route->segments) {
          if (!segment.is_variable) continue;
          std::string_view head(segment.field_path);
          head = head.substr(0, head.find('.'));
          if (head == field->name()) bound = true;
        }
        if (!bound) route->query_fields.push_back(field);
      }
    }

    Node* node = table.root_.get();
    for (const PathSegment& segment : route->segments) {
      if (segment.is_variable) {
        if (!node->variable) node->variable = std::make_unique<Node>();
        node = node->variable.get();
        continue;
      }
      Node* child = node->LiteralChild(segment.literal);
      if (child == nullptr) {
        node->literals.emplace_back(segment.literal, std::make_unique<Node>());
        child = node->literals.back().second.get();
      }
      node = child;
    }
    const int m = static_cast<int>(route->method);
    if (const Route* existing = node->by_method[m]) {
      return BuildError(
          method, absl::StrCat(Absl(HttpMethodName(route->method)), " ", *path,
                               " is already bound to ", existing->method_descriptor->full_name()));
    }
    route->index = table.routes_.size();
    node->by_method[m] = route.get();
    node->method_mask |= static_cast<uint8_t>(1 << m);
    table.routes_.push_back(std::move(route));
    return absl::OkStatus();
  };

  for (const google::protobuf::ServiceDescriptor* service : services) {
    for (int i = 0; i < service->method_count(); ++i) {
      const MethodDescriptor* method = service->method(i);
      if (!method->options().HasExtension(google::api::http)) continue;
      if (method->client_streaming() || method->server_streaming()) {
        return BuildError(method, "streaming methods cannot have HTTP routes");
      }
      const google::api::HttpRule& rule = method->options().GetExtension(google::api::http);
      absl::Status status = add_rule(method, rule, /*nested=*/false);
      if (!status.ok()) return status;
      for (const google::api::HttpRule& extra : rule.additional_bindings()) {
        status = add_rule(method, extra, /*nested=*/true);
        if (!status.ok()) return status;
      }
    }
  }
  return table;
}

RouteMatch RouteTable::Match(std::string_view method, std::string_view path) const {
  HttpMethod parsed;
  if (ParseHttpMethod(method, &parsed)) return Match(parsed, path);
  // An unknown method: 405 if the path exists for any method, else 404.
  RouteMatch match;
  absl::InlinedVector<std::string_view, 12> segments;
  if (!SplitPath(path, &segments)) return match;
  uint8_t mask = 0;
  // Walk every matching node; the lambda recursion is shallow (one level per segment).
  struct Walker {
    const absl::InlinedVector<std::string_view, 12>& segments;
    uint8_t* mask;
    void Walk(const Node* node, size_t i) const {
      if (i == segments.size()) {
        *mask |= node->method_mask;
        return;
      }
      if (const Node* child = node->LiteralChild(segments[i])) Walk(child, i + 1);
      if (node->variable && !segments[i].empty()) Walk(node->variable.get(), i + 1);
    }
  };
  Walker{segments, &mask}.Walk(root_.get(), 0);
  if (mask != 0) {
    match.result = RouteMatch::Result::kMethodNotAllowed;
    match.allow = AllowStrings()[mask];
  }
  return match;
}

RouteMatch RouteTable::Match(HttpMethod method, std::string_view path) const {
  RouteMatch match;
  absl::InlinedVector<std::string_view, 12> segments;
  if (!SplitPath(path, &segments)) return match;
  const int m = static_cast<int>(method);

  // Depth-first, literal before variable; the first node that serves the method wins. Nodes
  // reached without the method contribute to the Allow list.
  struct Walker {
    const absl::InlinedVector<std::string_view, 12>& segments;
    int m;
    uint8_t mask = 0;
    const Route* Walk(const Node* node, size_t i) {
      if (i == segments.size()) {
        if (const Route* route = node->by_method[m]) return route;
        mask |= node->method_mask;
        return nullptr;
      }
      if (const Node* child = node->LiteralChild(segments[i])) {
        if (const Route* route = Walk(child, i + 1)) return route;
      }
      if (node->variable && !segments[i].empty()) return Walk(node->variable.get(), i + 1);
      return nullptr;
    }
  };
  Walker walker{segments, m};
  const Route* route = walker.Walk(root_.get(), 0);
  if (route == nullptr) {
    if (walker.mask != 0) {
      match.result = RouteMatch::Result::kMethodNotAllowed;
      match.allow = AllowStrings()[walker.mask];
    }
    return match;
  }
  match.result = RouteMatch::Result::kFound;
  match.route = route;
  for (size_t i = 0; i < route->segments.size(); ++i) {
    const PathSegment& segment = route->segments[i];
    if (!segment.is_variable) continue;
    PathBinding& binding = match.bindings.emplace_back();
    binding.field_path = segment.field_path;
    PercentDecode(segments[i], /*plus_as_space=*/false, &binding.value);
  }
  return match;
}

}  // namespace calleval::edge

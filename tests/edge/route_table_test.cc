#include "edge/route_table.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "calleval/v1/accounts.pb.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "calleval/v1/common.pb.h"
#include "gmock/gmock.h"
#include "google/api/annotations.pb.h"
#include "google/protobuf/descriptor.pb.h"
#include "gtest/gtest.h"

namespace calleval::edge {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptorProto;
using google::protobuf::FileDescriptorProto;
using google::protobuf::ServiceDescriptor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

RouteTable RealTable() {
  // Referencing a message of each file links it into the generated pool.
  auto table = RouteTable::Build(
      {calleval::v1::Call::descriptor()->file()->FindServiceByName("Calls"),
       calleval::v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
       calleval::v1::Workspace::descriptor()->file()->FindServiceByName("Accounts")});
  EXPECT_TRUE(table.ok()) << table.status();
  return std::move(table).value();
}

std::vector<std::string> QueryNames(const Route& route) {
  std::vector<std::string> names;
  for (const auto* field : route.query_fields) names.push_back(field->name());
  return names;
}

TEST(RouteTableTest, BuildsOneRoutePerAnnotatedMethod) {
  RouteTable table = RealTable();
  // Calls 13 (calls, waveform, stats and alert rules), Agents 23 (agents, languages, scenarios,
  // a call's replay, runs, batch runs and their comparison, integration settings), Accounts 2
  // (GetCurrentWorkspace, ListWorkspaces; Authenticate has no route).
  EXPECT_EQ(table.routes().size(), 38u);
  for (const auto& route : table.routes()) {
    EXPECT_NE(route->method_descriptor->name(), "Authenticate");
  }
}

TEST(RouteTableTest, MatchesLiteralPath) {
  RouteTable table = RealTable();
  RouteMatch match = table.Match(HttpMethod::kGet, "/api/public/v1/calls");
  ASSERT_EQ(match.result, RouteMatch::Result::kFound);
  EXPECT_EQ(match.route->method_descriptor->name(), "ListCalls");
  EXPECT_TRUE(match.bindings.empty());
  EXPECT_EQ(match.route->success_status, 200);
  EXPECT_EQ(match.route->body_kind, BodyKind::kNone);
  EXPECT_THAT(QueryNames(*match.route),
              ElementsAre("client_id", "agent_id", "analysis_status", "tag", "observation_type",
                          "page", "per_page", "transcription_status", "call_timestamp_from",
                          "call_timestamp_to", "search"));
}

TEST(RouteTableTest, BindsPathVariable) {
  RouteTable table = RealTable();
  RouteMatch match = table.Match("GET", "/api/public/v1/calls/crm-9931");
  ASSERT_EQ(match.result, RouteMatch::Result::kFound);
  EXPECT_EQ(match.route->method_descriptor->name(), "GetCall");
  ASSERT_EQ(match.bindings.size(), 1u);
  EXPECT_EQ(match.bindings[0].field_path, "call_identifier_or_id");
  EXPECT_EQ(match.bindings[0].value, "crm-9931");
  EXPECT_THAT(QueryNames(*match.route), ElementsAre("client_id"));
}

TEST(RouteTableTest, WaveformRouteBelowTheCall) {
  RouteTable table = RealTable();
  RouteMatch match = table.Match("GET", "/api/public/v1/calls/crm-9931/waveform");
  ASSERT_EQ(match.result, RouteMatch::Result::kFound);
  EXPECT_EQ(match.route->method_descriptor->name(), "GetCallWaveform");
  ASSERT_EQ(match.bindings.size(), 1u);
  EXPECT_EQ(match.bindings[0].value, "crm-9931");
  EXPECT_THAT(QueryNames(*match.route), ElementsAre("client_id"));
}

TEST(RouteTableTest, PercentDecodesVariables) {
  RouteTable table = RealTable();
  RouteMatch match = table.Match("GET", "/api/public/v1/calls/a%2Fb%20c+d%zz%4");
  ASSERT_EQ(match.result, RouteMatch::Result::kFound);
  ASSERT_EQ(match.bindings.size(), 1u);
  // '+' is literal in a path; malformed escapes stay as they are.
  EXPECT_EQ(match.bindings[0].value, "a/b c+d%zz%4");
}

TEST(RouteTableTest, PercentDecodeQueryForm) {
  std::string out;
  PercentDecode("a+b%3D%e2%9c%93", /*plus_as_space=*/true, &out);
  EXPECT_EQ(out, "a b=\xe2\x9c\x93");
  PercentDecode("%", /*plus_as_space=*/true, &out);
  EXPECT_EQ(out, "%");
}

TEST(RouteTableTest, SamePathDifferentMethods) {
  RouteTable table = RealTable();
  RouteMatch patch = table.Match("PATCH", "/api/public/v1/calls/42");
  ASSERT_EQ(patch.result, RouteMatch::Result::kFound);
  EXPECT_EQ(patch.route->method_descriptor->name(), "UpdateCall");
  EXPECT_EQ(patch.route->body_kind, BodyKind::kField);
  ASSERT_NE(patch.route->body_field, nullptr);
  EXPECT_EQ(patch.route->body_field->name(), "update");
  EXPECT_THAT(QueryNames(*patch.route), ElementsAre("client_id", "agent_id"));

  RouteMatch del = table.Match("DELETE", "/api/public/v1/calls/42");
  ASSERT_EQ(del.result, RouteMatch::Result::kFound);
  EXPECT_EQ(del.route->method_descriptor->name(), "DeleteCall");
  EXPECT_TRUE(del.route->empty_response);
  EXPECT_EQ(del.route->success_status, 204);
}

TEST(RouteTableTest, SuccessStatusFromOption) {
  RouteTable table = RealTable();
  RouteMatch ingest = table.Match("POST", "/api/public/v1/calls");
  ASSERT_EQ(ingest.result, RouteMatch::Result::kFound);
  EXPECT_EQ(ingest.route->success_status, 201);
  EXPECT_EQ(ingest.route->body_kind, BodyKind::kWhole);
  EXPECT_TRUE(ingest.route->query_fields.empty());

  RouteMatch create = table.Match("POST", "/api/v1/agents");
  ASSERT_EQ(create.result, RouteMatch::Result::kFound);
  EXPECT_EQ(create.route->method_descriptor->name(), "CreateAgent");
  EXPECT_EQ(create.route->success_status, 201);

  RouteMatch get = table.Match("GET", "/api/v1/agents/7");
  ASSERT_EQ(get.result, RouteMatch::Result::kFound);
  EXPECT_EQ(get.route->success_status, 200);
  EXPECT_EQ(get.bindings[0].value, "7");

  RouteMatch workspace = table.Match("GET", "/api/v1/workspaces/current");
  ASSERT_EQ(workspace.result, RouteMatch::Result::kFound);
  EXPECT_EQ(workspace.route->method_descriptor->name(), "GetCurrentWorkspace");
  RouteMatch workspaces = table.Match("GET", "/api/v1/workspaces");
  ASSERT_EQ(workspaces.result, RouteMatch::Result::kFound);
  EXPECT_EQ(workspaces.route->method_descriptor->name(), "ListWorkspaces");
  EXPECT_THAT(QueryNames(*workspaces.route), ElementsAre());
}

TEST(RouteTableTest, MethodNotAllowedListsAllowedMethods) {
  RouteTable table = RealTable();
  RouteMatch put = table.Match("PUT", "/api/public/v1/calls/42");
  EXPECT_EQ(put.result, RouteMatch::Result::kMethodNotAllowed);
  EXPECT_EQ(put.allow, "GET, PATCH, DELETE");
  EXPECT_EQ(put.route, nullptr);

  RouteMatch post = table.Match("POST", "/api/v1/workspaces/current");
  EXPECT_EQ(post.result, RouteMatch::Result::kMethodNotAllowed);
  EXPECT_EQ(post.allow, "GET");

  RouteMatch options = table.Match("OPTIONS", "/api/public/v1/calls");
  EXPECT_EQ(options.result, RouteMatch::Result::kMethodNotAllowed);
  EXPECT_EQ(options.allow, "GET, POST");
}

TEST(RouteTableTest, UnknownPathsAreNotFound) {
  RouteTable table = RealTable();
  for (const char* path :
       {"/api/public/v1/nope", "/api/public/v1/calls/a/b", "/api/v1/agents/", "/api/v1/agents//",
        "api/v1/agents", "", "/", "/API/v1/agents", "/api/v1/agents/1/extra"}) {
    EXPECT_EQ(table.Match("GET", path).result, RouteMatch::Result::kNotFound) << path;
    EXPECT_EQ(table.Match("OPTIONS", path).result, RouteMatch::Result::kNotFound) << path;
  }
}

TEST(RouteTableTest, MethodNames) {
  HttpMethod method;
  ASSERT_TRUE(ParseHttpMethod("PATCH", &method));
  EXPECT_EQ(method, HttpMethod::kPatch);
  EXPECT_EQ(HttpMethodName(method), "PATCH");
  EXPECT_FALSE(ParseHttpMethod("patch", &method));
  EXPECT_FALSE(ParseHttpMethod("HEAD", &method));
}

// Builds a service "test.S" in its own pool, one method per rule, so annotations the real
// protos would never carry can be exercised.
class HandMadeTest : public ::testing::Test {
 protected:
  struct Method {
    Method(google::api::HttpRule r, std::string out = "test.Resp",
           std::optional<int> status = std::nullopt)
        : rule(std::move(r)), output(std::move(out)), success_status(status) {}
    google::api::HttpRule rule;
    std::string output;
    std::optional<int> success_status;
  };

  static google::api::HttpRule Rule(const char* verb, const char* path, const char* body = "") {
    google::api::HttpRule rule;
    std::string v = verb;
    if (v == "get") rule.set_get(path);
    if (v == "post") rule.set_post(path);
    if (v == "put") rule.set_put(path);
    if (v == "patch") rule.set_patch(path);
    if (v == "delete") rule.set_delete_(path);
    if (v == "custom") {
      rule.mutable_custom()->set_kind("HEAD");
      rule.mutable_custom()->set_path(path);
    }
    rule.set_body(body);
    return rule;
  }

  static void AddField(google::protobuf::DescriptorProto* message, const char* name, int number,
                       FieldDescriptorProto::Type type, const char* type_name = nullptr,
                       bool repeated = false) {
    auto* field = message->add_field();
    field->set_name(name);
    field->set_number(number);
    field->set_type(type);
    field->set_label(repeated ? FieldDescriptorProto::LABEL_REPEATED
                              : FieldDescriptorProto::LABEL_OPTIONAL);
    if (type_name != nullptr) field->set_type_name(type_name);
  }

  absl::StatusOr<RouteTable> BuildWith(const std::vector<Method>& methods) {
    pool_ = std::make_unique<DescriptorPool>(DescriptorPool::generated_pool());
    FileDescriptorProto file;
    file.set_name("test/hand_made.proto");
    file.set_package("test");
    file.set_syntax("proto3");
    file.add_dependency("google/protobuf/empty.proto");

    auto* inner = file.add_message_type();
    inner->set_name("Inner");
    AddField(inner, "name", 1, FieldDescriptorProto::TYPE_STRING);
    AddField(inner, "id", 2, FieldDescriptorProto::TYPE_INT64);

    auto* req = file.add_message_type();
    req->set_name("Req");
    AddField(req, "id", 1, FieldDescriptorProto::TYPE_INT64);
    AddField(req, "name", 2, FieldDescriptorProto::TYPE_STRING);
    AddField(req, "inner", 3, FieldDescriptorProto::TYPE_MESSAGE, ".test.Inner");
    AddField(req, "tags", 4, FieldDescriptorProto::TYPE_STRING, nullptr, /*repeated=*/true);
    AddField(req, "items", 5, FieldDescriptorProto::TYPE_MESSAGE, ".test.Inner",
             /*repeated=*/true);
    AddField(req, "null_fields", 100, FieldDescriptorProto::TYPE_STRING, nullptr, true);

    auto* resp = file.add_message_type();
    resp->set_name("Resp");
    AddField(resp, "value", 1, FieldDescriptorProto::TYPE_STRING);

    auto* service = file.add_service();
    service->set_name("S");
    int n = 0;
    for (const Method& m : methods) {
      auto* method = service->add_method();
      method->set_name("M" + std::to_string(n++));
      method->set_input_type(".test.Req");
      method->set_output_type(m.output == "empty" ? ".google.protobuf.Empty" : "." + m.output);
      *method->mutable_options()->MutableExtension(google::api::http) = m.rule;
      if (m.success_status) {
        method->mutable_options()->SetExtension(calleval::v1::http_success_status,
                                                *m.success_status);
      }
    }
    const google::protobuf::FileDescriptor* built = pool_->BuildFile(file);
    EXPECT_NE(built, nullptr);
    if (built == nullptr) return absl::InternalError("file did not build");
    return RouteTable::Build({built->FindServiceByName("S")});
  }

  void ExpectBuildError(const std::vector<Method>& methods, const char* fragment) {
    auto table = BuildWith(methods);
    ASSERT_FALSE(table.ok()) << "expected failure containing: " << fragment;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(table.status().message()), HasSubstr(fragment));
  }

  std::unique_ptr<DescriptorPool> pool_;
};

TEST_F(HandMadeTest, NestedVariableAndQueryFields) {
  auto table = BuildWith({{Rule("patch", "/v1/things/{inner.name}/x/{id}", "inner")}});
  ASSERT_TRUE(table.ok()) << table.status();
  RouteMatch match = table->Match("PATCH", "/v1/things/a%20b/x/9");
  ASSERT_EQ(match.result, RouteMatch::Result::kFound);
  ASSERT_EQ(match.bindings.size(), 2u);
  EXPECT_EQ(match.bindings[0].field_path, "inner.name");
  EXPECT_EQ(match.bindings[0].value, "a b");
  EXPECT_EQ(match.bindings[1].field_path, "id");
  EXPECT_EQ(match.bindings[1].value, "9");
  // Not id (path), not inner (body), not items (message), never null_fields.
  EXPECT_THAT(QueryNames(*match.route), ElementsAre("name", "tags"));
}

TEST_F(HandMadeTest, LiteralBeatsVariableAndBacktracks) {
  auto table = BuildWith({{Rule("get", "/a/{name}")},
                          {Rule("get", "/a/special")},
                          {Rule("delete", "/a/only-delete")},
                          {Rule("post", "/b/{name}", "*")},
                          {Rule("get", "/b/lit")}});
  ASSERT_TRUE(table.ok()) << table.status();
  RouteMatch special = table->Match("GET", "/a/special");
  ASSERT_EQ(special.result, RouteMatch::Result::kFound);
  EXPECT_EQ(special.route->method_descriptor->name(), "M1");
  EXPECT_TRUE(special.bindings.empty());

  RouteMatch other = table->Match("GET", "/a/other");
  ASSERT_EQ(other.result, RouteMatch::Result::kFound);
  EXPECT_EQ(other.route->method_descriptor->name(), "M0");

  // The literal node has no GET; the variable one does.
  RouteMatch backtrack = table->Match("GET", "/a/only-delete");
  ASSERT_EQ(backtrack.result, RouteMatch::Result::kFound);
  EXPECT_EQ(backtrack.route->method_descriptor->name(), "M0");
  EXPECT_EQ(backtrack.bindings[0].value, "only-delete");

  // Allow merges every node the path reaches.
  RouteMatch merged = table->Match("PUT", "/b/lit");
  EXPECT_EQ(merged.result, RouteMatch::Result::kMethodNotAllowed);
  EXPECT_EQ(merged.allow, "GET, POST");
}

TEST_F(HandMadeTest, RootPathAndAdditionalBindings) {
  google::api::HttpRule rule = Rule("get", "/");
  *rule.add_additional_bindings() = Rule("get", "/v2/{id}");
  auto table = BuildWith({{rule}});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->routes().size(), 2u);
  EXPECT_EQ(table->Match("GET", "/").result, RouteMatch::Result::kFound);
  RouteMatch v2 = table->Match("GET", "/v2/5");
  ASSERT_EQ(v2.result, RouteMatch::Result::kFound);
  EXPECT_EQ(v2.route->index, 1u);
}

TEST_F(HandMadeTest, EmptyResponseIs204) {
  auto table = BuildWith(
      {{Rule("delete", "/a/{id}"), "empty"}, {Rule("post", "/a", "*"), "test.Resp", 202}});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->routes()[0]->success_status, 204);
  EXPECT_TRUE(table->routes()[0]->empty_response);
  EXPECT_EQ(table->routes()[1]->success_status, 202);
}

TEST_F(HandMadeTest, RejectsUnknownVariableField) {
  ExpectBuildError({{Rule("get", "/a/{nope}")}}, "has no field nope");
  ExpectBuildError({{Rule("get", "/a/{inner.nope}")}}, "has no field nope");
  ExpectBuildError({{Rule("get", "/a/{name.x}")}}, "is not a message field");
}

TEST_F(HandMadeTest, RejectsVariableOnMessageOrRepeatedField) {
  ExpectBuildError({{Rule("get", "/a/{inner}")}}, "names a message field");
  ExpectBuildError({{Rule("get", "/a/{tags}")}}, "names a repeated field");
}

TEST_F(HandMadeTest, RejectsBadBody) {
  ExpectBuildError({{Rule("post", "/a", "nope")}}, "has no such field");
  ExpectBuildError({{Rule("post", "/a", "name")}}, "singular message field");
  ExpectBuildError({{Rule("post", "/a", "items")}}, "singular message field");
  ExpectBuildError({{Rule("get", "/a", "*")}}, "cannot take a body");
  ExpectBuildError({{Rule("delete", "/a", "inner")}}, "cannot take a body");
}

TEST_F(HandMadeTest, RejectsMalformedTemplates) {
  ExpectBuildError({{Rule("get", "a/b")}}, "does not start with '/'");
  ExpectBuildError({{Rule("get", "")}}, "does not start with '/'");
  ExpectBuildError({{Rule("get", "/a//b")}}, "empty segment");
  ExpectBuildError({{Rule("get", "/a/")}}, "empty segment");
  ExpectBuildError({{Rule("get", "/a/{id")}}, "unsupported variable");
  ExpectBuildError({{Rule("get", "/a/{}")}}, "unsupported variable");
  ExpectBuildError({{Rule("get", "/a/{name=**}")}}, "unsupported variable");
  ExpectBuildError({{Rule("get", "/a/{name=things/*}")}}, "unsupported variable");
  ExpectBuildError({{Rule("get", "/a/{id}{name}")}}, "unsupported variable");
  ExpectBuildError({{Rule("get", "/a/{inner..name}")}}, "unsupported variable");
  ExpectBuildError({{Rule("get", "/a/*")}}, "unsupported segment");
  ExpectBuildError({{Rule("get", "/a/b:verb")}}, "unsupported segment");
  ExpectBuildError({{Rule("get", "/a/x}")}}, "unsupported segment");
  ExpectBuildError({{Rule("get", "/a/{id}/{id}")}}, "twice");
}

TEST_F(HandMadeTest, RejectsDuplicateMethodAndPath) {
  ExpectBuildError({{Rule("get", "/a/{id}")}, {Rule("get", "/a/{name}")}},
                   "already bound to test.S.M0");
  ExpectBuildError({{Rule("post", "/a", "*")}, {Rule("post", "/a", "inner")}}, "already bound");
  // Same path with another method is fine.
  EXPECT_TRUE(BuildWith({{Rule("get", "/a/{id}")}, {Rule("put", "/a/{name}", "*")}}).ok());
}

TEST_F(HandMadeTest, RejectsUnsupportedRules) {
  ExpectBuildError({{Rule("custom", "/a")}}, "custom HTTP methods");
  ExpectBuildError({{google::api::HttpRule()}}, "no HTTP method pattern");
  google::api::HttpRule response_body = Rule("get", "/a");
  response_body.set_response_body("nope");
  ExpectBuildError({{response_body}}, "response_body names no field");
  google::api::HttpRule nested = Rule("get", "/a");
  google::api::HttpRule* extra = nested.add_additional_bindings();
  *extra = Rule("get", "/b");
  *extra->add_additional_bindings() = Rule("get", "/c");
  ExpectBuildError({{nested}}, "may not nest");
}

TEST_F(HandMadeTest, ResponseBodyNamesAResponseField) {
  google::api::HttpRule rule = Rule("get", "/a");
  rule.set_response_body("value");
  auto table = BuildWith({{rule}});
  ASSERT_TRUE(table.ok()) << table.status();
  const Route* route = table->Match(HttpMethod::kGet, "/a").route;
  ASSERT_NE(route, nullptr);
  ASSERT_NE(route->response_body_field, nullptr);
  EXPECT_EQ(route->response_body_field->name(), "value");
}

TEST_F(HandMadeTest, RejectsInconsistentSuccessStatus) {
  ExpectBuildError({{Rule("delete", "/a/{id}"), "empty", 200}}, "answers 204");
  ExpectBuildError({{Rule("post", "/a", "*"), "test.Resp", 404}}, "not a 2xx");
  ExpectBuildError({{Rule("post", "/a", "*"), "test.Resp", 204}}, "not a 2xx");
  EXPECT_TRUE(BuildWith({{Rule("delete", "/a/{id}"), "empty", 204}}).ok());
}

}  // namespace
}  // namespace calleval::edge

#include "edge/openapi.h"

#include <set>
#include <string>

#include "calleval/v1/accounts.pb.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "edge/route_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace calleval::edge {
namespace {

using Json = nlohmann::json;
using ::testing::UnorderedElementsAre;

class OpenApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = RouteTable::Build(
        {calleval::v1::Call::descriptor()->file()->FindServiceByName("Calls"),
         calleval::v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
         calleval::v1::Workspace::descriptor()->file()->FindServiceByName("Accounts")});
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = std::make_unique<RouteTable>(std::move(table).value());
    std::string text = BuildOpenApi(*table_, "calleval", "1.2.3");
    doc_ = Json::parse(text);
  }

  const Json& Op(const std::string& path, const std::string& method) {
    EXPECT_TRUE(doc_["paths"].contains(path)) << path;
    EXPECT_TRUE(doc_["paths"][path].contains(method)) << method << " " << path;
    return doc_["paths"][path][method];
  }

  const Json& Schema(const std::string& name) {
    EXPECT_TRUE(doc_["components"]["schemas"].contains(name)) << name;
    return doc_["components"]["schemas"][name];
  }

  static std::set<std::string> ParamNames(const Json& op, const std::string& in) {
    std::set<std::string> names;
    if (!op.contains("parameters")) return names;
    for (const Json& p : op["parameters"]) {
      if (p["in"] == in) names.insert(p["name"].get<std::string>());
    }
    return names;
  }

  static const Json* Param(const Json& op, const std::string& name) {
    for (const Json& p : op["parameters"]) {
      if (p["name"] == name) return &p;
    }
    return nullptr;
  }

  std::unique_ptr<RouteTable> table_;
  Json doc_;
};

TEST_F(OpenApiTest, Header) {
  EXPECT_EQ(doc_["openapi"], "3.0.3");
  EXPECT_EQ(doc_["info"]["title"], "calleval");
  EXPECT_EQ(doc_["info"]["version"], "1.2.3");
}

TEST_F(OpenApiTest, EveryRouteHasAnOperation) {
  std::set<std::string> ids;
  for (const auto& route : table_->routes()) {
    std::string method(HttpMethodName(route->method));
    for (char& c : method) c = static_cast<char>(std::tolower(c));
    const Json& op = Op(route->path_template, method);
    const std::string expected_id =
        route->method_descriptor->service()->name() + "_" + route->method_descriptor->name();
    EXPECT_EQ(op["operationId"], expected_id);
    EXPECT_TRUE(ids.insert(op["operationId"].get<std::string>()).second);
    EXPECT_TRUE(op["responses"].contains(std::to_string(route->success_status))) << expected_id;
    EXPECT_EQ(op["responses"]["404"]["$ref"], "#/components/responses/NotFound");
    EXPECT_FALSE(op.contains("security")) << "routed operations use the global bearer auth";
  }
  EXPECT_EQ(ids.size(), 22u);
}

TEST_F(OpenApiTest, PathAndQueryParameters) {
  const Json& get = Op("/api/public/v1/calls/{call_identifier_or_id}", "get");
  EXPECT_THAT(ParamNames(get, "path"), UnorderedElementsAre("call_identifier_or_id"));
  EXPECT_THAT(ParamNames(get, "query"), UnorderedElementsAre("client_id"));
  const Json* id = Param(get, "call_identifier_or_id");
  ASSERT_NE(id, nullptr);
  EXPECT_EQ((*id)["required"], true);
  EXPECT_EQ((*id)["schema"]["type"], "string");
  const Json* client = Param(get, "client_id");
  ASSERT_NE(client, nullptr);
  EXPECT_EQ((*client)["required"], false);
  EXPECT_EQ((*client)["schema"], (Json{{"type", "integer"}, {"format", "int64"}}));
  EXPECT_FALSE(get.contains("requestBody"));

  const Json& list = Op("/api/public/v1/calls", "get");
  EXPECT_THAT(ParamNames(list, "query"),
              UnorderedElementsAre("client_id", "agent_id", "analysis_status", "tag",
                                   "observation_type", "page", "per_page"));
  EXPECT_EQ((*Param(list, "page"))["schema"]["format"], "int32");

  const Json& agent = Op("/api/v1/agents/{id}", "get");
  EXPECT_EQ((*Param(agent, "id"))["schema"]["type"], "integer");
}

TEST_F(OpenApiTest, BodiesAndSuccessCodes) {
  const Json& ingest = Op("/api/public/v1/calls", "post");
  EXPECT_FALSE(ingest.contains("parameters"));  // body "*": nothing from the query string
  EXPECT_EQ(ingest["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/calleval.v1.IngestCallRequest");
  EXPECT_EQ(ingest["responses"]["201"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/calleval.v1.Call");
  EXPECT_EQ(ingest["responses"]["413"]["$ref"], "#/components/responses/PayloadTooLarge");
  EXPECT_EQ(ingest["responses"]["400"]["$ref"], "#/components/responses/BadRequest");

  const Json& patch = Op("/api/public/v1/calls/{call_identifier_or_id}", "patch");
  EXPECT_EQ(patch["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/calleval.v1.CallUpdate");
  EXPECT_THAT(ParamNames(patch, "query"), UnorderedElementsAre("client_id", "agent_id"));
  EXPECT_TRUE(patch["responses"].contains("200"));

  const Json& del = Op("/api/public/v1/calls/{call_identifier_or_id}", "delete");
  ASSERT_TRUE(del["responses"].contains("204"));
  EXPECT_FALSE(del["responses"]["204"].contains("content"));
  EXPECT_FALSE(del["responses"].contains("200"));
}

TEST_F(OpenApiTest, SchemasFollowTheCodec) {
  const Json& call = Schema("calleval.v1.Call")["properties"];
  EXPECT_EQ(call["id"], (Json{{"type", "integer"}, {"format", "int64"}}));
  EXPECT_EQ(call["duration_seconds"],
            (Json{{"type", "integer"}, {"format", "int64"}, {"nullable", true}}));
  EXPECT_EQ(call["call_identifier"], (Json{{"type", "string"}}));
  EXPECT_EQ(call["tag"], (Json{{"type", "string"}, {"nullable", true}}));
  EXPECT_EQ(call["metadata"],
            (Json{{"type", "object"}, {"additionalProperties", true}, {"nullable", true}}));
  EXPECT_EQ(call["transcript"]["type"], "array");
  EXPECT_EQ(call["transcript"]["items"]["$ref"], "#/components/schemas/calleval.v1.Turn");
  EXPECT_EQ(call["ignored_metric_ids"],
            (Json{{"type", "array"}, {"items", {{"type", "integer"}, {"format", "int64"}}}}));

  const Json& turn = Schema("calleval.v1.Turn")["properties"];
  EXPECT_EQ(turn["start_time"],
            (Json{{"type", "number"}, {"format", "double"}, {"nullable", true}}));
  // omit_empty: absent rather than null.
  EXPECT_EQ(turn["data"], (Json{{"type", "object"}, {"additionalProperties", true}}));

  const Json& result = Schema("calleval.v1.MetricResult")["properties"];
  EXPECT_EQ(result["value"], (Json{{"nullable", true}}));  // any JSON value
  EXPECT_EQ(result["structured_output"]["allOf"][0]["$ref"],
            "#/components/schemas/calleval.v1.MetricOutcome");
  EXPECT_EQ(result["structured_output"]["nullable"], true);

  const Json& agent = Schema("calleval.v1.Agent")["properties"];
  EXPECT_EQ(agent["call_directions"]["items"]["type"], "string");
  EXPECT_EQ(agent["max_call_duration_seconds"], (Json{{"type", "integer"}, {"format", "int32"}}));

  // Request messages never show the codec's bookkeeping fields.
  const Json& ingest = Schema("calleval.v1.IngestCallRequest")["properties"];
  EXPECT_TRUE(ingest.contains("call_identifier"));
  EXPECT_FALSE(ingest.contains("null_fields"));
  EXPECT_FALSE(ingest.contains("set_fields"));
  EXPECT_FALSE(Schema("calleval.v1.CallUpdate")["properties"].contains("set_fields"));

  // Reachable from responses.
  Schema("calleval.v1.Pagination");
  Schema("calleval.v1.StandardMetricResult");
  Schema("calleval.v1.OpeningMessage");
  Schema("calleval.v1.Language");
  Schema("calleval.v1.Workspace");
  EXPECT_FALSE(doc_["components"]["schemas"].contains("google.protobuf.Empty"));
  EXPECT_FALSE(doc_["components"]["schemas"].contains("google.protobuf.Struct"));
}

TEST_F(OpenApiTest, ErrorResponseComponent) {
  EXPECT_EQ(Schema("ErrorResponse")["$ref"], "#/components/schemas/calleval.v1.ErrorResponse");
  const Json& error = Schema("calleval.v1.Error")["properties"];
  EXPECT_EQ(error["status"]["type"], "integer");
  EXPECT_EQ(error["details"]["items"]["$ref"], "#/components/schemas/calleval.v1.ErrorDetail");
  EXPECT_EQ(Schema("calleval.v1.ErrorDetail")["properties"]["field"]["nullable"], true);
  const Json& not_found = doc_["components"]["responses"]["NotFound"];
  EXPECT_EQ(not_found["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorResponse");
}

TEST_F(OpenApiTest, SecurityExemptsLocalRoutes) {
  EXPECT_EQ(doc_["components"]["securitySchemes"]["bearerAuth"],
            (Json{{"type", "http"}, {"scheme", "bearer"}}));
  EXPECT_EQ(doc_["security"], (Json::array({{{"bearerAuth", Json::array()}}})));
  for (const char* path : {"/healthz", "/readyz", "/openapi.json", "/recordings/{id}"}) {
    const Json& op = Op(path, "get");
    EXPECT_EQ(op["security"], Json::array()) << path;
  }
  const Json& recording = Op("/recordings/{id}", "get");
  EXPECT_THAT(ParamNames(recording, "query"), UnorderedElementsAre("expires", "signature"));
  EXPECT_THAT(ParamNames(recording, "path"), UnorderedElementsAre("id"));
}

// Every "$ref" in the document points at something that exists.
void CheckRefs(const Json& doc, const Json& node, int* count) {
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() == "$ref") {
        ASSERT_TRUE(it->is_string());
        std::string ref = it->get<std::string>();
        ASSERT_EQ(ref.rfind("#/", 0), 0u) << ref;
        // Component names contain dots, never '/' or '~', so the pointer is the ref's tail.
        Json::json_pointer pointer(ref.substr(1));
        EXPECT_TRUE(doc.contains(pointer)) << "dangling " << ref;
        ++*count;
      } else {
        CheckRefs(doc, *it, count);
      }
    }
  } else if (node.is_array()) {
    for (const Json& element : node) CheckRefs(doc, element, count);
  }
}

TEST_F(OpenApiTest, AllRefsResolve) {
  int count = 0;
  CheckRefs(doc_, doc_, &count);
  EXPECT_GT(count, 50);
}

}  // namespace
}  // namespace calleval::edge

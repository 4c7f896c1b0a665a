#include "edge/openapi.h"

#include <set>
#include <string>

#include "calleval/v1/accounts.pb.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "calleval/v1/metrics.pb.h"
#include "edge/route_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/edge/openapi_validator.h"

namespace calleval::edge {
namespace {

using Json = nlohmann::json;
using ::calleval::testing::ValidateSchema;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

class OpenApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = RouteTable::Build(
        {calleval::v1::Call::descriptor()->file()->FindServiceByName("Calls"),
         calleval::v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
         calleval::v1::Workspace::descriptor()->file()->FindServiceByName("Accounts"),
         calleval::v1::Metric::descriptor()->file()->FindServiceByName("Metrics")});
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

  // `properties` with every "description" taken out, to compare the shapes alone.
  static Json Undescribed(Json properties) {
    for (auto& [name, schema] : properties.items()) schema.erase("description");
    return properties;
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
    EXPECT_EQ(op["responses"]["401"]["$ref"], "#/components/responses/Unauthorized");
    EXPECT_EQ(op["responses"]["422"]["$ref"], "#/components/responses/UnprocessableEntity");
    EXPECT_FALSE(op.contains("security")) << "routed operations use the global bearer auth";
  }
  EXPECT_EQ(ids.size(), 50u);
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
  EXPECT_EQ((*id)["example"], "call-0001");
  EXPECT_FALSE(get.contains("requestBody"));

  const Json& list = Op("/api/public/v1/calls", "get");
  EXPECT_THAT(ParamNames(list, "query"),
              UnorderedElementsAre("client_id", "agent_id", "analysis_status", "tag",
                                   "observation_type", "page", "per_page", "transcription_status",
                                   "call_timestamp_from", "call_timestamp_to", "search"));
  EXPECT_EQ((*Param(list, "page"))["schema"]["format"], "int32");
  EXPECT_EQ(
      (*Param(list, "analysis_status"))["schema"],
      (Json{{"type", "string"},
            {"enum", {"pending", "processing", "computed", "completed", "failed", "skipped"}}}));
  EXPECT_EQ((*Param(list, "transcription_status"))["schema"],
            (Json{{"type", "string"}, {"enum", {"pending", "processing", "completed", "failed"}}}));
  EXPECT_EQ((*Param(list, "call_timestamp_from"))["schema"],
            (Json{{"type", "string"}, {"format", "date-time"}}));
  EXPECT_EQ((*Param(list, "call_timestamp_to"))["schema"],
            (Json{{"type", "string"}, {"format", "date-time"}}));

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
  const Json call = Undescribed(Schema("calleval.v1.Call")["properties"]);
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

  const Json turn = Undescribed(Schema("calleval.v1.Turn")["properties"]);
  EXPECT_EQ(turn["start_time"],
            (Json{{"type", "number"}, {"format", "double"}, {"nullable", true}}));
  // omit_empty: absent rather than null.
  EXPECT_EQ(turn["data"], (Json{{"type", "object"}, {"additionalProperties", true}}));

  const Json result = Undescribed(Schema("calleval.v1.MetricResult")["properties"]);
  EXPECT_EQ(result["value"], Json::object());  // any JSON value, null included
  // Nullable needs a type beside it; $ref siblings are ignored, so the ref is wrapped.
  EXPECT_EQ(result["structured_output"],
            (Json{{"type", "object"},
                  {"nullable", true},
                  {"allOf", {{{"$ref", "#/components/schemas/calleval.v1.MetricOutcome"}}}}}));

  const Json agent = Undescribed(Schema("calleval.v1.Agent")["properties"]);
  EXPECT_EQ(agent["call_directions"]["items"],
            (Json{{"type", "string"}, {"enum", {"inbound", "outbound"}}}));
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
  // The voice platforms' webhooks carry the platform's signature, not a key (docs/api.md §5.9).
  for (const char* path : {"/api/public/v1/integrations/vapi/events",
                           "/api/public/v1/integrations/retell/events"}) {
    const Json& op = Op(path, "post");
    EXPECT_EQ(op["security"], Json::array()) << path;
    EXPECT_TRUE(op["responses"].contains("401")) << path;
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

TEST_F(OpenApiTest, ServersDefaultToTheServingHost) {
  EXPECT_EQ(doc_["servers"], (Json::array({{{"url", "/"}}})));
  Json with_base = Json::parse(BuildOpenApi(*table_, "calleval", "1", "https://calleval.test"));
  EXPECT_EQ(with_base["servers"], (Json::array({{{"url", "https://calleval.test"}}})));
}

TEST_F(OpenApiTest, ResponsesRequireEveryPrintedField) {
  const Json& call = Schema("calleval.v1.Call");
  std::set<std::string> required(call["required"].begin(), call["required"].end());
  for (const auto& [name, schema] : call["properties"].items()) {
    // omit_empty fields are the only ones the codec may leave out.
    EXPECT_EQ(required.count(name), name == "ignored_metric_ids" ? 0u : 1u) << name;
  }
  EXPECT_THAT(Schema("calleval.v1.ErrorResponse")["required"], ElementsAre("error"));
  EXPECT_THAT(Schema("calleval.v1.ErrorDetail")["required"], ElementsAre("field", "issue"));
}

TEST_F(OpenApiTest, BodiesRequireWhatValidationRequires) {
  EXPECT_THAT(Schema("calleval.v1.IngestCallRequest")["required"],
              ElementsAre("call_identifier", "agent_id"));
  // Turn is also an answer's: the request side has its own component, requiring only the role.
  EXPECT_THAT(Schema("calleval.v1.TurnInput")["required"], ElementsAre("role"));
  EXPECT_EQ(Schema("calleval.v1.IngestCallRequest")["properties"]["transcript"]["items"]["$ref"],
            "#/components/schemas/calleval.v1.TurnInput");
  EXPECT_EQ(Schema("calleval.v1.Turn")["required"].size(), 4u);

  // Create requires the name; PATCH merges, so its body requires nothing at the top.
  const Json& create = Op("/api/v1/agents", "post");
  EXPECT_EQ(create["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/calleval.v1.AgentFields");
  EXPECT_THAT(Schema("calleval.v1.AgentFields")["required"], ElementsAre("name"));
  const Json& patch = Op("/api/v1/agents/{id}", "patch");
  EXPECT_EQ(patch["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/calleval.v1.AgentFieldsUpdate");
  EXPECT_FALSE(Schema("calleval.v1.AgentFieldsUpdate").contains("required"));
  EXPECT_THAT(Schema("calleval.v1.MetricFields")["required"], ElementsAre("name", "metrics_type"));
  EXPECT_THAT(Schema("calleval.v1.CreateBatchRunRequest")["required"],
              ElementsAre("agent_id", "scenario_ids"));
  EXPECT_FALSE(Schema("calleval.v1.CallUpdate").contains("required"));
}

TEST_F(OpenApiTest, EnumsFormatsAndDescriptions) {
  const Json& call = Schema("calleval.v1.Call")["properties"];
  EXPECT_EQ(call["observation_type"]["enum"], (Json{"voice", "text"}));
  EXPECT_EQ(call["transcription_status"]["enum"],
            (Json{"pending", "processing", "completed", "failed"}));
  // Nullable: null is one of the values.
  EXPECT_EQ(call["transcript_source"]["enum"], (Json{"provided", "generated", nullptr}));
  EXPECT_EQ(call["created_at"]["format"], "date-time");
  EXPECT_EQ(call["call_timestamp"]["format"], "date-time");
  EXPECT_EQ(Schema("calleval.v1.Run")["properties"]["status"]["enum"],
            (Json{"queued", "in_progress", "completed", "failed", "cancelled"}));
  EXPECT_EQ(Schema("calleval.v1.TurnInput")["properties"]["role"]["enum"],
            (Json{"AI Assistant", "User", "Function Call", "Function Call Result"}));
  EXPECT_EQ(Schema("calleval.v1.Metric")["properties"]["metrics_type"]["enum"].size(), 5u);

  // From the protos' comments.
  EXPECT_EQ(call["call_identifier"]["description"],
            "The caller's own identifier, unique in the workspace.");
  EXPECT_THAT(Schema("calleval.v1.Call")["description"].get<std::string>(),
              StartsWith("The call record every call route answers with"));
  EXPECT_THAT(Op("/api/v1/metrics/generate", "post")["description"].get<std::string>(),
              StartsWith("Proposes definitions with the LLM provider"));
  for (const Json& tag : doc_["tags"]) {
    EXPECT_FALSE(tag.value("description", "").empty()) << tag["name"];
  }
}

// What the linter's "spec" rule asks of every schema: nullable only beside a type.
void CheckNullableHasType(const Json& node, const std::string& where) {
  if (node.is_object()) {
    if (node.contains("nullable")) {
      EXPECT_TRUE(node.contains("type")) << where;
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      CheckNullableHasType(*it, where + "/" + it.key());
    }
  } else if (node.is_array()) {
    for (const Json& element : node) CheckNullableHasType(element, where);
  }
}

TEST_F(OpenApiTest, NullableAlwaysHasAType) { CheckNullableHasType(doc_, ""); }

TEST_F(OpenApiTest, EveryOperationHasExamplesThatFitItsSchemas) {
  int checked = 0;
  for (const auto& [path, item] : doc_["paths"].items()) {
    for (const auto& [method, op] : item.items()) {
      bool has_example = false;
      const Json::json_pointer body_pointer("/requestBody/content/application~1json");
      if (op.contains(body_pointer)) {
        const Json& media = op[body_pointer];
        ASSERT_TRUE(media.contains("example")) << method << " " << path;
        EXPECT_THAT(ValidateSchema(doc_, media["schema"], media["example"]), IsEmpty())
            << method << " " << path << " request";
        has_example = true;
        ++checked;
      }
      for (const auto& [status, response] : op["responses"].items()) {
        if (!response.contains("content") || !response["content"].contains("application/json")) {
          continue;
        }
        const Json& media = response["content"]["application/json"];
        ASSERT_TRUE(media.contains("example")) << method << " " << path << " " << status;
        EXPECT_THAT(ValidateSchema(doc_, media["schema"], media["example"]), IsEmpty())
            << method << " " << path << " " << status;
        has_example = true;
        ++checked;
      }
      for (const Json& parameter : op.value("parameters", Json::array())) {
        if (parameter["in"] == "path") {
          ASSERT_TRUE(parameter.contains("example")) << method << " " << path;
          has_example = true;
        }
      }
      EXPECT_TRUE(has_example) << method << " " << path;
    }
  }
  for (const auto& [name, response] : doc_["components"]["responses"].items()) {
    const Json& media = response["content"]["application/json"];
    EXPECT_THAT(ValidateSchema(doc_, media["schema"], media["example"]), IsEmpty()) << name;
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

// Every (example) option is JSON text (the generator would otherwise fall back to a made-up value).
TEST_F(OpenApiTest, ExampleOptionsAreJson) {
  int count = 0;
  for (const google::protobuf::FileDescriptor* file :
       {calleval::v1::Call::descriptor()->file(), calleval::v1::Agent::descriptor()->file(),
        calleval::v1::Metric::descriptor()->file(), calleval::v1::Workspace::descriptor()->file(),
        calleval::v1::ErrorResponse::descriptor()->file()}) {
    for (int m = 0; m < file->message_type_count(); ++m) {
      const google::protobuf::Descriptor* message = file->message_type(m);
      for (int f = 0; f < message->field_count(); ++f) {
        const std::string& text = message->field(f)->options().GetExtension(calleval::v1::example);
        if (text.empty()) continue;
        EXPECT_FALSE(Json::parse(text, nullptr, false).is_discarded())
            << message->field(f)->full_name() << ": " << text;
        ++count;
      }
    }
  }
  EXPECT_GT(count, 20);
}

// The validator itself: each mismatch the conformance test relies on is caught.
TEST_F(OpenApiTest, ValidatorCatchesMismatches) {
  const Json ref = Json{{"$ref", "#/components/schemas/calleval.v1.Workspace"}};
  EXPECT_THAT(ValidateSchema(doc_, ref, {{"id", 1}, {"name", "w"}, {"credit_balance", 5}}),
              IsEmpty());
  EXPECT_THAT(ValidateSchema(doc_, ref, {{"id", 1}, {"name", "w"}}),
              ElementsAre("$: missing required property credit_balance"));
  EXPECT_THAT(ValidateSchema(doc_, ref, {{"id", "1"}, {"name", "w"}, {"credit_balance", 5}}),
              ElementsAre("$.id: expected an integer, got \"1\""));
  EXPECT_THAT(
      ValidateSchema(doc_, ref, {{"id", 1}, {"name", "w"}, {"credit_balance", 5}, {"extra", 1}}),
      ElementsAre("$.extra: property not in the schema"));
  EXPECT_THAT(ValidateSchema(doc_, ref, {{"id", 1}, {"name", nullptr}, {"credit_balance", 5}}),
              ElementsAre("$.name: null where the schema is not nullable"));
  const Json run = Json{{"$ref", "#/components/schemas/calleval.v1.Run"}};
  Json bad_run = Json::parse(R"({"id":1,"scenario_id":1,"agent_id":1,"batch_run_id":null,
      "channel":"fax","status":"queued","call_id":null,"passed":null,"started_at":null,
      "ended_at":null,"end_reason":null,"error":null,"created_at":"yesterday","version":null,
      "platform_version":null})");
  EXPECT_THAT(ValidateSchema(doc_, run, bad_run),
              UnorderedElementsAre("$.channel: \"fax\" is not one of [\"phone\",\"web\",\"text\"]",
                                   "$.created_at: \"yesterday\" is not an RFC 3339 date-time"));
  EXPECT_TRUE(calleval::testing::IsDateTime("2026-11-22T10:15:00.25+02:00"));
  EXPECT_FALSE(calleval::testing::IsDateTime("2026-11-22 10:15:00"));
}

}  // namespace
}  // namespace calleval::edge

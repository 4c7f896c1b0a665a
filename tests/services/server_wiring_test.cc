// The wiring of cmd/calleval/server.cc: every method with an HTTP route is served twice, on the
// gRPC port and through the edge, which calls the handler of a role in its own process
// directly (edge/direct_invoker.h) and sends the rest to gRPC. Both registrations come from the
// service's method table (common/method_table.h); this checks them against each other for every
// route of the route table: the same request, over HTTP and over gRPC, must get the same answer.
//
// A method left out of the direct registrations answers 503 at the edge (no channel to a role
// run here), one left off the gRPC server UNIMPLEMENTED, and one wired to the wrong handler
// answers another message: each fails here.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "cmd/calleval/server.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/method_table.h"
#include "common/schema.h"
#include "edge/direct_invoker.h"
#include "edge/json_codec.h"
#include "edge/route_table.h"
#include "nlohmann/json.hpp"
#include "services/accounts/accounts_service.h"
#include "services/agents/agents_service.h"
#include "services/calls/calls_service.h"
#include "services/metrics/metrics_service.h"
#include "tests/integration/http_client.h"
#include "tests/services/service_test_support.h"
#include "tests/support/test_database.h"

namespace calleval {
namespace {

using ::calleval::testing::HttpClient;
using ::calleval::testing::HttpResponse;
using nlohmann::json;

std::vector<const google::protobuf::ServiceDescriptor*> PublicServices() {
  return {testing::ServiceNamed(v1::Accounts::service_full_name()),
          testing::ServiceNamed(v1::Agents::service_full_name()),
          testing::ServiceNamed(v1::Calls::service_full_name()),
          testing::ServiceNamed(v1::Metrics::service_full_name())};
}

// How `method` runs as its service's table says (common/method_table.h); nullopt without an
// entry.
template <typename Service>
std::optional<Execution> TableExecution(const google::protobuf::MethodDescriptor* method) {
  std::optional<Execution> found;
  for (const MethodEntry<Service>& entry : Service::Methods()) {
    if (method->name() == entry.name) found = entry.execution;
  }
  return found;
}
std::optional<Execution> ExecutionOf(const google::protobuf::MethodDescriptor* method) {
  const std::string& service = method->service()->full_name();
  if (service == v1::Accounts::service_full_name()) {
    return TableExecution<accounts::AccountsService>(method);
  }
  if (service == v1::Agents::service_full_name()) {
    return TableExecution<agents::AgentsService>(method);
  }
  if (service == v1::Calls::service_full_name()) return TableExecution<calls::CallsService>(method);
  if (service == v1::Metrics::service_full_name()) {
    return TableExecution<metrics::MetricsService>(method);
  }
  return std::nullopt;
}

// The concrete path of `route` with every variable set to `value`.
std::string PathOf(const edge::Route& route, const std::string& value) {
  std::string path;
  for (const edge::PathSegment& segment : route.segments) {
    absl::StrAppend(&path, "/", segment.is_variable ? value : segment.literal);
  }
  return path;
}

// The request message the edge decodes from PathOf(route, value) and a body of "{}".
std::unique_ptr<google::protobuf::Message> RequestOf(const edge::Route& route,
                                                     const std::string& value) {
  auto request = testing::NewMessage(route.method_descriptor->input_type());
  switch (route.body_kind) {
    case edge::BodyKind::kNone:
      break;
    case edge::BodyKind::kWhole:
      EXPECT_TRUE(edge::ParseJsonBody("{}", request.get()).ok());
      break;
    case edge::BodyKind::kField:
      EXPECT_TRUE(edge::ParseJsonBody("{}", request->GetReflection()->MutableMessage(
                                                request.get(), route.body_field))
                      .ok());
      break;
  }
  for (const edge::PathSegment& segment : route.segments) {
    if (!segment.is_variable) continue;
    EXPECT_TRUE(edge::SetFieldFromString(segment.field_path, value, request.get()).ok());
  }
  return request;
}

class ServerWiringTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("server_wiring");
    ServerConfig config;  // all roles in this process, as `calleval serve` runs them
    config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
    config.data_dir = dir_;
    config.http_addr = "127.0.0.1:0";
    config.grpc_addr = "127.0.0.1:0";
    config.access_log = false;
    if (GetParam() == db::Backend::kPostgres) {
      auto database = testing::TestDatabase::Create(db::Backend::kPostgres, SchemaMigrations());
      ASSERT_TRUE(database.ok()) << database.status();
      database_ = std::move(*database);
      config.database_url = database_->url();
    }
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->bootstrap().has_value());
    key_ = server_->bootstrap()->key.api_key;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    auto routes = edge::RouteTable::Build(PublicServices());
    ASSERT_TRUE(routes.ok()) << routes.status();
    routes_ = std::make_unique<edge::RouteTable>(*std::move(routes));
  }
  void TearDown() override {
    server_.reset();
    database_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Sends `route` over HTTP and the same request over gRPC with `authorization` (none when
  // empty), and expects the same answer: the status, the error code and message, or the body.
  void ExpectSameAnswer(const edge::Route& route, const std::string& authorization,
                        const std::string& value) {
    const std::string path = PathOf(route, value);
    SCOPED_TRACE(absl::StrCat(std::string(edge::HttpMethodName(route.method)), " ", path, " (",
                              route.method_descriptor->full_name(), ")",
                              authorization.empty() ? " without a key" : " with the key"));
    HttpClient http(server_->http_base_url());
    std::map<std::string, std::string> headers;
    if (!authorization.empty()) headers["Authorization"] = authorization;
    const std::string body = "{}";
    const HttpResponse answered =
        http.Send(std::string(edge::HttpMethodName(route.method)), path,
                  route.body_kind == edge::BodyKind::kNone ? nullptr : &body, headers);

    auto request = RequestOf(route, value);
    auto response = testing::NewMessage(route.method_descriptor->output_type());
    testing::Metadata metadata;
    if (!authorization.empty()) metadata.push_back({"authorization", authorization});
    const grpc::Status status =
        testing::CallMethod(channel_, route.method_descriptor, *request, response.get(), metadata);
    ASSERT_NE(status.error_code(), grpc::UNIMPLEMENTED) << "not on the gRPC server";

    if (!status.ok()) {
      const absl::Status received = FromGrpcStatus(status);
      EXPECT_EQ(answered.status, HttpStatusFor(received)) << answered.body;
      const json error = answered.json()["error"];
      ASSERT_TRUE(error.is_object()) << answered.body;
      EXPECT_EQ(error.value("code", ""), ErrorInfoOf(received).code()) << answered.body;
      EXPECT_EQ(error.value("message", ""), received.message()) << answered.body;
      return;
    }
    ++answered_ok_;
    if (route.empty_response) {
      EXPECT_EQ(answered.status, 204) << answered.body;
      return;
    }
    EXPECT_EQ(answered.status, route.success_status) << answered.body;
    const std::string printed = route.response_body_field != nullptr
                                    ? edge::PrintJsonField(*response, route.response_body_field)
                                    : edge::PrintJson(*response);
    EXPECT_EQ(answered.json(), json::parse(printed));
  }

  std::string dir_;
  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<Server> server_;
  std::string key_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<edge::RouteTable> routes_;
  int answered_ok_ = 0;  // comparisons where the method succeeded
};

TEST_P(ServerWiringTest, EveryAnnotatedMethodHasARoute) {
  std::set<const google::protobuf::MethodDescriptor*> routed;
  for (const auto& route : routes_->routes()) routed.insert(route->method_descriptor);
  std::vector<std::string> missing;
  int annotated = 0;
  for (const google::protobuf::ServiceDescriptor* service : PublicServices()) {
    for (int i = 0; i < service->method_count(); ++i) {
      if (!testing::IsPublic(service->method(i))) continue;
      ++annotated;
      if (routed.count(service->method(i)) == 0) missing.push_back(service->method(i)->name());
    }
  }
  EXPECT_TRUE(missing.empty()) << absl::StrJoin(missing, ", ");
  EXPECT_GE(annotated, 43);
}

// Whether a method runs inline or on the pool is chosen once, in its service's method table,
// which the gRPC adapter and the edge's direct registration both read: every routed method has
// an entry (CheckMethodTable makes sure of one entry per RPC), and the edge registered each as
// its entry says.
TEST_P(ServerWiringTest, EveryRoutedMethodRunsAsItsServicesTableSays) {
  ASSERT_NE(server_->direct_invoker(), nullptr);
  int checked = 0;
  int short_reads = 0;
  for (const auto& route : routes_->routes()) {
    const google::protobuf::MethodDescriptor* method = route->method_descriptor;
    SCOPED_TRACE(method->full_name());
    const std::optional<Execution> execution = ExecutionOf(method);
    ASSERT_TRUE(execution.has_value()) << "no entry in its service's table";
    const std::optional<edge::DirectInvoker::Dispatch> dispatch =
        server_->direct_invoker()->DispatchOf(method);
    ASSERT_TRUE(dispatch.has_value()) << "not registered for the edge";
    EXPECT_EQ(*dispatch == edge::DirectInvoker::Dispatch::kInline,
              Resolved(*execution) == Execution::kInline);
    // A short read waits on the network on PostgreSQL: there it goes to the pool.
    if (*execution == Execution::kPointRead) {
      EXPECT_EQ(*dispatch == edge::DirectInvoker::Dispatch::kInline,
                GetParam() == db::Backend::kSqlite);
      ++short_reads;
    }
    ++checked;
  }
  EXPECT_GE(checked, 43);
  EXPECT_GE(short_reads, 8);
}

// Without a key every route is refused the same way by both paths: each handler ran (the
// gRPC server has the method, the edge's direct registration has it) and authenticated.
TEST_P(ServerWiringTest, EveryRouteRefusesAMissingKeyLikeItsGrpcMethod) {
  ASSERT_GE(routes_->routes().size(), 43u);
  for (const auto& route : routes_->routes()) {
    ExpectSameAnswer(*route, "", "1");
    ExpectSameAnswer(*route, "Bearer cev_notakeyofthisinstallation000000", "1");
  }
}

// With the key and empty requests the handlers answer (lists, the workspace) or refuse them
// (validation, not found) with messages that name what they looked for: the same handler is
// behind both paths.
TEST_P(ServerWiringTest, EveryRouteAnswersAnEmptyRequestLikeItsGrpcMethod) {
  for (const auto& route : routes_->routes()) {
    ExpectSameAnswer(*route, testing::Bearer(key_), "424242");
  }
}

// The id of the object `route` reads, among those the test made (0 for routes without one).
struct Made {
  int64_t agent = 0, scenario = 0, metric = 0, call = 0, alert_rule = 0;
};
int64_t NumericIdFor(const edge::Route& route, const Made& made) {
  const std::string& method = route.method_descriptor->name();
  for (const edge::PathSegment& segment : route.segments) {
    if (!segment.is_variable) continue;
    if (segment.field_path == "agent_id") return made.agent;
    if (segment.field_path == "scenario_id") return made.scenario;
    if (segment.field_path == "call_identifier_or_id") return made.call;
    if (absl::StrContains(method, "Alert")) return made.alert_rule;
    if (absl::StrContains(method, "Agent")) return made.agent;
    if (absl::StrContains(method, "Scenario")) return made.scenario;
    if (absl::StrContains(method, "Metric")) return made.metric;
    return 0;  // runs: none are made (the runs role would start them at once)
  }
  return 0;
}
// The path value of a read: an id, or the provider of the integration settings made.
std::string IdFor(const edge::Route& route, const Made& made) {
  for (const edge::PathSegment& segment : route.segments) {
    if (segment.is_variable && segment.field_path == "provider") return "retell";
  }
  return absl::StrCat(NumericIdFor(route, made));
}

// Reads of objects that exist answer the same JSON both ways: the handlers behind the edge and
// the gRPC server read the same stores the same way.
TEST_P(ServerWiringTest, EveryReadOfExistingObjectsAnswersLikeItsGrpcMethod) {
  auto context = [this] { return testing::ContextWithKey(key_); };
  Made made;
  v1::AgentFields agent_fields;
  agent_fields.set_name("Booking");
  agent_fields.set_phone_number("+14155550123");
  agent_fields.set_language_id(1);
  agent_fields.set_instructions("Take table bookings.");
  v1::Agent agent;
  ASSERT_GRPC_OK(v1::Agents::NewStub(channel_)->CreateAgent(context().get(), agent_fields, &agent));
  made.agent = agent.id();
  v1::ScenarioFields scenario_fields;
  scenario_fields.set_agent_id(agent.id());
  scenario_fields.set_name("Two at eight");
  scenario_fields.set_goal("Book a table");
  v1::Scenario scenario;
  ASSERT_GRPC_OK(
      v1::Agents::NewStub(channel_)->CreateScenario(context().get(), scenario_fields, &scenario));
  made.scenario = scenario.id();
  v1::CreateMetricRequest metric_request;
  metric_request.mutable_metric()->set_name("Greets the caller");
  metric_request.mutable_metric()->set_metrics_type("specific_text_/_phrase_check");
  metric_request.mutable_metric()->add_phrases("good evening");
  v1::Metric metric;
  ASSERT_GRPC_OK(
      v1::Metrics::NewStub(channel_)->CreateMetric(context().get(), metric_request, &metric));
  made.metric = metric.id();
  v1::WriteIntegrationRequest integration;
  integration.set_provider("retell");
  (*integration.mutable_settings()->mutable_fields())["api_key"].set_string_value("key_1");
  v1::Integration written;
  ASSERT_GRPC_OK(v1::Agents::NewStub(channel_)->ReplaceIntegration(context().get(), integration,
                                                                   &written));
  v1::IngestCallRequest ingest;
  ingest.set_call_identifier("wired");
  ingest.set_agent_id(agent.id());
  v1::Turn* turn = ingest.add_transcript();
  turn->set_role("AI Assistant");
  turn->set_content("Good evening, how can I help?");
  turn->set_start_time(0);
  turn->set_end_time(2);
  auto calls = v1::Calls::NewStub(channel_);
  v1::Call call;
  ASSERT_GRPC_OK(calls->IngestCall(context().get(), ingest, &call));
  made.call = call.id();
  v1::CreateAlertRuleRequest rule_request;
  rule_request.set_name("Slow answers");
  rule_request.set_figure("latency.p95_ms");
  rule_request.set_op(">");
  rule_request.set_threshold(1500);
  rule_request.set_window("1h");
  rule_request.set_webhook_url("https://hooks.example.com/calleval");
  v1::AlertRule rule;
  ASSERT_GRPC_OK(calls->CreateAlertRule(context().get(), rule_request, &rule));
  made.alert_rule = rule.id();
  // The scoring role works on the call in the background: compare once it is done.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (call.analysis_status() == "pending" || call.analysis_status() == "processing" ||
         call.analysis_status() == "computed") {
    ASSERT_LT(absl::Now(), deadline) << call.DebugString();
    absl::SleepFor(absl::Milliseconds(50));
    v1::GetCallRequest get;
    get.set_call_identifier_or_id("wired");
    ASSERT_GRPC_OK(calls->GetCall(context().get(), get, &call));
  }

  int reads = 0;
  for (const auto& route : routes_->routes()) {
    if (route->method != edge::HttpMethod::kGet) continue;
    ++reads;
    ExpectSameAnswer(*route, testing::Bearer(key_), IdFor(*route, made));
  }
  EXPECT_GE(reads, 14);
  // Every read but GetRun, GetBatchRun, GetBatchRunComparison and GetCallWaveform (the call is
  // a text call, without a recording) found what it looked for.
  EXPECT_GE(answered_ok_, reads - 4);
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(ServerWiringTest);

}  // namespace
}  // namespace calleval

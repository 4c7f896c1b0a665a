// The method tables (common/method_table.h) and the one place callers are admitted. Every check
// here iterates the tables themselves, not a list written for the test: a method added to a
// table is checked the day it is added, on gRPC and at the edge alike.
//
// - each table serves every RPC of its service exactly once, with handlers of the RPC's types,
//   and CheckMethodTable names what is wrong with one that does not;
// - every workspace method refuses a missing or bad API key with UNAUTHENTICATED, and a
//   client_id its key may not use with PERMISSION_DENIED, over gRPC and through the edge's
//   DirectInvoker: the same admission, whichever way the call came;
// - every internal method refuses whoever lacks the installation's credential, an API key
//   included, and the edge does not register it at all.

#include "common/method_table.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "cmd/calleval/server.h"
#include "common/errors.h"
#include "edge/direct_invoker.h"
#include "services/accounts/accounts_service.h"
#include "services/agents/agents_service.h"
#include "services/calls/calls_methods.h"
#include "services/calls/calls_service.h"
#include "services/metrics/metrics_service.h"
#include "tests/services/service_test_support.h"

namespace calleval {
namespace {

using testing::Metadata;

// A workspace id no key of the test server was granted.
constexpr int64_t kForeignWorkspace = 987654;

// One table entry, with the descriptor of its method, whatever its service.
struct TableMethod {
  const google::protobuf::MethodDescriptor* method;
  Access access;
};

template <typename Service>
void AppendTable(std::vector<TableMethod>* out) {
  const google::protobuf::ServiceDescriptor* service = ServiceDescriptorOf<Service>();
  for (const MethodEntry<Service>& entry : Service::Methods()) {
    const google::protobuf::MethodDescriptor* method = service->FindMethodByName(entry.name);
    ASSERT_NE(method, nullptr) << entry.name;
    out->push_back({method, entry.access});
  }
}

std::vector<TableMethod> AllTableMethods(Access access) {
  std::vector<TableMethod> all;
  AppendTable<accounts::AccountsService>(&all);
  AppendTable<agents::AgentsService>(&all);
  AppendTable<calls::CallsService>(&all);
  AppendTable<metrics::MetricsService>(&all);
  std::vector<TableMethod> matching;
  for (const TableMethod& m : all) {
    if (m.access == access) matching.push_back(m);
  }
  return matching;
}

// Credentials that must not open a workspace method.
std::vector<Metadata> BadKeys() {
  return {
      {},                       // none at all
      {{"authorization", ""}},  // an empty header
      {{"authorization", testing::Bearer("cev_notakeyofthisinstallation000000")}},
      {{"authorization", "Basic cev_notakeyofthisinstallation000000"}},   // the wrong scheme
      {{kInternalCredentialMetadata, testing::kTestInternalCredential}},  // not an API key
  };
}

class MethodTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("method_table");
    const std::string credential_file = dir_ + "/internal-credential-given";
    std::ofstream(credential_file) << testing::kTestInternalCredential << "\n";
    ServerConfig config;  // every role in this process, as `calleval serve` runs them
    config.admin_addr = "127.0.0.1:0";  // never the fixed default: tests run in parallel
    config.data_dir = dir_;
    config.http_addr = "127.0.0.1:0";
    config.grpc_addr = "127.0.0.1:0";
    config.access_log = false;
    config.internal_credential_file = credential_file;
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->bootstrap().has_value());
    key_ = server_->bootstrap()->key.api_key;
    ASSERT_NE(server_->direct_invoker(), nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  grpc::Status CallOverGrpc(const google::protobuf::MethodDescriptor* method,
                            const google::protobuf::Message& request, const Metadata& metadata) {
    auto response = testing::NewMessage(method->output_type());
    return testing::CallMethod(channel_, method, request, response.get(), metadata);
  }

  // The call the edge makes for an HTTP request with `authorization`.
  absl::Status CallAtTheEdge(const google::protobuf::MethodDescriptor* method,
                             const google::protobuf::Message& request,
                             const std::string& authorization) {
    std::unique_ptr<google::protobuf::Message> copy(request.New());
    copy->CopyFrom(request);
    edge::CallContext context;
    context.authorization = authorization;
    std::promise<absl::Status> answered;
    server_->direct_invoker()->Invoke(
        method, std::move(copy), context,
        [&answered](absl::Status status, std::unique_ptr<google::protobuf::Message>) {
          answered.set_value(std::move(status));
        });
    return answered.get_future().get();
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  std::string key_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST(MethodTables, EveryTableServesEachRpcOfItsServiceOnce) {
  EXPECT_TRUE(CheckMethodTable<accounts::AccountsService>().ok())
      << CheckMethodTable<accounts::AccountsService>();
  EXPECT_TRUE(CheckMethodTable<agents::AgentsService>().ok())
      << CheckMethodTable<agents::AgentsService>();
  EXPECT_TRUE(CheckMethodTable<calls::CallsService>().ok())
      << CheckMethodTable<calls::CallsService>();
  EXPECT_TRUE(CheckMethodTable<metrics::MetricsService>().ok())
      << CheckMethodTable<metrics::MetricsService>();
  // Every public method is a workspace method, every other one internal.
  for (Access access : {Access::kWorkspace, Access::kInternal}) {
    for (const TableMethod& m : AllTableMethods(access)) {
      EXPECT_EQ(testing::IsPublic(m.method), access == Access::kWorkspace) << m.method->full_name();
    }
  }
  EXPECT_GE(AllTableMethods(Access::kWorkspace).size(), 48u);
  EXPECT_GE(AllTableMethods(Access::kInternal).size(), 14u);
}

TEST(MethodTables, CheckMethodTableNamesWhatIsWrong) {
  using calls::CallsService;
  const google::protobuf::ServiceDescriptor* calls = ServiceDescriptorOf<CallsService>();
  const absl::Span<const MethodEntry<CallsService>> table = CallsService::Methods();
  ASSERT_EQ(std::string(table[0].name), "IngestCall");

  const absl::Status missing = CheckMethodTable<CallsService>(calls, table.subspan(1));
  EXPECT_EQ(missing.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(missing.message(), "IngestCall has no entry")) << missing;

  std::vector<MethodEntry<CallsService>> twice(table.begin(), table.end());
  twice.push_back(table[1]);
  const absl::Status duplicated = CheckMethodTable<CallsService>(calls, twice);
  EXPECT_TRUE(absl::StrContains(duplicated.message(), "GetCall has 2 entries")) << duplicated;

  std::vector<MethodEntry<CallsService>> mistyped(table.begin() + 1, table.end());
  mistyped.push_back(
      Unary<&CallsService::GetCall>("IngestCall", Execution::kPool, Access::kWorkspace));
  const absl::Status wrong_types = CheckMethodTable<CallsService>(calls, mistyped);
  EXPECT_TRUE(absl::StrContains(wrong_types.message(),
                                "IngestCall's handler takes calleval.v1.GetCallRequest"))
      << wrong_types;

  const absl::Status foreign =
      CheckMethodTable<CallsService>(ServiceDescriptorOf<agents::AgentsService>(), table);
  EXPECT_TRUE(absl::StrContains(foreign.message(), "IngestCall is not an RPC of the service"))
      << foreign;
  EXPECT_TRUE(absl::StrContains(foreign.message(), "GetAgent has no entry")) << foreign;
}

TEST_F(MethodTableTest, EveryWorkspaceMethodRefusesABadKeyOverGrpcAndAtTheEdge) {
  int checked = 0;
  for (const TableMethod& m : AllTableMethods(Access::kWorkspace)) {
    auto request = testing::NewMessage(m.method->input_type());
    for (const Metadata& metadata : BadKeys()) {
      SCOPED_TRACE(absl::StrCat(
          m.method->full_name(), " with ",
          metadata.empty() ? "no metadata" : metadata[0].first + ": " + metadata[0].second));
      EXPECT_GRPC_ERROR(CallOverGrpc(m.method, *request, metadata), grpc::UNAUTHENTICATED,
                        "unauthenticated");
      // The edge forwards the Authorization header, nothing else.
      std::string authorization;
      if (!metadata.empty() && metadata[0].first == "authorization") {
        authorization = metadata[0].second;
      }
      const absl::Status at_edge = CallAtTheEdge(m.method, *request, authorization);
      EXPECT_EQ(at_edge.code(), absl::StatusCode::kUnauthenticated) << at_edge;
      EXPECT_EQ(ErrorInfoOf(at_edge).code(), "unauthenticated") << at_edge;
    }
    ++checked;
  }
  EXPECT_GE(checked, 38);
}

// The workspace a request names is checked against the key before the handler runs: the
// top-level client_id, and for the PATCH methods the one in the body when the query has none.
TEST_F(MethodTableTest, EveryWorkspaceMethodRefusesAWorkspaceTheKeyWasNotGranted) {
  int checked = 0;
  for (const TableMethod& m : AllTableMethods(Access::kWorkspace)) {
    const google::protobuf::Descriptor* type = m.method->input_type();
    std::vector<std::unique_ptr<google::protobuf::Message>> requests;
    if (const auto* client_id = type->FindFieldByName("client_id")) {
      requests.push_back(testing::NewMessage(type));
      requests.back()->GetReflection()->SetInt64(requests.back().get(), client_id,
                                                 kForeignWorkspace);
    }
    for (const char* body : {"agent", "scenario"}) {
      const google::protobuf::FieldDescriptor* field = type->FindFieldByName(body);
      if (field == nullptr || field->message_type() == nullptr) continue;
      const auto* nested = field->message_type()->FindFieldByName("client_id");
      if (nested == nullptr) continue;
      requests.push_back(testing::NewMessage(type));
      google::protobuf::Message* fields =
          requests.back()->GetReflection()->MutableMessage(requests.back().get(), field);
      fields->GetReflection()->SetInt64(fields, nested, kForeignWorkspace);
    }
    for (const auto& request : requests) {
      SCOPED_TRACE(absl::StrCat(m.method->full_name(), " ", request->ShortDebugString()));
      EXPECT_GRPC_ERROR(
          CallOverGrpc(m.method, *request, {{"authorization", testing::Bearer(key_)}}),
          grpc::PERMISSION_DENIED, "workspace_not_accessible");
      const absl::Status at_edge = CallAtTheEdge(m.method, *request, testing::Bearer(key_));
      EXPECT_EQ(at_edge.code(), absl::StatusCode::kPermissionDenied) << at_edge;
      EXPECT_EQ(ErrorInfoOf(at_edge).code(), "workspace_not_accessible") << at_edge;
      ++checked;
    }
  }
  // Every workspace method but ListLanguages and ListWorkspaces names a workspace; the two PATCHes twice.
  EXPECT_GE(checked, 38);
}

TEST_F(MethodTableTest, EveryInternalMethodNeedsTheInstallationsCredential) {
  const std::vector<Metadata> refused = {
      {},
      {{"authorization", testing::Bearer(key_)}},  // a valid API key is not the credential
      {{kInternalCredentialMetadata, "not-the-installations-credential"}},
      {{kInternalCredentialMetadata, ""}},
  };
  int checked = 0;
  for (const TableMethod& m : AllTableMethods(Access::kInternal)) {
    auto request = testing::NewMessage(m.method->input_type());
    for (const Metadata& metadata : refused) {
      SCOPED_TRACE(absl::StrCat(m.method->full_name(), " with ",
                                metadata.empty() ? "no metadata" : metadata[0].first));
      EXPECT_GRPC_ERROR(CallOverGrpc(m.method, *request, metadata), grpc::UNAUTHENTICATED,
                        "unauthenticated");
    }
    // No HTTP request carries the credential: the edge has no handler for them.
    EXPECT_FALSE(server_->direct_invoker()->DispatchOf(m.method).has_value())
        << m.method->full_name();
    ++checked;
  }
  EXPECT_GE(checked, 14);

  // The credential opens them: an empty lease, and a holder with nothing to give back.
  v1::LeaseAnalysisRequest lease;
  lease.set_lease_seconds(1);
  lease.set_max_attempts(1);
  lease.set_holder("method-table-test");
  const Metadata internal = {{kInternalCredentialMetadata, testing::kTestInternalCredential}};
  const grpc::Status leased = CallOverGrpc(
      testing::ServiceNamed(v1::Calls::service_full_name())->FindMethodByName("LeaseAnalysis"),
      lease, internal);
  EXPECT_TRUE(leased.ok()) << leased.error_message();
  v1::AuthenticateRequest authenticate;
  authenticate.set_api_key(key_);
  v1::Principal principal;
  auto context = testing::ContextWith(internal);
  ASSERT_GRPC_OK(
      v1::Accounts::NewStub(channel_)->Authenticate(context.get(), authenticate, &principal));
  EXPECT_EQ(principal.key_id(), server_->bootstrap()->key.key_id);
}

// The edge runs each workspace method as its entry says, on the pool the entry names.
TEST_F(MethodTableTest, TheEdgeRegistersEveryWorkspaceMethodAsItsEntrySays) {
  int checked = 0;
  auto expect_table = [&](const auto& table, const google::protobuf::ServiceDescriptor* service) {
    for (const auto& entry : table) {
      if (entry.access != Access::kWorkspace) continue;
      const auto dispatch =
          server_->direct_invoker()->DispatchOf(service->FindMethodByName(entry.name));
      ASSERT_TRUE(dispatch.has_value()) << entry.name;
      EXPECT_EQ(*dispatch == edge::DirectInvoker::Dispatch::kInline,
                Resolved(entry.execution) == Execution::kInline)
          << entry.name;
      ++checked;
    }
  };
  expect_table(accounts::AccountsService::Methods(),
               ServiceDescriptorOf<accounts::AccountsService>());
  expect_table(agents::AgentsService::Methods(), ServiceDescriptorOf<agents::AgentsService>());
  expect_table(calls::CallsService::Methods(), ServiceDescriptorOf<calls::CallsService>());
  expect_table(metrics::MetricsService::Methods(), ServiceDescriptorOf<metrics::MetricsService>());
  EXPECT_GE(checked, 38);
}

}  // namespace
}  // namespace calleval

#pragma once

// What the adapter suites (tests/services/*_service_test.cc) share: workspaces and keys on a
// real database, an adapter served by a real gRPC server on loopback, and unary calls made the
// way a client without generated code makes them (any method, by descriptor), so a suite can
// sweep every method of a service.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "calleval/v1/common.pb.h"
#include "common/database.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/internal_credential.h"
#include "common/method_table.h"
#include "common/schema.h"
#include "common/status_macros.h"
#include "google/api/annotations.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/rpc/status.pb.h"
#include "services/accounts/accounts_store.h"
#include "services/accounts/authenticator.h"
#include "tests/support/test_database.h"

namespace calleval::testing {

using Metadata = std::vector<std::pair<std::string, std::string>>;

// A new empty directory under the test's temporary directory.
inline std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = ::testing::TempDir() + "/" + prefix + "_XXXXXX";
  return mkdtemp(tmpl.data());
}

// Long enough for CheckInternalCredential (at least 16 printable characters).
inline constexpr char kTestInternalCredential[] = "service-tests-internal-credential";

// The workspaces and keys every adapter suite acts with.
struct Tenants {
  int64_t own = 0;      // the key's own workspace
  int64_t granted = 0;  // another workspace granted to `key`
  int64_t foreign = 0;  // a workspace `key` may not act on
  std::string key;
  int64_t key_id = 0;
  std::string foreign_key;  // a key of `foreign` only
  std::string revoked_key;  // a key of `own`, revoked before any use
};

// Marks a key revoked the way an operator does (there is no store method for it yet).
inline absl::Status RevokeKey(db::Database& db, int64_t key_id) {
  return db.Write([key_id](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(db::Statement stmt,
                     c.Prepare("UPDATE api_keys SET revoked_at = ? WHERE id = ?"));
    stmt.Bind(1, "2026-01-01T00:00:00Z").Bind(2, key_id);
    RETURN_IF_ERROR(stmt.Run());
    if (c.Changes() != 1) return absl::InternalError("no key to revoke");
    return absl::OkStatus();
  });
}

inline absl::StatusOr<Tenants> CreateTenants(db::Database& db, int64_t credits = 100000) {
  accounts::AccountsStore store(&db);
  Tenants t;
  ASSIGN_OR_RETURN(accounts::Workspace own, store.CreateWorkspace("own", credits));
  ASSIGN_OR_RETURN(accounts::Workspace granted, store.CreateWorkspace("granted", credits));
  ASSIGN_OR_RETURN(accounts::Workspace foreign, store.CreateWorkspace("foreign", credits));
  t.own = own.id;
  t.granted = granted.id;
  t.foreign = foreign.id;
  ASSIGN_OR_RETURN(accounts::CreatedKey key, store.CreateKey(own.id, {granted.id}));
  t.key = key.api_key;
  t.key_id = key.key_id;
  ASSIGN_OR_RETURN(accounts::CreatedKey foreign_key, store.CreateKey(foreign.id, {}));
  t.foreign_key = foreign_key.api_key;
  ASSIGN_OR_RETURN(accounts::CreatedKey revoked, store.CreateKey(own.id, {}));
  t.revoked_key = revoked.api_key;
  RETURN_IF_ERROR(RevokeKey(db, revoked.key_id));
  return t;
}

inline std::string Bearer(const std::string& key) { return "Bearer " + key; }

// Authorization values that must all be refused with UNAUTHENTICATED.
inline std::vector<Metadata> UnauthenticatedMetadata(const Tenants& t) {
  return {
      {},                       // no header at all
      {{"authorization", ""}},  // an empty one
      {{"authorization", Bearer("cev_notakeyofthisinstallation000000")}},
      {{"authorization", Bearer(t.revoked_key)}},                // revoked
      {{"authorization", "Basic " + t.key}},                     // the right key, the wrong scheme
      {{"authorization", t.key}},                                // no scheme
      {{kInternalCredentialMetadata, kTestInternalCredential}},  // not an API key
  };
}

// A gRPC server on 127.0.0.1 with an ephemeral port, serving `services`.
class TestGrpcServer {
 public:
  static std::unique_ptr<TestGrpcServer> Start(const std::vector<grpc::Service*>& services) {
    return StartOwning(services, {});
  }

  // Serves each of `services` from its method table (common/method_table.h), as Server does.
  template <typename... Services>
  static std::unique_ptr<TestGrpcServer> Serve(Services*... services) {
    std::vector<std::unique_ptr<grpc::Service>> adapters;
    (adapters.push_back(std::make_unique<GrpcTableService<Services>>(services)), ...);
    std::vector<grpc::Service*> registered;
    for (const auto& adapter : adapters) registered.push_back(adapter.get());
    return StartOwning(registered, std::move(adapters));
  }

  ~TestGrpcServer() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  TestGrpcServer() = default;
  static std::unique_ptr<TestGrpcServer> StartOwning(
      const std::vector<grpc::Service*>& services,
      std::vector<std::unique_ptr<grpc::Service>> owned) {
    auto server = std::unique_ptr<TestGrpcServer>(new TestGrpcServer());
    server->owned_ = std::move(owned);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &server->port_);
    for (grpc::Service* service : services) builder.RegisterService(service);
    server->server_ = builder.BuildAndStart();
    if (server->server_ == nullptr || server->port_ == 0) return nullptr;
    server->channel_ = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
    return server;
  }

  int port_ = 0;
  std::vector<std::unique_ptr<grpc::Service>> owned_;  // outlives server_
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

// Calls method `name` of `service` in process, the way the edge does
// (DirectInvoker::RegisterTable): admitted by AdmitAndRun with the Authorization header alone.
template <typename Service>
absl::Status CallInProcess(Service& service, absl::string_view name,
                           const std::string& authorization,
                           const google::protobuf::Message& request,
                           google::protobuf::Message* response) {
  for (const MethodEntry<Service>& entry : Service::Methods()) {
    if (name != entry.name) continue;
    return AdmitAndRun(service, entry, Caller{authorization, std::nullopt}, request, response);
  }
  return absl::NotFoundError(absl::StrCat("no method ", name, " in the table"));
}

// A client context with a deadline and `metadata`.
inline std::unique_ptr<grpc::ClientContext> ContextWith(const Metadata& metadata) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  for (const auto& [key, value] : metadata) context->AddMetadata(key, value);
  return context;
}

inline std::unique_ptr<grpc::ClientContext> ContextWithKey(const std::string& key) {
  return ContextWith({{"authorization", Bearer(key)}});
}

inline std::unique_ptr<grpc::ClientContext> InternalContext() {
  return ContextWith({{kInternalCredentialMetadata, kTestInternalCredential}});
}

// One unary call of `method` by its path, with generated request and response types.
inline grpc::Status CallMethod(const std::shared_ptr<grpc::Channel>& channel,
                               const google::protobuf::MethodDescriptor* method,
                               const google::protobuf::Message& request,
                               google::protobuf::Message* response, const Metadata& metadata) {
  grpc::TemplatedGenericStub<google::protobuf::Message, google::protobuf::Message> stub(channel);
  std::unique_ptr<grpc::ClientContext> context = ContextWith(metadata);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status result;
  stub.UnaryCall(context.get(),
                 absl::StrCat("/", method->service()->full_name(), "/", method->name()),
                 grpc::StubOptions(), &request, response, [&](grpc::Status status) {
                   std::lock_guard<std::mutex> lock(mu);
                   result = std::move(status);
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return result;
}

// A default request and response of `method`'s generated types.
inline std::unique_ptr<google::protobuf::Message> NewMessage(
    const google::protobuf::Descriptor* type) {
  return std::unique_ptr<google::protobuf::Message>(
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(type)->New());
}

// A service of the generated pool by full name ("calleval.v1.Calls").
inline const google::protobuf::ServiceDescriptor* ServiceNamed(const char* full_name) {
  return google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(full_name);
}

inline bool IsPublic(const google::protobuf::MethodDescriptor* method) {
  return method->options().HasExtension(google::api::http);
}

// The status as the edge sees it after the hop (code, message and the ErrorInfo detail).
inline absl::Status Received(const grpc::Status& status) { return FromGrpcStatus(status); }

// The ErrorInfo the status carries in its binary details (a google.rpc.Status with the ErrorInfo
// packed as an Any): what the edge turns into the JSON error body. Without one (no `code`), the
// edge could only guess the error code from the status code.
inline v1::ErrorInfo WireErrorInfo(const grpc::Status& status) {
  google::rpc::Status details;
  v1::ErrorInfo info;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return info;
  }
  for (const google::protobuf::Any& any : details.details()) {
    if (any.UnpackTo(&info)) return info;
  }
  return info;
}

// Expects `status` to fail with `grpc_code` and to carry an ErrorInfo detail with `error_code`.
#define EXPECT_GRPC_ERROR(status, expected_grpc_code, expected_error_code)                      \
  do {                                                                                          \
    const grpc::Status expect_status_ = (status);                                               \
    EXPECT_EQ(expect_status_.error_code(), (expected_grpc_code))                                \
        << expect_status_.error_message();                                                      \
    EXPECT_EQ(::calleval::testing::WireErrorInfo(expect_status_).code(), (expected_error_code)) \
        << expect_status_.error_message();                                                      \
  } while (0)

#define ASSERT_GRPC_OK(status)                                                    \
  do {                                                                            \
    const grpc::Status assert_status_ = (status);                                 \
    ASSERT_TRUE(assert_status_.ok())                                              \
        << assert_status_.error_code() << ": " << assert_status_.error_message(); \
  } while (0)

// The same failure, as an absl::Status from an in-process call (CallInProcess) and as a gRPC
// status.
inline void ExpectSameOutcome(const absl::Status& direct, const grpc::Status& remote) {
  const absl::Status received = Received(remote);
  EXPECT_EQ(direct.code(), received.code()) << direct << " vs " << received;
  EXPECT_EQ(direct.message(), received.message());
  EXPECT_EQ(ErrorInfoOf(direct).SerializeAsString(), ErrorInfoOf(received).SerializeAsString())
      << direct << " vs " << received;
}

// Calls every public method (one with an HTTP route) of `service` with an empty request and each
// of UnauthenticatedMetadata(): all must fail UNAUTHENTICATED with the ErrorInfo the edge
// answers 401 with. Returns the names of the methods checked.
inline std::vector<std::string> ExpectPublicMethodsRefuseUnauthenticated(
    const std::shared_ptr<grpc::Channel>& channel,
    const google::protobuf::ServiceDescriptor* service, const Tenants& tenants) {
  std::vector<std::string> checked;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* method = service->method(i);
    if (!IsPublic(method)) continue;
    checked.push_back(method->name());
    for (const Metadata& metadata : UnauthenticatedMetadata(tenants)) {
      auto request = NewMessage(method->input_type());
      auto response = NewMessage(method->output_type());
      const grpc::Status status = CallMethod(channel, method, *request, response.get(), metadata);
      SCOPED_TRACE(absl::StrCat(method->full_name(), " with ",
                                metadata.empty() ? "no metadata" : metadata[0].second));
      EXPECT_GRPC_ERROR(status, grpc::UNAUTHENTICATED, "unauthenticated");
    }
  }
  return checked;
}

// Calls every public method of `service` whose request has a top-level client_id with a valid
// key and the client_id of a workspace the key was not granted: all must fail
// PERMISSION_DENIED workspace_not_accessible (403), before anything is read or written. Returns
// the names of the public methods whose request has no client_id.
inline std::vector<std::string> ExpectPublicMethodsRefuseForeignWorkspace(
    const std::shared_ptr<grpc::Channel>& channel,
    const google::protobuf::ServiceDescriptor* service, const Tenants& tenants) {
  std::vector<std::string> without_client_id;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* method = service->method(i);
    if (!IsPublic(method)) continue;
    auto request = NewMessage(method->input_type());
    const google::protobuf::FieldDescriptor* client_id =
        method->input_type()->FindFieldByName("client_id");
    if (client_id == nullptr) {
      without_client_id.push_back(method->name());
      continue;
    }
    request->GetReflection()->SetInt64(request.get(), client_id, tenants.foreign);
    auto response = NewMessage(method->output_type());
    const grpc::Status status = CallMethod(channel, method, *request, response.get(),
                                           {{"authorization", Bearer(tenants.key)}});
    SCOPED_TRACE(method->full_name());
    EXPECT_GRPC_ERROR(status, grpc::PERMISSION_DENIED, "workspace_not_accessible");
  }
  return without_client_id;
}

// The base of each adapter suite, on a SQLite file and on PostgreSQL: a fresh database with the
// schema, the tenants, and the authenticator the server uses (over the real accounts store).
// Suites declare their adapter before their TestGrpcServer, so the server shuts down first.
class ServiceTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    auto database = TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    auto tenants = CreateTenants(*db());
    ASSERT_TRUE(tenants.ok()) << tenants.status();
    tenants_ = *std::move(tenants);
    accounts_store_ = std::make_unique<accounts::AccountsStore>(db());
    authenticator_ = accounts::NewStoreAuthenticator(accounts_store_.get());
  }

  db::Database* db() const { return database_->db(); }
  std::string key_header() const { return Bearer(tenants_.key); }

  std::unique_ptr<TestDatabase> database_;
  Tenants tenants_;
  std::unique_ptr<accounts::AccountsStore> accounts_store_;
  std::unique_ptr<accounts::Authenticator> authenticator_;
};

}  // namespace calleval::testing

// The gRPC face of the server, as internal services, grpcurl and Kubernetes probes use it.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "cmd/calleval/server.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "common/internal_credential.h"
#include "google/api/annotations.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpc/reflection/v1/reflection.pb.h"
#include "services/accounts/authenticator.h"
#include "tests/integration/test_server.h"

namespace calleval {
namespace {

using Metadata = std::vector<std::pair<std::string, std::string>>;
namespace rv1 = grpc::reflection::v1;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Builds `files` into `pool`, each after the files it imports, as a reflection client does.
void BuildPool(const rv1::FileDescriptorResponse& files, google::protobuf::DescriptorPool* pool) {
  std::vector<google::protobuf::FileDescriptorProto> pending;
  for (const std::string& bytes : files.file_descriptor_proto()) {
    pending.emplace_back();
    ASSERT_TRUE(pending.back().ParseFromString(bytes));
  }
  while (!pending.empty()) {
    const size_t before = pending.size();
    for (auto it = pending.begin(); it != pending.end();) {
      bool ready = true;
      for (const std::string& dependency : it->dependency()) {
        ready = ready && pool->FindFileByName(dependency) != nullptr;
      }
      if (!ready) {
        ++it;
        continue;
      }
      ASSERT_NE(pool->BuildFile(*it), nullptr) << it->name();
      it = pending.erase(it);
    }
    ASSERT_LT(pending.size(), before) << "an import is missing from the response";
  }
}

class GrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("grpc");
    Start(testing::TestServerConfig(dir_));
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start(const ServerConfig& config) {
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    key_ = server_->bootstrap()->key.api_key;
    channel_ = grpc::CreateChannel(GrpcAddress(), grpc::InsecureChannelCredentials());
  }

  std::string GrpcAddress() const { return absl::StrCat("127.0.0.1:", server_->grpc_port()); }

  void Authorize(grpc::ClientContext* context) {
    context->AddMetadata("authorization", "Bearer " + key_);
  }

  // One unary call by method path, as a client without generated code makes it.
  grpc::Status Call(const std::string& path, const google::protobuf::Message& request,
                    google::protobuf::Message* response, const Metadata& metadata = {}) {
    grpc::TemplatedGenericStub<google::protobuf::Message, google::protobuf::Message> stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status result;
    stub.UnaryCall(&context, path, grpc::StubOptions(), &request, response,
                   [&](grpc::Status status) {
                     std::lock_guard<std::mutex> lock(mu);
                     result = status;
                     done = true;
                     cv.notify_one();
                   });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return result;
  }

  // One request on a ServerReflectionInfo stream of `version` ("v1" or "v1alpha": the same
  // messages under two packages).
  rv1::ServerReflectionResponse Reflect(const std::string& version,
                                        const rv1::ServerReflectionRequest& request) {
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    auto next = [&cq]() {
      void* tag = nullptr;
      bool ok = false;
      EXPECT_TRUE(cq.Next(&tag, &ok));
      return ok;
    };
    auto stream = stub.PrepareCall(
        &context,
        absl::StrCat("/grpc.reflection.", version, ".ServerReflection/ServerReflectionInfo"), &cq);
    stream->StartCall(nullptr);
    EXPECT_TRUE(next());
    std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    grpc::ByteBuffer out(&slice, 1);
    stream->Write(out, nullptr);
    EXPECT_TRUE(next());
    stream->WritesDone(nullptr);
    EXPECT_TRUE(next());
    grpc::ByteBuffer in;
    stream->Read(&in, nullptr);
    EXPECT_TRUE(next());
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(in.Dump(&slices).ok());
    std::string received;
    for (const auto& s : slices) {
      received.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    rv1::ServerReflectionResponse response;
    EXPECT_TRUE(response.ParseFromString(received));
    grpc::Status status;
    stream->Finish(&status, nullptr);
    next();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  std::string InternalCredential() const {
    return std::string(absl::StripAsciiWhitespace(ReadFile(dir_ + "/internal-credential")));
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  std::string key_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcTest, CallsOverGrpcWithBearerMetadata) {
  auto agents = v1::Agents::NewStub(channel_);
  auto calls = v1::Calls::NewStub(channel_);
  v1::AgentFields fields;
  fields.set_name("grpc agent");
  fields.set_phone_number("+14155550123");
  fields.set_language_id(1);
  fields.set_instructions("Help.");
  v1::Agent agent;
  {
    grpc::ClientContext context;
    Authorize(&context);
    grpc::Status status = agents->CreateAgent(&context, fields, &agent);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  v1::IngestCallRequest ingest;
  ingest.set_call_identifier("grpc-1");
  ingest.set_agent_id(agent.id());
  auto* turn = ingest.add_transcript();
  turn->set_role("User");
  turn->set_content("hello");
  v1::Call call;
  {
    grpc::ClientContext context;
    Authorize(&context);
    grpc::Status status = calls->IngestCall(&context, ingest, &call);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(call.analysis_status(), "pending");
    EXPECT_EQ(call.transcription_status(), "completed");
  }
  {
    // The same identifier again: ALREADY_EXISTS with the ErrorInfo detail.
    grpc::ClientContext context;
    Authorize(&context);
    v1::Call again;
    absl::Status status = FromGrpcStatus(calls->IngestCall(&context, ingest, &again));
    EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
    EXPECT_EQ(ErrorInfoOf(status).details(0).field(), "call_identifier");
  }
  {
    grpc::ClientContext context;
    v1::GetCallRequest get;
    get.set_call_identifier_or_id("grpc-1");
    v1::Call read;
    EXPECT_EQ(calls->GetCall(&context, get, &read).error_code(), grpc::UNAUTHENTICATED);
  }
}

// Code runs reached over gRPC (a metrics role in its own process) share the bounded sandbox
// pool: with one thread and one queue slot full, the next run is shed as UNAVAILABLE
// "overloaded" (503 with Retry-After at the edge) instead of waiting.
TEST_F(GrpcTest, SaturatedSandboxPoolShedsCodeRunsOverGrpc) {
  server_.reset();
  std::filesystem::remove_all(dir_);  // a fresh installation, with its bootstrap key
  dir_ = testing::MakeTempDir("grpc-pool");
  ServerConfig config = testing::TestServerConfig(dir_);
  config.sandbox_pool_threads = 1;
  config.sandbox_pool_queue = 1;
  Start(config);
  auto agents = v1::Agents::NewStub(channel_);
  auto calls = v1::Calls::NewStub(channel_);
  v1::AgentFields fields;
  fields.set_name("pool agent");
  fields.set_phone_number("+14155550123");
  fields.set_language_id(1);
  fields.set_instructions("Help.");
  v1::Agent agent;
  {
    grpc::ClientContext context;
    Authorize(&context);
    ASSERT_TRUE(agents->CreateAgent(&context, fields, &agent).ok());
  }
  v1::IngestCallRequest ingest;
  ingest.set_call_identifier("pool-1");
  ingest.set_agent_id(agent.id());
  ingest.add_transcript()->set_role("User");
  v1::Call call;
  {
    grpc::ClientContext context;
    Authorize(&context);
    ASSERT_TRUE(calls->IngestCall(&context, ingest, &call).ok());
  }
  v1::TestCodeRequest slow;
  slow.mutable_body()->set_code("import time\ntime.sleep(3)\nmetric['result'] = True");
  slow.mutable_body()->set_call_observation_id(call.id());
  constexpr int kRuns = 4;
  std::vector<grpc::Status> statuses(kRuns);
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i) {
    runs.emplace_back([&, i] {
      auto metrics = v1::Metrics::NewStub(channel_);
      grpc::ClientContext context;
      Authorize(&context);
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::TestCodeResponse response;
      statuses[i] = metrics->TestCode(&context, slow, &response);
    });
  }
  for (std::thread& run : runs) run.join();
  int ran = 0, shed = 0;
  for (const grpc::Status& status : statuses) {
    if (status.ok()) {
      ++ran;
      continue;
    }
    ++shed;
    EXPECT_EQ(status.error_code(), grpc::UNAVAILABLE) << status.error_message();
    EXPECT_EQ(ErrorInfoOf(FromGrpcStatus(status)).code(), "overloaded");
  }
  EXPECT_GE(ran, 1);
  EXPECT_LE(ran, 2);  // the pool's thread and its one queue slot
  EXPECT_GE(shed, kRuns - 2);
}

// grpc-status-details-bin is a google.rpc.Status of the call's code and message with the
// ErrorInfo as an Any, which grpc-go (grpcurl) and every other gRPC library read.
TEST_F(GrpcTest, ErrorDetailsAreAGoogleRpcStatus) {
  auto calls = v1::Calls::NewStub(channel_);
  grpc::ClientContext context;
  Authorize(&context);
  v1::GetCallRequest get;
  get.set_call_identifier_or_id("no-such-call");
  v1::Call read;
  grpc::Status status = calls->GetCall(&context, get, &read);
  ASSERT_EQ(status.error_code(), grpc::NOT_FOUND);
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(status.error_details()));
  EXPECT_EQ(details.code(), grpc::NOT_FOUND);
  EXPECT_EQ(details.message(), status.error_message());
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/calleval.v1.ErrorInfo");
  v1::ErrorInfo info;
  ASSERT_TRUE(details.details(0).UnpackTo(&info));
  EXPECT_EQ(info.code(), "not_found");
  // And back: the edge's JSON error body comes from this.
  absl::Status back = FromGrpcStatus(status);
  EXPECT_EQ(back.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorInfoOf(back).code(), "not_found");
}

TEST_F(GrpcTest, HealthPerServiceName) {
  for (const std::string service : {"", "calleval.v1.Accounts", "calleval.v1.Agents",
                                    "calleval.v1.Calls", "calleval.v1.Metrics"}) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = Call("/grpc.health.v1.Health/Check", request, &response);
    ASSERT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("calleval.v1.Nothing");
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_EQ(Call("/grpc.health.v1.Health/Check", request, &response).error_code(), grpc::NOT_FOUND);
}

TEST(GrpcSplitHealthTest, OnlyTheServicesOfTheProcessAreKnown) {
  const std::string dir = testing::MakeTempDir("grpc_health");
  ServerConfig config = testing::TestServerConfig(dir);
  config.roles = {"calls"};
  auto server = Server::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto check = [&](const std::string& service, grpc::health::v1::HealthCheckResponse* response) {
    grpc::GenericStub stub(channel);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::ClientContext context;
    std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    grpc::ByteBuffer in(&slice, 1), out;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status result;
    stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &in, &out,
                   [&](grpc::Status status) {
                     std::lock_guard<std::mutex> lock(mu);
                     result = status;
                     done = true;
                     cv.notify_one();
                   });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    std::vector<grpc::Slice> slices;
    if (result.ok() && out.Dump(&slices).ok()) {
      std::string received;
      for (const auto& s : slices) {
        received.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      response->ParseFromString(received);
    }
    return result.error_code();
  };
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_EQ(check("calleval.v1.Calls", &response), grpc::OK);
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(check("", &response), grpc::OK);
  EXPECT_EQ(check("calleval.v1.Agents", &response), grpc::NOT_FOUND);
  EXPECT_EQ(check("calleval.v1.Accounts", &response), grpc::NOT_FOUND);
  server->reset();
  std::filesystem::remove_all(dir);
}

TEST_F(GrpcTest, ReflectionV1AndV1AlphaListAndDescribeEveryService) {
  const std::set<std::string> expected = {"calleval.v1.Accounts",
                                          "calleval.v1.Agents",
                                          "calleval.v1.Calls",
                                          "calleval.v1.Metrics",
                                          "grpc.health.v1.Health",
                                          "grpc.reflection.v1.ServerReflection",
                                          "grpc.reflection.v1alpha.ServerReflection"};
  for (const std::string version : {"v1", "v1alpha"}) {
    rv1::ServerReflectionRequest list;
    list.set_list_services("*");
    const rv1::ServerReflectionResponse listed = Reflect(version, list);
    std::set<std::string> names;
    for (const auto& s : listed.list_services_response().service()) {
      names.insert(s.name());
    }
    EXPECT_EQ(names, expected) << version;
    for (const std::string& name : expected) {
      rv1::ServerReflectionRequest describe;
      describe.set_file_containing_symbol(name);
      rv1::ServerReflectionResponse response = Reflect(version, describe);
      ASSERT_FALSE(response.has_error_response())
          << version << " " << name << ": " << response.error_response().error_message();
      // The defining file and its imports: enough for a client to build a pool with the service.
      google::protobuf::DescriptorPool pool;
      BuildPool(response.file_descriptor_response(), &pool);
      EXPECT_NE(pool.FindServiceByName(name), nullptr) << version << " " << name;
    }
  }
  rv1::ServerReflectionRequest unknown;
  unknown.set_file_containing_symbol("calleval.v1.Nothing");
  EXPECT_EQ(Reflect("v1", unknown).error_response().error_code(), grpc::NOT_FOUND);
  rv1::ServerReflectionRequest by_name;
  by_name.set_file_by_filename("grpc/health/v1/health.proto");
  EXPECT_EQ(Reflect("v1", by_name).file_descriptor_response().file_descriptor_proto_size(), 1);
}

TEST_F(GrpcTest, InternalMethodsNeedTheInternalCredential) {
  const std::string credential = InternalCredential();
  ASSERT_EQ(credential.size(), 64u);  // 32 random bytes in hex
  EXPECT_EQ(std::filesystem::status(dir_ + "/internal-credential").permissions() &
                (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
  const std::string bearer = "Bearer " + key_;
  v1::LeaseAnalysisRequest lease;
  lease.set_lease_seconds(60);
  lease.set_max_attempts(3);
  v1::AuthenticateRequest authenticate;
  authenticate.set_api_key(key_);
  for (const Metadata& metadata :
       {Metadata{}, Metadata{{"authorization", bearer}},
        Metadata{{kInternalCredentialMetadata, "not-the-installation-credential"}},
        Metadata{{kInternalCredentialMetadata, credential + "0"}},
        Metadata{{kInternalCredentialMetadata, credential.substr(1)}}}) {
    v1::LeaseAnalysisResponse leased;
    EXPECT_EQ(Call("/calleval.v1.Calls/LeaseAnalysis", lease, &leased, metadata).error_code(),
              grpc::UNAUTHENTICATED);
    v1::Principal principal;
    EXPECT_EQ(
        Call("/calleval.v1.Accounts/Authenticate", authenticate, &principal, metadata).error_code(),
        grpc::UNAUTHENTICATED);
  }
  v1::LeaseAnalysisResponse leased;
  grpc::Status status = Call("/calleval.v1.Calls/LeaseAnalysis", lease, &leased,
                             {{kInternalCredentialMetadata, credential}});
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(leased.has_job());  // nothing ingested
  v1::Principal principal;
  status = Call("/calleval.v1.Accounts/Authenticate", authenticate, &principal,
                {{kInternalCredentialMetadata, credential}});
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(principal.workspace_id(), server_->bootstrap()->workspace.id);
  // Public methods keep the API-key rule: the internal credential is not a key.
  v1::GetCurrentWorkspaceRequest current;
  v1::Workspace workspace;
  EXPECT_EQ(Call("/calleval.v1.Accounts/GetCurrentWorkspace", current, &workspace,
                 {{kInternalCredentialMetadata, credential}})
                .error_code(),
            grpc::UNAUTHENTICATED);
  EXPECT_TRUE(Call("/calleval.v1.Accounts/GetCurrentWorkspace", current, &workspace,
                   {{"authorization", bearer}})
                  .ok());
}

// Every method without an HTTP route is internal, so none may answer without the credential
// (a new queue method that forgot the check fails here).
TEST_F(GrpcTest, EveryMethodWithoutAnHttpRouteIsClosed) {
  google::protobuf::DynamicMessageFactory factory;
  int internal = 0;
  for (const google::protobuf::ServiceDescriptor* service :
       {v1::Workspace::descriptor()->file()->FindServiceByName("Accounts"),
        v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
        v1::Call::descriptor()->file()->FindServiceByName("Calls"),
        v1::Metric::descriptor()->file()->FindServiceByName("Metrics")}) {
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* method = service->method(i);
      if (method->options().HasExtension(google::api::http)) continue;
      ++internal;
      std::unique_ptr<google::protobuf::Message> request(
          factory.GetPrototype(method->input_type())->New());
      std::unique_ptr<google::protobuf::Message> response(
          factory.GetPrototype(method->output_type())->New());
      const std::string path = absl::StrCat("/", service->full_name(), "/", method->name());
      EXPECT_EQ(
          Call(path, *request, response.get(), {{"authorization", "Bearer " + key_}}).error_code(),
          grpc::UNAUTHENTICATED)
          << path;
    }
  }
  // 5 analysis queue, 5 transcription queue (each with its lease renewal),
  // ReleaseHolderLeases, the edge's GetRecordingLocation, the runs workers' IngestRunCall and
  // GetWorkspaceCall, the batch comparisons' GetCallFigures; Authenticate, ReserveCredits,
  // RefundCredits; the Agents service's six directory methods, the calls service's GetCallAgent and
  // CountRuns, the runs workers' GetRunScenario, GetRunAgent, GetAgentWebChannel, GetRunIntegration
  // and the run queue's six (LeaseRun, RenewRunLease, SetRunCall, FinishRun, ReleaseRun,
  // ReleaseRunLeasesOf), the edge's HandlePlatformEvent; the Metrics service's ExistingMetrics,
  // AgentDeleted, ScenarioDeleted, GetIngestCatalog and GetMetricDefinitions.
  EXPECT_EQ(internal, 42);
}

// The clients one role has of another send the credential: the remote authenticator here.
TEST_F(GrpcTest, InternalChannelsSendTheCredential) {
  auto right =
      accounts::NewGrpcAuthenticator(CreateInternalChannel(GrpcAddress(), InternalCredential()));
  absl::StatusOr<accounts::Principal> principal = right->Authenticate("Bearer " + key_);
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->workspace_id, server_->bootstrap()->workspace.id);
  auto wrong = accounts::NewGrpcAuthenticator(
      CreateInternalChannel(GrpcAddress(), "another-installation-credential"));
  EXPECT_EQ(wrong->Authenticate("Bearer " + key_).status().code(),
            absl::StatusCode::kUnauthenticated);
  auto none = accounts::NewGrpcAuthenticator(channel_);
  EXPECT_EQ(none->Authenticate("Bearer " + key_).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// --internal-credential-file: the file's secret, trimmed; no file is made in the data dir.
TEST(GrpcCredentialFileTest, FlagNamesTheCredential) {
  const std::string dir = testing::MakeTempDir("grpc_credential");
  const std::string secrets = testing::MakeTempDir("grpc_secret");
  ServerConfig config = testing::TestServerConfig(dir);
  config.internal_credential_file = secrets + "/credential";
  {
    std::ofstream(config.internal_credential_file) << "too-short\n";
    auto server = Server::Start(config);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    std::ofstream(config.internal_credential_file) << "a-mounted-kubernetes-secret-0123\n";
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_FALSE(std::filesystem::exists(dir + "/internal-credential"));
    const std::string address = absl::StrCat("127.0.0.1:", (*server)->grpc_port());
    auto right = accounts::NewGrpcAuthenticator(
        CreateInternalChannel(address, "a-mounted-kubernetes-secret-0123"));
    const std::string bearer = "Bearer " + (*server)->bootstrap()->key.api_key;
    EXPECT_TRUE(right->Authenticate(bearer).ok());
    auto wrong = accounts::NewGrpcAuthenticator(
        CreateInternalChannel(address, "a-mounted-kubernetes-secret-0124"));
    EXPECT_EQ(wrong->Authenticate(bearer).status().code(), absl::StatusCode::kUnauthenticated);
  }
  std::filesystem::remove(config.internal_credential_file);
  EXPECT_EQ(Server::Start(config).status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(secrets);
}

}  // namespace
}  // namespace calleval

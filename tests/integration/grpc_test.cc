// The gRPC face of the server, as internal services, grpcurl and Kubernetes probes use it.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "cmd/calleval/server.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpc/reflection/v1/reflection.pb.h"
#include "tests/integration/test_server.h"

namespace calleval {
namespace {

using Metadata = std::vector<std::pair<std::string, std::string>>;
namespace rv1 = grpc::reflection::v1;

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

}  // namespace
}  // namespace calleval

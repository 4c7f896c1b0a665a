// The gRPC face of the server, as internal services, grpcurl and Kubernetes probes use it.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "cmd/calleval/server.h"
#include "common/errors.h"
#include "common/grpc_status.h"
#include "grpc_probe.pb.h"
#include "tests/integration/test_server.h"

namespace calleval {
namespace {

class GrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("grpc");
    ServerConfig config = testing::TestServerConfig(dir_);
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    key_ = server_->bootstrap()->key.api_key;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Authorize(grpc::ClientContext* context) {
    context->AddMetadata("authorization", "Bearer " + key_);
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

TEST_F(GrpcTest, HealthServiceServing) {
  grpc::TemplatedGenericStub<google::protobuf::Message, google::protobuf::Message> stub(channel_);
  testing::HealthCheckRequest request;
  testing::HealthCheckResponse response;
  grpc::ClientContext context;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status result;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status status) {
                   std::lock_guard<std::mutex> lock(mu);
                   result = status;
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  ASSERT_TRUE(result.ok()) << result.error_message();
  EXPECT_EQ(response.status(), 1);  // SERVING
}

TEST_F(GrpcTest, ReflectionListsTheServices) {
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
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  stream->StartCall(nullptr);
  ASSERT_TRUE(next());
  testing::ServerReflectionRequest request;
  request.set_list_services("*");
  std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer out(&slice, 1);
  stream->Write(out, nullptr);
  ASSERT_TRUE(next());
  stream->WritesDone(nullptr);
  ASSERT_TRUE(next());
  grpc::ByteBuffer in;
  stream->Read(&in, nullptr);
  ASSERT_TRUE(next());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string received;
  for (const auto& s : slices) received.append(reinterpret_cast<const char*>(s.begin()), s.size());
  testing::ServerReflectionResponse response;
  ASSERT_TRUE(response.ParseFromString(received));
  std::set<std::string> names;
  for (const auto& s : response.list_services_response().service()) names.insert(s.name());
  EXPECT_TRUE(names.count("calleval.v1.Calls"));
  EXPECT_TRUE(names.count("calleval.v1.Agents"));
  EXPECT_TRUE(names.count("calleval.v1.Accounts"));
  EXPECT_TRUE(names.count("grpc.health.v1.Health"));
  grpc::Status status;
  stream->Finish(&status, nullptr);
  next();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace calleval

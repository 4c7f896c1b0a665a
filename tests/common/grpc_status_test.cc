// absl::Status <-> grpc::Status: ErrorInfo travels inside a google.rpc.Status.

#include "common/grpc_status.h"

#include <gtest/gtest.h>

#include "calleval/v1/common.pb.h"
#include "common/errors.h"
#include "google/rpc/status.pb.h"

namespace calleval {
namespace {

TEST(GrpcStatusTest, ErrorInfoTravelsAsAnAnyInAGoogleRpcStatus) {
  absl::Status error = FieldError("agent_id", "no agent 7");
  grpc::Status wire = ToGrpcStatus(error);
  EXPECT_EQ(wire.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(wire.error_message(), error.message());
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(wire.error_details()));
  EXPECT_EQ(details.code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(details.message(), error.message());
  ASSERT_EQ(details.details_size(), 1);
  v1::ErrorInfo info;
  ASSERT_TRUE(details.details(0).UnpackTo(&info));
  EXPECT_EQ(info.details(0).field(), "agent_id");

  absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(back.message(), error.message());
  EXPECT_EQ(ErrorInfoOf(back).SerializeAsString(), ErrorInfoOf(error).SerializeAsString());
}

TEST(GrpcStatusTest, StatusWithoutErrorInfoSendsNoDetails) {
  grpc::Status wire = ToGrpcStatus(absl::UnavailableError("starting"));
  EXPECT_EQ(wire.error_code(), grpc::UNAVAILABLE);
  EXPECT_TRUE(wire.error_details().empty());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(GrpcStatusTest, ReadsTheBareErrorInfoOfOlderPeers) {
  v1::ErrorInfo info;
  info.set_code("call_exists");
  grpc::Status wire(grpc::ALREADY_EXISTS, "exists", info.SerializeAsString());
  absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrorInfoOf(back).code(), "call_exists");
}

TEST(GrpcStatusTest, ForeignDetailsAreDroppedKeepingCodeAndMessage) {
  // Another server's google.rpc.Status with a detail type we do not know.
  google::rpc::Status other;
  other.set_code(grpc::NOT_FOUND);
  other.set_message("gone");
  other.add_details()->set_type_url("type.googleapis.com/google.rpc.DebugInfo");
  for (const std::string& details : {other.SerializeAsString(), std::string("\xff\xff garbage")}) {
    absl::Status back = FromGrpcStatus(grpc::Status(grpc::NOT_FOUND, "gone", details));
    EXPECT_EQ(back.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(back.message(), "gone");
    EXPECT_FALSE(back.GetPayload(kErrorInfoTypeUrl).has_value());
    EXPECT_EQ(ErrorInfoOf(back).code(), "not_found");  // derived from the code
  }
}

}  // namespace
}  // namespace calleval

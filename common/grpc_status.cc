#include "common/grpc_status.h"

#include <string>

#include "absl/strings/cord.h"
#include "calleval/v1/common.pb.h"
#include "common/errors.h"
#include "google/protobuf/any.pb.h"
#include "google/rpc/status.pb.h"

namespace calleval {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string details;
  if (auto payload = status.GetPayload(kErrorInfoTypeUrl)) {
    google::rpc::Status rpc_status;
    rpc_status.set_code(static_cast<int>(status.code()));
    rpc_status.set_message(std::string(status.message()));
    google::protobuf::Any* any = rpc_status.add_details();
    any->set_type_url(std::string(kErrorInfoTypeUrl));
    any->set_value(std::string(*payload));
    details = rpc_status.SerializeAsString();
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      std::move(details));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  const std::string& details = status.error_details();
  if (details.empty()) return out;
  // A google.rpc.Status says the call's code; bare ErrorInfo bytes parse as one with code 0
  // (its string field 1 lands in the unknown fields), so the code tells them apart.
  google::rpc::Status rpc_status;
  if (rpc_status.ParseFromString(details) && rpc_status.code() == status.error_code()) {
    for (const google::protobuf::Any& any : rpc_status.details()) {
      if (any.type_url() == kErrorInfoTypeUrl) {
        out.SetPayload(kErrorInfoTypeUrl, absl::Cord(any.value()));
        break;
      }
    }
    return out;
  }
  v1::ErrorInfo legacy;
  if (legacy.ParseFromString(details) && !legacy.code().empty()) {
    out.SetPayload(kErrorInfoTypeUrl, absl::Cord(details));
  }
  return out;
}

}  // namespace calleval

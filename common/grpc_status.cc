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

absl::string_view GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace calleval

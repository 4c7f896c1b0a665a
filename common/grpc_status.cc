#include "common/grpc_status.h"

#include "absl/strings/cord.h"
#include "common/errors.h"

namespace calleval {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string details;
  if (auto payload = status.GetPayload(kErrorInfoTypeUrl)) details = std::string(*payload);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      std::move(details));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (!status.error_details().empty()) {
    out.SetPayload(kErrorInfoTypeUrl, absl::Cord(status.error_details()));
  }
  return out;
}

}  // namespace calleval

#include "services/calls/recording_locator.h"

#include <utility>

#include "calleval/v1/calls.grpc.pb.h"
#include "common/client_context.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace calleval::calls {

RecordingLocator StoreRecordingLocator(CallsStore* calls) {
  return [calls](int64_t call_id) { return calls->GetRecording(call_id); };
}

RecordingLocator NewGrpcRecordingLocator(std::shared_ptr<grpc::Channel> calls) {
  std::shared_ptr<v1::Calls::Stub> stub = v1::Calls::NewStub(std::move(calls));
  return [stub](int64_t call_id) -> absl::StatusOr<StoredRecording> {
    // A point read; the browser waiting on the link gets a 503 past it and may retry.
    std::unique_ptr<grpc::ClientContext> context = ContextWithin(absl::Seconds(10));
    v1::GetRecordingLocationRequest request;
    request.set_call_id(call_id);
    v1::RecordingLocation reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub->GetRecordingLocation(context.get(), request, &reply)));
    return StoredRecording{reply.key(), reply.content_type(), reply.bytes()};
  };
}

}  // namespace calleval::calls

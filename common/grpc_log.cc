#include "common/grpc_log.h"

#include <grpc/support/log.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/request_id.h"

namespace calleval {
namespace {

using grpc::experimental::InterceptionHookPoints;


// A caller's mistake is worth a line, not an alarm; a failure of the service is.
LogLevel LevelFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return LogLevel::kDebug;
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNAUTHENTICATED:
      return LogLevel::kInfo;
    default:
      return LogLevel::kWarn;
  }
}

class CallLogInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CallLogInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method() == nullptr ? "" : info->method()),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      TakeRequestId(methods->GetRecvInitialMetadata());
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      LogEnd(methods->GetSendStatus());
    }
    methods->Proceed();
  }

 private:
  // Keeps the caller's id when usable; otherwise puts a new one in its place, which the
  // handler then reads like any other (request_id_ outlives the call's handler).
  void TakeRequestId(std::multimap<grpc::string_ref, grpc::string_ref>* metadata) {
    if (metadata == nullptr) return;
    auto [begin, end] = metadata->equal_range(kRequestIdKey);
    if (begin != end && std::next(begin) == end &&
        IsUsableRequestId(absl::string_view(begin->second.data(), begin->second.size()))) {
      request_id_.assign(begin->second.data(), begin->second.size());
      return;
    }
    metadata->erase(begin, end);
    request_id_ = NewRequestId();
    metadata->emplace(grpc::string_ref(kRequestIdKey), grpc::string_ref(request_id_));
  }

  void LogEnd(const grpc::Status& status) {
    const LogLevel level = LevelFor(status.error_code());
    if (!LogEnabled(level)) return;
    const double latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    if (status.ok()) {
      Log(level, "grpc call",
          {{"request_id", request_id_},
           {"method", method_},
           {"code", GrpcCodeName(status.error_code())},
           {"latency_ms", latency_ms}});
    } else {
      Log(level, "grpc call failed",
          {{"request_id", request_id_},
           {"method", method_},
           {"code", GrpcCodeName(status.error_code())},
           {"latency_ms", latency_ms},
           {"error", status.error_message()}});
    }
  }

  std::string method_;
  std::chrono::steady_clock::time_point start_;
  std::string request_id_;
};

class CallLogInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CallLogInterceptor(info);
  }
};

class RequestIdClientInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      const absl::string_view request_id = CurrentRequestId();
      auto* metadata = methods->GetSendInitialMetadata();
      if (!request_id.empty() && metadata->count(kRequestIdKey) == 0) {
        metadata->emplace(kRequestIdKey, std::string(request_id));
      }
    }
    methods->Proceed();
  }
};

class RequestIdClientInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new RequestIdClientInterceptor();
  }
};

void LogGrpcLine(gpr_log_func_args* args) {
  LogLevel level = LogLevel::kDebug;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = LogLevel::kError;
  if (args->severity == GPR_LOG_SEVERITY_INFO) level = LogLevel::kInfo;
  Log(level, args->message == nullptr ? "" : args->message,
      {{"component", "grpc"},
       {"source", absl::StrCat(args->file == nullptr ? "" : args->file, ":", args->line)}});
}

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewCallLogInterceptorFactory() {
  return std::make_unique<CallLogInterceptorFactory>();
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewRequestIdClientInterceptorFactory() {
  return std::make_unique<RequestIdClientInterceptorFactory>();
}

std::string RequestIdOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kRequestIdKey);
  if (it == metadata.end()) return std::string();
  const absl::string_view id(it->second.data(), it->second.size());
  return IsUsableRequestId(id) ? std::string(id) : std::string();
}

void RouteGrpcLogsToLog() { gpr_set_log_function(&LogGrpcLine); }

}  // namespace calleval

#include "common/grpc_metrics.h"

#include <grpcpp/support/status.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/telemetry.h"

namespace calleval {
namespace {


// The method's label: its full name for this code base's services and gRPC's own (health,
// reflection); anything else a client names is "other", so labels stay bounded.
std::string MethodLabel(const char* method) {
  absl::string_view name = method == nullptr ? "" : method;
  if (absl::StartsWith(name, "/calleval.") || absl::StartsWith(name, "/grpc.")) {
    return std::string(name);
  }
  return "other";
}

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetricsInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(MethodLabel(info->method())), start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    static telemetry::CounterFamily& calls = telemetry::DefaultRegistry().Counter(
        "calleval_grpc_server_handled_total",
        "gRPC calls this process answered, by method and status code.", {"method", "code"});
    static telemetry::HistogramFamily& latency = telemetry::DefaultRegistry().Histogram(
        "calleval_grpc_server_handling_seconds",
        "Time from a gRPC call's arrival to its status, by method.", {"method"});
    calls.WithLabels({method_, std::string(GrpcCodeName(code))}).Increment();
    latency.WithLabels({method_}).ObserveDuration(absl::Now() - start_);
  }

  const std::string method_;
  const absl::Time start_;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewGrpcMetricsInterceptorFactory() {
  return std::make_unique<MetricsInterceptorFactory>();
}

}  // namespace calleval

#pragma once

// Each service's methods are written once, in one table, and served from it twice: on the gRPC
// port (GrpcTableService below) and by the edge in the same process (DirectInvoker::RegisterTable,
// edge/direct_invoker.h). An entry says everything either transport needs:
//
//   Unary<&CallsService::GetCall>("GetCall", Execution::kPointRead, Access::kWorkspace)
//
// its name in the proto service, where it runs, who may call it, and its typed handler,
//
//   absl::Status CallsService::GetCall(const RequestContext&, const v1::GetCallRequest&,
//   v1::Call*);
//
// Callers are admitted in one place, AdmitAndRun: the service's RequestGuard checks the API key
// (and the client_id the request names) or the internal credential as the entry's Access says,
// and hands the handler the resolved workspace. No handler reads a credential.
//
// A service served this way declares
//   using Api = v1::Calls;                          // its generated gRPC service
//   static absl::Span<const MethodEntry<CallsService>> Methods();
//   ThreadPool* pool() const;                       // where kPool entries run
//   const RequestGuard& guard() const;              // admits callers
// CheckMethodTable reports a table that misses an RPC of the service, names one twice, names
// one that does not exist, or types a handler unlike its RPC; Server::Start refuses to start with
// one, and tests/services/method_table_test.cc checks every table.

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_callback.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/grpc_log.h"
#include "common/internal_credential.h"
#include "common/log.h"
#include "common/method_execution.h"
#include "common/thread_pool.h"
#include "common/unary.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace calleval {

// Who may call a method.
enum class Access {
  // An API key (Authorization: Bearer <key>). The request's optional client_id picks the
  // workspace among those granted to the key; without one, the key's own.
  kWorkspace,
  // The installation's internal credential (kInternalCredentialMetadata), never an API key:
  // queue and ledger methods that only the installation's own processes call. They have no HTTP
  // route, so the edge never registers them.
  kInternal,
};

// The credentials a call arrived with, as either transport carries them.
struct Caller {
  std::string authorization;  // the Authorization header or metadata, empty when absent
  // The internal credential metadata; nullopt when absent (the edge never forwards one).
  std::optional<std::string> internal_credential;
};

// What a handler knows of the admitted caller.
struct RequestContext {
  int64_t workspace_id = 0;  // Access::kWorkspace: the workspace the request acts on
  // Access::kWorkspace: the key's own workspace and the others granted to it (by id), whatever
  // workspace the request acts on: what a listing of the key's workspaces answers.
  int64_t key_workspace_id = 0;
  std::vector<int64_t> granted_workspace_ids;
};

// Admits callers: the one function between a call's credentials and its handler (the gRPC
// "interceptor" and its in-process twin are both AdmitAndRun below).
class RequestGuard {
 public:
  virtual ~RequestGuard() = default;
  // 401 for a missing or unknown key or credential, 403 for a client_id the key may not use.
  virtual absl::StatusOr<RequestContext> Admit(Access access, const Caller& caller,
                                               std::optional<int64_t> client_id) const = 0;
};

// The caller's credentials from gRPC metadata.
inline Caller CallerOf(const grpc::ServerContextBase& context) {
  Caller caller;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    caller.authorization.assign(it->second.data(), it->second.size());
  }
  if (auto it = metadata.find(kInternalCredentialMetadata); it != metadata.end()) {
    caller.internal_credential.emplace(it->second.data(), it->second.size());
  }
  return caller;
}

template <typename Service>
struct MethodEntry {
  using Handler = absl::Status (*)(Service& service, const RequestContext& context,
                                   const google::protobuf::Message& request,
                                   google::protobuf::Message* response);
  using ClientIdReader = std::optional<int64_t> (*)(const google::protobuf::Message& request);
  using PoolSelector = ThreadPool* (Service::*)() const;
  using GrpcHandlerFactory = grpc::internal::MethodHandler* (*)(Service& service,
                                                                const MethodEntry& entry);
  using DescriptorOf = const google::protobuf::Descriptor* (*)();

  const char* name;  // the RPC's name in Service::Api, "GetCall"
  Execution execution;
  Access access;
  // The workspace the request names (its client_id), read before the handler runs.
  ClientIdReader client_id;
  Handler handler;
  GrpcHandlerFactory grpc_handler;
  DescriptorOf request_type;
  DescriptorOf response_type;
  // Slow work (the sandbox, the LLM) runs on a bounded pool of its own when the service has one,
  // and is shed with 503 "overloaded" when that pool is full; null: pool().
  PoolSelector bounded_pool = nullptr;

  // This entry, run on the pool `select` returns (when it returns one).
  constexpr MethodEntry OnPool(PoolSelector select) const {
    MethodEntry entry = *this;
    entry.bounded_pool = select;
    return entry;
  }

  // The bounded pool of this entry on `service`, or null.
  ThreadPool* BoundedPoolOf(const Service& service) const {
    return bounded_pool == nullptr ? nullptr : (service.*bounded_pool)();
  }
};

namespace method_table_internal {

template <typename Handler>
struct HandlerTraits;
template <typename S, typename Req, typename Resp>
struct HandlerTraits<absl::Status (S::*)(const RequestContext&, const Req&, Resp*)> {
  using Service = S;
  using Request = Req;
  using Response = Resp;
};

template <typename Request, typename = void>
struct HasClientId : std::false_type {};
template <typename Request>
struct HasClientId<Request, std::void_t<decltype(std::declval<const Request&>().has_client_id())>>
    : std::true_type {};

// The request's top-level optional client_id; requests without the field act on the key's own
// workspace.
template <typename Request>
std::optional<int64_t> TopLevelClientId(const google::protobuf::Message& message) {
  if constexpr (HasClientId<Request>::value) {
    const auto& request = static_cast<const Request&>(message);
    if (request.has_client_id()) return request.client_id();
  }
  return std::nullopt;
}

template <typename Request, auto kReader>
std::optional<int64_t> ClientIdVia(const google::protobuf::Message& message) {
  return kReader(static_cast<const Request&>(message));
}

template <auto kHandler>
absl::Status RunTyped(typename HandlerTraits<decltype(kHandler)>::Service& service,
                      const RequestContext& context, const google::protobuf::Message& request,
                      google::protobuf::Message* response) {
  using Traits = HandlerTraits<decltype(kHandler)>;
  return (service.*kHandler)(context, static_cast<const typename Traits::Request&>(request),
                             static_cast<typename Traits::Response*>(response));
}

template <typename Message>
const google::protobuf::Descriptor* DescriptorOfType() {
  return Message::descriptor();
}

}  // namespace method_table_internal

// Admits the caller as `entry` says, then runs its handler. Both transports call this and
// nothing else, so a method is authenticated the same way over gRPC and at the edge.
template <typename Service>
absl::Status AdmitAndRun(Service& service, const MethodEntry<Service>& entry, const Caller& caller,
                         const google::protobuf::Message& request,
                         google::protobuf::Message* response) {
  absl::StatusOr<RequestContext> context =
      service.guard().Admit(entry.access, caller, entry.client_id(request));
  if (!context.ok()) return context.status();
  return entry.handler(service, *context, request, response);
}

// Serves one call of `entry` on gRPC: admitted and run inline or on a pool as the entry says.
// Admission runs where the handler runs (resolving a key may read the store).
template <typename Service>
grpc::ServerUnaryReactor* ServeUnary(Service& service, const MethodEntry<Service>& entry,
                                     grpc::CallbackServerContext* context,
                                     const google::protobuf::Message* request,
                                     google::protobuf::Message* response) {
  // The request id (common/grpc_log.h) names the handler's log lines and travels on with the
  // calls it makes to other roles.
  auto work = [&service, &entry, caller = CallerOf(*context), request_id = RequestIdOf(*context),
               request, response] {
    ScopedLogContext log_context(request_id);
    return AdmitAndRun(service, entry, caller, *request, response);
  };
  if (ThreadPool* bounded = entry.BoundedPoolOf(service); bounded != nullptr) {
    return RunUnaryOrShed(context, bounded, entry.name, std::move(work));
  }
  return RunUnaryAs(context, entry.execution, service.pool(), std::move(work));
}

namespace method_table_internal {

template <auto kHandler>
grpc::internal::MethodHandler* NewGrpcHandler(
    typename HandlerTraits<decltype(kHandler)>::Service& service,
    const MethodEntry<typename HandlerTraits<decltype(kHandler)>::Service>& entry) {
  using Traits = HandlerTraits<decltype(kHandler)>;
  return new grpc::internal::CallbackUnaryHandler<typename Traits::Request,
                                                  typename Traits::Response>(
      [&service, &entry](grpc::CallbackServerContext* context,
                         const typename Traits::Request* request,
                         typename Traits::Response* response) {
        return ServeUnary(service, entry, context, request, response);
      });
}

}  // namespace method_table_internal

// The table entry of `kHandler`, a member `absl::Status (Service::*)(const RequestContext&,
// const Request&, Response*)`. `kClientId` (`std::optional<int64_t>(const Request&)`) reads the
// workspace a request names when it is not simply its top-level client_id.
template <auto kHandler, auto kClientId = nullptr>
constexpr auto Unary(const char* name, Execution execution, Access access) {
  using Traits = method_table_internal::HandlerTraits<decltype(kHandler)>;
  using Request = typename Traits::Request;
  using Response = typename Traits::Response;
  typename MethodEntry<typename Traits::Service>::ClientIdReader client_id = nullptr;
  if constexpr (std::is_same_v<decltype(kClientId), std::nullptr_t>) {
    client_id = &method_table_internal::TopLevelClientId<Request>;
  } else {
    static_assert(std::is_same_v<decltype(kClientId), std::optional<int64_t> (*)(const Request&)>,
                  "the client_id reader takes the handler's request");
    client_id = &method_table_internal::ClientIdVia<Request, kClientId>;
  }
  return MethodEntry<typename Traits::Service>{name,
                                               execution,
                                               access,
                                               client_id,
                                               &method_table_internal::RunTyped<kHandler>,
                                               &method_table_internal::NewGrpcHandler<kHandler>,
                                               &method_table_internal::DescriptorOfType<Request>,
                                               &method_table_internal::DescriptorOfType<Response>};
}

// The proto service `Service` serves.
template <typename Service>
const google::protobuf::ServiceDescriptor* ServiceDescriptorOf() {
  return google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      Service::Api::service_full_name());
}

// OK when `table` serves every RPC of `service` exactly once with handlers of the RPC's types;
// otherwise says what is wrong, every problem at once.
template <typename Service>
absl::Status CheckMethodTable(const google::protobuf::ServiceDescriptor* service,
                              absl::Span<const MethodEntry<Service>> table) {
  std::vector<std::string> problems;
  for (const MethodEntry<Service>& entry : table) {
    const google::protobuf::MethodDescriptor* method = service->FindMethodByName(entry.name);
    if (method == nullptr) {
      problems.push_back(absl::StrCat(entry.name, " is not an RPC of the service"));
      continue;
    }
    if (method->input_type() != entry.request_type() ||
        method->output_type() != entry.response_type()) {
      problems.push_back(absl::StrCat(
          entry.name, "'s handler takes ", entry.request_type()->full_name(), " and answers ",
          entry.response_type()->full_name(), ", the RPC ", method->input_type()->full_name(),
          " and ", method->output_type()->full_name()));
    }
  }
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string& name = service->method(i)->name();
    int entries = 0;
    for (const MethodEntry<Service>& entry : table) entries += name == entry.name ? 1 : 0;
    if (entries == 0)
      problems.push_back(absl::StrCat(name, " has no entry (it would go unserved)"));
    if (entries > 1) problems.push_back(absl::StrCat(name, " has ", entries, " entries"));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("the method table of ", service->full_name(), ": ",
                                          absl::StrJoin(problems, "; ")));
}

template <typename Service>
absl::Status CheckMethodTable() {
  return CheckMethodTable<Service>(ServiceDescriptorOf<Service>(), Service::Methods());
}

// `service` on the gRPC port: every RPC of Service::Api served from its table entry with the
// callback API, the way the generated WithCallbackMethod_* templates register theirs. An RPC
// without an entry would stay the generated synchronous stub answering UNIMPLEMENTED:
// CheckMethodTable rules that out before a server starts.
template <typename Service>
class GrpcTableService final : public Service::Api::Service {
 public:
  explicit GrpcTableService(Service* service) {
    const google::protobuf::ServiceDescriptor* descriptor = ServiceDescriptorOf<Service>();
    for (const MethodEntry<Service>& entry : Service::Methods()) {
      const google::protobuf::MethodDescriptor* method = descriptor->FindMethodByName(entry.name);
      if (method == nullptr) continue;  // reported by CheckMethodTable
      // The generated service adds its methods in declaration order: the descriptor's index.
      this->MarkMethodCallback(method->index(), entry.grpc_handler(*service, entry));
    }
  }
};

}  // namespace calleval

#pragma once

// MethodInvoker for roles that run in the edge's own process: calls the service's handler
// directly, without serializing the request or crossing gRPC's threads. Measured on 2 cores,
// GET /calls/{id} through in-process gRPC channels reached about 15,000 requests/s; calling the
// handlers directly removes two thread hops and two serializations per request (bench/).
// Methods not registered here (roles run elsewhere) go to the fallback invoker (gRPC).

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "common/method_table.h"
#include "common/thread_pool.h"
#include "edge/method_invoker.h"

namespace calleval::edge {

class DirectInvoker : public MethodInvoker {
 public:
  // Where a handler runs. kInline: on the edge's I/O thread (short reads only). kPool: on the
  // store pool (writes, which wait for a group commit), or on the pool given at registration:
  // slow kinds of work (the code sandbox, the LLM) get pools of their own, so ingest and reads
  // never wait behind them. A pool that refuses the task (its queue is full) answers 503
  // "overloaded", which the edge sends with Retry-After.
  enum class Dispatch { kInline, kPool };
  using Handler = std::function<absl::Status(const std::string& authorization,
                                             const google::protobuf::Message& request,
                                             google::protobuf::Message* response)>;

  DirectInvoker(ThreadPool* pool, MethodInvoker* fallback) : pool_(pool), fallback_(fallback) {}

  // Registers the handler of `method`; its request and response are the method's generated
  // message types.
  // `pool` (kPool only; null: the store pool) must outlive the invoker.
  void Register(const google::protobuf::MethodDescriptor* method, Dispatch dispatch,
                Handler handler, ThreadPool* pool = nullptr);

  // Typed convenience: `fn(authorization, const Request&, Response*)`.
  template <typename Request, typename Response, typename Fn>
  void Register(const google::protobuf::MethodDescriptor* method, Dispatch dispatch, Fn fn,
                ThreadPool* pool = nullptr) {
    Register(
        method, dispatch,
        [fn = std::move(fn)](const std::string& authorization,
                             const google::protobuf::Message& request,
                             google::protobuf::Message* response) {
          return fn(authorization, static_cast<const Request&>(request),
                    static_cast<Response*>(response));
        },
        pool);
  }

  // Registers every method of `service`'s table (common/method_table.h) that the edge can reach:
  // the workspace methods, admitted by AdmitAndRun exactly as over gRPC (the in-process twin of
  // the gRPC path) and run inline or on the pool the entry names. Internal methods have no HTTP
  // route and no credential arrives with an HTTP request: they stay gRPC's alone.
  template <typename Service>
  void RegisterTable(Service* service) {
    const google::protobuf::ServiceDescriptor* descriptor = ServiceDescriptorOf<Service>();
    for (const MethodEntry<Service>& entry : Service::Methods()) {
      if (entry.access == Access::kInternal) continue;
      const google::protobuf::MethodDescriptor* method = descriptor->FindMethodByName(entry.name);
      if (method == nullptr) continue;  // reported by CheckMethodTable
      ThreadPool* bounded = entry.BoundedPoolOf(*service);
      Register(
          method, Resolved(entry.execution) == Execution::kInline ? Dispatch::kInline : Dispatch::kPool,
          [service, &entry](const std::string& authorization,
                            const google::protobuf::Message& request,
                            google::protobuf::Message* response) {
            return AdmitAndRun(*service, entry, Caller{authorization, std::nullopt}, request,
                               response);
          },
          bounded != nullptr ? bounded : service->pool());
    }
  }

  // How `method`'s handler was registered to run; nullopt when it was not (it goes to the
  // fallback).
  std::optional<Dispatch> DispatchOf(const google::protobuf::MethodDescriptor* method) const {
    auto it = handlers_.find(method);
    if (it == handlers_.end()) return std::nullopt;
    return it->second.dispatch;
  }

  void Invoke(const google::protobuf::MethodDescriptor* method,
              std::unique_ptr<google::protobuf::Message> request, const CallContext& context,
              Done done) override;

 private:
  struct Entry {
    Dispatch dispatch;
    Handler handler;
    ThreadPool* pool;
  };
  ThreadPool* pool_;
  MethodInvoker* fallback_;
  absl::flat_hash_map<const google::protobuf::MethodDescriptor*, Entry> handlers_;
};

}  // namespace calleval::edge

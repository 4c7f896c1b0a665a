#pragma once

// Where each routed method of a service runs, chosen once: the service's gRPC adapter
// (RunUnaryAs, common/unary.h) and the edge's direct registration of the same handler
// (cmd/calleval/server.cc) both read the service's table, so the two paths cannot drift apart.
// server_wiring_test checks that every routed method has exactly one entry.

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace calleval {

enum class Execution {
  // On the calling thread (gRPC's, or the edge's I/O thread). For point reads only: they take
  // tens of microseconds on SQLite, less than the hop to a pool costs.
  kInline,
  // On the service's pool: whatever writes (a write waits for its group commit), scans, or
  // runs code or an LLM (those on their own bounded pools).
  kPool,
};

struct MethodExecution {
  absl::string_view method;  // the method's name in its service, "GetAgent"
  Execution execution;
};

// `method`'s entry in `table`, or nullptr.
constexpr const MethodExecution* FindExecution(absl::Span<const MethodExecution> table,
                                               absl::string_view method) {
  for (const MethodExecution& entry : table) {
    if (entry.method == method) return &entry;
  }
  return nullptr;
}

// How `method` runs; kPool for a method the table does not list, which never blocks a thread
// that serves others.
constexpr Execution ExecutionOf(absl::Span<const MethodExecution> table, absl::string_view method) {
  const MethodExecution* entry = FindExecution(table, method);
  return entry == nullptr ? Execution::kPool : entry->execution;
}

}  // namespace calleval

#pragma once

// Where each routed method of a service runs, chosen once: the service's gRPC adapter
// (RunUnaryAs, common/unary.h) and the edge's direct registration of the same handler
// (cmd/calleval/server.cc) both read the service's table, so the two paths cannot drift apart.
// server_wiring_test checks that every routed method has exactly one entry.

#include <atomic>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace calleval {

enum class Execution {
  // On the calling thread (gRPC's, or the edge's I/O thread). For reads of a few rows that
  // never leave the process: tens of microseconds, less than the hop to a pool costs.
  kInline,
  // On the service's pool: whatever writes (a write waits for its group commit), scans, or
  // runs code or an LLM (those on their own bounded pools).
  kPool,
  // A read of one row by key: kInline when the database is in this process (SQLite), kPool
  // when it is a round trip away (PostgreSQL), where the thread would wait on the network for
  // most of the read and the edge's two I/O threads would cap reads in flight at two.
  // ExecutionOf() resolves it as SetPointReadsInline() says.
  kPointRead,
};

namespace internal {
inline std::atomic<bool> point_reads_inline{true};
}  // namespace internal

// How kPointRead methods run in this process: set once at start-up, before serving, from the
// database backend (inline on SQLite, the default).
inline void SetPointReadsInline(bool inline_reads) {
  internal::point_reads_inline.store(inline_reads, std::memory_order_relaxed);
}

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

// How `method` runs, kInline or kPool (a kPointRead resolved); kPool for a method the table
// does not list, which never blocks a thread that serves others.
inline Execution ExecutionOf(absl::Span<const MethodExecution> table, absl::string_view method) {
  const MethodExecution* entry = FindExecution(table, method);
  if (entry == nullptr) return Execution::kPool;
  if (entry->execution != Execution::kPointRead) return entry->execution;
  return internal::point_reads_inline.load(std::memory_order_relaxed) ? Execution::kInline
                                                                       : Execution::kPool;
}

}  // namespace calleval

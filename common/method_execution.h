#pragma once

// Where a method of a service runs. Each entry of a service's method table (common/method_table.h)
// names one, and both transports read it from there: the gRPC adapter and the edge's direct
// registration cannot drift apart.

#include <atomic>

namespace calleval {

enum class Execution {
  // On the calling thread (gRPC's, or the edge's I/O thread). For reads of a few rows that
  // never leave the process: tens of microseconds, less than the hop to a pool costs.
  kInline,
  // On the service's pool: whatever writes (a write waits for its group commit), scans, or
  // runs code or an LLM (those on their own bounded pools, MethodEntry::OnPool).
  kPool,
  // A short read (a row by key, a handful of rows): kInline when the database is in this
  // process (SQLite), kPool when it is a round trip away (PostgreSQL), where the thread would
  // wait on the network for most of the read and the edge's two I/O threads would cap reads in
  // flight at two.
  // Resolved() decides, as SetPointReadsInline() said.
  kPointRead,
};

namespace internal {
inline std::atomic<bool> point_reads_inline{true};
}  // namespace internal

// How kPointRead methods run in this process: set once at start-up, before any method is
// registered, from the database backend (inline on SQLite, the default).
inline void SetPointReadsInline(bool inline_reads) {
  internal::point_reads_inline.store(inline_reads, std::memory_order_relaxed);
}

// `execution` as it runs here: kInline or kPool.
inline Execution Resolved(Execution execution) {
  if (execution != Execution::kPointRead) return execution;
  return internal::point_reads_inline.load(std::memory_order_relaxed) ? Execution::kInline
                                                                       : Execution::kPool;
}

}  // namespace calleval

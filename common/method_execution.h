#pragma once

// Where a method of a service runs. Each entry of a service's method table (common/method_table.h)
// names one, and both transports read it from there: the gRPC adapter and the edge's direct
// registration cannot drift apart.

namespace calleval {

enum class Execution {
  // On the calling thread (gRPC's, or the edge's I/O thread). For point reads only: they take
  // tens of microseconds on SQLite, less than the hop to a pool costs.
  kInline,
  // On the service's pool: whatever writes (a write waits for its group commit), scans, or
  // runs code or an LLM (those on their own bounded pools, MethodEntry::OnPool).
  kPool,
};

}  // namespace calleval

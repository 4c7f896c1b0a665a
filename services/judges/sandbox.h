#pragma once

// Code as judge (SPEC §6): runs a caller's Python snippet in a fresh python3 process under
// bubblewrap. No network, read-only system mounts, no access to the service's files or
// environment, a private size-bounded /tmp, a new session, rlimits (CPU, address space,
// processes, file size, open files), a wall-clock kill of the whole sandbox, and byte caps on
// everything it writes back. Code never runs unsandboxed: when the sandbox cannot start, Run
// and Validate return an error status and the caller fails the metric closed.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/struct.pb.h"
#include "nlohmann/json.hpp"

namespace calleval::judges {

struct SandboxLimits {
  absl::Duration cpu = absl::Seconds(5);
  absl::Duration wall = absl::Seconds(10);
  int64_t memory_bytes = int64_t{256} << 20;  // address space
  int processes = 16;
  int64_t output_bytes = int64_t{64} << 10;  // stdout, stderr and the result, each
  int64_t tmp_bytes = int64_t{16} << 20;     // the private /tmp
  int64_t file_bytes = int64_t{16} << 20;    // largest file it may write
  int open_files = 64;
};

// What went wrong in the snippet (its own exception, a limit it hit, a bad result).
struct CodeError {
  std::string type;  // e.g. ZeroDivisionError, TimeoutError, MemoryError, OutputLimitExceeded
  std::string message;
  std::optional<int> line;  // line in the snippet, when known
};

struct CodeRun {
  // metric['result'] as the snippet left it (null_value when never set).
  google::protobuf::Value result;
  bool result_set = false;  // the snippet assigned metric['result']
  std::string explanation;  // metric['explanation'] as text
  std::optional<CodeError> error;
  absl::Duration elapsed;  // wall time of the whole sandboxed run
};

struct CodeIssue {
  std::optional<int> line;
  std::optional<int> column;
  std::string message;
};

struct CodeValidation {
  bool valid = false;
  std::vector<CodeIssue> errors;
};

class PythonSandbox {
 public:
  struct Options {
    std::string bwrap = "/usr/bin/bwrap";
    std::string python = "/usr/bin/python3";
    SandboxLimits limits;
  };
  PythonSandbox() : PythonSandbox(Options()) {}
  explicit PythonSandbox(Options options);

  // Runs `code` with globals `context` (the JSON given) and
  // `metric = {"result": None, "explanation": "", "structured_output": None}`.
  // OK with `error` set when the snippet failed or hit a limit; an error status only when the
  // sandbox itself could not run (bwrap or python missing, namespaces refused): kUnavailable.
  absl::StatusOr<CodeRun> Run(absl::string_view code, const nlohmann::json& context) const;

  // Syntax errors (with line and column), and a snippet that never assigns metric['result'].
  // Parsed inside the sandbox too (the parser itself is fed untrusted text).
  absl::StatusOr<CodeValidation> Validate(absl::string_view code) const;

  const Options& options() const { return options_; }

 private:
  Options options_;
};

}  // namespace calleval::judges

#pragma once

// Code as judge (docs/api.md §6): runs a caller's Python snippet in a fresh python3 process under
// bubblewrap. No network, read-only system mounts, no access to the service's files or
// environment, a private size-bounded /tmp, a new session, rlimits (CPU, address space,
// processes, file size, open files), a wall-clock kill of the whole sandbox, and byte caps on
// everything it writes back. Code never runs unsandboxed: when the sandbox cannot start, Run
// and Validate return an error status and the caller fails the metric closed.
//
// How (docs/code-judge.md has the user's view):
// - The service clones a child (CLONE_VM | CLONE_VFORK, like posix_spawn) that starts its own
//   session, keeps only the four pipes (stdin, stdout, stderr, the result on fd 3), sets
//   RLIMIT_CPU/AS/FSIZE/NOFILE/CORE and execs bwrap with an empty environment. A service that
//   runs as root hands the child to uid/gid 65534 first: host root is exempt from
//   RLIMIT_NPROC, and the sandbox needs no privilege of the host.
// - bwrap unshares every namespace (user, mount, PID, network, IPC, UTS, cgroup) and maps
//   uid 0 of the new user namespace to that unprivileged uid; the root is read-only and holds
//   /usr (read-only), the /bin, /lib, /lib64 links, a private /proc (see Options::proc) and a
//   read-only /dev.
// - A Python harness (python3 -I -S -c) first mounts a tmpfs of tmp_bytes on /tmp, forbids
//   nested user namespaces (max_user_namespaces 0 where there is a /proc, and a seccomp rule
//   either way), makes /proc/sys read-only, drops every capability (bounding, ambient,
//   effective, permitted, inheritable; securebits locked; no_new_privs), installs a seccomp
//   filter (ptrace kills; unshare or clone of a user namespace and clone3 are refused) and sets
//   RLIMIT_NPROC (counted in the sandbox's own user namespace); only then reads the code.
// - The service writes the input and reads the outputs with poll(), kills the whole process
//   group at the wall clock or when an output passes its cap, and always reaps the child.
//
// Errors of a run (CodeRun.error.type): the snippet's own exception (ZeroDivisionError,
// MemoryError, RecursionError, SystemExit, ... with the line), TypeError/ValueError for a
// result that is not a bool, finite number, string or None, TimeoutError (wall clock),
// CPULimitExceeded, OutputLimitExceeded, BlockedSystemCall ("blocked system call: ptrace",
// refused by the harness's seccomp filter), Crashed ("the code crashed (signal 11)"), Killed,
// Exited (ended without a result) and ResultChannelError (the code wrote on fd 3).
//
// Thread-safe: Run and Validate may be called concurrently; each run is its own process tree.

#include <atomic>
#include <cstdint>
#include <memory>
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
  absl::Duration cpu = absl::Seconds(5);  // rounded up to whole seconds (RLIMIT_CPU)
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
    // Debian's interpreter (not a pyenv one on PATH); must live under /usr, the only
    // directory of the host mounted in the sandbox.
    std::string python = "/usr/bin/python3";
    SandboxLimits limits;
    // The snippet's /proc: one of its own PID namespace (kMounted), none (kNone: an empty
    // directory), or kAuto: mounted, until the kernel refuses the mount, then none from that
    // run on. The kernel refuses a new proc mount where parts of the visible /proc are covered
    // by mounts it did not make, which is what container runtimes do by default (they mask
    // /proc/kcore, /proc/sys and others); a sandbox without /proc loses nothing it needs.
    enum class Proc { kAuto, kMounted, kNone };
    Proc proc = Proc::kAuto;
  };
  PythonSandbox() : PythonSandbox(Options()) {}
  explicit PythonSandbox(Options options);

  // Runs `code` with globals `context` (the JSON given) and
  // `metric = {"result": None, "explanation": "", "structured_output": None}`.
  // OK with `error` set when the snippet failed or hit a limit; an error status only when the
  // sandbox itself could not run (bwrap or python missing, namespaces refused): kUnavailable,
  // with a message that starts "the code sandbox is unavailable: ".
  absl::StatusOr<CodeRun> Run(absl::string_view code, const nlohmann::json& context) const;

  // Syntax errors (with line and column), and a snippet that never assigns metric['result'].
  // Parsed inside the sandbox too (the parser itself is fed untrusted text).
  absl::StatusOr<CodeValidation> Validate(absl::string_view code) const;

  const Options& options() const { return options_; }

  // Whether runs from now on get a /proc: false for kNone, and for kAuto once the kernel
  // refused to mount one.
  bool mounts_proc() const;

 private:
  // Run, before its outcome is counted for the operators' metrics.
  absl::StatusOr<CodeRun> RunUncounted(absl::string_view code, const nlohmann::json& context) const;

  Options options_;
  // kAuto: the kernel refused a proc mount; shared by copies of this sandbox.
  std::shared_ptr<std::atomic<bool>> proc_refused_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace calleval::judges

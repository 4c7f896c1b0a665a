#include "services/judges/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/telemetry.h"
#include "services/judges/sandbox_py.h"

namespace calleval::judges {
namespace {

// A service started as root hands the sandbox to this uid ("nobody") before bwrap runs:
// processes of host root ignore RLIMIT_NPROC, and a fork bomb must hit the process limit.
constexpr uid_t kUnprivilegedId = 65534;
constexpr int kTmpInodes = 1024;
constexpr size_t kChildStackBytes = size_t{64} << 10;
constexpr size_t kReadChunk = size_t{64} << 10;
// The harness writes this byte on the result channel once the sandbox is locked down and
// before it reads the caller's code: without it, a failure is the sandbox's, not the code's.
constexpr char kStartedMarker = 'S';
// The harness's JSON is two levels deep; anything deeper was forged by the code.
constexpr int kMaxResultDepth = 4;

// The Python the sandbox runs is in services/judges/sandbox_py/, embedded by the build into
// sandbox_py.h: kLockDownPy (lock_down.py) runs first in every sandbox of Run(), then kRunPy
// (run.py) in the same interpreter; kValidatePy (validate.py) alone for Validate(). Each file
// says what it does.

absl::Status Unavailable(absl::string_view why) {
  return absl::UnavailableError(absl::StrCat("the code sandbox is unavailable: ", why));
}

// "10 s", "0.5 s".
std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToDoubleSeconds(d), " s"); }

// "64 KiB", "256 MiB", "1000 bytes".
std::string Bytes(int64_t n) {
  if (n > 0 && n % (int64_t{1} << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  if (n > 0 && n % 1024 == 0) return absl::StrCat(n >> 10, " KiB");
  return absl::StrCat(n, " bytes");
}

int64_t WholeSeconds(absl::Duration d) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(d))));
}

// The last non-empty line of what a process wrote on stderr, printable ASCII only (the text
// ends up in statuses and protobuf strings, which must be valid UTF-8).
std::string LastLine(absl::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  const size_t nl = text.rfind('\n');
  if (nl != absl::string_view::npos) text.remove_prefix(nl + 1);
  if (text.size() > 500) text = text.substr(0, 500);
  std::string out(text);
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

// Deepest nesting of arrays and objects in `json` (outside strings), so that a document forged
// by the code on the result channel is rejected before the (recursive) value tree is built.
int JsonDepth(absl::string_view json) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// What the child (cloned with CLONE_VM | CLONE_VFORK) needs; it writes `failed_*` when a step
// before execve fails. The memory is shared until the child execs or exits.
struct ChildPlan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int fds[4] = {-1, -1, -1, -1};  // become the child's 0 (stdin), 1, 2 and 3 (result)
  bool drop_root = false;
  pid_t parent = 0;
  rlimit cpu{}, memory{}, file_size{}, open_files{}, core{};
  const char* failed_step = nullptr;
  int failed_errno = 0;
};

// Closes every descriptor from `first` up, so that none of the service's (sockets, the data
// dir's database, other runs' pipes) reaches the sandbox.
int CloseFrom(int first) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0U) == 0) return 0;
#endif
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  const rlim_t end = lim.rlim_cur == RLIM_INFINITY ? 1 << 20 : lim.rlim_cur;
  for (rlim_t fd = first; fd < end; ++fd) close(static_cast<int>(fd));
  return 0;
}

// The child between clone and execve: async-signal-safe calls only, and raw syscalls for the
// credential changes (glibc's wrappers would signal the parent's threads, whose memory this
// child shares).
int ChildMain(void* arg) {
  auto* plan = static_cast<ChildPlan*>(arg);
  auto fail = [plan](const char* step) {
    plan->failed_errno = errno;
    plan->failed_step = step;
    _exit(127);
  };
  // The parent blocked every signal around clone; restore default dispositions before
  // unblocking so that none of the service's handlers runs here.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  // Its own session and process group: the wall-clock kill takes the whole group.
  if (setsid() < 0) fail("setsid");
  int high[4];
  for (int i = 0; i < 4; ++i) {
    high[i] = fcntl(plan->fds[i], F_DUPFD_CLOEXEC, 10);
    if (high[i] < 0) fail("fcntl(F_DUPFD_CLOEXEC)");
  }
  for (int i = 0; i < 4; ++i) {
    if (dup2(high[i], i) < 0) fail("dup2");
  }
  if (CloseFrom(4) != 0) fail("close_range");
  if (plan->drop_root) {
    if (syscall(SYS_setgroups, 0, nullptr) != 0) fail("setgroups");
    if (syscall(SYS_setresgid, kUnprivilegedId, kUnprivilegedId, kUnprivilegedId) != 0) {
      fail("setresgid");
    }
    if (syscall(SYS_setresuid, kUnprivilegedId, kUnprivilegedId, kUnprivilegedId) != 0) {
      fail("setresuid");
    }
  }
  // After the uid change, which clears it. bwrap's --die-with-parent takes it from there.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl(PR_SET_PDEATHSIG)");
  if (getppid() != plan->parent) {
    errno = ESRCH;
    fail("getppid");
  }
  if (setrlimit(RLIMIT_CORE, &plan->core) != 0) fail("setrlimit(RLIMIT_CORE)");
  if (setrlimit(RLIMIT_CPU, &plan->cpu) != 0) fail("setrlimit(RLIMIT_CPU)");
  if (setrlimit(RLIMIT_AS, &plan->memory) != 0) fail("setrlimit(RLIMIT_AS)");
  if (setrlimit(RLIMIT_FSIZE, &plan->file_size) != 0) fail("setrlimit(RLIMIT_FSIZE)");
  if (setrlimit(RLIMIT_NOFILE, &plan->open_files) != 0) fail("setrlimit(RLIMIT_NOFILE)");
  execve(plan->path, plan->argv, plan->envp);
  fail("execve");
  return 127;
}

// Owns a descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// What one sandboxed process did.
struct Outcome {
  std::string out, err, channel;  // stdout, stderr, the result channel (fd 3)
  bool timed_out = false;
  const char* over_limit = nullptr;  // "stdout", "stderr" or "result" when a cap was hit
  int status = 0;                    // wait status of bwrap
  absl::Duration cpu;  // user + system time of bwrap and of what it reaped (may miss the code)
  absl::Duration elapsed;
};

absl::Status Errno(absl::string_view what, int err) {
  return Unavailable(absl::StrCat(what, ": ", std::strerror(err)));
}

// Starts `argv` (bwrap ...) with `input` on stdin and collects stdout, stderr and fd 3 until
// it exits, the wall clock runs out, or a cap is exceeded; then kills what is left and reaps.
absl::StatusOr<Outcome> Execute(const std::vector<std::string>& argv, absl::string_view input,
                                const SandboxLimits& limits) {
  Outcome outcome;
  const absl::Time start = absl::Now();

  // The parent's ends are close-on-exec so that concurrent runs never leak into each other.
  // stdin is a socket: send(MSG_NOSIGNAL) cannot raise SIGPIPE in the service.
  int sv[2], out[2], err[2], res[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Errno("socketpair", errno);
  }
  Fd in_parent(sv[0]), in_child(sv[1]);
  if (pipe2(out, O_CLOEXEC) != 0) return Errno("pipe", errno);
  Fd out_parent(out[0]), out_child(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return Errno("pipe", errno);
  Fd err_parent(err[0]), err_child(err[1]);
  if (pipe2(res, O_CLOEXEC) != 0) return Errno("pipe", errno);
  Fd res_parent(res[0]), res_child(res[1]);
  shutdown(in_child.get(), SHUT_WR);
  shutdown(in_parent.get(), SHUT_RD);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char* no_env[] = {nullptr};

  ChildPlan plan;
  plan.path = argv[0].c_str();
  plan.argv = args.data();
  plan.envp = no_env;
  plan.fds[0] = in_child.get();
  plan.fds[1] = out_child.get();
  plan.fds[2] = err_child.get();
  plan.fds[3] = res_child.get();
  plan.drop_root = geteuid() == 0;
  plan.parent = getpid();
  const rlim_t cpu = static_cast<rlim_t>(WholeSeconds(limits.cpu));
  // SIGXCPU at the soft limit (the harness reports it at once, with the line), SIGKILL a
  // second later for code that ignores SIGXCPU or spins in C.
  plan.cpu = {cpu, cpu + 1};
  plan.memory = {static_cast<rlim_t>(limits.memory_bytes),
                 static_cast<rlim_t>(limits.memory_bytes)};
  plan.file_size = {static_cast<rlim_t>(limits.file_bytes), static_cast<rlim_t>(limits.file_bytes)};
  plan.open_files = {static_cast<rlim_t>(limits.open_files),
                     static_cast<rlim_t>(limits.open_files)};
  plan.core = {0, 0};

  // clone(CLONE_VM | CLONE_VFORK), as posix_spawn does: no copy of the service's page tables
  // (a fork of a large multi-threaded process is slow and makes its pages copy-on-write).
  // Signals stay blocked while the child shares our memory.
  std::unique_ptr<char[]> stack(new char[kChildStackBytes]);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const pid_t pid =
      clone(ChildMain, stack.get() + kChildStackBytes, CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return Errno("clone", clone_errno);
  if (plan.failed_step != nullptr) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return Errno(plan.failed_step == absl::string_view("execve")
                     ? absl::StrCat("cannot run ", argv[0])
                     : absl::StrCat("cannot start the sandbox (", plan.failed_step, ")"),
                 plan.failed_errno);
  }
  in_child.Reset();
  out_child.Reset();
  err_child.Reset();
  res_child.Reset();
  for (const Fd* fd : {&in_parent, &out_parent, &err_parent, &res_parent}) {
    fcntl(fd->get(), F_SETFL, fcntl(fd->get(), F_GETFL) | O_NONBLOCK);
  }
  // Readable when the child exits; without pidfds (Linux < 5.3), poll with a short timeout.
  Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));

  const absl::Time deadline = start + limits.wall;
  const size_t cap = static_cast<size_t>(limits.output_bytes);
  bool exited = false;
  rusage usage{};
  size_t written = 0;
  if (input.empty()) in_parent.Reset();
  auto reap = [&](int flags) {
    int status = 0;
    pid_t r;
    while ((r = wait4(pid, &status, flags, &usage)) < 0 && errno == EINTR) {
    }
    if (r == pid) {
      exited = true;
      outcome.status = status;
    }
  };
  std::unique_ptr<char[]> buffer(new char[kReadChunk]);
  while (true) {
    if (!exited && pidfd.get() < 0) reap(WNOHANG);
    if (exited && out_parent.get() < 0 && err_parent.get() < 0 && res_parent.get() < 0) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      outcome.timed_out = !exited;
      break;
    }
    int timeout_ms = static_cast<int>(
        absl::ToInt64Milliseconds(absl::Ceil(deadline - now, absl::Milliseconds(1))));
    if (pidfd.get() < 0 && !exited) timeout_ms = std::min(timeout_ms, 10);
    pollfd fds[5] = {
        {in_parent.get(), POLLOUT, 0},          {out_parent.get(), POLLIN, 0},
        {err_parent.get(), POLLIN, 0},          {res_parent.get(), POLLIN, 0},
        {exited ? -1 : pidfd.get(), POLLIN, 0},
    };
    const int n = poll(fds, 5, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // cannot happen with valid descriptors; the kill below ends the run
    }
    if (fds[0].revents != 0) {
      const size_t chunk = std::min(input.size() - written, kReadChunk);
      const ssize_t sent =
          send(in_parent.get(), input.data() + written, chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0) written += static_cast<size_t>(sent);
      // Done, or the sandbox stopped reading (EPIPE): either way it gets EOF.
      if (written == input.size() || (sent < 0 && errno != EAGAIN && errno != EINTR)) {
        in_parent.Reset();
      }
    }
    struct Stream {
      Fd* fd;
      std::string* data;
      size_t cap;
      const char* name;
    };
    // One more byte on the result channel for the start marker.
    Stream streams[3] = {{&out_parent, &outcome.out, cap, "stdout"},
                         {&err_parent, &outcome.err, cap, "stderr"},
                         {&res_parent, &outcome.channel, cap + 1, "result"}};
    for (int i = 0; i < 3; ++i) {
      if (fds[i + 1].revents == 0) continue;
      Stream& s = streams[i];
      const ssize_t got = read(s.fd->get(), buffer.get(), kReadChunk);
      if (got > 0) {
        s.data->append(buffer.get(), static_cast<size_t>(got));
        if (s.data->size() > s.cap) {
          outcome.over_limit = s.name;
          s.data->resize(s.cap);
        }
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        s.fd->Reset();
      }
    }
    if (outcome.over_limit != nullptr) break;
    if (fds[4].revents != 0) reap(WNOHANG);
  }
  if (!exited) {
    // Not reaped yet, so the ids cannot have been reused. The group holds bwrap and the
    // sandbox's init (whose death kills every process of the sandbox's PID namespace).
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    reap(0);
  }
  outcome.cpu =
      absl::DurationFromTimeval(usage.ru_utime) + absl::DurationFromTimeval(usage.ru_stime);
  outcome.elapsed = absl::Now() - start;
  return outcome;
}

// bwrap's arguments up to the program: every namespace unshared (no network: the new network
// namespace has only a loopback), uid 0 of its own user namespace mapped to the caller's
// unprivileged uid (one namespace, so the harness may mount while it holds its capabilities),
// /usr read-only plus the merged-usr links, a private /proc (`proc`; an empty directory
// otherwise) and /dev, an empty environment but for PATH and LANG, a new session, and a
// read-only root and /dev. `caps`: the capabilities the Run harness needs for its lock-down
// (none for Validate).
std::vector<std::string> BwrapArgs(const PythonSandbox::Options& options, bool caps, bool proc) {
  std::vector<std::string> args = {options.bwrap,    "--unshare-all",
                                   "--unshare-user", "--die-with-parent",
                                   "--new-session",  "--clearenv",
                                   "--setenv",       "PATH",
                                   "/usr/bin:/bin",  "--setenv",
                                   "LANG",           "C.UTF-8",
                                   "--uid",          "0",
                                   "--gid",          "0",
                                   "--ro-bind",      "/usr",
                                   "/usr",           "--symlink",
                                   "usr/bin",        "/bin",
                                   "--symlink",      "usr/lib",
                                   "/lib",           "--symlink",
                                   "usr/lib64",      "/lib64",
                                   proc ? "--proc" : "--dir",
                                   "/proc",
                                   "--dev",          "/dev",
                                   "--dir",          "/tmp",
                                   "--chdir",        "/",
                                   "--remount-ro",   "/dev",
                                   "--remount-ro",   "/",
                                   "--cap-drop",     "ALL"};
  if (caps) {
    for (const char* cap : {"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_SETPCAP"}) {
      args.push_back("--cap-add");
      args.push_back(cap);
    }
  }
  args.push_back("--");
  args.push_back(options.python);
  args.push_back("-I");
  args.push_back("-S");
  args.push_back("-c");
  return args;
}

absl::Status CheckPaths(const PythonSandbox::Options& options) {
  if (access(options.bwrap.c_str(), X_OK) != 0) {
    return Errno(absl::StrCat("cannot run ", options.bwrap), errno);
  }
  // Only /usr is mounted in the sandbox.
  if (!absl::StartsWith(options.python, "/usr/")) {
    return Unavailable(absl::StrCat(options.python, " is not under /usr"));
  }
  if (access(options.python.c_str(), X_OK) != 0) {
    return Errno(absl::StrCat("cannot run ", options.python), errno);
  }
  return absl::OkStatus();
}

// The reasons a run ended early that are not the code's own exception. Nullopt: the sandbox
// did not start (`unavailable` says why).
std::optional<CodeError> LimitError(const Outcome& outcome, const SandboxLimits& limits) {
  if (outcome.timed_out) {
    return CodeError{
        "TimeoutError",
        absl::StrCat("the code ran longer than ", Seconds(limits.wall), " (wall clock)"),
        std::nullopt};
  }
  if (outcome.over_limit != nullptr) {
    const absl::string_view which = outcome.over_limit;
    return CodeError{
        "OutputLimitExceeded",
        which == "result"
            ? absl::StrCat("the code's result is larger than ", Bytes(limits.output_bytes))
            : absl::StrCat("the code wrote more than ", Bytes(limits.output_bytes), " to ", which),
        std::nullopt};
  }
  return std::nullopt;
}

bool Started(const Outcome& outcome) {
  return !outcome.channel.empty() && outcome.channel[0] == kStartedMarker;
}

// bwrap's words when the kernel refuses it a proc mount (EPERM from mount(2)).
constexpr absl::string_view kProcMountRefused = "Can't mount proc";

// Runs `program` (python3 -c's code) with `program_args` in a sandbox. kAuto: when the kernel
// refuses the proc mount, runs again without /proc, and so does every later run.
absl::StatusOr<Outcome> ExecuteSandboxed(const PythonSandbox::Options& options,
                                         std::atomic<bool>& proc_refused, bool caps,
                                         std::string program,
                                         const std::vector<std::string>& program_args,
                                         absl::string_view input) {
  using Proc = PythonSandbox::Options::Proc;
  auto argv = [&](bool proc) {
    std::vector<std::string> args = BwrapArgs(options, caps, proc);
    args.push_back(program);
    args.insert(args.end(), program_args.begin(), program_args.end());
    return args;
  };
  const bool proc = options.proc == Proc::kMounted ||
                    (options.proc == Proc::kAuto && !proc_refused.load(std::memory_order_relaxed));
  ASSIGN_OR_RETURN(Outcome outcome, Execute(argv(proc), input, options.limits));
  if (proc && options.proc == Proc::kAuto && !Started(outcome) &&
      absl::StrContains(outcome.err, kProcMountRefused)) {
    proc_refused.store(true, std::memory_order_relaxed);
    return Execute(argv(false), input, options.limits);
  }
  return outcome;
}

absl::Status NotStarted(const Outcome& outcome, const SandboxLimits& limits) {
  if (outcome.timed_out) {
    return Unavailable(absl::StrCat("it did not start within ", Seconds(limits.wall)));
  }
  std::string why = LastLine(outcome.err);
  if (why.empty()) {
    why = WIFSIGNALED(outcome.status)
              ? absl::StrCat("bwrap was killed by signal ", WTERMSIG(outcome.status))
              : absl::StrCat("bwrap exited with status ", WEXITSTATUS(outcome.status));
  }
  return Unavailable(why);
}

// Why the code ended without a result: a limit enforced by the kernel, a crash, or an exit.
CodeError NoResultError(const Outcome& outcome, const SandboxLimits& limits) {
  int signal = 0;
  int code = 0;
  if (WIFSIGNALED(outcome.status)) {
    signal = WTERMSIG(outcome.status);
  } else if (WEXITSTATUS(outcome.status) > 128) {  // bwrap: 128 + the signal of its child
    signal = WEXITSTATUS(outcome.status) - 128;
  } else {
    code = WEXITSTATUS(outcome.status);
  }
  // SIGKILL that the parent did not send: the hard CPU limit (soft + 1 s), which one process
  // cannot reach sooner in wall time; or the code killed itself.
  const int64_t cpu_limit = WholeSeconds(limits.cpu);
  if (signal == SIGXCPU || outcome.cpu >= absl::Seconds(cpu_limit) ||
      (signal == SIGKILL && outcome.elapsed >= absl::Seconds(cpu_limit + 1))) {
    return {"CPULimitExceeded",
            absl::StrCat("the code used more than ", cpu_limit, " s of CPU time"), std::nullopt};
  }
  if (absl::StrContains(outcome.err, "MemoryError")) {
    return {"MemoryError",
            absl::StrCat("the code ran out of memory (limit ", Bytes(limits.memory_bytes), ")"),
            std::nullopt};
  }
  if (signal == SIGXFSZ) {
    return {"FileSizeLimitExceeded",
            absl::StrCat("the code wrote a file larger than ", Bytes(limits.file_bytes)),
            std::nullopt};
  }
  if (signal == SIGKILL) return {"Killed", "the code was killed (signal 9)", std::nullopt};
  // The harness's seccomp filter kills with SIGSYS on ptrace alone (other ABIs get EPERM).
  if (signal == SIGSYS) {
    return {"BlockedSystemCall", "blocked system call: ptrace", std::nullopt};
  }
  if (signal != 0) {
    return {"Crashed", absl::StrCat("the code crashed (signal ", signal, ")"), std::nullopt};
  }
  std::string message =
      absl::StrCat("the code exited (status ", code, ") without reporting a result");
  const std::string last = LastLine(outcome.err);
  if (!last.empty()) absl::StrAppend(&message, ": ", last);
  return {"Exited", std::move(message), std::nullopt};
}

// object[key], or null when absent (const operator[] would be undefined behaviour).
const nlohmann::json& Field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  if (!object.is_object()) return *kNull;
  auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

// The harness's JSON, or nullopt when it is not a JSON object (the code wrote on fd 3).
std::optional<nlohmann::json> ParseChannel(absl::string_view payload) {
  if (payload.empty() || JsonDepth(payload) > kMaxResultDepth) return std::nullopt;
  nlohmann::json doc = nlohmann::json::parse(payload.begin(), payload.end(), nullptr,
                                             /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  return doc;
}

const CodeError kForgedResult{
    "ResultChannelError",
    "the result channel (fd 3) did not hold the sandbox's result; the code must not write to "
    "fd 3",
    std::nullopt};

}  // namespace

PythonSandbox::PythonSandbox(Options options) : options_(std::move(options)) {}

bool PythonSandbox::mounts_proc() const {
  switch (options_.proc) {
    case Options::Proc::kMounted:
      return true;
    case Options::Proc::kNone:
      return false;
    case Options::Proc::kAuto:
      break;
  }
  return !proc_refused_->load(std::memory_order_relaxed);
}

absl::StatusOr<CodeRun> PythonSandbox::Run(absl::string_view code,
                                           const nlohmann::json& context) const {
  static telemetry::CounterFamily& runs = telemetry::DefaultRegistry().Counter(
      "calleval_sandbox_runs_total",
      "Custom metric code run in the sandbox, by outcome: ok, error (the code raised, hit a "
      "limit or left no valid result), unavailable (the sandbox could not run).",
      {"outcome"});
  static telemetry::Histogram& durations =
      telemetry::DefaultRegistry()
          .Histogram("calleval_sandbox_run_duration_seconds",
                     "Wall time of a sandboxed run of custom metric code.", {})
          .WithLabels({});
  const absl::Time start = absl::Now();
  absl::StatusOr<CodeRun> run = RunUncounted(code, context);
  durations.ObserveDuration(absl::Now() - start);
  runs.WithLabels({!run.ok() ? "unavailable" : run->error ? "error" : "ok"}).Increment();
  return run;
}

absl::StatusOr<CodeRun> PythonSandbox::RunUncounted(absl::string_view code,
                                                    const nlohmann::json& context) const {
  RETURN_IF_ERROR(CheckPaths(options_));
  const SandboxLimits& limits = options_.limits;
  std::vector<std::string> args;
  for (int64_t arg : {limits.tmp_bytes, int64_t{kTmpInodes}, int64_t{limits.processes},
                      limits.memory_bytes, WholeSeconds(limits.cpu), limits.output_bytes}) {
    args.push_back(absl::StrCat(arg));
  }
  // Invalid UTF-8 in the code or the context becomes U+FFFD rather than an exception here.
  const nlohmann::json request = {{"code", std::string(code)}, {"context", context}};
  const std::string input = request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);

  ASSIGN_OR_RETURN(Outcome outcome,
                   ExecuteSandboxed(options_, *proc_refused_, /*caps=*/true,
                                    absl::StrCat(kLockDownPy, kRunPy), args, input));
  CodeRun run;
  run.result.set_null_value(google::protobuf::NULL_VALUE);
  run.elapsed = outcome.elapsed;
  if (!Started(outcome)) {
    if (outcome.over_limit != nullptr) {
      run.error = LimitError(outcome, limits);
      return run;
    }
    return NotStarted(outcome, limits);
  }
  if (std::optional<CodeError> error = LimitError(outcome, limits)) {
    run.error = std::move(error);
    return run;
  }
  const absl::string_view payload = absl::string_view(outcome.channel).substr(1);
  if (payload.empty()) {
    run.error = NoResultError(outcome, limits);
    return run;
  }
  std::optional<nlohmann::json> doc = ParseChannel(payload);
  if (!doc) {
    run.error = kForgedResult;
    return run;
  }
  const nlohmann::json& result = Field(*doc, "result");
  if (result.is_boolean()) {
    run.result.set_bool_value(result.get<bool>());
  } else if (result.is_number()) {
    run.result.set_number_value(result.get<double>());
  } else if (result.is_string()) {
    run.result.set_string_value(result.get<std::string>());
  } else if (!result.is_null()) {
    run.error = kForgedResult;
    return run;
  }
  const nlohmann::json& result_set = Field(*doc, "result_set");
  run.result_set = result_set.is_boolean() && result_set.get<bool>();
  const nlohmann::json& explanation = Field(*doc, "explanation");
  if (explanation.is_string()) run.explanation = explanation.get<std::string>();
  const nlohmann::json& error = Field(*doc, "error");
  if (error.is_object()) {
    CodeError e;
    const nlohmann::json& type = Field(error, "type");
    const nlohmann::json& message = Field(error, "message");
    const nlohmann::json& line = Field(error, "line");
    e.type = type.is_string() ? type.get<std::string>() : "Exception";
    if (message.is_string()) e.message = message.get<std::string>();
    if (line.is_number_integer()) e.line = line.get<int>();
    run.error = std::move(e);
  } else if (!error.is_null()) {
    run.error = kForgedResult;
  }
  return run;
}

absl::StatusOr<CodeValidation> PythonSandbox::Validate(absl::string_view code) const {
  RETURN_IF_ERROR(CheckPaths(options_));
  const SandboxLimits& limits = options_.limits;
  ASSIGN_OR_RETURN(Outcome outcome, ExecuteSandboxed(options_, *proc_refused_, /*caps=*/false,
                                                     std::string(kValidatePy), {}, code));

  CodeValidation validation;
  auto fail = [&validation](std::string message) {
    validation.errors.push_back({std::nullopt, std::nullopt, std::move(message)});
    return validation;
  };
  if (!Started(outcome)) return NotStarted(outcome, limits);
  if (std::optional<CodeError> error = LimitError(outcome, limits)) {
    return fail(absl::StrCat("the code could not be checked: ", error->message));
  }
  const absl::string_view payload = absl::string_view(outcome.channel).substr(1);
  if (payload.empty()) {
    return fail(
        absl::StrCat("the code could not be checked: ", NoResultError(outcome, limits).message));
  }
  std::optional<nlohmann::json> doc = ParseChannel(payload);
  if (!doc || !Field(*doc, "errors").is_array()) {
    return fail("the code could not be checked: the parser's answer was not readable");
  }
  for (const nlohmann::json& item : Field(*doc, "errors")) {
    if (!item.is_object()) continue;
    CodeIssue issue;
    if (Field(item, "line").is_number_integer()) issue.line = Field(item, "line").get<int>();
    if (Field(item, "column").is_number_integer()) issue.column = Field(item, "column").get<int>();
    if (Field(item, "message").is_string())
      issue.message = Field(item, "message").get<std::string>();
    validation.errors.push_back(std::move(issue));
  }
  validation.valid = validation.errors.empty();
  return validation;
}

}  // namespace calleval::judges

// The code-as-judge sandbox (docs/api.md §6): hostile snippets are contained with a clear error and
// leave the test process (standing in for the service) unharmed; results, explanations and
// errors of ordinary snippets come back intact; Validate reports syntax errors and snippets
// that never set the result. Run as root, one test re-runs the smoke tests as uid 65534.
//
// Every test runs three ways: with a /proc of the sandbox's own, with none, and as in a
// container whose runtime masks parts of /proc (bwrap started in a user and mount namespace
// where /proc/sys is covered by a bind mount, as Docker, podman and containerd leave it), where
// the kernel refuses a new proc mount and the default sandbox goes on without one.

#include "services/judges/sandbox.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::judges {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Optional;

int OpenFdCount() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Where the sandbox's /proc comes from.
enum class ProcSetup { kMounted, kNone, kMaskedByAContainer };

// A "bwrap" that starts the real one as a container runtime would leave it: in a user and mount
// namespace of its own with /proc/sys covered by a bind mount (runtimes bind it read-only and
// mask /proc/kcore and others). Written once per test process and removed when it exits.
class ContainerBwrap {
 public:
  ContainerBwrap()
      : path_((fs::path(::testing::TempDir()) / absl::StrCat("bwrap_in_a_container_", getpid()))
                  .string()) {
    std::ofstream(path_) << "#!/bin/sh\n"
                            "exec /usr/bin/unshare --user --map-root-user --mount /bin/sh -c "
                            "'/usr/bin/mount --bind /proc/sys /proc/sys && exec /usr/bin/bwrap "
                            "\"$@\"' sh \"$@\"\n";
    fs::permissions(path_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
  }
  ~ContainerBwrap() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string& BwrapInAContainer() {
  static const ContainerBwrap script;
  return script.path();
}

PythonSandbox::Options OptionsFor(ProcSetup setup) {
  PythonSandbox::Options options;
  switch (setup) {
    case ProcSetup::kMounted:
      options.proc = PythonSandbox::Options::Proc::kMounted;
      break;
    case ProcSetup::kNone:
      options.proc = PythonSandbox::Options::Proc::kNone;
      break;
    case ProcSetup::kMaskedByAContainer:
      options.proc = PythonSandbox::Options::Proc::kAuto;
      options.bwrap = BwrapInAContainer();
      break;
  }
  return options;
}

class SandboxTest : public ::testing::TestWithParam<ProcSetup> {
 protected:
  SandboxTest() : sandbox_(OptionsFor(GetParam())) {}
  bool HasProc() const { return GetParam() == ProcSetup::kMounted; }

  void SetUp() override { fds_before_ = OpenFdCount(); }
  void TearDown() override {
    // Every run closed its pipes and reaped its processes.
    EXPECT_EQ(OpenFdCount(), fds_before_);
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
  }

  PythonSandbox::Options Limited(absl::Duration cpu, absl::Duration wall) const {
    PythonSandbox::Options options = OptionsFor(GetParam());
    options.limits.cpu = cpu;
    options.limits.wall = wall;
    return options;
  }

  CodeRun MustRun(const PythonSandbox& sandbox, absl::string_view code,
                  const nlohmann::json& context = nlohmann::json::object()) {
    absl::StatusOr<CodeRun> run = sandbox.Run(code, context);
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? *std::move(run) : CodeRun{};
  }
  CodeRun MustRun(absl::string_view code,
                  const nlohmann::json& context = nlohmann::json::object()) {
    return MustRun(sandbox_, code, context);
  }

  // A benign snippet right after a hostile one: the sandbox (and the process) still work.
  void ExpectHealthy() {
    CodeRun run =
        MustRun("metric['result'] = context['x'] * 2\nmetric['explanation'] = 'ok'", {{"x", 21}});
    EXPECT_FALSE(run.error.has_value()) << run.error->type << ": " << run.error->message;
    EXPECT_EQ(run.result.number_value(), 42);
    EXPECT_EQ(run.explanation, "ok");
  }

  // Runs a hostile snippet expected to end with `type`; then checks the sandbox still works.
  CodeRun ExpectContained(absl::string_view code, absl::string_view type,
                          const PythonSandbox* sandbox = nullptr) {
    CodeRun run = MustRun(sandbox != nullptr ? *sandbox : sandbox_, code);
    EXPECT_TRUE(run.error.has_value()) << "no error; explanation: " << run.explanation;
    if (run.error) {
      EXPECT_EQ(run.error->type, type) << run.error->message;
      EXPECT_FALSE(run.error->message.empty());
    }
    ExpectHealthy();
    return run;
  }

  // Runs a snippet that catches its own failures and reports them; expects no error.
  CodeRun ExpectReported(absl::string_view code) {
    CodeRun run = MustRun(code);
    EXPECT_FALSE(run.error.has_value()) << run.error->type << ": " << run.error->message;
    ExpectHealthy();
    return run;
  }

  PythonSandbox sandbox_;
  int fds_before_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Ordinary snippets.

TEST_P(SandboxTest, BooleanResultAndExplanation) {
  CodeRun run = MustRun(
      "longest = max((s['duration_ms'] for s in context['silence']['silences']), default=0)\n"
      "metric['result'] = longest < 10000\n"
      "metric['explanation'] = f\"longest silence {longest} ms\"\n",
      {{"silence",
        {{"count", 2}, {"silences", {{{"duration_ms", 1200}}, {{"duration_ms", 800}}}}}}});
  EXPECT_FALSE(run.error.has_value());
  EXPECT_TRUE(run.result_set);
  EXPECT_TRUE(run.result.bool_value());
  EXPECT_EQ(run.explanation, "longest silence 1200 ms");
  EXPECT_GT(run.elapsed, absl::ZeroDuration());
}

TEST_P(SandboxTest, NumberStringAndContextValues) {
  CodeRun number = MustRun("metric['result'] = context['silence']['count'] + 0.5",
                           {{"silence", {{"count", 3}}}});
  EXPECT_FALSE(number.error.has_value());
  EXPECT_DOUBLE_EQ(number.result.number_value(), 3.5);

  CodeRun text = MustRun("metric['result'] = 'long' if context['call']['d'] > 600 else 'short'",
                         {{"call", {{"d", 601}}}});
  EXPECT_EQ(text.result.string_value(), "long");

  CodeRun unicode = MustRun(
      "metric['result'] = 'h\\u00e9llo \\U0001F600'\n"
      "metric['explanation'] = context['t']",
      {{"t", "caf\xc3\xa9"}});
  EXPECT_EQ(unicode.result.string_value(), "h\xc3\xa9llo \xf0\x9f\x98\x80");
  EXPECT_EQ(unicode.explanation, "caf\xc3\xa9");

  CodeRun nulls = MustRun("metric['result'] = context['latency'] is None", {{"latency", nullptr}});
  EXPECT_TRUE(nulls.result.bool_value());
}

TEST_P(SandboxTest, ExplanationIsConvertedToText) {
  CodeRun run = MustRun("metric['result'] = 1\nmetric['explanation'] = {'a': [1, 2]}");
  EXPECT_EQ(run.explanation, "{'a': [1, 2]}");
  CodeRun none = MustRun("metric['result'] = 1\nmetric['explanation'] = None");
  EXPECT_EQ(none.explanation, "");
}

TEST_P(SandboxTest, NeverSettingTheResultIsNotAnError) {
  CodeRun run = MustRun("x = 1 + 1");
  EXPECT_FALSE(run.error.has_value());
  EXPECT_FALSE(run.result_set);
  EXPECT_TRUE(run.result.has_null_value());
}

TEST_P(SandboxTest, ExceptionsReportTypeMessageAndLine) {
  CodeRun run = MustRun("metric['result'] = 1\n\ndef f(x):\n    return x / 0\nf(2)\n");
  ASSERT_TRUE(run.error.has_value());
  EXPECT_EQ(run.error->type, "ZeroDivisionError");
  EXPECT_EQ(run.error->message, "division by zero");
  EXPECT_THAT(run.error->line, Optional(4));  // the deepest line of the snippet
  EXPECT_TRUE(run.result_set);                // what it set before failing is kept

  CodeRun syntax = MustRun("metric['result'] = (1,\n");
  ASSERT_TRUE(syntax.error.has_value());
  EXPECT_EQ(syntax.error->type, "SyntaxError");
  EXPECT_THAT(syntax.error->line, Optional(1));

  CodeRun key = MustRun("a = 1\nmetric['result'] = context['missing']");
  ASSERT_TRUE(key.error.has_value());
  EXPECT_EQ(key.error->type, "KeyError");
  EXPECT_EQ(key.error->message, "'missing'");
  EXPECT_THAT(key.error->line, Optional(2));
}

TEST_P(SandboxTest, LargeContextRoundTrip) {
  std::string blob(1 << 20, 'x');
  for (size_t i = 0; i < blob.size(); i += 97) blob[i] = static_cast<char>('a' + i % 26);
  nlohmann::json turns = nlohmann::json::array();
  for (int i = 0; i < 2000; ++i) turns.push_back({{"role", "user"}, {"content", "hello"}});
  const nlohmann::json context = {{"blob", blob}, {"transcript", turns}};
  CodeRun run = MustRun(
      "import hashlib\n"
      "metric['result'] = len(context['blob']) + len(context['transcript'])\n"
      "metric['explanation'] = hashlib.sha256(context['blob'].encode()).hexdigest()[:16]",
      context);
  ASSERT_FALSE(run.error.has_value()) << run.error->message;
  EXPECT_EQ(run.result.number_value(), (1 << 20) + 2000);
  EXPECT_EQ(run.explanation.size(), 16u);
}

TEST_P(SandboxTest, ConcurrentRunsFromFourThreads) {
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t, &ok] {
      for (int i = 0; i < 3; ++i) {
        absl::StatusOr<CodeRun> run = sandbox_.Run(
            "metric['result'] = context['t'] * 100 + context['i']", {{"t", t}, {"i", i}});
        if (run.ok() && !run->error && run->result.number_value() == t * 100 + i) ++ok[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(ok, ::testing::Each(3));
}

TEST_P(SandboxTest, HugeExplanationIsTruncated) {
  CodeRun run = MustRun("metric['result'] = True\nmetric['explanation'] = 'y' * 1000000");
  EXPECT_FALSE(run.error.has_value());
  EXPECT_TRUE(run.result.bool_value());
  EXPECT_LE(run.explanation.size(), size_t{64} << 10);
  EXPECT_TRUE(absl::EndsWith(run.explanation, "[truncated]"));
}

// ---------------------------------------------------------------------------------------------
// Bad results.

TEST_P(SandboxTest, WrongResultTypes) {
  for (const char* value : {"{1, 2}", "object()", "[1]", "{'a': 1}", "b'x'"}) {
    SCOPED_TRACE(value);
    CodeRun run = ExpectContained(absl::StrCat("metric['result'] = ", value), "TypeError");
    EXPECT_THAT(run.error->message,
                HasSubstr("metric['result'] must be a bool, number, string or null"));
    EXPECT_TRUE(run.result.has_null_value());
  }
  CodeRun nan = ExpectContained("metric['result'] = float('nan')", "ValueError");
  EXPECT_THAT(nan.error->message, HasSubstr("finite"));
}

TEST_P(SandboxTest, HostileStrOnExplanation) {
  ExpectContained(
      "class E:\n    def __str__(self):\n        raise RuntimeError('no text')\n"
      "metric['result'] = 1\nmetric['explanation'] = E()",
      "RuntimeError");
}

TEST_P(SandboxTest, SysExit) {
  CodeRun run = ExpectContained("import sys\nsys.exit(3)", "SystemExit");
  EXPECT_THAT(run.error->message, HasSubstr("sys.exit(3)"));
  EXPECT_THAT(run.error->line, Optional(2));
  ExpectContained("raise SystemExit", "SystemExit");
}

TEST_P(SandboxTest, OsExitWithoutResult) {
  CodeRun run = ExpectContained("import os\nos._exit(5)", "Exited");
  EXPECT_THAT(run.error->message, HasSubstr("status 5"));
}

TEST_P(SandboxTest, ImportOfMissingModule) {
  CodeRun run = ExpectContained("x = 1\nimport does_not_exist_anywhere", "ModuleNotFoundError");
  EXPECT_THAT(run.error->line, Optional(2));
  // Nothing of the service's Python either: -I -S, no site-packages.
  ExpectContained("import requests", "ModuleNotFoundError");
}

TEST_P(SandboxTest, DeepRecursion) {
  CodeRun run = ExpectContained("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError");
  EXPECT_THAT(run.error->line, Optional(2));
}

// ---------------------------------------------------------------------------------------------
// Hostile snippets: the file system.

TEST_P(SandboxTest, ReadEtcPasswd) {
  CodeRun run =
      ExpectContained("metric['result'] = open('/etc/passwd').read()", "FileNotFoundError");
  EXPECT_TRUE(run.result.has_null_value());
  ExpectReported(
      "import os\nmetric['result'] = sorted(os.listdir('/'))\n"
      "metric['result'] = ','.join(metric['result'])");
  CodeRun root = MustRun("import os\nmetric['result'] = ','.join(sorted(os.listdir('/')))");
  EXPECT_EQ(root.result.string_value(), "bin,dev,lib,lib64,proc,tmp,usr");
}

TEST_P(SandboxTest, ReadTheDataDir) {
  // A secret in a directory of the service (its data dir), and the test's own files.
  const fs::path dir = fs::path(::testing::TempDir()) / absl::StrCat("sandbox_data_", getpid());
  fs::create_directories(dir);
  const fs::path secret = dir / "calleval.db";
  std::ofstream(secret) << "SECRET-DATA-DIR-CONTENT";
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  const std::string cwd = fs::current_path().string();
  const nlohmann::json context = {{"paths",
                                   {secret.string(), exe, cwd + "/CMakeCache.txt",
                                    "/work/main/CMakeLists.txt", "/root/.bashrc"}}};
  CodeRun run = MustRun(
      "found = []\n"
      "for p in context['paths']:\n"
      "    try:\n"
      "        found.append(open(p, 'rb').read(100).decode('latin-1'))\n"
      "    except OSError as e:\n"
      "        pass\n"
      "metric['result'] = len(found)\n"
      "metric['explanation'] = repr(found)",
      context);
  EXPECT_FALSE(run.error.has_value());
  EXPECT_EQ(run.result.number_value(), 0) << run.explanation;
  EXPECT_THAT(run.explanation, ::testing::Not(HasSubstr("SECRET")));
  ExpectContained(absl::StrCat("metric['result'] = open('", secret.string(), "').read()"),
                  "FileNotFoundError");
  fs::remove_all(dir);
}

TEST_P(SandboxTest, WriteOutsideTmp) {
  CodeRun run = ExpectReported(
      "import os\n"
      "failed = []\n"
      "for p in ['/usr/x', '/usr/lib/x', '/home/x', '/x', 'in_cwd', '/dev/x', '/dev/shm/x',\n"
      "          '/proc/x', '/bin/x']:\n"
      "    try:\n"
      "        with open(p, 'w') as f:\n"
      "            f.write('x')\n"
      "    except OSError as e:\n"
      "        failed.append(p)\n"
      "metric['result'] = len(failed)\n"
      "metric['explanation'] = os.getcwd()");
  EXPECT_EQ(run.result.number_value(), 9);
  EXPECT_FALSE(fs::exists("/usr/x"));
  EXPECT_FALSE(fs::exists("/x"));
  // /tmp is writable (and private).
  CodeRun tmp = MustRun(
      "open('/tmp/scratch', 'w').write('abc')\nmetric['result'] = open('/tmp/scratch').read()");
  EXPECT_EQ(tmp.result.string_value(), "abc");
  CodeRun fresh = MustRun("import os\nmetric['result'] = len(os.listdir('/tmp'))");
  EXPECT_EQ(fresh.result.number_value(), 0);  // every run gets a new, empty /tmp
}

TEST_P(SandboxTest, FillTmp) {
  const absl::Time start = absl::Now();
  CodeRun big = ExpectReported(
      "chunk = b'x' * (1 << 20)\n"
      "n = 0\n"
      "try:\n"
      "    for i in range(64):\n"
      "        with open('/tmp/f%d' % i, 'wb') as f:\n"
      "            for _ in range(4):\n"
      "                f.write(chunk)\n"
      "                f.flush()\n"
      "                n += 1\n"
      "except OSError as e:\n"
      "    metric['explanation'] = str(e)\n"
      "metric['result'] = n");
  EXPECT_THAT(big.explanation, HasSubstr("No space left on device"));
  EXPECT_LE(big.result.number_value(), 16);
  CodeRun many = ExpectReported(
      "n = 0\n"
      "try:\n"
      "    for i in range(100000):\n"
      "        open('/tmp/%d' % i, 'w').close()\n"
      "        n += 1\n"
      "except OSError as e:\n"
      "    metric['explanation'] = str(e)\n"
      "metric['result'] = n");
  EXPECT_THAT(many.explanation, HasSubstr("No space left on device"));
  EXPECT_LT(many.result.number_value(), 1100);
  // One file past RLIMIT_FSIZE: EFBIG (Python ignores SIGXFSZ).
  CodeRun file = ExpectReported(
      "try:\n"
      "    with open('/tmp/big', 'wb') as f:\n"
      "        f.seek(17 << 20)\n"
      "        f.write(b'x')\n"
      "except OSError as e:\n"
      "    metric['explanation'] = str(e)\n"
      "metric['result'] = 1");
  EXPECT_THAT(file.explanation, HasSubstr("File too large"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_P(SandboxTest, ProcSysIsReadOnly) {
  CodeRun run = ExpectReported(
      "failed = 0\n"
      "for p in ['/proc/sys/user/max_user_namespaces', '/proc/sys/net/ipv4/ip_forward',\n"
      "          '/proc/sys/kernel/hostname', '/proc/sysrq-trigger']:\n"
      "    try:\n"
      "        open(p, 'w').write('1')\n"
      "    except OSError:\n"
      "        failed += 1\n"
      "metric['result'] = failed");
  EXPECT_EQ(run.result.number_value(), 4);
}

// ---------------------------------------------------------------------------------------------
// Hostile snippets: the network.

TEST_P(SandboxTest, TcpToTheInternet) {
  CodeRun run = ExpectContained(
      "import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
      "metric['result'] = True",
      "OSError");
  EXPECT_THAT(run.error->line, Optional(2));
  EXPECT_TRUE(run.result.has_null_value());
}

TEST_P(SandboxTest, TcpToAHostListener) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 8), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  CodeRun run =
      ExpectContained(absl::StrCat("import socket\ns = socket.create_connection(('127.0.0.1', ",
                                   port, "), timeout=3)\nmetric['result'] = True"),
                      "ConnectionRefusedError");
  EXPECT_EQ(accept(listener, nullptr, nullptr), -1);  // nobody ever connected
  close(listener);
}

TEST_P(SandboxTest, UdpSendto) {
  ExpectContained(
      "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
      "s.sendto(b'x' * 100, ('8.8.8.8', 53))\nmetric['result'] = True",
      "OSError");
}

TEST_P(SandboxTest, DnsLookup) {
  CodeRun run = ExpectContained(
      "import socket\nmetric['result'] = str(socket.getaddrinfo('example.com', 80))", "gaierror");
  EXPECT_THAT(run.error->line, Optional(2));
}

// ---------------------------------------------------------------------------------------------
// Hostile snippets: processes, CPU, memory, output.

TEST_P(SandboxTest, ForkBomb) {
  const absl::Time start = absl::Now();
  CodeRun run = ExpectContained("import os\nwhile True:\n    os.fork()", "BlockingIOError");
  EXPECT_THAT(run.error->message, HasSubstr("Resource temporarily unavailable"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_P(SandboxTest, ForkBombThatSwallowsErrors) {
  PythonSandbox sandbox(Limited(absl::Seconds(1), absl::Seconds(2)));
  const absl::Time start = absl::Now();
  CodeRun run = MustRun(sandbox,
                        "import os\nwhile True:\n    try:\n        os.fork()\n"
                        "    except BaseException:\n        pass");
  ASSERT_TRUE(run.error.has_value());
  EXPECT_THAT(run.error->type, AnyOf("TimeoutError", "CPULimitExceeded"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  ExpectHealthy();
}

TEST_P(SandboxTest, ThreadsCountAsProcesses) {
  ExpectContained(
      "import threading, time\n"
      "ts = [threading.Thread(target=time.sleep, args=(5,)) for _ in range(64)]\n"
      "for t in ts:\n    t.start()",
      "RuntimeError");
}

TEST_P(SandboxTest, BusyLoopHitsTheCpuLimit) {
  PythonSandbox sandbox(Limited(absl::Seconds(1), absl::Seconds(5)));
  const absl::Time start = absl::Now();
  CodeRun run = ExpectContained("x = 0\nwhile True:\n    x += 1", "CPULimitExceeded", &sandbox);
  EXPECT_EQ(run.error->message, "the code used more than 1 s of CPU time");
  EXPECT_THAT(run.error->line, Optional(::testing::AnyOf(2, 3)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

TEST_P(SandboxTest, CpuLimitCannotBeCaughtOrIgnored) {
  PythonSandbox sandbox(Limited(absl::Seconds(1), absl::Seconds(5)));
  CodeRun caught = ExpectContained(
      "while True:\n    try:\n        while True:\n            pass\n"
      "    except BaseException:\n        pass",
      "CPULimitExceeded", &sandbox);
  EXPECT_EQ(caught.error->message, "the code used more than 1 s of CPU time");
  // Ignoring SIGXCPU leaves the hard limit a second later (SIGKILL); so does a loop in C.
  CodeRun ignored = ExpectContained(
      "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
      "CPULimitExceeded", &sandbox);
  EXPECT_EQ(ignored.error->message, "the code used more than 1 s of CPU time");
  ExpectContained("sum(range(10 ** 12))", "CPULimitExceeded", &sandbox);
}

TEST_P(SandboxTest, SleepHitsTheWallClock) {
  PythonSandbox sandbox(Limited(absl::Seconds(5), absl::Seconds(1)));
  const absl::Time start = absl::Now();
  CodeRun run = ExpectContained("import time\ntime.sleep(60)", "TimeoutError", &sandbox);
  EXPECT_EQ(run.error->message, "the code ran longer than 1 s (wall clock)");
  EXPECT_GE(run.elapsed, absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_P(SandboxTest, Allocate2GB) {
  CodeRun run = ExpectContained("x = 1\nb = bytearray(2 * 1024 ** 3)", "MemoryError");
  EXPECT_EQ(run.error->message, "the code ran out of memory (limit 256 MiB)");
  EXPECT_THAT(run.error->line, Optional(2));
  ExpectContained("chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))", "MemoryError");
}

TEST_P(SandboxTest, Print10MB) {
  CodeRun run = ExpectContained("print('x' * 10_000_000)", "OutputLimitExceeded");
  EXPECT_EQ(run.error->message, "the code wrote more than 64 KiB to stdout");
  CodeRun err =
      ExpectContained("import sys\nfor i in range(100000):\n    sys.stderr.write('y' * 100)",
                      "OutputLimitExceeded");
  EXPECT_EQ(err.error->message, "the code wrote more than 64 KiB to stderr");
  // Small output is fine.
  ExpectReported("print('hello')\nmetric['result'] = 1");
}

// ptrace is refused by the sandbox's seccomp filter, which ends the code at once: the error
// names the blocked call instead of the code sitting out the wall clock.
TEST_P(SandboxTest, PtraceIsReportedAsABlockedSystemCall) {
  PythonSandbox sandbox(Limited(absl::Seconds(5), absl::Seconds(4)));
  const absl::Time start = absl::Now();
  CodeRun traceme = ExpectContained(
      "import ctypes\nctypes.CDLL(None).ptrace(0, 0, 0, 0)\nmetric['result'] = True",
      "BlockedSystemCall", &sandbox);
  EXPECT_EQ(traceme.error->message, "blocked system call: ptrace");
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // Attaching to another process of the sandbox, errors swallowed: still ended and reported.
  CodeRun attach = ExpectContained(
      "import ctypes, os\n"
      "try:\n"
      "    ctypes.CDLL(None, use_errno=True).ptrace(16, os.getppid(), 0, 0)\n"
      "except Exception:\n"
      "    pass\n"
      "metric['result'] = 'traced'",
      "BlockedSystemCall", &sandbox);
  EXPECT_EQ(attach.error->message, "blocked system call: ptrace");
  EXPECT_LT(attach.elapsed, absl::Seconds(3));
}

TEST_P(SandboxTest, KillParentAndInit) {
  CodeRun run = ExpectReported(
      "import os, signal\n"
      "for pid in (os.getppid(), 1):\n"
      "    try:\n"
      "        os.kill(pid, signal.SIGKILL)\n"
      "    except OSError:\n"
      "        pass\n"
      "metric['result'] = 'alive'\n"
      "metric['explanation'] = str(os.getppid())");
  EXPECT_EQ(run.result.string_value(), "alive");
  EXPECT_EQ(run.explanation, "1");  // the sandbox's own init, not the service
  CodeRun all = MustRun(
      "import os\ntry:\n    os.kill(-1, 9)\nexcept OSError:\n    pass\nmetric['result'] = 1");
  EXPECT_EQ(all.result.number_value(), 1);
  ExpectHealthy();
}

TEST_P(SandboxTest, ProcessesOfTheHostAreInvisible) {
  CodeRun run = ExpectReported(
      "import os\n"
      "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
      "metric['result'] = len(pids)\n"
      "try:\n"
      "    metric['explanation'] = open('/proc/1/environ', 'rb').read().decode() + '|' + "
      "open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode()\n"
      "except OSError as e:\n"
      "    metric['explanation'] = type(e).__name__");
  if (HasProc()) {
    EXPECT_LE(run.result.number_value(), 3);
    // pid 1 is the sandbox's own init (bwrap), with an empty environment.
    EXPECT_EQ(run.explanation, "|/usr/bin/bwrap");
  } else {
    EXPECT_EQ(run.result.number_value(), 0);
    EXPECT_EQ(run.explanation, "FileNotFoundError");
  }
}

// The sandbox has the /proc its setup gives, and the root looks the same either way; in a
// container that masks /proc, the default sandbox noticed and stopped asking for one.
TEST_P(SandboxTest, ProcFollowsTheSetup) {
  CodeRun run = ExpectReported(
      "import os\n"
      "metric['result'] = ','.join(sorted(os.listdir('/')))\n"
      "metric['explanation'] = str(os.path.exists('/proc/self'))");
  EXPECT_EQ(run.result.string_value(), "bin,dev,lib,lib64,proc,tmp,usr");
  EXPECT_EQ(run.explanation, HasProc() ? "True" : "False");
  EXPECT_EQ(sandbox_.mounts_proc(), HasProc());
}

// A user namespace inside the sandbox would give the code a full set of capabilities in it.
// Refused by the seccomp filter whether or not there is a /proc to set max_user_namespaces in.
TEST_P(SandboxTest, NestedUserNamespacesAreRefused) {
  CodeRun run = ExpectReported(
      "import ctypes, os, subprocess, errno\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "out = []\n"
      "def call(rc):\n"
      "    out.append('%d:%s' % (rc, errno.errorcode.get(ctypes.get_errno(), '0')))\n"
      "call(libc.unshare(0x10000000))\n"                       // CLONE_NEWUSER
      "call(libc.unshare(0x10000000 | 0x00020000))\n"          // ... | CLONE_NEWNS
      "call(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0))\n"  // clone(NEWUSER | SIGCHLD)
      "args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17)\n"  // struct clone_args
      "call(libc.syscall(435, args, 88))\n"                    // clone3
      "p = subprocess.run(['/usr/bin/unshare', '--user', '/usr/bin/true'], "
      "capture_output=True)\n"
      "out.append(str(p.returncode != 0))\n"
      "metric['result'] = ','.join(out)");
  EXPECT_EQ(run.result.string_value(), "-1:EPERM,-1:EPERM,-1:EPERM,-1:ENOSYS,True");
}

TEST_P(SandboxTest, EnvironmentOfTheServiceIsInvisible) {
  setenv("CALLEVAL_SANDBOX_TEST_SECRET", "hunter2", 1);
  CodeRun run = ExpectReported(
      "import os\n"
      "metric['result'] = ','.join(sorted(os.environ))\n"
      "metric['explanation'] = repr(dict(os.environ))");
  unsetenv("CALLEVAL_SANDBOX_TEST_SECRET");
  EXPECT_THAT(run.explanation, ::testing::Not(HasSubstr("hunter2")));
  for (absl::string_view key : absl::StrSplit(run.result.string_value(), ',')) {
    EXPECT_THAT(std::string(key), AnyOf("PATH", "LANG", "PWD", "LC_CTYPE")) << key;
  }
}

TEST_P(SandboxTest, CapabilitiesAreZero) {
  // Asked of the kernel (capget, prctl), which needs no /proc.
  CodeRun asked = ExpectReported(
      "import ctypes\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "header = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
      "data = (ctypes.c_uint32 * 6)()\n"
      "assert libc.capget(header, data) == 0\n"
      "bounding = sum(libc.prctl(23, c, 0, 0, 0) == 1 for c in range(64))\n"  // CAPBSET_READ
      "ambient = sum(libc.prctl(47, 1, c, 0, 0) == 1 for c in range(64))\n"   // AMBIENT_IS_SET
      "metric['result'] = 'caps=%s bounding=%d ambient=%d no_new_privs=%d' % "
      "(','.join(map(str, data)), bounding, ambient, libc.prctl(39, 0, 0, 0, 0))");
  EXPECT_EQ(asked.result.string_value(), "caps=0,0,0,0,0,0 bounding=0 ambient=0 no_new_privs=1");
  if (!HasProc()) return;
  CodeRun run = ExpectReported(
      "caps = {}\n"
      "for line in open('/proc/self/status'):\n"
      "    k, _, v = line.partition(':')\n"
      "    if k.startswith('Cap') or k == 'NoNewPrivs':\n"
      "        caps[k] = v.strip()\n"
      "metric['result'] = ' '.join('%s=%s' % kv for kv in sorted(caps.items()))");
  EXPECT_EQ(run.result.string_value(),
            "CapAmb=0000000000000000 CapBnd=0000000000000000 CapEff=0000000000000000 "
            "CapInh=0000000000000000 CapPrm=0000000000000000 NoNewPrivs=1");
}

TEST_P(SandboxTest, CtypesSegfault) {
  CodeRun run = ExpectContained("import ctypes\nctypes.string_at(0)", "Crashed");
  EXPECT_EQ(run.error->message, "the code crashed (signal 11)");
}

TEST_P(SandboxTest, CtypesMountUnshareSetnsFail) {
  CodeRun run = ExpectReported(
      "import ctypes, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "out = []\n"
      "out.append(libc.mount(b'tmpfs', b'/usr', b'tmpfs', 0, None))\n"
      "out.append(libc.mount(None, b'/usr', None, 4096 | 32, None))\n"  // remount rw
      "out.append(libc.umount2(b'/proc', 2))\n"
      "out.append(libc.unshare(0x10000000))\n"  // CLONE_NEWUSER
      "out.append(libc.unshare(0x00020000))\n"  // CLONE_NEWNS
      "out.append(libc.unshare(0x40000000))\n"  // CLONE_NEWNET
      "try:\n"
      "    fd = os.open('/proc/1/ns/mnt', os.O_RDONLY)\n"
      "except OSError:\n"
      "    fd = libc.syscall(434, 1, 0)\n"  // pidfd_open(1): setns takes it too

      "out.append(libc.setns(fd, 0))\n"
      "out.append(libc.chroot(b'/tmp'))\n"
      "out.append(libc.setuid(1000))\n"
      "metric['result'] = ','.join(map(str, out))");
  EXPECT_EQ(run.result.string_value(), "-1,-1,-1,-1,-1,-1,-1,-1,-1");
}

TEST_P(SandboxTest, SubprocessStaysInside) {
  CodeRun run = ExpectReported(
      "import subprocess\n"
      "p = subprocess.run(['/usr/bin/id'], capture_output=True, text=True)\n"
      "q = subprocess.run(['/usr/bin/cat', '/etc/hostname'], capture_output=True, text=True)\n"
      "metric['result'] = p.stdout.strip()\n"
      "metric['explanation'] = str(q.returncode)");
  // uid 0 of the sandbox's own user namespace, without capabilities.
  EXPECT_THAT(run.result.string_value(), HasSubstr("uid=0"));
  EXPECT_EQ(run.explanation, "1");
}

TEST_P(SandboxTest, PtraceOfTheSandboxInit) {
  // Tracing the sandbox's init would stop it and stall the run until the wall clock; the call
  // is refused instead, and the error says which call it was rather than "timed out".
  PythonSandbox sandbox(Limited(absl::Seconds(1), absl::Seconds(5)));
  CodeRun run = MustRun(sandbox,
                        "import ctypes\n"
                        "libc = ctypes.CDLL(None, use_errno=True)\n"
                        "metric['result'] = libc.ptrace(16, 1, 0, 0)\n");
  ASSERT_TRUE(run.error.has_value());
  EXPECT_EQ(run.error->type, "BlockedSystemCall");
  EXPECT_EQ(run.error->message, "blocked system call: ptrace");
  EXPECT_LT(run.elapsed, absl::Seconds(3));
  ExpectHealthy();
}

TEST_P(SandboxTest, TooManyOpenFiles) {
  CodeRun run =
      ExpectContained("fs = []\nwhile True:\n    fs.append(open('/dev/null'))", "OSError");
  EXPECT_THAT(run.error->message, HasSubstr("Too many open files"));
}

// ---------------------------------------------------------------------------------------------
// Hostile snippets: the result channel (fd 3).

TEST_P(SandboxTest, JunkOnTheResultChannel) {
  CodeRun run = ExpectContained("import os\nos.write(3, b'junk{')\nmetric['result'] = 1",
                                "ResultChannelError");
  EXPECT_THAT(run.error->message, HasSubstr("fd 3"));
  ExpectContained("import os\nos.write(3, b'[' * 60000)\nos._exit(0)", "ResultChannelError");
  ExpectContained("import os\nos.write(3, b'{\"result\": [1]}')\nos._exit(0)",
                  "ResultChannelError");
  ExpectContained("import os\nos.write(3, b'\\xff\\xfe')\nos._exit(0)", "ResultChannelError");
  ExpectContained("import os\nos.write(3, b'x' * 200000)", "OutputLimitExceeded");
}

TEST_P(SandboxTest, ClosedResultChannel) {
  CodeRun run = ExpectContained("import os\nos.close(3)\nmetric['result'] = 1", "Exited");
  EXPECT_THAT(run.error->message, HasSubstr("without reporting a result"));
}

TEST_P(SandboxTest, ForgedResultOnlyAffectsItsOwnRun) {
  // A snippet can write a result of its own making and leave: it only lies about itself.
  CodeRun run = MustRun(
      "import os\nos.write(3, b'{\"result\":true,\"result_set\":true,\"explanation\":\"x\","
      "\"error\":null}')\nos._exit(0)");
  EXPECT_TRUE(run.result.bool_value());
  ExpectHealthy();
}

// ---------------------------------------------------------------------------------------------
// Validate.

TEST_P(SandboxTest, ValidateAcceptsAssignments) {
  for (const char* code :
       {"metric['result'] = True", "metric[\"result\"] = 1\nmetric['explanation'] = 'x'",
        "if context['x']:\n    metric['result'] = 1\nelse:\n    metric['result'] = 2",
        "def f():\n    metric['result'] += 1\nf()", "metric['result']: int = 3",
        "metric.update(result=1)", "metric.__setitem__('result', 1)",
        "metric['result'], metric['explanation'] = 1, 'x'"}) {
    SCOPED_TRACE(code);
    absl::StatusOr<CodeValidation> v = sandbox_.Validate(code);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(v->valid);
    EXPECT_TRUE(v->errors.empty());
  }
}

TEST_P(SandboxTest, ValidateReportsSyntaxErrors) {
  absl::StatusOr<CodeValidation> v = sandbox_.Validate("x = 1\nmetric['result'] = (1,\n");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->valid);
  ASSERT_EQ(v->errors.size(), 1u);
  EXPECT_THAT(v->errors[0].line, Optional(2));
  EXPECT_THAT(v->errors[0].column, Optional(20));
  EXPECT_EQ(v->errors[0].message, "'(' was never closed");

  absl::StatusOr<CodeValidation> indent = sandbox_.Validate("metric['result'] = 1\n  x = 2");
  ASSERT_TRUE(indent.ok());
  ASSERT_EQ(indent->errors.size(), 1u);
  EXPECT_EQ(indent->errors[0].message, "unexpected indent");
  EXPECT_THAT(indent->errors[0].line, Optional(2));

  absl::StatusOr<CodeValidation> nul = sandbox_.Validate(std::string("x = 1\0", 6));
  ASSERT_TRUE(nul.ok());
  EXPECT_FALSE(nul->valid);
}

TEST_P(SandboxTest, ValidateReportsAMissingResult) {
  for (const char* code : {"x = 1", "metric['explanation'] = 'x'", "result = 1",
                           "metric['result']: int", "print(metric['result'])"}) {
    SCOPED_TRACE(code);
    absl::StatusOr<CodeValidation> v = sandbox_.Validate(code);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_FALSE(v->valid);
    ASSERT_EQ(v->errors.size(), 1u);
    EXPECT_EQ(v->errors[0].message, "the code never assigns metric['result']");
    EXPECT_FALSE(v->errors[0].line.has_value());
    EXPECT_FALSE(v->errors[0].column.has_value());
  }
}

TEST_P(SandboxTest, ValidateSurvivesHostileInput) {
  absl::StatusOr<CodeValidation> deep = sandbox_.Validate(std::string(200000, '(') + "1");
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_FALSE(deep->valid);
  absl::StatusOr<CodeValidation> binary = sandbox_.Validate("\xff\xfe\x00\x01 metric");
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_FALSE(binary->valid);
  ExpectHealthy();
}

// ---------------------------------------------------------------------------------------------
// No sandbox, no run.

TEST_P(SandboxTest, MissingBwrapIsUnavailable) {
  PythonSandbox::Options options;
  options.bwrap = "/nonexistent/bwrap";
  PythonSandbox sandbox(options);
  absl::StatusOr<CodeRun> run = sandbox.Run("metric['result'] = 1", {});
  EXPECT_EQ(run.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(run.status().message(), HasSubstr("the code sandbox is unavailable: "));
  EXPECT_EQ(sandbox.Validate("metric['result'] = 1").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_P(SandboxTest, BrokenSandboxIsUnavailable) {
  // A "bwrap" that never starts the harness (as when namespaces are refused).
  PythonSandbox::Options options;
  options.bwrap = "/usr/bin/false";
  PythonSandbox sandbox(options);
  absl::StatusOr<CodeRun> run = sandbox.Run("metric['result'] = 1", {});
  EXPECT_EQ(run.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(run.status().message(), HasSubstr("bwrap exited with status 1"));

  PythonSandbox::Options python;
  python.python = "/opt/python3";
  EXPECT_EQ(PythonSandbox(python).Run("metric['result'] = 1", {}).status().code(),
            absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------------------------------------
// The same, from a service that is not root (re-run as uid 65534 when the tests run as root).

class SandboxSmoke : public SandboxTest {};

TEST_P(SandboxSmoke, RunsAndContains) {
  CodeRun run = MustRun("import os\nmetric['result'] = os.getuid()\n");
  EXPECT_FALSE(run.error.has_value());
  EXPECT_EQ(run.result.number_value(), 0);
  ExpectContained("open('/etc/passwd')", "FileNotFoundError");
  ExpectContained("import os\nwhile True:\n    os.fork()", "BlockingIOError");
  ExpectContained("b = bytearray(2 * 1024 ** 3)", "MemoryError");
  ExpectContained("import ctypes\nctypes.string_at(0)", "Crashed");
  CodeRun fill = ExpectReported(
      "try:\n    f = open('/tmp/x', 'wb')\n    while True:\n        f.write(b'x' * 65536)\n"
      "        f.flush()\nexcept OSError as e:\n    metric['explanation'] = str(e)\n"
      "metric['result'] = 1");
  EXPECT_THAT(fill.explanation, AnyOf(HasSubstr("No space left"), HasSubstr("File too large")));
  CodeRun caps = MustRun(
      "import ctypes\n"
      "header = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
      "data = (ctypes.c_uint32 * 6)()\n"
      "ctypes.CDLL(None).capget(header, data)\n"
      "metric['result'] = ','.join(map(str, data))");
  EXPECT_EQ(caps.result.string_value(), "0,0,0,0,0,0");
  absl::StatusOr<CodeValidation> v = sandbox_.Validate("metric['result'] = (");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->valid);
}

constexpr ProcSetup kEverySetup[] = {ProcSetup::kMounted, ProcSetup::kNone,
                                     ProcSetup::kMaskedByAContainer};
std::string SetupName(const ::testing::TestParamInfo<ProcSetup>& info) {
  switch (info.param) {
    case ProcSetup::kMounted:
      return "OwnProc";
    case ProcSetup::kNone:
      return "NoProc";
    case ProcSetup::kMaskedByAContainer:
      return "InAContainer";
  }
  return "Unknown";
}
INSTANTIATE_TEST_SUITE_P(Proc, SandboxTest, ::testing::ValuesIn(kEverySetup), SetupName);
INSTANTIATE_TEST_SUITE_P(Proc, SandboxSmoke, ::testing::ValuesIn(kEverySetup), SetupName);

// The container setup above really masks /proc: a sandbox that insists on mounting one cannot
// start there, and says why.
TEST(SandboxInAContainer, AMountedProcIsRefusedThere) {
  PythonSandbox::Options options = OptionsFor(ProcSetup::kMaskedByAContainer);
  options.proc = PythonSandbox::Options::Proc::kMounted;
  PythonSandbox sandbox(options);
  absl::StatusOr<CodeRun> run = sandbox.Run("metric['result'] = 1", {});
  EXPECT_EQ(run.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(run.status().message(), HasSubstr("Can't mount proc"));
  EXPECT_TRUE(sandbox.mounts_proc());
}

TEST(SandboxNonRoot, SmokeTestsPassAsAnUnprivilegedUser) {
  if (geteuid() != 0) GTEST_SKIP() << "already running as uid " << geteuid();
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  const std::string setpriv = "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups ";
  if (std::system((setpriv + "/usr/bin/test -x '" + exe + "'").c_str()) != 0) {
    GTEST_SKIP() << exe << " is not executable by uid 65534";
  }
  const int status = std::system(
      (setpriv + "'" + exe + "' --gtest_filter='*SandboxSmoke.*' > /dev/null 2>&1").c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "re-run as uid 65534: status " << status;
}

}  // namespace
}  // namespace calleval::judges

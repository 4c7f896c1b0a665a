#include "tests/support/test_s3.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace calleval::testing {
namespace {

constexpr const char* kToolsDir = CALLEVAL_TOOLS_S3_DIR;

// `node` on PATH, as a shell would find it.
std::string FindNode() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/node");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestS3>> TestS3::Start(const std::string& dir,
                                                      const std::string& bucket, int port) {
  const std::string node = FindNode();
  if (node.empty()) {
    return absl::FailedPreconditionError("no `node` on PATH (scripts/setup installs nodejs)");
  }
  const std::string serve = absl::StrCat(kToolsDir, "/serve.js");
  if (!std::filesystem::exists(absl::StrCat(kToolsDir, "/node_modules/s3rver/package.json"))) {
    return absl::FailedPreconditionError(absl::StrCat("s3rver is not installed in ", kToolsDir,
                                                      " (run scripts/setup, or `npm ci` there)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const std::string log = dir + "/serve.log";
  const int err = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Everything the child needs is built before fork(): the test process may have threads.
  const std::string port_text = std::to_string(port);
  std::vector<std::string> argv = {node,       serve,  "--dir",  dir,
                                   "--bucket", bucket, "--port", port_text};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    // Its own process group, so that a stop reaches node and nothing else.
    setpgid(0, 0);
    dup2(out[1], 1);
    if (err >= 0) dup2(err, 2);
    if (in >= 0) dup2(in, 0);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  if (err >= 0) close(err);
  if (in >= 0) close(in);

  // serve.js prints "listening <port>" once the bucket exists and the socket listens.
  std::string printed;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int chosen = 0;
  while (chosen == 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      char buffer[256];
      const ssize_t n = read(out[0], buffer, sizeof(buffer));
      if (n <= 0) break;  // the server exited
      printed.append(buffer, static_cast<size_t>(n));
      for (absl::string_view line : absl::StrSplit(printed, '\n')) {
        if (absl::ConsumePrefix(&line, "listening ") && absl::SimpleAtoi(line, &chosen)) break;
      }
    }
  }
  close(out[0]);
  if (chosen == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return absl::InternalError(absl::StrCat("the test S3 server did not start; see ", log));
  }
  return std::unique_ptr<TestS3>(new TestS3(pid, chosen, dir, bucket));
}

TestS3::~TestS3() { Stop(); }

void TestS3::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 50; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = 0;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = 0;
}

std::string TestS3::Endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }

std::string TestS3::Url(const std::string& prefix) const {
  return absl::StrCat("s3://", bucket_, prefix.empty() ? "" : "/", prefix, "?endpoint=", Endpoint(),
                      "&region=us-east-1");
}

}  // namespace calleval::testing

// calleval: the service. `calleval serve` runs every role (or those named by --roles).

#include <malloc.h>

#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cmd/calleval/server.h"
#include "cmd/calleval/server_config.h"
#include "common/grpc_log.h"
#include "common/log.h"

namespace {

// Request bodies (up to --max-body-bytes) and their parsed copies are mapped on their own and
// unmapped when freed. By default glibc raises its mmap threshold to the largest block freed so
// far (up to 32 MiB), after which such buffers come from the heaps and stay resident: a burst
// of malformed 10 MB bodies left the server at four times its idle size for good
// (bench/abuse_memory.sh). Setting both thresholds turns that adjustment off. Called before
// any thread starts.
void KeepLargeBuffersOffTheHeap() {
  constexpr int kMmapThresholdBytes = 256 << 10;
  constexpr int kTrimThresholdBytes = 1 << 20;
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
}

int Serve(const std::vector<std::string>& args) {
  // SIGTERM/SIGINT are taken synchronously by sigwait below, never by a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  KeepLargeBuffersOffTheHeap();

  bool help = false;
  auto config = calleval::ParseServerConfig(args, &help);
  if (help) {
    std::cout << calleval::ServeHelp();
    return 0;
  }
  if (!config.ok()) {
    // One line naming the flag at fault; the whole table is one --help away.
    std::cerr << "calleval: " << config.status().message()
              << " (calleval serve --help lists the flags)\n";
    return 2;
  }
  // Before any thread starts: every line from here on is the configured log's.
  calleval::LogOptions log;
  log.format = config->log_format;
  log.min_level = config->log_level;
  log.role = config->roles == calleval::AllRoles() ? "all" : absl::StrJoin(config->roles, ",");
  calleval::ConfigureLogging(std::move(log));
  calleval::RouteGrpcLogsToLog();
  auto server = calleval::Server::Start(*config);
  if (!server.ok()) {
    calleval::LogError(absl::StrCat("cannot start: ", server.status().message()));
    return 1;
  }
  if (const auto& bootstrap = (*server)->bootstrap()) {
    std::cout << "Created workspace " << bootstrap->workspace.id << " \""
              << bootstrap->workspace.name << "\" with " << bootstrap->workspace.credit_balance
              << " credits.\nAPI key (shown once, also in " << config->data_dir
              << "/bootstrap-key): " << bootstrap->key.api_key << "\n";
  }
  // Before the HTTP and gRPC lines: whoever reads these stops at the last of them.
  if ((*server)->admin_port() != 0) {
    std::cout << "calleval: metrics on " << (*server)->admin_url() << "\n";
  }
  if ((*server)->media_port() != 0) {
    std::cout << "calleval: phone media on port " << (*server)->media_port() << ", advertised as "
              << (*server)->media_advertised() << "\n";
  }
  if ((*server)->http_port() != 0) {
    std::cout << "calleval: HTTP on " << (*server)->http_base_url() << "\n";
  }
  if ((*server)->grpc_port() != 0) {
    std::cout << "calleval: gRPC on port " << (*server)->grpc_port() << "\n";
  }
  std::cout.flush();
  int received = 0;
  sigwait(&signals, &received);
  calleval::LogInfo("shutting down", {{"signal", received}});
  (*server)->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil is built with mutex deadlock detection on, which costs a graph update on
  // every lock; the service's lock order is simple and tested, so it is switched off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << "calleval: missing command (calleval --help lists them)\n";
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << "usage: calleval COMMAND [flags]\n\ncommands:\n"
                 "  serve   runs the service\n"
                 "  help    prints this help\n\n"
              << calleval::ServeHelp();
    return 0;
  }
  if (args[0] == "serve") return Serve({args.begin() + 1, args.end()});
  std::cerr << "calleval: unknown command " << args[0] << " (calleval --help lists them)\n";
  return 2;
}

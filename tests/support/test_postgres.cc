#include "tests/support/test_postgres.h"

#include <fcntl.h>
#include <grp.h>
#include <glob.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace calleval::testing {
namespace {

// "nobody" on Debian: the server's user when the tests run as root.
constexpr uid_t kUnprivileged = 65534;
constexpr const char* kUser = "calleval";

std::string DataDir(const std::string& dir) { return dir + "/data"; }
std::string SocketDir(const std::string& dir) { return dir + "/socket"; }

// The newest installed server's bin directory (/usr/lib/postgresql/<version>/bin).
absl::StatusOr<std::string> BinDir() {
  glob_t found{};
  std::string best;
  int best_version = -1;
  if (glob("/usr/lib/postgresql/*/bin/postgres", 0, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) {
      const std::string path = found.gl_pathv[i];
      const std::string bin = path.substr(0, path.size() - std::string("/postgres").size());
      const std::string version = std::filesystem::path(bin).parent_path().filename();
      const int v = std::atoi(version.c_str());
      if (v > best_version) {
        best_version = v;
        best = bin;
      }
    }
  }
  globfree(&found);
  if (best.empty()) {
    return absl::FailedPreconditionError(
        "no PostgreSQL server under /usr/lib/postgresql (install Debian's postgresql package: "
        "scripts/setup does)");
  }
  return best;
}

// Runs argv (as "nobody" when root) with output to `log`; returns the pid, or waits for it
// and returns its exit status when `wait`. Everything the child needs is made before fork():
// the test process may have threads.
absl::StatusOr<int> Spawn(const std::vector<std::string>& argv, const std::string& log,
                          bool wait) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char locale[] = "LC_ALL=C";
  char path[] = "PATH=/usr/bin:/bin";
  char* env[] = {locale, path, nullptr};
  const bool drop = geteuid() == 0;
  const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) return absl::InternalError(absl::StrCat("cannot open ", log));
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid < 0) {
    close(out);
    if (in >= 0) close(in);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    // Its own session: the server must not die with the test, nor hold ctest's pipes.
    setsid();
    dup2(out, 1);
    dup2(out, 2);
    if (in >= 0) dup2(in, 0);
    if (drop && (setgroups(0, nullptr) != 0 || setgid(kUnprivileged) != 0 ||
                 setuid(kUnprivileged) != 0)) {
      _exit(126);
    }
    execve(args[0], args.data(), env);
    _exit(127);
  }
  close(out);
  if (in >= 0) close(in);
  if (!wait) return pid;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool Accepting(const std::string& dir) {
  const std::string conninfo =
      absl::StrCat("host=", SocketDir(dir), " dbname=postgres user=", kUser, " connect_timeout=2");
  return PQping(conninfo.c_str()) == PQPING_OK;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The postmaster's pid from data/postmaster.pid, 0 when there is none.
pid_t ServerPid(const std::string& dir) {
  std::ifstream in(DataDir(dir) + "/postmaster.pid");
  long pid = 0;
  in >> pid;
  return static_cast<pid_t>(pid);
}

}  // namespace

absl::StatusOr<TestPostgres> TestPostgres::Start(const std::string& dir, Durability durability) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  // One starter at a time (parallel test processes may all try).
  const int lock = open((dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return absl::InternalError(absl::StrCat("cannot lock ", dir));
  flock(lock, LOCK_EX);
  auto unlock = std::unique_ptr<int, void (*)(int*)>(new int(lock), [](int* fd) {
    flock(*fd, LOCK_UN);
    close(*fd);
    delete fd;
  });
  if (Accepting(dir)) return TestPostgres(dir);

  auto bin = BinDir();
  if (!bin.ok()) return bin.status();
  const std::string log = dir + "/postgres.log";
  chmod(dir.c_str(), 0755);
  if (!std::filesystem::exists(DataDir(dir) + "/PG_VERSION")) {
    std::filesystem::remove_all(DataDir(dir), ec);
    for (const std::string& d : {DataDir(dir), SocketDir(dir)}) {
      std::filesystem::create_directories(d, ec);
      if (geteuid() == 0 && chown(d.c_str(), kUnprivileged, kUnprivileged) != 0) {
        return absl::InternalError(absl::StrCat("cannot hand ", d, " to uid ", kUnprivileged));
      }
    }
    auto rc = Spawn({*bin + "/initdb", "-D", DataDir(dir), "-U", kUser, "-A", "trust", "-E",
                     "UTF8", "--locale=C", "--no-sync"},
                    dir + "/initdb.log", /*wait=*/true);
    if (!rc.ok()) return rc.status();
    if (*rc != 0) {
      return absl::InternalError(
          absl::StrCat("initdb failed (", *rc, "): ", ReadFile(dir + "/initdb.log")));
    }
  }
  std::vector<std::string> argv = {*bin + "/postgres", "-D", DataDir(dir), "-k", SocketDir(dir),
                                   "-c", "listen_addresses=", "-c", "max_connections=200"};
  if (durability == Durability::kNone) {
    for (const char* setting : {"fsync=off", "synchronous_commit=off", "full_page_writes=off"}) {
      argv.insert(argv.end(), {"-c", setting});
    }
  }
  auto pid = Spawn(argv, log, /*wait=*/false);
  if (!pid.ok()) return pid.status();
  for (int i = 0; i < 300; ++i) {
    if (Accepting(dir)) return TestPostgres(dir);
    int status = 0;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      return absl::InternalError(absl::StrCat("the PostgreSQL server exited: ", ReadFile(log)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(*pid, SIGKILL);
  return absl::DeadlineExceededError(
      absl::StrCat("the PostgreSQL server did not accept connections in 30 s: ", ReadFile(log)));
}

absl::Status TestPostgres::Stop(const std::string& dir) {
  const pid_t pid = ServerPid(dir);
  if (pid > 0 && kill(pid, SIGQUIT) == 0) {
    // Immediate shutdown: nothing here needs to survive.
    for (int i = 0; i < 100 && kill(pid, 0) == 0; ++i) {
      waitpid(pid, nullptr, WNOHANG);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (kill(pid, 0) == 0) kill(pid, SIGKILL);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return absl::OkStatus();
}

absl::StatusOr<TestPostgres*> TestPostgres::Shared() {
  static absl::StatusOr<TestPostgres*>* shared = [] {
    const char* fixture = std::getenv("CALLEVAL_TEST_POSTGRES_DIR");
    std::string dir;
    bool own = false;
    if (fixture != nullptr && *fixture != '\0') {
      dir = fixture;
    } else {
      std::string tmpl = (std::filesystem::temp_directory_path() / "calleval-pg-XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) {
        return new absl::StatusOr<TestPostgres*>(absl::InternalError("mkdtemp failed"));
      }
      dir = tmpl;
      own = true;
    }
    auto server = Start(dir);
    if (!server.ok()) return new absl::StatusOr<TestPostgres*>(server.status());
    static std::string own_dir;
    if (own) {
      own_dir = dir;
      std::atexit([] { Stop(own_dir).IgnoreError(); });
    }
    return new absl::StatusOr<TestPostgres*>(new TestPostgres(std::move(*server)));
  }();
  return *shared;
}

std::string TestPostgres::UrlFor(const std::string& database) const {
  return absl::StrCat("postgresql://", kUser, "@/", database, "?host=", SocketDir(dir_));
}

std::string TestPostgres::AdminUrl() const { return UrlFor("postgres"); }

absl::StatusOr<std::string> TestPostgres::NewDatabase() const {
  static std::atomic<int> counter{0};
  const std::string name = absl::StrCat("t", getpid(), "_", counter.fetch_add(1), "_",
                                        std::chrono::steady_clock::now().time_since_epoch().count() %
                                            1000000);
  PGconn* conn = PQconnectdb(AdminUrl().c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    return absl::UnavailableError(absl::StrCat("cannot reach the test server: ", message));
  }
  PGresult* r = PQexec(conn, absl::StrCat("CREATE DATABASE ", name).c_str());
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  std::string message = ok ? "" : PQresultErrorMessage(r);
  PQclear(r);
  PQfinish(conn);
  if (!ok) return absl::InternalError(absl::StrCat("CREATE DATABASE failed: ", message));
  return UrlFor(name);
}

}  // namespace calleval::testing

// The phone channel when the runs and edge roles run apart, as the Kubernetes layout runs them
// (docs/channels.md, "When the runs and edge roles run apart"): two `calleval serve` processes
// of the built binary, one with the edge and the roles that own tables, one with the runs role
// alone, which serves its phone lines on its media listener. The carrier (the local Twilio,
// Telnyx and Plivo) reaches only the edge, which relays the media websocket and the webhooks to
// the runs process through the route each line's token carries. A run there is scored and its
// latency measured through the relay; a token whose route does not verify is 404, exactly like
// an unknown one, and makes no connection.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/line_route.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_carriers.h"
#include "tests/support/fake_phone_agent.h"
#include "tests/support/fake_twilio_server.h"
#include "tests/support/local_carriers.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

constexpr int kAgentDelayMs = 1000;

// `calleval serve ARGS` of the built binary, read until it says where it listens; SIGTERM when
// the object goes (the exit status is checked: a clean shutdown is 0).
class ServeProcess {
 public:
  ServeProcess(std::vector<std::string> args, const std::string& log_path) {
    std::vector<std::string> argv = {CALLEVAL_BIN, "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    const int err = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    // Everything the child needs is made before fork(): this process has threads.
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      if (err >= 0) dup2(err, 2);
      execv(raw[0], raw.data());
      _exit(127);
    }
    close(out[1]);
    if (err >= 0) close(err);
    // The gRPC line is the last one `serve` prints at start-up.
    std::string printed;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (printed.find("gRPC on port") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buffer[512];
      const ssize_t n = read(out[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      printed.append(buffer, static_cast<size_t>(n));
    }
    close(out[0]);
    std::smatch m;
    if (std::regex_search(printed, m, std::regex(R"(HTTP on (http://\S+))"))) http_ = m[1];
    if (std::regex_search(printed, m, std::regex(R"(gRPC on port (\d+))"))) {
      grpc_port_ = std::stoi(m[1]);
    }
    if (std::regex_search(printed, m,
                          std::regex(R"(phone media on port \d+, advertised as (\S+))"))) {
      media_ = m[1];
    }
    if (std::regex_search(printed, m, std::regex(R"(API key \(shown once[^)]*\): (\S+))"))) {
      api_key_ = m[1];
    }
  }
  ~ServeProcess() { Stop(); }

  bool started() const { return grpc_port_ != 0; }
  const std::string& http() const { return http_; }
  int grpc_port() const { return grpc_port_; }
  const std::string& media() const { return media_; }
  const std::string& api_key() const { return api_key_; }

  // SIGTERM, then the exit status (-1 when it had to be killed).
  int Stop() {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 300; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return exit_status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
    return exit_status_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::string http_, media_, api_key_;
  int grpc_port_ = 0;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A TCP listener that counts the connections made to it: where a forged route points.
class CountingListener {
 public:
  CountingListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        const int c = accept(fd_, nullptr, nullptr);
        if (c >= 0) {
          ++accepted_;
          close(c);
        }
      }
    });
  }
  ~CountingListener() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int accepted() const { return accepted_.load(); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// The two processes and the carriers' stand-ins, over the carrier GetParam() names.
class PhoneSplitTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    carriers_ = std::make_unique<LocalCarriers>(absl::Milliseconds(kAgentDelayMs));
    dir_ = testing::MakeTempDir("phone_split");
    const std::vector<std::string> common = {
        "--http-addr", "127.0.0.1:0",  "--grpc-addr", "127.0.0.1:0",           "--admin-addr",
        "off",         "--access-log", "false",       "--allow-private-hosts", "127.0.0.1"};
    std::vector<std::string> edge_args = {
        "--roles",    "edge,accounts,agents,calls,metrics,scoring",
        "--data-dir", dir_ + "/edge",
        "--workers",  "2"};
    edge_args.insert(edge_args.end(), common.begin(), common.end());
    edge_ = std::make_unique<ServeProcess>(edge_args, dir_ + "/edge.log");
    ASSERT_TRUE(edge_->started()) << ReadFile(dir_ + "/edge.log");
    ASSERT_FALSE(edge_->http().empty());
    ASSERT_TRUE(edge_->media().empty()) << "an edge opens no media listener";
    const std::string owners = absl::StrCat("127.0.0.1:", edge_->grpc_port());
    // Its own data dir: it shares only the credential and the recordings, as a pod does.
    std::vector<std::string> runs_args = {
        "--roles", "runs", "--data-dir", dir_ + "/runs", "--run-workers", "4", "--accounts-addr",
        owners, "--agents-addr", owners, "--calls-addr", owners, "--metrics-addr", owners,
        "--internal-credential-file", dir_ + "/edge/internal-credential", "--recordings-url",
        dir_ + "/edge/recordings",
        // The carrier reaches the edge, never the runs process.
        "--public-base-url", edge_->http(), "--twilio-api-url", carriers_->ApiUrl("twilio"),
        "--telnyx-api-url", carriers_->ApiUrl("telnyx"), "--plivo-api-url",
        carriers_->ApiUrl("plivo")};
    runs_args.insert(runs_args.end(), common.begin(), common.end());
    runs_ = std::make_unique<ServeProcess>(runs_args, dir_ + "/runs.log");
    ASSERT_TRUE(runs_->started()) << ReadFile(dir_ + "/runs.log");
    ASSERT_TRUE(runs_->http().empty()) << "the runs process has no edge";
    ASSERT_FALSE(runs_->media().empty()) << ReadFile(dir_ + "/runs.log");
    credential_ = ReadFile(dir_ + "/edge/internal-credential");
    client_ = std::make_unique<HttpClient>(edge_->http());
    client_->set_api_key(edge_->api_key());
  }

  void TearDown() override {
    // Both shut down cleanly, relayed streams and all.
    if (runs_) {
      EXPECT_EQ(runs_->Stop(), 0) << ReadFile(dir_ + "/runs.log");
    }
    if (edge_) {
      EXPECT_EQ(edge_->Stop(), 0) << ReadFile(dir_ + "/edge.log");
    }
    carriers_.reset();
    std::filesystem::remove_all(dir_);
  }

  const std::string& carrier() const { return GetParam(); }

  std::string Number(int n) const { return LocalCarriers::Number(carrier(), n); }

  void PutSettings() {
    HttpResponse put =
        client_->Put("/api/v1/integrations/" + carrier(), carriers_->Settings(carrier()).dump());
    ASSERT_EQ(put.status, 200) << put.body;
  }

  PlayedCall CallTo(const std::string& to) { return carriers_->CallTo(carrier(), to); }
  bool WaitForEnd(const std::string& to) { return carriers_->WaitForEnd(carrier(), to); }
  int PostForgedHangup(const std::string& to) { return carriers_->PostForgedHangup(carrier(), to); }

  int64_t RunPhoneScenario(const std::string& number, std::vector<std::string> lines,
                           std::optional<int> max_duration_seconds = std::nullopt,
                           std::vector<std::string> call_directions = {"inbound"}) {
    HttpResponse agent = client_->Post("/api/v1/agents", json{{"name", "Phone bot " + number},
                                                              {"language_id", 1},
                                                              {"phone_number", number},
                                                              {"call_directions", call_directions},
                                                              {"instructions", "Book cleanings."}});
    EXPECT_EQ(agent.status, 201) << agent.body;
    json fields = {{"agent_id", agent.json()["id"]},
                   {"name", "Book a cleaning"},
                   {"caller_script", lines},
                   {"metric_ids", {1}}};
    if (max_duration_seconds) fields["max_duration_seconds"] = *max_duration_seconds;
    HttpResponse scenario = client_->Post("/api/v1/scenarios", fields);
    EXPECT_EQ(scenario.status, 201) << scenario.body;
    HttpResponse queued = client_->Post(
        absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/run"),
        json::object());
    EXPECT_EQ(queued.status, 202) << queued.body;
    return queued.json()["id"].get<int64_t>();
  }

  json WaitRun(int64_t id) {
    json run;
    for (int i = 0; i < 2400; ++i) {
      run = client_->Get(absl::StrCat("/api/v1/runs/", id)).json();
      if (run["status"] == "completed" || run["status"] == "failed") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return run;
  }

  std::unique_ptr<LocalCarriers> carriers_;
  std::string dir_;
  std::unique_ptr<ServeProcess> edge_, runs_;
  std::string credential_;
  std::unique_ptr<HttpClient> client_;
};

TEST_P(PhoneSplitTest, ARunInTheRunsProcessIsRelayedByTheEdgeAndScored) {
  PutSettings();
  const std::string number = Number(1);
  const int64_t run_id =
      RunPhoneScenario(number, {"Hi, I would like to book a cleaning.", "Friday morning, please."});

  bool connected = false;
  for (int i = 0; i < 600 && !connected; ++i) {
    connected = CallTo(number).media_connected;
    if (!connected) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(connected) << CallTo(number).error << ReadFile(dir_ + "/runs.log");
  // The carrier was given the edge's URL, whose token routes to the runs process's listener.
  const PlayedCall during = CallTo(number);
  ASSERT_NE(during.media_url.find("/media/" + carrier() + "/"), std::string::npos)
      << during.media_url;
  const std::string edge_host = edge_->http().substr(edge_->http().find("://") + 3);
  EXPECT_NE(during.media_url.find("://" + edge_host + "/media/"), std::string::npos)
      << during.media_url;
  const std::string token = during.media_url.substr(during.media_url.rfind('/') + 1);
  EXPECT_EQ(runs::VerifiedLineHolder(token, credential_), runs_->media());
  // Relayed: a forged webhook reaches the holder, which refuses its signature; the media
  // token, spent, does not open a second stream.
  EXPECT_EQ(PostForgedHangup(number), 403);
  EXPECT_EQ(MediaUpgradeStatus(during.media_url), 409);

  json run = WaitRun(run_id);
  ASSERT_EQ(run["status"], "completed") << run.dump() << ReadFile(dir_ + "/runs.log");
  EXPECT_EQ(run["end_reason"], "completed");
  EXPECT_EQ(run["passed"], true);
  ASSERT_TRUE(WaitForEnd(number));
  const PlayedCall call = CallTo(number);
  EXPECT_EQ(call.answers, 2);
  EXPECT_TRUE(call.hung_up_by_service);
  EXPECT_EQ(call.error, "");
  // The carrier's webhooks were relayed and taken (the holder answered 200).
  ASSERT_GE(call.webhooks_sent.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const std::string& sent = call.webhooks_sent[i];
    EXPECT_EQ(sent.substr(sent.rfind('=')), "=200") << sent;
  }
  // The line is gone: the relayed answer is the holder's 404.
  EXPECT_EQ(MediaUpgradeStatus(call.media_url), 404);

  const json stored =
      client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  const json* latency = nullptr;
  for (const json& m : stored["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr) << stored.dump();
  ASSERT_EQ(latency->at("status"), "completed") << latency->dump();
  ASSERT_EQ(latency->at("result")["count"], 2) << latency->dump();
  int k = 0;
  for (const json& turn : latency->at("result")["turns"]) {
    const double measured = turn["latency_ms"].get<double>();
    EXPECT_NEAR(measured, kAgentDelayMs, 30) << turn.dump();
    RecordProperty(absl::StrCat("latency_error_ms_", k++), absl::StrCat(measured - kAgentDelayMs));
    std::printf(
        "%s phone run through the edge's relay: measured %.1f ms for a delay of %d ms "
        "(error %+.1f ms)\n",
        carrier().c_str(), measured, kAgentDelayMs, measured - kAgentDelayMs);
  }
}

INSTANTIATE_TEST_SUITE_P(Carriers, PhoneSplitTest, ::testing::Values("twilio", "telnyx", "plivo"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Routes that do not verify (and, below, the ends of relayed calls): the edge answers 404 as for
// an unknown token, for the websocket, the webhooks and the answer document alike, and connects
// nowhere. The same requests with a
// route the installation's credential signed do reach the address (so the listener would have
// seen the forged ones, had the edge made them).
class PhoneSplitRoutesTest : public PhoneSplitTest {};

TEST_P(PhoneSplitRoutesTest, AForgedRouteIsNotFoundAndMakesNoConnection) {
  CountingListener target;
  const std::string random = Base64Url(RandomBytes(32));
  const std::string forged_mac =
      runs::RoutedLineToken(random, target.address(), "not-the-installation-credential");
  // The address swapped for the forger's, the installation's MAC of another address kept.
  const std::string real = runs::RoutedLineToken(random, runs_->media(), credential_);
  const std::string swapped =
      random + "." + Base64Url(target.address()) + real.substr(real.rfind('.'));
  const std::string ws_base = "ws" + edge_->http().substr(4);
  HttpClient raw(edge_->http());
  for (const std::string& token : {forged_mac, swapped, random + "..", random}) {
    SCOPED_TRACE(token);
    EXPECT_EQ(MediaUpgradeStatus(ws_base + "/media/twilio/" + token), 404);
    HttpResponse events =
        raw.Post("/media/twilio/" + token + "/events", std::string("CallStatus=completed"));
    EXPECT_EQ(events.status, 404) << events.body;
    EXPECT_EQ(events.json()["error"]["message"], "no phone line is waiting at this address");
    EXPECT_EQ(raw.Get("/media/plivo/" + token + "/answer").status, 404);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(target.accepted(), 0);

  // The control: signed by the installation, the route is followed (the listener closes at
  // once, so the edge answers that the holder could not be reached).
  const std::string signed_route = runs::RoutedLineToken(random, target.address(), credential_);
  EXPECT_EQ(
      raw.Post("/media/twilio/" + signed_route + "/events", std::string("CallStatus=completed"))
          .status,
      503);
  EXPECT_NE(MediaUpgradeStatus(ws_base + "/media/twilio/" + signed_route), 404);
  for (int i = 0; i < 40 && target.accepted() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(target.accepted(), 2);

  // A well-signed route to the runs process for a line it does not hold: its own 404.
  const std::string unknown_line = runs::RoutedLineToken(random, runs_->media(), credential_);
  HttpResponse relayed = raw.Post("/media/twilio/" + unknown_line + "/events", std::string("x=1"));
  EXPECT_EQ(relayed.status, 404) << relayed.body;
  EXPECT_EQ(MediaUpgradeStatus(ws_base + "/media/twilio/" + unknown_line), 404);
}

// The ends of a relayed stream: the agent hanging up (the carrier stops and closes the
// websocket on its side of the relay) and the duration cap (the service closes it on the other).
TEST_P(PhoneSplitRoutesTest, EitherSideEndingARelayedCallEndsItOnTheOther) {
  PutSettings();
  carriers_->twilio().SetLine(Number(5), {FakeTwilioServer::Pickup::kAgent, 1});
  const std::vector<std::string> lines = {"Hi, I would like to book a cleaning.",
                                          "Friday morning, please.", "Thank you, goodbye."};
  const int64_t hangup = RunPhoneScenario(Number(5), lines);
  const int64_t capped = RunPhoneScenario(Number(6), lines, 4);

  json run = WaitRun(hangup);
  EXPECT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "agent_hangup");
  ASSERT_TRUE(WaitForEnd(Number(5)));
  EXPECT_FALSE(CallTo(Number(5)).hung_up_by_service);

  run = WaitRun(capped);
  EXPECT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "max_duration");
  ASSERT_TRUE(WaitForEnd(Number(6)));
  EXPECT_TRUE(CallTo(Number(6)).hung_up_by_service);
}

// An agent that calls in reaches the carrier's fixed incoming-call webhook, which names no line
// to route by: with the runs role apart from the edge the run fails at once, saying what to do,
// instead of waiting out a call that could never be matched.
TEST_P(PhoneSplitRoutesTest, AnAgentThatCallsInNeedsTheEdgeInTheRunsProcess) {
  PutSettings();
  const int64_t id = RunPhoneScenario(Number(7), {"Hello?"}, std::nullopt, {"outbound"});
  json run = WaitRun(id);
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_NE(run.value("error", std::string()).find("run the runs and edge roles together"),
            std::string::npos)
      << run.dump();
  EXPECT_TRUE(CallTo(Number(7)).id.empty()) << "the agent was dialled";
  // The edge holds no line: an agent's call reaching it is refused as one nobody waits for.
  HttpClient raw(edge_->http());
  HttpResponse incoming = raw.Post(
      "/media/twilio/incoming", std::string("CallSid=CA1&From=%2B14155550107&To=%2B14155552671"));
  EXPECT_EQ(incoming.status, 200) << incoming.body;
  EXPECT_NE(incoming.body.find("<Reject reason=\"busy\"/>"), std::string::npos) << incoming.body;
}

INSTANTIATE_TEST_SUITE_P(Once, PhoneSplitRoutesTest, ::testing::Values("twilio"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace calleval

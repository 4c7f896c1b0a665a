// The phone channel end to end with each carrier (Twilio, Telnyx, Plivo): a run places the call
// through the carrier's local stand-in (its REST API, its signed webhooks, its media stream paced
// in real time), which connects the answered call to the service's media websocket and bridges
// it to a test agent answering a known delay after the caller stops speaking. The run is scored
// and its latency metric measures that delay; busy, no answer, voicemail, the agent hanging up
// and the duration cap end the runs as they should; a forged webhook is refused and changes
// nothing; the media token is single-use. An agent that only calls out calls in instead: the
// carrier's incoming-call webhook is answered with the run's stream (or refused when no run
// waits, or forged), and a Retell agent is asked to place that call.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_carriers.h"
#include "tests/support/fake_phone_agent.h"
#include "tests/support/fake_retell_server.h"
#include "tests/support/fake_twilio_server.h"
#include "tests/support/local_carriers.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

constexpr int kAgentDelayMs = 1000;
constexpr const char* kWorkspaceNumber = LocalCarriers::kWorkspaceNumber;
constexpr char kRetellKey[] = "key_retell_phone";
// How long a run whose agent calls in waits for the call here.
constexpr absl::Duration kCallInTimeout = absl::Seconds(6);

// The workspace's Twilio integration settings (docs/api.md §5.8).
std::string TwilioSettings() {
  return json{{"account_sid", LocalCarriers::kTwilioAccountSid},
              {"auth_token", LocalCarriers::kTwilioAuthToken},
              {"caller_numbers", {kWorkspaceNumber}}}
      .dump();
}

// Runs over the carrier GetParam() names, against its local stand-in.
class PhoneRunTest : public ::testing::TestWithParam<std::string> {
 protected:
  PhoneRunTest() : retell_(kRetellKey) {}

  void SetUp() override {
    carriers_ = std::make_unique<LocalCarriers>(absl::Milliseconds(kAgentDelayMs));
    dir_ = testing::MakeTempDir("phone_run");
    ServerConfig config = testing::TestServerConfig(dir_);
    config.workers = 2;
    config.run_workers = 6;
    config.twilio_api_url = carriers_->ApiUrl("twilio");
    config.telnyx_api_url = carriers_->ApiUrl("telnyx");
    config.plivo_api_url = carriers_->ApiUrl("plivo");
    config.ring_timeout = absl::Seconds(25);  // --ring-timeout, which Twilio is asked for
    config.retell_api_url = retell_.base_url();
    config.phone_call_in_timeout = kCallInTimeout;
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    // The URL the team pastes into the workspace's numbers' settings (docs/channels.md).
    const std::string incoming = server_->http_base_url() + "/media/" + carrier() + "/incoming";
    carriers_->SetIncomingUrl(carrier(), incoming);
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(server_->bootstrap()->key.api_key);
  }

  void TearDown() override {
    retell_.JoinCalls();
    server_.reset();
    carriers_.reset();
    std::filesystem::remove_all(dir_);
  }

  const std::string& carrier() const { return GetParam(); }

  std::string Number(int n) const { return LocalCarriers::Number(carrier(), n); }

  // The workspace's integration settings for the carrier (docs/api.md §5.8), with a second
  // number when `second_number` is set.
  void PutSettings(const std::string& second_number = "") {
    json settings = carriers_->Settings(carrier());
    if (!second_number.empty()) settings["caller_numbers"].push_back(second_number);
    HttpResponse put = client_->Put("/api/v1/integrations/" + carrier(), settings.dump());
    ASSERT_EQ(put.status, 200) << put.body;
  }

  void SetLine(const std::string& to, FakeLine line) { carriers_->SetLine(carrier(), to, line); }
  std::vector<PlayedCall> Calls() { return carriers_->Calls(carrier()); }
  PlayedCall CallTo(const std::string& to) { return carriers_->CallTo(carrier(), to); }
  PlayedCall CallFrom(const std::string& from) { return carriers_->CallFrom(carrier(), from); }

  // The agent at `from` calls the workspace's `to` (`forged`: the webhook is signed with a key
  // not the account's). `taken`: the service took the call (Twilio, Plivo: its answer streams
  // it; Telnyx: its answer command came).
  struct DialAnswer {
    int status = 0;
    std::string body;
    bool taken = false;
  };
  DialAnswer DialIn(const std::string& from, const std::string& to, bool forged = false) {
    DialAnswer out;
    if (carrier() == "twilio") {
      FakeTwilioServer::Answer answer =
          carriers_->twilio().DialIn(from, to, forged ? "forged-token" : "");
      out.status = answer.status;
      out.body = answer.body;
      out.taken = absl::StrContains(answer.body, "<Stream");
      return out;
    }
    absl::StatusOr<WebhookAnswer> answer;
    std::string id;
    if (carrier() == "telnyx") {
      Ed25519TestKey forger;
      answer = carriers_->telnyx().DialIn(from, to, &id, forged ? &forger : nullptr);
    } else {
      answer = carriers_->plivo().DialIn(from, to, forged ? "forged-token" : "");
    }
    if (!answer.ok()) return out;
    out.status = answer->status;
    out.body = answer->body;
    if (carrier() == "plivo") {
      out.taken = absl::StrContains(answer->body, "<Stream");
    } else if (out.status == 200) {
      // Telnyx is answered by command, from the run's thread.
      for (int i = 0; i < 60 && !out.taken; ++i) {
        out.taken = carriers_->telnyx().answers().count(id) > 0;
        if (!out.taken) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return out;
  }

  // Calls in as the agent at `from` until a run takes the call (it may not await it yet).
  bool CallIn(const std::string& from, const std::string& to = kWorkspaceNumber) {
    for (int i = 0; i < 100; ++i) {
      if (DialIn(from, to).taken) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  bool WaitForEnd(const std::string& to) { return carriers_->WaitForEnd(carrier(), to); }
  int PostForgedHangup(const std::string& to) { return carriers_->PostForgedHangup(carrier(), to); }

  // A phone agent at `number` and a scenario for it; the scenario's id.
  // `platform`: the agent lives on a voice platform (agent_source external_vapi or
  // external_retell, with an assistant_id); the run dials its number all the same.
  // `calls_out`: the agent's call_directions are ["outbound"] (it calls in to the workspace).
  int64_t PhoneScenario(const std::string& number, std::vector<std::string> lines,
                        std::optional<int> max_duration_seconds = std::nullopt,
                        const std::string& platform = "", bool calls_out = false) {
    json fields = {{"name", "Phone bot " + number},
                   {"language_id", 1},
                   {"phone_number", number},
                   {"instructions", "Book cleanings."}};
    if (!platform.empty()) {
      fields["agent_source"] = platform;
      fields["assistant_id"] = "assistant-" + number.substr(1);
    }
    if (calls_out) fields["call_directions"] = {"outbound"};
    HttpResponse agent = client_->Post("/api/v1/agents", fields);
    EXPECT_EQ(agent.status, 201) << agent.body;
    EXPECT_EQ(agent.json()["telephony_carrier"], carrier());
    json scenario = {{"agent_id", agent.json()["id"]},
                     {"name", "Book a cleaning"},
                     {"caller_script", lines},
                     {"metric_ids", {1}}};
    if (max_duration_seconds) scenario["max_duration_seconds"] = *max_duration_seconds;
    HttpResponse created = client_->Post("/api/v1/scenarios", scenario);
    EXPECT_EQ(created.status, 201) << created.body;
    return created.json()["id"].get<int64_t>();
  }

  int64_t Run(int64_t scenario) {
    HttpResponse queued =
        client_->Post(absl::StrCat("/api/v1/scenarios/", scenario, "/run"), json::object());
    EXPECT_EQ(queued.status, 202) << queued.body;
    EXPECT_EQ(queued.json()["channel"], "phone");
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

  // Last to go but the carriers: its calls are placed through them.
  FakeRetellServer retell_;
  std::unique_ptr<LocalCarriers> carriers_;
  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_P(PhoneRunTest, ScoredRunMeasuresTheAgentsDelayAndRefusesForgeries) {
  PutSettings();
  const std::string number = Number(1);
  const int64_t run_id = Run(
      PhoneScenario(number, {"Hi, I would like to book a cleaning.", "Friday morning, please."}));

  // While the call is on: a webhook signed with another key is refused and changes nothing
  // (had it been taken, the run would end agent_hangup); the media websocket's token does not
  // open a second stream.
  bool connected = false;
  for (int i = 0; i < 400 && !connected; ++i) {
    connected = CallTo(number).media_connected;
    if (!connected) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(connected) << CallTo(number).error;
  EXPECT_EQ(PostForgedHangup(number), 403);
  EXPECT_EQ(MediaUpgradeStatus(CallTo(number).media_url), 409);

  json run = WaitRun(run_id);
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "completed");  // the script was done: the service hung up
  EXPECT_EQ(run["passed"], true);
  ASSERT_TRUE(WaitForEnd(number));
  const PlayedCall call = CallTo(number);
  EXPECT_EQ(call.answers, 2);
  EXPECT_GE(call.marks_played, 2);  // one after each caller line, once it had played
  EXPECT_EQ(call.clears, 0);        // nobody talked over the caller: it had nothing to take back
  EXPECT_TRUE(call.hung_up_by_service);
  EXPECT_EQ(call.error, "");
  if (carrier() == "twilio") {
    EXPECT_EQ(CallTo(number).id.substr(0, 2), "CA");
    EXPECT_EQ(carriers_->twilio().calls().front().from, "+14155552671");
    EXPECT_EQ(carriers_->twilio().calls().front().ring_timeout_seconds, 25);
  }
  // The carrier's first webhooks (the call ringing, then answered) were taken.
  ASSERT_GE(call.webhooks_sent.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const std::string& sent = call.webhooks_sent[i];
    EXPECT_EQ(sent.substr(sent.rfind('=')), "=200") << sent;
  }
  // Once the run is over its line is gone: the media URL is unknown now.
  EXPECT_EQ(MediaUpgradeStatus(call.media_url), 404);

  const json stored =
      client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(stored["observation_type"], "voice");
  EXPECT_EQ(stored["metadata"]["end_reason"], "completed");
  EXPECT_FALSE(stored["metadata"].contains("barge_ins")) << stored["metadata"].dump();
  const std::string link = stored["presigned_recording_url"];
  HttpClient raw(link.substr(0, link.find("/recordings/")));
  HttpResponse wav = raw.Get(link.substr(link.find("/recordings/")));
  ASSERT_EQ(wav.status, 200);
  EXPECT_EQ(wav.body.substr(0, 4), "RIFF");
  EXPECT_EQ(static_cast<uint8_t>(wav.body[22]), 2);  // both sides: agent left, caller right

  const json* latency = nullptr;
  for (const json& m : stored["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr);
  ASSERT_EQ(latency->at("status"), "completed") << latency->dump();
  ASSERT_EQ(latency->at("result")["count"], 2) << latency->dump();
  int k = 0;
  for (const json& turn : latency->at("result")["turns"]) {
    const double measured = turn["latency_ms"].get<double>();
    EXPECT_NEAR(measured, kAgentDelayMs, 30) << turn.dump();
    RecordProperty(absl::StrCat("latency_error_ms_", k++), absl::StrCat(measured - kAgentDelayMs));
    std::printf("%s phone run latency: measured %.1f ms for a delay of %d ms (error %+.1f ms)\n",
                carrier().c_str(), measured, kAgentDelayMs, measured - kAgentDelayMs);
  }
}

// The agent talks over the caller's first line (its cue: 700 ms into it): the caller yields as a
// person would. It stops mid-line, the carrier is told to clear what it still holds of the line,
// and nothing loud reaches the agent while it finishes its answer; then the caller says its next
// line, which the agent answers as usual.
TEST_P(PhoneRunTest, AnAgentTalkingOverTheCallerMakesItYield) {
  PutSettings();
  const std::string number = Number(1);
  SetLine(number, {FakeLine::kAgent, 0, 700});
  const int64_t run_id = Run(PhoneScenario(
      number, {"Hi, I would like to book a cleaning for my three bedroom apartment on the "
               "second floor, some time next week if you have anything open.",
               "Friday morning, please."}));
  json run = WaitRun(run_id);
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "completed");
  ASSERT_TRUE(WaitForEnd(number));
  const PlayedCall call = CallTo(number);
  EXPECT_EQ(call.clears, 1);
  EXPECT_EQ(call.talked_over_after_clear, 0);
  EXPECT_EQ(call.answers, 2);  // the interruption, then the answer to the second line
  EXPECT_EQ(call.error, "");
  const json stored =
      client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(stored["metadata"]["barge_ins"], 1) << stored["metadata"].dump();
}

TEST_P(PhoneRunTest, EndReasonsOfCallsThatDidNotGoToTheEnd) {
  PutSettings();
  SetLine(Number(2), {FakeLine::kBusy, 0});
  SetLine(Number(3), {FakeLine::kNoAnswer, 0});
  SetLine(Number(4), {FakeLine::kMachine, 0});
  SetLine(Number(5), {FakeLine::kAgent, 1});
  const std::vector<std::string> lines = {"Hi, I would like to book a cleaning.",
                                          "Friday morning, please.", "Thank you, goodbye."};
  const int64_t busy = Run(PhoneScenario(Number(2), lines));
  const int64_t no_answer = Run(PhoneScenario(Number(3), lines));
  const int64_t voicemail = Run(PhoneScenario(Number(4), lines));
  const int64_t hangup = Run(PhoneScenario(Number(5), lines));
  const int64_t capped = Run(PhoneScenario(Number(6), lines, 4));

  json run = WaitRun(busy);
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_EQ(run["end_reason"], "busy");
  EXPECT_NE(run["error"].get<std::string>().find("busy"), std::string::npos) << run.dump();

  run = WaitRun(no_answer);
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_EQ(run["end_reason"], "no_answer");

  run = WaitRun(voicemail);
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_EQ(run["end_reason"], "voicemail");
  EXPECT_NE(run["error"].get<std::string>().find("voicemail"), std::string::npos) << run.dump();
  ASSERT_TRUE(WaitForEnd(Number(4)));
  EXPECT_TRUE(CallTo(Number(4)).hung_up_by_service);

  // The agent hung up after its first answer: the conversation so far is scored.
  run = WaitRun(hangup);
  EXPECT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "agent_hangup");
  ASSERT_TRUE(WaitForEnd(Number(5)));
  EXPECT_TRUE(CallTo(Number(5)).stop_sent);  // the carrier ended the stream
  EXPECT_FALSE(CallTo(Number(5)).hung_up_by_service);

  // The scenario's 4 s cap: the service hung up.
  run = WaitRun(capped);
  EXPECT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "max_duration");
  ASSERT_TRUE(WaitForEnd(Number(6)));
  EXPECT_TRUE(CallTo(Number(6)).hung_up_by_service);
}

// An agent on Vapi or Retell with a phone number is reached like any phone agent: its number is
// dialled through the workspace's carrier, and the call scored. (The workspace has no platform
// key here, so nothing is pulled from the platform.)
TEST_P(PhoneRunTest, AnAgentOnAVoicePlatformIsDialledAtItsNumber) {
  PutSettings();
  const int64_t vapi = Run(PhoneScenario(Number(8), {"Hi, I would like to book a cleaning."},
                                         std::nullopt, "external_vapi"));
  const int64_t retell = Run(PhoneScenario(Number(9), {"Hi, I would like to book a cleaning."},
                                           std::nullopt, "external_retell"));
  for (const int64_t id : {vapi, retell}) {
    json run = WaitRun(id);
    EXPECT_EQ(run["status"], "completed") << run.dump();
    EXPECT_EQ(run["end_reason"], "completed") << run.dump();
    // Neither platform was asked anything, so neither told a version of its agent.
    EXPECT_TRUE(run["platform_version"].is_null()) << run.dump();
  }
  ASSERT_TRUE(WaitForEnd(Number(8)));
  ASSERT_TRUE(WaitForEnd(Number(9)));
  EXPECT_EQ(CallTo(Number(8)).answers, 1);
  EXPECT_EQ(CallTo(Number(9)).answers, 1);
}

// The latency metric of a scored run's call: each turn within 30 ms of the test agent's delay.
void ExpectAgentLatency(HttpClient& client, const json& run, const std::string& what) {
  const json stored =
      client.Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  const json* latency = nullptr;
  for (const json& m : stored["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") latency = &m;
  }
  ASSERT_NE(latency, nullptr) << stored.dump();
  ASSERT_EQ(latency->at("status"), "completed") << latency->dump();
  ASSERT_GE(latency->at("result")["count"].get<int>(), 1) << latency->dump();
  for (const json& turn : latency->at("result")["turns"]) {
    const double measured = turn["latency_ms"].get<double>();
    EXPECT_NEAR(measured, kAgentDelayMs, 30) << turn.dump();
    std::printf("%s latency: measured %.1f ms for a delay of %d ms (error %+.1f ms)\n",
                what.c_str(), measured, kAgentDelayMs, measured - kAgentDelayMs);
  }
}

// An agent that only calls out is not dialled: the run awaits its call on the workspace's
// number, answers the carrier's incoming-call webhook with its stream, and scores the call.
TEST_P(PhoneRunTest, AnAgentThatOnlyCallsOutCallsInAndIsScored) {
  PutSettings();
  const std::string agent_number = Number(1);
  const int64_t run_id = Run(PhoneScenario(
      agent_number, {"Hi, I would like to book a cleaning.", "Friday morning, please."},
      std::nullopt, "", /*calls_out=*/true));
  ASSERT_TRUE(CallIn(agent_number));

  json run = WaitRun(run_id);
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "completed");  // the script was done: the service hung up
  EXPECT_EQ(run["passed"], true);
  ASSERT_TRUE(WaitForEnd(agent_number));
  const PlayedCall call = CallFrom(agent_number);
  EXPECT_EQ(call.to, kWorkspaceNumber);
  EXPECT_EQ(call.answers, 2);
  EXPECT_TRUE(call.hung_up_by_service);
  EXPECT_EQ(call.error, "");
  // Nothing was dialled: every call the carrier saw is the agent's.
  for (const PlayedCall& c : Calls()) EXPECT_EQ(c.from, agent_number) << c.to;
  if (carrier() == "telnyx") {
    const json answer = carriers_->telnyx().answers().begin()->second;
    EXPECT_EQ(answer["stream_track"], "inbound_track");
    EXPECT_EQ(answer["stream_bidirectional_mode"], "rtp");
    EXPECT_EQ(answer["stream_bidirectional_codec"], "PCMU");
    EXPECT_NE(answer["webhook_url"].get<std::string>().find("/events"), std::string::npos);
  }
  // The line is gone with the run: its media URL is unknown now, and a new call is refused.
  EXPECT_EQ(MediaUpgradeStatus(call.media_url), 404);
  ExpectAgentLatency(*client_, run, carrier() + " incoming call");
}

// Two runs of one agent held at once await its call on different numbers of the workspace, so
// each call reaches its own run.
TEST_P(PhoneRunTest, ConcurrentRunsOfOneAgentAwaitDifferentNumbers) {
  const std::string second = "+14155552672";
  PutSettings(second);
  const std::string agent_number = Number(3);
  const int64_t scenario = PhoneScenario(agent_number, {"Hi, I would like to book a cleaning."},
                                         std::nullopt, "", /*calls_out=*/true);
  const int64_t first_run = Run(scenario);
  const int64_t second_run = Run(scenario);
  ASSERT_TRUE(CallIn(agent_number, second));
  ASSERT_TRUE(CallIn(agent_number, kWorkspaceNumber));
  for (const int64_t id : {first_run, second_run}) {
    json run = WaitRun(id);
    EXPECT_EQ(run["status"], "completed") << run.dump();
    EXPECT_EQ(run["end_reason"], "completed") << run.dump();
  }
  int streamed = 0;
  for (const PlayedCall& c : Calls()) streamed += c.media_connected ? 1 : 0;
  EXPECT_EQ(streamed, 2);
}

// Nobody calls: the run ends no_answer. A forged incoming-call webhook for the awaited numbers
// is refused (403) and changes nothing; once no run waits, a call is rejected.
TEST_P(PhoneRunTest, AnAwaitedCallThatNeverComesEndsNoAnswer) {
  PutSettings();
  const std::string agent_number = Number(2);
  const int64_t run_id =
      Run(PhoneScenario(agent_number, {"Hello."}, std::nullopt, "", /*calls_out=*/true));
  // Until the run awaits the call, the webhook is rejected; then the forgery is refused.
  DialAnswer forged;
  for (int i = 0; i < 100 && forged.status != 403; ++i) {
    forged = DialIn(agent_number, kWorkspaceNumber, /*forged=*/true);
    if (forged.status != 403) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(forged.status, 403) << forged.body;
  EXPECT_FALSE(forged.taken);

  json run = WaitRun(run_id);
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_EQ(run["end_reason"], "no_answer");
  EXPECT_NE(run["error"].get<std::string>().find(absl::StrCat("did not call ", kWorkspaceNumber)),
            std::string::npos)
      << run.dump();
  for (const PlayedCall& c : Calls()) EXPECT_FALSE(c.media_connected) << c.from;

  // No run waits now: Twilio and Plivo are told to refuse the call; Telnyx gets a bare 200
  // and no answer, so the call rings out.
  const DialAnswer late = DialIn(agent_number, kWorkspaceNumber);
  EXPECT_EQ(late.status, 200);
  EXPECT_FALSE(late.taken);
  if (carrier() == "twilio") EXPECT_EQ(late.body, "<Response><Reject reason=\"busy\"/></Response>");
  if (carrier() == "plivo") {
    EXPECT_NE(late.body.find("<Response><Hangup reason=\"busy\"/></Response>"), std::string::npos)
        << late.body;
  }
  if (carrier() == "telnyx") {
    EXPECT_EQ(late.body, "");
    EXPECT_TRUE(carriers_->telnyx().answers().empty());
  }
}

// A Retell agent that calls out: the run asks Retell to have it call the awaited number
// (create-phone-call), and Retell's call comes in through the carrier like any other. Retell's
// answer names the version of the agent placing the call: the run's and the call's
// platform_version.
TEST_P(PhoneRunTest, RetellIsAskedToPlaceTheAgentsCall) {
  PutSettings();
  ASSERT_EQ(
      client_->Put("/api/v1/integrations/retell", json{{"api_key", kRetellKey}}.dump()).status,
      200);
  const std::string agent_number = Number(9);
  retell_.AddAgent("assistant-" + agent_number.substr(1), json{{"language", "en-US"}}, "llm_9",
                   json{{"general_prompt", "Book cleanings."},
                        {"begin_message", "Hello, Sparkle here."},
                        {"start_speaker", "agent"}});
  retell_.SetAgentVersion("assistant-" + agent_number.substr(1), 3);
  retell_.PlaceCallsWith(
      [this](const std::string& from, const std::string& to) { DialIn(from, to); });
  const int64_t run_id = Run(PhoneScenario(agent_number, {"Hi, I would like to book a cleaning."},
                                           std::nullopt, "external_retell", /*calls_out=*/true));
  json run = WaitRun(run_id);
  ASSERT_EQ(run["status"], "completed") << run.dump();
  EXPECT_EQ(run["end_reason"], "completed");
  const std::vector<json> asked = retell_.phone_calls();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0]["from_number"], agent_number);
  EXPECT_EQ(asked[0]["to_number"], kWorkspaceNumber);
  EXPECT_EQ(asked[0]["override_agent_id"], "assistant-" + agent_number.substr(1));
  ASSERT_TRUE(WaitForEnd(agent_number));
  EXPECT_EQ(CallFrom(agent_number).answers, 1);
  EXPECT_EQ(run["platform_version"], "3") << run.dump();
  const json call =
      client_->Get(absl::StrCat("/api/public/v1/calls/", run["call_id"].get<int64_t>())).json();
  EXPECT_EQ(call["platform_version"], "3") << call.dump();
  ExpectAgentLatency(*client_, run, carrier() + " Retell call");
}

// Retell refusing to place the call ends the run failed with Retell's message.
TEST_P(PhoneRunTest, RetellsRefusalEndsTheRunWithItsMessage) {
  PutSettings();
  // The agent's own key, which Retell does not know, wins over the workspace's (none here).
  const std::string agent_number = Number(8);
  HttpResponse agent = client_->Post("/api/v1/agents", json{{"name", "Retell bot"},
                                                            {"language_id", 1},
                                                            {"phone_number", agent_number},
                                                            {"instructions", "Book cleanings."},
                                                            {"agent_source", "external_retell"},
                                                            {"assistant_id", "agent_unknown"},
                                                            {"call_directions", {"outbound"}}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  ASSERT_EQ(
      client_->Put("/api/v1/integrations/retell", json{{"api_key", "key_revoked"}}.dump()).status,
      200);
  HttpResponse scenario = client_->Post(
      "/api/v1/scenarios",
      json{{"agent_id", agent.json()["id"]}, {"name", "s"}, {"caller_script", {"Hello."}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  json run = WaitRun(Run(scenario.json()["id"].get<int64_t>()));
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_NE(run["error"].get<std::string>().find("Invalid API Key"), std::string::npos)
      << run.dump();
  EXPECT_TRUE(retell_.phone_calls().empty());
  EXPECT_TRUE(Calls().empty());
}

TEST_P(PhoneRunTest, WithoutTheWorkspacesSettingsTheRunFailsSayingSo) {
  const int64_t run_id = Run(PhoneScenario(Number(7), {"Hello."}));
  json run = WaitRun(run_id);
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_NE(run["error"].get<std::string>().find("integrations/" + carrier()), std::string::npos)
      << run.dump();
  EXPECT_TRUE(Calls().empty());
}

INSTANTIATE_TEST_SUITE_P(Carriers, PhoneRunTest, ::testing::Values("twilio", "telnyx", "plivo"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// A runs role in a process without an edge, its media listener turned off, has nowhere for
// the carrier to stream the call (phone_split_test runs it with the listener, relayed by the
// edge).
TEST(PhoneRunApartTest, RunsRoleWithoutAnEdgeOrMediaListenerFailsPhoneRunsSayingWhy) {
  FakeTwilioServer twilio(LocalCarriers::kTwilioAccountSid, LocalCarriers::kTwilioAuthToken);
  const std::string dir = testing::MakeTempDir("phone_run_apart");
  ServerConfig backend_config = testing::TestServerConfig(dir);
  backend_config.roles = {"edge", "accounts", "agents", "calls", "metrics", "scoring"};
  auto backend = Server::Start(backend_config);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::string backend_addr = absl::StrCat("127.0.0.1:", (*backend)->grpc_port());
  const std::string runs_dir = testing::MakeTempDir("phone_run_apart_runs");
  ServerConfig runs_config = testing::TestServerConfig(runs_dir);
  runs_config.roles = {"runs"};
  runs_config.agents_addr = runs_config.calls_addr = runs_config.metrics_addr = backend_addr;
  runs_config.internal_credential_file = dir + "/internal-credential";
  runs_config.recordings_url = dir + "/recordings";
  runs_config.twilio_api_url = twilio.api_url();
  runs_config.media_addr = "off";
  auto runs_process = Server::Start(runs_config);
  ASSERT_TRUE(runs_process.ok()) << runs_process.status();

  HttpClient client((*backend)->http_base_url());
  client.set_api_key((*backend)->bootstrap()->key.api_key);
  ASSERT_EQ(client.Put("/api/v1/integrations/twilio", TwilioSettings()).status, 200);
  HttpResponse agent = client.Post("/api/v1/agents", json{{"name", "Phone bot"},
                                                          {"language_id", 1},
                                                          {"instructions", "Book cleanings."},
                                                          {"phone_number", "+14155550108"}});
  ASSERT_EQ(agent.status, 201) << agent.body;
  HttpResponse scenario = client.Post(
      "/api/v1/scenarios",
      json{{"agent_id", agent.json()["id"]}, {"name", "s"}, {"caller_script", {"Hello."}}});
  ASSERT_EQ(scenario.status, 201) << scenario.body;
  HttpResponse queued =
      client.Post(absl::StrCat("/api/v1/scenarios/", scenario.json()["id"].get<int64_t>(), "/run"),
                  json::object());
  ASSERT_EQ(queued.status, 202) << queued.body;
  json run;
  for (int i = 0; i < 600; ++i) {
    run = client.Get(absl::StrCat("/api/v1/runs/", queued.json()["id"].get<int64_t>())).json();
    if (run["status"] == "completed" || run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(run["status"], "failed") << run.dump();
  EXPECT_NE(run["error"].get<std::string>().find("--media-addr is off"), std::string::npos)
      << run.dump();
  EXPECT_TRUE(twilio.calls().empty());
  runs_process->reset();
  backend->reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(runs_dir);
}

}  // namespace
}  // namespace calleval

// Calls ingested over HTTP are analysed by the scoring workers of the same server: a corpus
// recording served by a local HTTP server goes pending -> completed with the standard metrics
// and the credits charged once; text calls complete; a short balance skips the call.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cmd/calleval/server.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/test_http_server.h"
#include "tests/support/test_wav.h"

namespace calleval {
namespace {

using ::nlohmann::json;

// The generated test corpus (tests/corpus).
const std::string kCorpus = CALLEVAL_CORPUS_DIR;

class ScoringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("scoring");
    ServerConfig config = testing::TestServerConfig(dir_);
    config.workers = 2;
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<testing::HttpClient>(server_->http_base_url());
    client_->set_api_key(server_->bootstrap()->key.api_key);
    auto agent = client_->Post("/api/v1/agents", json{{"name", "scored"},
                                                      {"phone_number", "+14155550123"},
                                                      {"language_id", 1},
                                                      {"instructions", "x"}});
    ASSERT_EQ(agent.status, 201) << agent.body;
    agent_ = agent.json()["id"];
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Up to 2 minutes: a voice call with a provided transcript completes once the embedded
  // recognizer has transcribed it (about 10 s of CPU for the 42 s corpus call, more on a
  // loaded machine).
  json WaitFinal(const std::string& key) {
    json call;
    for (int i = 0; i < 4800; ++i) {
      call = client_->Get("/api/public/v1/calls/" + key).json();
      const std::string status =
          call.is_object() ? call.value("analysis_status", std::string()) : std::string();
      if (status == "completed" || status == "failed" || status == "skipped") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return call;
  }

  int64_t Balance(testing::HttpClient& client) {
    return client.Get("/api/v1/workspaces/current").json()["credit_balance"];
  }

  static const json* Metric(const json& call, const std::string& key) {
    for (const json& m : call["standard_metrics"]) {
      if (m["standard_metric_key"] == key) return &m;
    }
    return nullptr;
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<testing::HttpClient> client_;
  int64_t agent_ = 0;
};

TEST_F(ScoringTest, CorpusCallScoredEndToEndAndChargedOnce) {
  const std::string wav = kCorpus + "/basic_stereo.wav";
  ASSERT_TRUE(std::filesystem::exists(wav)) << "no test corpus at " << kCorpus;
  std::ifstream truth_file(kCorpus + "/basic_stereo.truth.json");
  json truth = json::parse(truth_file);
  std::ifstream transcript_file(kCorpus + "/basic_stereo.transcript.json");
  json transcript = json::parse(transcript_file);

  TestHttpServer files;
  files.ServeFile("/basic.wav", wav, "audio/wav");
  const int64_t before = Balance(*client_);
  auto ingest =
      client_->Post("/api/public/v1/calls", json{{"call_identifier", "scored-1"},
                                                 {"agent_id", agent_},
                                                 {"recording_url", files.url("/basic.wav")},
                                                 {"transcript", transcript}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = WaitFinal("scored-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  EXPECT_EQ(call["duration_seconds"], std::llround(truth["duration_seconds"].get<double>()));
  ASSERT_EQ(call["standard_metrics"].size(), 12u);

  const json* latency = Metric(call, "latency");
  ASSERT_NE(latency, nullptr);
  EXPECT_EQ(latency->at("status"), "completed");
  const json* true_latency = nullptr;
  for (const json& m : truth["standard_metrics"]) {
    if (m["standard_metric_key"] == "latency") true_latency = &m;
  }
  ASSERT_NE(true_latency, nullptr);
  EXPECT_EQ(latency->at("result")["count"], true_latency->at("result")["count"]);
  EXPECT_NEAR(latency->at("result")["average_ms"].get<double>(),
              true_latency->at("result")["average_ms"].get<double>(), 30);
  // The other headline numbers against the corpus truth (the budgets' tolerances).
  auto truth_metric = [&](const std::string& key) -> const json& {
    for (const json& m : truth["standard_metrics"]) {
      if (m["standard_metric_key"] == key) return m;
    }
    return truth["standard_metrics"][0];
  };
  for (const char* key : {"ai_interruptions", "user_interruptions", "silence_detection"}) {
    EXPECT_EQ(Metric(call, key)->at("result")["count"], truth_metric(key)["result"]["count"])
        << key;
  }
  const double true_wpm = truth_metric("words_per_minute")["result"]["ai_wpm"];
  EXPECT_NEAR(Metric(call, "words_per_minute")->at("result")["ai_wpm"].get<double>(), true_wpm,
              true_wpm * 0.05);
  EXPECT_NEAR(Metric(call, "talk_ratio")->at("result")["ai_ratio"].get<double>(),
              truth_metric("talk_ratio")["result"]["ai_ratio"].get<double>(), 0.01);
  EXPECT_EQ(Metric(call, "voice_change_detection")->at("result")["changed"], false);
  // The provided transcript against the embedded recognizer's, with consistent counts.
  EXPECT_EQ(call["transcription_status"], "completed");
  EXPECT_EQ(call["transcript_source"], "provided");
  EXPECT_EQ(call["transcript"], transcript);
  const json& accuracy = *Metric(call, "transcription_accuracy");
  ASSERT_EQ(accuracy["status"], "completed") << accuracy.dump();
  const json& counts = accuracy["result"];
  const int64_t errors = counts["substitutions"].get<int64_t>() +
                         counts["deletions"].get<int64_t>() + counts["insertions"].get<int64_t>();
  ASSERT_GT(counts["reference_words"].get<int64_t>(), 0);
  const double wer = static_cast<double>(errors) / counts["reference_words"].get<double>();
  EXPECT_NEAR(counts["wer"].get<double>(), wer, 1e-4);
  EXPECT_NEAR(counts["accuracy"].get<double>(), std::max(0.0, 1 - wer), 1e-4);
  EXPECT_EQ(accuracy["score"], counts["accuracy"]);
  // PocketSphinx hears part of it: not nothing, not everything of a clean synthetic call.
  EXPECT_GT(counts["accuracy"].get<double>(), 0.2);
  EXPECT_EQ(Metric(call, "user_sentiment")->at("status"), "failed");
  EXPECT_EQ(Metric(call, "user_sentiment")->at("error"), "llm_unavailable");

  // Completed metrics cost 1 each; failed and not-applicable ones are refunded.
  int64_t completed = 0;
  for (const json& m : call["standard_metrics"]) {
    EXPECT_EQ(m["credits_used"], m["status"] == "completed" ? 1 : 0) << m.dump();
    if (m["status"] == "completed") ++completed;
  }
  EXPECT_EQ(call["credits_used"], completed);
  EXPECT_EQ(testing::BalanceOnceSettled(*client_, before - completed), before - completed);
}

TEST_F(ScoringTest, TextCallCompletesWithoutCharge) {
  const int64_t before = Balance(*client_);
  auto ingest = client_->Post("/api/public/v1/calls",
                              json{{"call_identifier", "text-1"},
                                   {"agent_id", agent_},
                                   {"transcript", {{{"role", "User"}, {"content", "hello"}}}}});
  ASSERT_EQ(ingest.status, 201) << ingest.body;
  json call = WaitFinal("text-1");
  EXPECT_EQ(call["analysis_status"], "completed") << call.dump();
  ASSERT_EQ(call["standard_metrics"].size(), 2u);  // only the transcript-judged ones
  EXPECT_EQ(call["standard_metrics"][0]["standard_metric_key"], "user_sentiment");
  EXPECT_EQ(call["credits_used"], 0);
  EXPECT_EQ(testing::BalanceOnceSettled(*client_, before), before);
}

TEST_F(ScoringTest, UndecodableRecordingFailsUnsupportedAudio) {
  TestHttpServer files;
  files.Serve("/noise.wav", std::string(20000, 'z'), "audio/wav");
  const int64_t before = Balance(*client_);
  ASSERT_EQ(client_
                ->Post("/api/public/v1/calls", json{{"call_identifier", "bad-audio"},
                                                    {"agent_id", agent_},
                                                    {"recording_url", files.url("/noise.wav")}})
                .status,
            201);
  json call = WaitFinal("bad-audio");
  EXPECT_EQ(call["analysis_status"], "failed");
  EXPECT_EQ(call["failure_reason"], "unsupported_audio");
  // Everything reserved was refunded.
  EXPECT_EQ(testing::BalanceOnceSettled(*client_, before), before);
}

// The waveform of a recording the scoring workers decoded, over HTTP: a 6 s stereo call whose
// left channel has a loud tone from 1 to 2 s and whose right has a quieter one from 4 to 5 s,
// silence (exact zeros) everywhere else.
TEST_F(ScoringTest, WaveformShowsTheLoudPartsAndTheSilence) {
  TestHttpServer files;
  files.Serve("/tones.wav",
              testing::TestWav(8000, 6.0, {testing::ToneBetween(1.0, 2.0, 0.8),
                                           testing::ToneBetween(4.0, 5.0, 0.4)}),
              "audio/wav");
  ASSERT_EQ(client_
                ->Post("/api/public/v1/calls", json{{"call_identifier", "tones"},
                                                    {"agent_id", agent_},
                                                    {"recording_url", files.url("/tones.wav")}})
                .status,
            201);
  // Computed by the audio pass (the audio stage, before the transcription ends): polled.
  testing::HttpResponse waveform;
  for (int i = 0; i < 4800; ++i) {
    waveform = client_->Get("/api/public/v1/calls/tones/waveform");
    if (waveform.status != 404) break;
    // Until then: 404 saying the analysis has not computed it yet.
    EXPECT_EQ(waveform.json()["error"]["code"], "no_waveform") << waveform.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_EQ(waveform.status, 200) << waveform.body;
  const json body = waveform.json();
  EXPECT_EQ(body["channels"], 2);
  EXPECT_NEAR(body["duration_seconds"].get<double>(), 6.0, 0.01);
  const int buckets = body["buckets"];
  EXPECT_EQ(buckets, 300);  // 50 a second
  std::string peaks;
  ASSERT_TRUE(absl::Base64Unescape(body["peaks"].get<std::string>(), &peaks));
  ASSERT_EQ(peaks.size(), static_cast<size_t>(2 * buckets * 2));
  auto peak = [&](int channel, int bucket, int which) {
    return static_cast<int8_t>(peaks[(channel * buckets + bucket) * 2 + which]);
  };
  auto second = [&](double s) { return static_cast<int>(s * 50); };
  for (int b = 0; b < buckets; ++b) {
    const double t = b / 50.0;
    // Inside the tones (the resampler's edges left aside): full peaks each way.
    if (t >= 1.1 && t < 1.9) {
      EXPECT_GE(peak(0, b, 1), 90) << b;  // 0.8 of full scale: 102
      EXPECT_LE(peak(0, b, 0), -90) << b;
    }
    if (t >= 4.1 && t < 4.9) {
      EXPECT_NEAR(peak(1, b, 1), 51, 6) << b;  // 0.4: 51
      EXPECT_NEAR(peak(1, b, 0), -51, 6) << b;
    }
    // Away from them: silence, ~0.
    const bool left_silent = t < 0.9 || t >= 2.1;
    const bool right_silent = t < 3.9 || t >= 5.1;
    if (left_silent) {
      EXPECT_LE(std::abs(peak(0, b, 0)), 1) << b;
      EXPECT_LE(std::abs(peak(0, b, 1)), 1) << b;
    }
    if (right_silent) {
      EXPECT_LE(std::abs(peak(1, b, 0)), 1) << b;
      EXPECT_LE(std::abs(peak(1, b, 1)), 1) << b;
    }
  }
  EXPECT_GE(peak(0, second(1.5), 1), 90);
  EXPECT_LE(std::abs(peak(0, second(4.5), 1)), 1);

  // A text call has no recording: 404 saying so.
  ASSERT_EQ(client_
                ->Post("/api/public/v1/calls",
                       json{{"call_identifier", "text-w"},
                            {"agent_id", agent_},
                            {"transcript", {{{"role", "User"}, {"content", "hello"}}}}})
                .status,
            201);
  testing::HttpResponse none = client_->Get("/api/public/v1/calls/text-w/waveform");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(none.json()["error"]["code"], "no_recording") << none.body;
  EXPECT_EQ(client_->Get("/api/public/v1/calls/nope/waveform").status, 404);
}

TEST_F(ScoringTest, ShortBalanceSkipsTheCall) {
  auto db = db::Database::Open(dir_ + "/calleval.db", SchemaMigrations());
  ASSERT_TRUE(db.ok());
  accounts::AccountsStore store(db->get());
  auto poor = store.CreateWorkspace("poor", 1);
  testing::HttpClient client(server_->http_base_url());
  client.set_api_key(store.CreateKey(poor->id, {})->api_key);
  auto agent = client.Post("/api/v1/agents", json{{"name", "a"},
                                                  {"phone_number", "+14155550123"},
                                                  {"language_id", 1},
                                                  {"instructions", "x"}});
  ASSERT_EQ(agent.status, 201);
  ASSERT_EQ(client
                .Post("/api/public/v1/calls",
                      json{{"call_identifier", "poor-1"},
                           {"agent_id", agent.json()["id"]},
                           {"transcript", {{{"role", "User"}, {"content", "hello"}}}}})
                .status,
            201);
  json call = client.Get("/api/public/v1/calls/poor-1").json();
  for (int i = 0; i < 400 && call["analysis_status"] != "skipped"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    call = client.Get("/api/public/v1/calls/poor-1").json();
  }
  EXPECT_EQ(call["analysis_status"], "skipped");
  EXPECT_EQ(call["failure_reason"], "insufficient_credits");
  EXPECT_EQ(client.Get("/api/v1/workspaces/current").json()["credit_balance"], 1);
}

}  // namespace
}  // namespace calleval

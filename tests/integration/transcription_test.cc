// Speech-to-text in the call pipeline, against the real server (all roles in one process,
// SQLite in a temporary data dir): the embedded recognizer on corpus recordings, and an
// OpenAI-compatible transcriptions endpoint played by a local server speaking that API
// (tests/support/openai_transcriptions_route.h), with a local chat-completions provider for the
// metrics judged on the generated transcript.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "cmd/calleval/server.h"
#include "services/scoring/audio_metrics.h"
#include "services/scoring/word_error_rate.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/fake_openai_server.h"
#include "tests/support/openai_transcriptions_route.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

// The generated test corpus (tests/corpus).
const std::string kCorpus = CALLEVAL_CORPUS_DIR;

const json* Standard(const json& call, const std::string& key) {
  for (const json& m : call["standard_metrics"]) {
    if (m["standard_metric_key"] == key) return &m;
  }
  return nullptr;
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// One server per fixture; `configure` adds the providers.
class TranscriptionServer {
 public:
  explicit TranscriptionServer(const std::function<void(ServerConfig*)>& configure) {
    dir_ = testing::MakeTempDir("transcription");
    ServerConfig config = testing::TestServerConfig(dir_);
    config.workers = 2;
    configure(&config);
    auto server = Server::Start(config);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(server_->bootstrap()->key.api_key);
    HttpResponse agent =
        client_->Post("/api/v1/agents", json{{"name", "transcribed"},
                                             {"phone_number", "+14155550123"},
                                             {"language_id", 1},
                                             {"instructions", "You answer Acme support calls."}});
    EXPECT_EQ(agent.status, 201) << agent.body;
    agent_ = agent.json().value("id", int64_t{0});
  }
  ~TranscriptionServer() {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  HttpClient& client() { return *client_; }
  int64_t agent() const { return agent_; }

  json Ingest(json body) {
    body["agent_id"] = agent_;
    HttpResponse r = client_->Post("/api/public/v1/calls", body);
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json();
  }

  // Polls until both the analysis and the transcription have ended (up to 2 minutes).
  json WaitSettled(const std::string& key) {
    json call;
    for (int i = 0; i < 4800; ++i) {
      call = client_->Get("/api/public/v1/calls/" + key).json();
      const std::string analysis = call.value("analysis_status", "");
      const std::string transcription = call.value("transcription_status", "");
      if ((analysis == "completed" || analysis == "failed" || analysis == "skipped") &&
          (transcription == "completed" || transcription == "failed")) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return call;
  }

 private:
  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<HttpClient> client_;
  int64_t agent_ = 0;
};

// --- The embedded recognizer -------------------------------------------------------------

class EmbeddedTranscriptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kCorpus + "/short_stereo.wav"))
        << "no test corpus at " << kCorpus;
    server_ = std::make_unique<TranscriptionServer>([](ServerConfig*) {});
    files_.ServeFile("/short.wav", kCorpus + "/short_stereo.wav", "audio/wav");
    files_.ServeFile("/bank.wav", kCorpus + "/basic_stereo.wav", "audio/wav");
    files_.ServeFile("/mono.wav", kCorpus + "/mono_transcript.wav", "audio/wav");
  }

  TestHttpServer files_;
  std::unique_ptr<TranscriptionServer> server_;
};

TEST_F(EmbeddedTranscriptionTest, VoiceCallWithoutTranscriptGetsTheGeneratedOne) {
  const json ingested =
      server_->Ingest({{"call_identifier", "gen-1"}, {"recording_url", files_.url("/bank.wav")}});
  EXPECT_EQ(ingested["transcription_status"], "pending");
  EXPECT_TRUE(ingested["transcript_source"].is_null());
  const json call = server_->WaitSettled("gen-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  ASSERT_EQ(call["transcription_status"], "completed") << call.dump();
  EXPECT_EQ(call["transcript_source"], "generated");

  // Timed, role-labelled turns in order of start, both parties heard.
  const json& turns = call["transcript"];
  ASSERT_GE(turns.size(), 4u) << turns.dump();
  bool agent = false, user = false;
  double previous_start = 0;
  for (const json& turn : turns) {
    agent |= turn["role"] == "AI Assistant";
    user |= turn["role"] == "User";
    EXPECT_GE(turn["start_time"].get<double>(), previous_start);
    EXPECT_LE(turn["start_time"].get<double>(), turn["end_time"].get<double>());
    previous_start = turn["start_time"];
  }
  EXPECT_TRUE(agent && user) << turns.dump();

  // words_per_minute counted the generated transcript's words over the measured speaking time.
  const json& wpm = *Standard(call, "words_per_minute");
  ASSERT_EQ(wpm["status"], "completed") << wpm.dump();
  EXPECT_EQ(wpm["result"]["transcript"], "generated");
  int ai_words = 0;
  for (const json& turn : turns) {
    if (turn["role"] == "AI Assistant")
      ai_words += scoring::CountWords(turn["content"].get<std::string>());
  }
  EXPECT_EQ(wpm["result"]["ai_words"], ai_words);
  EXPECT_GT(ai_words, 0);
  const double ai_speaking_s = wpm["result"]["ai_speaking_s"];
  EXPECT_NEAR(wpm["result"]["ai_wpm"].get<double>(), ai_words / (ai_speaking_s / 60), 0.1);
  EXPECT_EQ(wpm["credits_used"], 1);

  // What was said, per party, against the corpus's script: PocketSphinx gets much of it.
  const json script = ReadJson(kCorpus + "/basic_stereo.transcript.json");
  for (const char* role : {"AI Assistant", "User"}) {
    std::string said, heard;
    for (const json& t : script) {
      if (t["role"] == role) said += t["content"].get<std::string>() + " ";
    }
    for (const json& t : turns) {
      if (t["role"] == role) heard += t["content"].get<std::string>() + " ";
    }
    const scoring::WordErrorCounts counts = scoring::WordErrorRate(said, heard);
    EXPECT_GT(counts.hits, counts.reference_words / 3) << role << ": " << heard;
  }

  // Nothing provided to compare with.
  const json& accuracy = *Standard(call, "transcription_accuracy");
  EXPECT_EQ(accuracy["status"], "not_applicable");
  EXPECT_EQ(accuracy["result"]["reference_words"], 0);
  EXPECT_TRUE(accuracy["result"]["accuracy"].is_null());
}

TEST_F(EmbeddedTranscriptionTest, ProvidedTranscriptIsKeptAndMeasured) {
  const json script = ReadJson(kCorpus + "/short_stereo.transcript.json");
  server_->Ingest({{"call_identifier", "acc-1"},
                   {"recording_url", files_.url("/short.wav")},
                   {"transcript", script}});
  const json call = server_->WaitSettled("acc-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  EXPECT_EQ(call["transcription_status"], "completed");
  EXPECT_EQ(call["transcript_source"], "provided");
  EXPECT_EQ(call["transcript"], script);
  const json& accuracy = *Standard(call, "transcription_accuracy");
  ASSERT_EQ(accuracy["status"], "completed") << accuracy.dump();
  EXPECT_EQ(accuracy["credits_used"], 1);
  EXPECT_GT(accuracy["result"]["reference_words"].get<int>(), 0);
  EXPECT_GE(accuracy["result"]["accuracy"].get<double>(), 0.0);
  EXPECT_LE(accuracy["result"]["accuracy"].get<double>(), 1.0);
}

TEST_F(EmbeddedTranscriptionTest, ProvidedTranscriptWithoutAccuracyIsNotTranscribed) {
  const json script = ReadJson(kCorpus + "/short_stereo.transcript.json");
  const json ingested = server_->Ingest({{"call_identifier", "no-stt"},
                                         {"recording_url", files_.url("/short.wav")},
                                         {"transcript", script},
                                         {"metric_ids", {1, 5}}});
  EXPECT_EQ(ingested["transcription_status"], "completed");
  const json call = server_->WaitSettled("no-stt");
  EXPECT_EQ(call["analysis_status"], "completed");
  EXPECT_EQ(call["transcript_source"], "provided");
  EXPECT_EQ(call["transcript"], script);
}

TEST_F(EmbeddedTranscriptionTest, MonoRecordingWithoutTranscriptFailsTranscriptionNotTheCall) {
  server_->Ingest({{"call_identifier", "mono-1"}, {"recording_url", files_.url("/mono.wav")}});
  const json call = server_->WaitSettled("mono-1");
  EXPECT_EQ(call["analysis_status"], "completed") << call.dump();
  EXPECT_EQ(call["transcription_status"], "failed");
  EXPECT_TRUE(call["transcript_source"].is_null());
  EXPECT_EQ(Standard(call, "silence_detection")->at("status"), "completed");
}

// --- An OpenAI-compatible transcriptions endpoint ----------------------------------------

// What the fake endpoint hears: the agent's channel is transcribed first, then the caller's.
std::vector<FakeTranscribedWord> FakeWords(double, int request_index) {
  if (request_index % 2 == 0) {
    return {{"Thank", 0.4, 0.6}, {"you", 0.6, 0.8}, {"for", 0.8, 0.9}, {"calling.", 0.9, 1.3}};
  }
  return {{"I", 2.7, 2.8}, {"need", 2.8, 3.0}, {"help.", 3.0, 3.4}};
}

class EndpointTranscriptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kCorpus + "/short_stereo.wav"))
        << "no test corpus at " << kCorpus;
    FakeTranscriptionsOptions options;
    options.transcript = FakeWords;
    stt_ = RegisterOpenAiTranscriptionsRoute(&stt_http_, options);
    server_ = std::make_unique<TranscriptionServer>([this](ServerConfig* config) {
      config->stt_base_url = stt_http_.url("/v1");
      config->stt_api_key = stt_->api_key();
      config->llm_base_url = llm_.base_url();
      config->llm_api_key = llm_.api_key();
      config->llm_model = "gpt-test";
    });
    files_.ServeFile("/short.wav", kCorpus + "/short_stereo.wav", "audio/wav");
    llm_.AnswerWhen("I need help.", R"({"result": true, "explanation": "helped"})");
  }

  FakeOpenAiServer llm_;
  TestHttpServer stt_http_;
  std::shared_ptr<FakeTranscriptions> stt_;
  TestHttpServer files_;
  std::unique_ptr<TranscriptionServer> server_;
};

TEST_F(EndpointTranscriptionTest, GeneratedTranscriptIsMergedAndJudged) {
  server_->Ingest({{"call_identifier", "ep-1"},
                   {"recording_url", files_.url("/short.wav")},
                   {"metric_ids", {5, 12}}});
  const json call = server_->WaitSettled("ep-1");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  ASSERT_EQ(call["transcription_status"], "completed") << call.dump();
  EXPECT_EQ(call["transcript_source"], "generated");
  const json expected = json::array(
      {{{"role", "AI Assistant"},
        {"content", "Thank you for calling."},
        {"start_time", 0.4},
        {"end_time", 1.3}},
       {{"role", "User"}, {"content", "I need help."}, {"start_time", 2.7}, {"end_time", 3.4}}});
  EXPECT_EQ(call["transcript"], expected);

  // Each channel went up as a 16 kHz mono WAV to whisper-1 with word timings.
  const std::vector<ReceivedTranscription> received = stt_->received();
  ASSERT_EQ(received.size(), 2u);
  const double seconds = ReadJson(kCorpus + "/short_stereo.truth.json")["duration_seconds"];
  for (const ReceivedTranscription& r : received) {
    EXPECT_EQ(r.http_status, 200);
    EXPECT_EQ(r.model, "whisper-1");
    EXPECT_EQ(r.response_format, "verbose_json");
    EXPECT_EQ(r.sample_rate, 16000);
    EXPECT_EQ(r.channels, 1);
    EXPECT_NEAR(r.duration_seconds, seconds, 0.05);
  }

  // task_completion was judged on the generated transcript, after the audio stage.
  const json& completion = *Standard(call, "task_completion");
  EXPECT_EQ(completion["status"], "completed") << completion.dump();
  EXPECT_EQ(completion["result"]["value"], true);
  EXPECT_EQ(Standard(call, "silence_detection")->at("status"), "completed");
  EXPECT_EQ(call["credits_used"], 2);
}

TEST_F(EndpointTranscriptionTest, AccuracyOfAProvidedTranscriptCountedByHand) {
  // Generated (the reference): "thank you for calling i need help" (7 words).
  // Provided: "thank you for calling" + "i need some help" -> one insertion ("some").
  server_->Ingest({{"call_identifier", "ep-acc"},
                   {"recording_url", files_.url("/short.wav")},
                   {"metric_ids", {7}},
                   {"transcript",
                    {{{"role", "AI Assistant"},
                      {"content", "Thank you for calling!"},
                      {"start_time", 0.3},
                      {"end_time", 1.4}},
                     {{"role", "User"},
                      {"content", "I need some help"},
                      {"start_time", 2.6},
                      {"end_time", 3.5}}}}});
  const json call = server_->WaitSettled("ep-acc");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  const json& accuracy = *Standard(call, "transcription_accuracy");
  ASSERT_EQ(accuracy["status"], "completed") << accuracy.dump();
  EXPECT_EQ(accuracy["result"]["reference_words"], 7);
  EXPECT_EQ(accuracy["result"]["substitutions"], 0);
  EXPECT_EQ(accuracy["result"]["deletions"], 0);
  EXPECT_EQ(accuracy["result"]["insertions"], 1);
  EXPECT_EQ(accuracy["result"]["wer"], 0.1429);
  EXPECT_EQ(accuracy["result"]["accuracy"], 0.8571);
  EXPECT_EQ(accuracy["score"], 0.8571);
  EXPECT_EQ(call["transcript_source"], "provided");
}

TEST_F(EndpointTranscriptionTest, FailedTranscriptionFailsTheMetricsThatNeedItNotTheCall) {
  // A refused request (401) is not retried: the transcription fails at once.
  stt_->FailNext({FakeTranscriptionFailure::kUnauthorized, ""});
  server_->Ingest({{"call_identifier", "ep-fail"},
                   {"recording_url", files_.url("/short.wav")},
                   {"metric_ids", {5, 12}}});
  const json call = server_->WaitSettled("ep-fail");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  EXPECT_EQ(call["transcription_status"], "failed");
  EXPECT_TRUE(call["transcript_source"].is_null());
  EXPECT_EQ(Standard(call, "silence_detection")->at("status"), "completed");
  const json& completion = *Standard(call, "task_completion");
  EXPECT_EQ(completion["status"], "failed");
  EXPECT_NE(completion["error"].get<std::string>().find("no transcript: the transcription failed"),
            std::string::npos)
      << completion.dump();
  EXPECT_EQ(completion["credits_used"], 0);
  EXPECT_EQ(call["credits_used"], 1);
  EXPECT_EQ(llm_.chat_calls(), 0);
}

TEST_F(EndpointTranscriptionTest, WordsPerMinuteWaitsForTheGeneratedTranscript) {
  server_->Ingest({{"call_identifier", "ep-wpm"},
                   {"recording_url", files_.url("/short.wav")},
                   {"metric_ids", {6}}});
  const json call = server_->WaitSettled("ep-wpm");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  const json& wpm = *Standard(call, "words_per_minute");
  ASSERT_EQ(wpm["status"], "completed") << wpm.dump();
  // The endpoint heard "Thank you for calling." and "I need help.".
  EXPECT_EQ(wpm["result"]["transcript"], "generated");
  EXPECT_EQ(wpm["result"]["ai_words"], 4);
  EXPECT_EQ(wpm["result"]["user_words"], 3);
  EXPECT_GT(wpm["result"]["ai_speaking_s"].get<double>(), 0.5);
  EXPECT_EQ(call["credits_used"], 1);
}

TEST_F(EndpointTranscriptionTest, WordsPerMinuteFailsWithTheTranscription) {
  stt_->FailNext({FakeTranscriptionFailure::kUnauthorized, ""});
  server_->Ingest({{"call_identifier", "ep-wpm-fail"},
                   {"recording_url", files_.url("/short.wav")},
                   {"metric_ids", {5, 6}}});
  const json call = server_->WaitSettled("ep-wpm-fail");
  ASSERT_EQ(call["analysis_status"], "completed") << call.dump();
  EXPECT_EQ(call["transcription_status"], "failed");
  const json& wpm = *Standard(call, "words_per_minute");
  EXPECT_EQ(wpm["status"], "failed") << wpm.dump();
  EXPECT_NE(wpm["error"].get<std::string>().find("the transcription failed"), std::string::npos);
  EXPECT_EQ(wpm["credits_used"], 0);
  EXPECT_EQ(call["credits_used"], 1);  // silence only
}

}  // namespace
}  // namespace calleval

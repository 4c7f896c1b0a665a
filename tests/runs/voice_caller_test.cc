#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>

#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/mulaw.h"
#include "services/runs/speech_synthesizer.h"
#include "services/runs/twilio_media_streams.h"
#include "tests/support/test_http_server.h"

namespace calleval::runs {
namespace {

using nlohmann::json;

TEST(MuLawTest, MatchesG711AtItsReferencePoints) {
  // Reference values of ITU-T G.711 mu-law.
  EXPECT_EQ(MuLawEncode(int16_t{0}), 0xFF);
  EXPECT_EQ(MuLawEncode(int16_t{-1}), 0x7F);
  EXPECT_EQ(MuLawEncode(int16_t{32767}), 0x80);
  EXPECT_EQ(MuLawEncode(int16_t{-32768}), 0x00);
  EXPECT_EQ(MuLawDecode(0xFF), 0);
  EXPECT_EQ(MuLawDecode(0x80), 32124);
  EXPECT_EQ(MuLawDecode(0x00), -32124);
  // Every code decodes and encodes back to itself (0x7F, negative zero, aside).
  for (int b = 0; b < 256; ++b) {
    if (b == 0x7F) continue;
    EXPECT_EQ(MuLawEncode(MuLawDecode(static_cast<uint8_t>(b))), b) << b;
  }
  // Round trips keep a signal within the codec's relative error (about 3%).
  for (int s = -32000; s <= 32000; s += 97) {
    const int back = MuLawDecode(MuLawEncode(static_cast<int16_t>(s)));
    EXPECT_LE(std::abs(back - s), std::max(8, std::abs(s) / 16)) << s;
  }
}

TEST(TwilioMediaStreamsTest, CallerMessagesHaveTwiliosShape) {
  TwilioStreamWriter writer("MZ1", "CA1", "AC1");
  const json connected = json::parse(writer.Connected());
  EXPECT_EQ(connected["event"], "connected");
  EXPECT_EQ(connected["protocol"], "Call");
  const json start = json::parse(writer.Start({{"auth_token", "t"}}));
  EXPECT_EQ(start["event"], "start");
  EXPECT_EQ(start["sequenceNumber"], "2");
  EXPECT_EQ(start["streamSid"], "MZ1");
  EXPECT_EQ(start["start"]["callSid"], "CA1");
  EXPECT_EQ(start["start"]["mediaFormat"]["encoding"], "audio/x-mulaw");
  EXPECT_EQ(start["start"]["mediaFormat"]["sampleRate"], 8000);
  EXPECT_EQ(start["start"]["customParameters"]["auth_token"], "t");
  const json media = json::parse(writer.Media(std::string(160, '\xff'), 40));
  EXPECT_EQ(media["sequenceNumber"], "3");
  EXPECT_EQ(media["media"]["track"], "inbound");
  EXPECT_EQ(media["media"]["chunk"], "1");
  EXPECT_EQ(media["media"]["timestamp"], "40");
  EXPECT_EQ(*Base64Decode(media["media"]["payload"].get<std::string>()), std::string(160, '\xff'));
  EXPECT_EQ(json::parse(writer.Mark("line-1"))["mark"]["name"], "line-1");
  const json stop = json::parse(writer.Stop());
  EXPECT_EQ(stop["event"], "stop");
  EXPECT_EQ(stop["sequenceNumber"], "5");
}

TEST(TwilioMediaStreamsTest, AgentEventsAreRead) {
  auto media = ParseTwilioAgentEvent(
      R"({"event":"media","streamSid":"MZ1","media":{"payload":")" + Base64Encode("abc") + R"("}})");
  ASSERT_TRUE(media.ok()) << media.status();
  EXPECT_EQ(media->kind, TwilioAgentEvent::kMedia);
  EXPECT_EQ(media->mulaw, "abc");
  auto mark = ParseTwilioAgentEvent(R"({"event":"mark","streamSid":"MZ1","mark":{"name":"end"}})");
  ASSERT_TRUE(mark.ok());
  EXPECT_EQ(mark->kind, TwilioAgentEvent::kMark);
  EXPECT_EQ(mark->mark, "end");
  EXPECT_EQ(ParseTwilioAgentEvent(R"({"event":"clear","streamSid":"MZ1"})")->kind,
            TwilioAgentEvent::kClear);
  EXPECT_EQ(ParseTwilioAgentEvent(R"({"event":"dtmf"})")->kind, TwilioAgentEvent::kOther);
  EXPECT_FALSE(ParseTwilioAgentEvent("not json").ok());
  EXPECT_FALSE(ParseTwilioAgentEvent(R"({"no":"event"})").ok());
  EXPECT_FALSE(ParseTwilioAgentEvent(R"({"event":"media","media":{}})").ok());
  EXPECT_FALSE(ParseTwilioAgentEvent(R"({"event":"media","media":{"payload":"@@@"}})").ok());
}

TEST(SpeechSynthesizerTest, SpeaksTextAtTheRequestedRate) {
  std::unique_ptr<SpeechSynthesizer> tts = NewEspeakSynthesizer();
  auto speech = tts->Synthesize("Hello, I would like to move my appointment to Friday.", 8000);
  ASSERT_TRUE(speech.ok()) << speech.status();
  const double seconds = speech->size() / 8000.0;
  EXPECT_GT(seconds, 1.5);
  EXPECT_LT(seconds, 6.0);
  double energy = 0;
  for (int16_t s : *speech) energy += static_cast<double>(s) * s;
  const double rms = std::sqrt(energy / speech->size());
  EXPECT_GT(rms, 500) << "the synthesized audio is (nearly) silent";
  // The same text at 16 kHz is as long, with twice the samples.
  auto wide = tts->Synthesize("Hello, I would like to move my appointment to Friday.", 16000);
  ASSERT_TRUE(wide.ok());
  EXPECT_NEAR(wide->size() / 16000.0, seconds, 0.05);
  EXPECT_TRUE(tts->Synthesize("", 8000)->empty());
}

TEST(SpeechSynthesizerTest, ResamplingKeepsDurationAndPitch) {
  // One second of 440 Hz at 22050 Hz to 8 kHz: still a second, still 440 zero-crossing pairs.
  std::vector<int16_t> tone(22050);
  for (size_t i = 0; i < tone.size(); ++i) {
    tone[i] = static_cast<int16_t>(10000 * std::sin(2 * 3.14159265358979 * 440 * i / 22050.0));
  }
  auto out = ResamplePcm16(tone, 22050, 8000);
  ASSERT_TRUE(out.ok());
  EXPECT_NEAR(static_cast<double>(out->size()), 8000, 20);
  int crossings = 0;
  for (size_t i = 1; i < out->size(); ++i) crossings += ((*out)[i - 1] < 0) != ((*out)[i] < 0);
  EXPECT_NEAR(crossings, 880, 6);
}

// A local OpenAI-compatible /v1/audio/speech: checks the request, answers 24 kHz PCM.
class SpeechEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Handle("/v1/audio/speech", [this](const TestHttpServer::Request& r) {
      TestHttpServer::Response response;
      ++requests_;
      if (r.Header("authorization") != "Bearer sk-tts") {
        response.status = 401;
        response.content_type = "application/json";
        response.body = R"({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})";
        return response;
      }
      if (failures_ > 0) {
        --failures_;
        response.status = 503;
        response.body = R"({"error": {"message": "overloaded"}})";
        return response;
      }
      const json body = json::parse(r.body, nullptr, false);
      last_body_ = body;
      // One second of 24 kHz samples per request: a 440 Hz tone.
      std::string pcm;
      for (int i = 0; i < 24000; ++i) {
        const auto v = static_cast<int16_t>(8000 * std::sin(2 * 3.14159265358979 * 440 * i / 24000.0));
        pcm.push_back(static_cast<char>(v & 0xFF));
        pcm.push_back(static_cast<char>((v >> 8) & 0xFF));
      }
      response.content_type = "audio/pcm";
      response.body = pcm;
      return response;
    });
  }
  OpenAiSpeechConfig Config(std::string key = "sk-tts") {
    OpenAiSpeechConfig config;
    config.base_url = server_.url("/v1");
    config.api_key = std::move(key);
    config.initial_backoff = absl::Milliseconds(10);
    return config;
  }
  TestHttpServer server_;
  std::atomic<int> requests_{0};
  std::atomic<int> failures_{0};
  json last_body_;
};

TEST_F(SpeechEndpointTest, SpeaksThroughTheEndpointAtTheRequestedRate) {
  auto tts = NewOpenAiSpeechSynthesizer(Config());
  auto audio = tts->Synthesize("Friday morning, please.", 8000);
  ASSERT_TRUE(audio.ok()) << audio.status();
  EXPECT_NEAR(static_cast<double>(audio->size()), 8000, 20);
  EXPECT_EQ(last_body_["input"], "Friday morning, please.");
  EXPECT_EQ(last_body_["model"], "tts-1");
  EXPECT_EQ(last_body_["voice"], "alloy");
  EXPECT_EQ(last_body_["response_format"], "pcm");
}

TEST_F(SpeechEndpointTest, OverloadIsRetriedARefusalIsNot) {
  failures_ = 2;
  auto tts = NewOpenAiSpeechSynthesizer(Config());
  ASSERT_TRUE(tts->Synthesize("hello", 8000).ok());
  EXPECT_EQ(requests_.load(), 3);
  requests_ = 0;
  auto refused = NewOpenAiSpeechSynthesizer(Config("sk-wrong"))->Synthesize("hello", 8000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("Incorrect API key"), std::string::npos);
  EXPECT_EQ(requests_.load(), 1);
}

}  // namespace
}  // namespace calleval::runs

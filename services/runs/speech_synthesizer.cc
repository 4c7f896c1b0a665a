#include "services/runs/speech_synthesizer.h"

#include <espeak-ng/espeak_ng.h>

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
}

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/errors.h"
#include "common/provider_http.h"
#include "nlohmann/json.hpp"

namespace calleval::runs {
namespace {

std::mutex& EngineMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

// Collects the synthesized samples of one call to espeak_ng_Synthesize.
int CollectSamples(short* wav, int count, espeak_EVENT* events) {
  if (wav == nullptr || count <= 0 || events == nullptr) return 0;
  auto* out = static_cast<std::vector<int16_t>*>(events->user_data);
  if (out != nullptr) out->insert(out->end(), wav, wav + count);
  return 0;
}

// Initializes eSpeak NG once per process; its sample rate, or an error.
absl::StatusOr<int> EngineRate() {
  static absl::StatusOr<int>* rate = [] {
    espeak_ng_InitializePath(nullptr);
    espeak_ng_ERROR_CONTEXT context = nullptr;
    espeak_ng_STATUS status = espeak_ng_Initialize(&context);
    if (status != ENS_OK) {
      espeak_ng_ClearErrorContext(&context);
      return new absl::StatusOr<int>(
          MakeError(absl::StatusCode::kFailedPrecondition, "tts_unavailable",
                    absl::StrCat("text-to-speech unavailable: eSpeak NG did not start (status ",
                                 static_cast<int>(status), "); install espeak-ng-data")));
    }
    status = espeak_ng_InitializeOutput(ENOUTPUT_MODE_SYNCHRONOUS, 0, nullptr);
    if (status != ENS_OK) {
      return new absl::StatusOr<int>(MakeError(absl::StatusCode::kFailedPrecondition,
                                               "tts_unavailable",
                                               "text-to-speech unavailable: eSpeak NG output"));
    }
    espeak_SetSynthCallback(CollectSamples);
    return new absl::StatusOr<int>(espeak_ng_GetSampleRate());
  }();
  return *rate;
}

class EspeakSynthesizer : public SpeechSynthesizer {
 public:
  explicit EspeakSynthesizer(EspeakOptions options) : options_(std::move(options)) {}

  absl::StatusOr<std::vector<int16_t>> Synthesize(const std::string& text,
                                                  int sample_rate) override {
    if (text.empty()) return std::vector<int16_t>();
    std::vector<int16_t> native;
    int native_rate = 0;
    {
      std::lock_guard<std::mutex> lock(EngineMutex());
      absl::StatusOr<int> rate = EngineRate();
      if (!rate.ok()) return rate.status();
      native_rate = *rate;
      if (espeak_ng_SetVoiceByName(options_.voice.c_str()) != ENS_OK &&
          espeak_ng_SetVoiceByName("en") != ENS_OK) {
        return MakeError(absl::StatusCode::kFailedPrecondition, "tts_unavailable",
                         absl::StrCat("text-to-speech: no eSpeak NG voice ", options_.voice));
      }
      espeak_ng_SetParameter(espeakRATE, options_.words_per_minute, 0);
      const espeak_ng_STATUS status =
          espeak_ng_Synthesize(text.c_str(), text.size() + 1, 0, POS_CHARACTER, 0,
                               espeakCHARS_UTF8, nullptr, &native);
      if (status != ENS_OK || espeak_ng_Synchronize() != ENS_OK) {
        return MakeError(absl::StatusCode::kInternal, "tts_error",
                         "text-to-speech: eSpeak NG could not synthesize the text");
      }
    }
    if (native_rate == sample_rate) return native;
    return ResamplePcm16(native, native_rate, sample_rate);
  }

 private:
  const EspeakOptions options_;
};

constexpr int kOpenAiPcmRate = 24000;

class OpenAiSpeechSynthesizer : public SpeechSynthesizer {
 public:
  explicit OpenAiSpeechSynthesizer(OpenAiSpeechConfig config) : config_(std::move(config)) {}

  absl::StatusOr<std::vector<int16_t>> Synthesize(const std::string& text,
                                                  int sample_rate) override {
    if (text.empty()) return std::vector<int16_t>();
    ProviderPost post;
    post.metrics_provider = "tts";
    post.url = absl::StrCat(absl::StripSuffix(config_.base_url, "/"), "/audio/speech");
    if (!config_.api_key.empty()) {
      post.headers.push_back(absl::StrCat("Authorization: Bearer ", config_.api_key));
    }
    post.body = nlohmann::json{{"model", config_.model},
                               {"input", text},
                               {"voice", config_.voice},
                               {"response_format", "pcm"}}
                    .dump();
    post.request_timeout = config_.request_timeout;
    post.max_attempts = config_.max_attempts;
    post.initial_backoff = config_.initial_backoff;
    post.cancel = config_.cancel;
    post.label = "text-to-speech failed: ";
    post.error_code = "tts_error";
    post.cancelled_code = "tts_cancelled";
    absl::StatusOr<std::string> body = PostToProvider(post);
    if (!body.ok()) return body.status();
    if (body->size() % 2 != 0) {
      return MakeError(absl::StatusCode::kUnavailable, "tts_bad_response",
                       "text-to-speech failed: the answer is not 16-bit PCM (odd length)");
    }
    std::vector<int16_t> pcm(body->size() / 2);
    for (size_t i = 0; i < pcm.size(); ++i) {
      pcm[i] = static_cast<int16_t>(static_cast<uint8_t>((*body)[2 * i]) |
                                    (static_cast<uint8_t>((*body)[2 * i + 1]) << 8));
    }
    return ResamplePcm16(pcm, kOpenAiPcmRate, sample_rate);
  }

 private:
  const OpenAiSpeechConfig config_;
};

}  // namespace

std::unique_ptr<SpeechSynthesizer> NewOpenAiSpeechSynthesizer(OpenAiSpeechConfig config) {
  return std::make_unique<OpenAiSpeechSynthesizer>(std::move(config));
}

std::unique_ptr<SpeechSynthesizer> NewEspeakSynthesizer(EspeakOptions options) {
  return std::make_unique<EspeakSynthesizer>(std::move(options));
}

absl::StatusOr<std::vector<int16_t>> ResamplePcm16(absl::Span<const int16_t> samples,
                                                   int from_rate, int to_rate) {
  if (from_rate == to_rate || samples.empty()) {
    return std::vector<int16_t>(samples.begin(), samples.end());
  }
  SwrContext* swr = nullptr;
  AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
  if (swr_alloc_set_opts2(&swr, &mono, AV_SAMPLE_FMT_S16, to_rate, &mono, AV_SAMPLE_FMT_S16,
                          from_rate, 0, nullptr) < 0 ||
      swr_init(swr) < 0) {
    swr_free(&swr);
    return absl::InternalError("resampler could not be set up");
  }
  const int capacity =
      static_cast<int>(static_cast<int64_t>(samples.size()) * to_rate / from_rate + 256);
  std::vector<int16_t> out(static_cast<size_t>(capacity));
  const uint8_t* in = reinterpret_cast<const uint8_t*>(samples.data());
  uint8_t* dst = reinterpret_cast<uint8_t*>(out.data());
  int written = swr_convert(swr, &dst, capacity, &in, static_cast<int>(samples.size()));
  if (written >= 0) {
    uint8_t* rest = reinterpret_cast<uint8_t*>(out.data() + written);
    const int flushed = swr_convert(swr, &rest, capacity - written, nullptr, 0);
    if (flushed > 0) written += flushed;
  }
  swr_free(&swr);
  if (written < 0) return absl::InternalError("resampling failed");
  out.resize(static_cast<size_t>(written));
  return out;
}

}  // namespace calleval::runs

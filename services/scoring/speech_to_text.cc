#include "services/scoring/speech_to_text.h"

#include <pocketsphinx.h>
#include <sphinxbase/err.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/provider_http.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/errors.h"
#include "nlohmann/json.hpp"
#include "services/scoring/audio_decoder.h"

namespace calleval::scoring {

SpeechRecognizer::~SpeechRecognizer() = default;

// ---------------------------------------------------------------------------------------------
// Audio.

void AppendPcm16(absl::Span<const float> samples, std::vector<int16_t>* out) {
  // No reserve(): called once per decoder block, an exact reserve would defeat the vector's
  // geometric growth and copy the whole channel every time.
  for (float s : samples) {
    // Round to nearest; NaN (never produced by the decoder) maps to 0 through the clamp.
    const float scaled = std::clamp(s * 32768.0f, -32768.0f, 32767.0f);
    out->push_back(static_cast<int16_t>(std::lrint(std::isnan(scaled) ? 0.0f : scaled)));
  }
}

absl::StatusOr<SpeechAudio> DecodeChannelsForSpeech(const std::string& path) {
  absl::StatusOr<std::unique_ptr<AudioDecoder>> decoder =
      AudioDecoder::Open(path, kSpeechSampleRate);
  if (!decoder.ok()) return decoder.status();
  SpeechAudio audio;
  audio.channels.resize((*decoder)->channels());
  std::array<std::vector<float>, 2> block;
  while (true) {
    absl::StatusOr<size_t> frames = (*decoder)->Read(&block);
    if (!frames.ok()) return frames.status();
    if (*frames == 0) break;
    for (size_t c = 0; c < audio.channels.size(); ++c) {
      AppendPcm16(absl::MakeConstSpan(block[c].data(), *frames), &audio.channels[c]);
    }
  }
  audio.duration_seconds = (*decoder)->decoded_seconds();
  return audio;
}

namespace {

constexpr size_t kFrameSamples = kSpeechSampleRate / 100;  // 10 ms analysis frames
constexpr uint32_t kDitherSeed = 20240611;

// Frame energies in dBFS, one per 10 ms (the last partial frame included).
std::vector<float> FrameLevels(absl::Span<const int16_t> samples) {
  std::vector<float> levels;
  levels.reserve(samples.size() / kFrameSamples + 1);
  for (size_t start = 0; start < samples.size(); start += kFrameSamples) {
    const size_t end = std::min(samples.size(), start + kFrameSamples);
    double sum = 0;
    for (size_t i = start; i < end; ++i) {
      const double x = samples[i] / 32768.0;
      sum += x * x;
    }
    levels.push_back(static_cast<float>(10.0 * std::log10(sum / (end - start) + 1e-12)));
  }
  return levels;
}

float Percentile(std::vector<float> values, double p) {
  if (values.empty()) return -120.0f;
  const size_t k = std::min(values.size() - 1, static_cast<size_t>(p / 100.0 * values.size()));
  std::nth_element(values.begin(), values.begin() + k, values.end());
  return values[k];
}

// The frame in [first, last) with the lowest level.
size_t QuietestFrame(const std::vector<float>& levels, size_t first, size_t last) {
  size_t best = first;
  for (size_t f = first; f < last; ++f) {
    if (levels[f] < levels[best]) best = f;
  }
  return best;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> SplitIntoUtterances(absl::Span<const int16_t> samples,
                                                           const PocketsphinxOptions& options) {
  std::vector<std::pair<size_t, size_t>> utterances;
  if (samples.empty()) return utterances;
  const std::vector<float> levels = FrameLevels(samples);
  const size_t n = levels.size();

  // Speech is well above the channel's noise floor and not far below its loud parts. The
  // second condition keeps faint crosstalk and hum out of the decoder, where they would only
  // turn into invented words; the recognizer still hears them inside the padding and pauses.
  const float floor_db = Percentile(levels, 10);
  const float peak_db = Percentile(levels, 99);
  const float threshold = std::max({floor_db + 10.0f, peak_db - 30.0f, -65.0f});

  const size_t min_pause = std::max<size_t>(1, std::lround(options.min_pause_seconds * 100));
  const size_t max_frames = std::max<size_t>(
      100, static_cast<size_t>(options.max_utterance_seconds * 100));
  const size_t pad = static_cast<size_t>(std::lround(options.padding_seconds * 100));

  // Active regions, pauses shorter than min_pause bridged, in frames.
  std::vector<std::pair<size_t, size_t>> regions;
  for (size_t f = 0; f < n; ++f) {
    if (levels[f] < threshold) continue;
    if (!regions.empty() && f - regions.back().second < min_pause) {
      regions.back().second = f + 1;
    } else {
      regions.emplace_back(f, f + 1);
    }
  }

  // Regions shorter than 50 ms are clicks. Padding counts against the length cap, and a region
  // longer than the cap (speech without pauses, or noise) is cut at its quietest frames; the
  // pieces meet at the cut without padding, so no audio is decoded twice.
  struct Piece {
    size_t begin, end;
    bool cut_before, cut_after;
  };
  const size_t inner_max = max_frames > 2 * pad + 50 ? max_frames - 2 * pad : max_frames;
  std::vector<Piece> pieces;
  for (auto [begin, end] : regions) {
    if (end - begin < 5) continue;
    bool cut_before = false;
    while (end - begin > inner_max) {
      const size_t cut = QuietestFrame(levels, begin + inner_max / 2, begin + inner_max);
      pieces.push_back({begin, cut, cut_before, true});
      begin = cut;
      cut_before = true;
    }
    pieces.push_back({begin, end, cut_before, false});
  }

  size_t previous_end = 0;
  for (const Piece& p : pieces) {
    size_t first = p.cut_before || p.begin < pad ? p.begin : p.begin - pad;
    first = std::max(first, previous_end);
    const size_t last = p.cut_after ? p.end : std::min(n, p.end + pad);
    const size_t sample_begin = first * kFrameSamples;
    const size_t sample_end = std::min(samples.size(), last * kFrameSamples);
    if (sample_end > sample_begin) utterances.emplace_back(sample_begin, sample_end);
    previous_end = last;
  }
  return utterances;
}

// ---------------------------------------------------------------------------------------------
// PocketSphinx.

struct PocketsphinxRecognizer::Decoder {
  ~Decoder() {
    if (ps != nullptr) ps_free(ps);
    if (config != nullptr) cmd_ln_free_r(config);
  }
  cmd_ln_t* config = nullptr;
  ps_decoder_t* ps = nullptr;
  // The cepstral mean the model starts with (-cmninit). Live CMN adapts it after every
  // utterance; restoring it at the start of each Transcribe makes a channel's transcript
  // independent of the channels decoded before it, while still adapting within the channel.
  std::vector<mfcc_t> initial_cmn;
};

namespace {

// PocketSphinx's word strings: "<s>", "</s>", "<sil>", "[NOISE]", "[SPEECH]" and "+NSN+"-style
// fillers are not words; "word(2)" is the second pronunciation of "word".
std::optional<std::string> SpokenWord(absl::string_view token) {
  if (token.empty() || token[0] == '<' || token[0] == '[' || token[0] == '+') return std::nullopt;
  if (absl::EndsWith(token, ")")) {
    const size_t open = token.rfind('(');
    if (open != absl::string_view::npos && open > 0) token = token.substr(0, open);
  }
  if (token.empty()) return std::nullopt;
  return std::string(token);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PocketsphinxRecognizer>> PocketsphinxRecognizer::Create(
    PocketsphinxOptions options) {
  const std::string hmm = absl::StrCat(options.model_dir, "/en-us");
  const std::string lm = absl::StrCat(options.model_dir, "/en-us.lm.bin");
  const std::string dict = absl::StrCat(options.model_dir, "/cmudict-en-us.dict");
  for (const std::string& path : {absl::StrCat(hmm, "/mdef"), lm, dict}) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      return MakeError(absl::StatusCode::kFailedPrecondition, "stt_unavailable",
                       absl::StrCat("speech-to-text model not found: cannot read ", path,
                                    " (install pocketsphinx-en-us)"));
    }
    std::fclose(f);
  }

  // Logging is process-wide in sphinxbase. Silence it before parsing the configuration too
  // (ps_init only applies -logfn once it runs), so model loading does not flood stderr.
  err_set_logfp(nullptr);
  auto decoder = std::make_unique<Decoder>();
  std::vector<std::pair<std::string, std::string>> settings = {
      {"-hmm", hmm}, {"-lm", lm}, {"-dict", dict}, {"-logfn", "/dev/null"},
      // With sphinxbase's VAD dropping frames, segment frame numbers no longer map to time;
      // SplitIntoUtterances skips the pauses instead.
      {"-remove_silence", "no"},
      // Dither is added by Transcribe itself, seeded per utterance: sphinxbase's own generator
      // runs on across utterances and calls, which made a channel's transcript depend on what
      // the decoder heard before.
      {"-dither", "no"}};
  for (const auto& extra : options.extra_arguments) {
    auto same = std::find_if(settings.begin(), settings.end(),
                             [&](const auto& s) { return s.first == extra.first; });
    if (same != settings.end()) {
      same->second = extra.second;
    } else {
      settings.push_back(extra);
    }
  }
  std::vector<char*> argv;
  for (auto& [name, value] : settings) {
    argv.push_back(name.data());
    argv.push_back(value.data());
  }
  decoder->config = cmd_ln_parse_r(nullptr, ps_args(), static_cast<int32>(argv.size()),
                                   argv.data(), TRUE);
  if (decoder->config == nullptr) {
    return MakeError(absl::StatusCode::kInvalidArgument, "stt_unavailable",
                     absl::StrCat("speech-to-text failed: invalid PocketSphinx arguments: ",
                                  absl::StrJoin(argv.begin(), argv.end(), " ")));
  }
  decoder->ps = ps_init(decoder->config);
  if (decoder->ps == nullptr) {
    return MakeError(absl::StatusCode::kFailedPrecondition, "stt_unavailable",
                     absl::StrCat("speech-to-text failed: PocketSphinx could not load the model "
                                  "in ",
                                  options.model_dir));
  }
  if (feat_t* feat = ps_get_feat(decoder->ps); feat != nullptr && feat->cmn_struct != nullptr) {
    decoder->initial_cmn.resize(feat->cmn_struct->veclen);
    cmn_live_get(feat->cmn_struct, decoder->initial_cmn.data());
  }
  return std::unique_ptr<PocketsphinxRecognizer>(
      new PocketsphinxRecognizer(std::move(options), std::move(decoder)));
}

PocketsphinxRecognizer::PocketsphinxRecognizer(PocketsphinxOptions options,
                                               std::unique_ptr<Decoder> decoder)
    : options_(std::move(options)), decoder_(std::move(decoder)) {}

PocketsphinxRecognizer::~PocketsphinxRecognizer() = default;

absl::StatusOr<ChannelTranscript> PocketsphinxRecognizer::Transcribe(
    const std::vector<int16_t>& mono_16k_samples) {
  const std::vector<std::pair<size_t, size_t>> utterances =
      SplitIntoUtterances(mono_16k_samples, options_);
  ChannelTranscript transcript;
  std::lock_guard<std::mutex> lock(mu_);
  ps_decoder_t* ps = decoder_->ps;
  // The acoustic model's frame rate (-frate, 100 per second).
  const double frame_seconds = 1.0 / cmd_ln_int32_r(decoder_->config, "-frate");
  if (feat_t* feat = ps_get_feat(ps);
      feat != nullptr && feat->cmn_struct != nullptr && !decoder_->initial_cmn.empty()) {
    cmn_live_set(feat->cmn_struct, decoder_->initial_cmn.data());
  }
  for (const auto& [begin, end] : utterances) {
    if (options_.cancel != nullptr && options_.cancel->load()) {
      return MakeError(absl::StatusCode::kCancelled, "stt_cancelled",
                       "speech-to-text failed: cancelled (the service is stopping)");
    }
    // A new stream restarts the frame count (segment frames are counted from the stream's
    // start, not the utterance's) and the front end's state, so each utterance is decoded
    // the same whatever came before it.
    if (ps_start_stream(ps) < 0 || ps_start_utt(ps) < 0) {
      return MakeError(absl::StatusCode::kInternal, "stt_error",
                       "speech-to-text failed: PocketSphinx could not start an utterance");
    }
    // Fed in one-second pieces, as from a live source, with +-1 LSB triangular dither: digital
    // silence (exact zeros, common in synthetic and gated audio) has no spectrum for the
    // front end's log energies. The generator restarts at every utterance, so the result
    // depends only on the utterance's samples.
    std::minstd_rand dither(kDitherSeed);
    for (size_t at = begin; at < end; at += kSpeechSampleRate) {
      const size_t count = std::min<size_t>(kSpeechSampleRate, end - at);
      piece_.resize(count);
      for (size_t i = 0; i < count; ++i) {
        const int noise = static_cast<int>(dither() & 1) - static_cast<int>(dither() & 1);
        piece_[i] = static_cast<int16_t>(
            std::clamp(mono_16k_samples[at + i] + noise, -32768, 32767));
      }
      if (ps_process_raw(ps, piece_.data(), count, FALSE, FALSE) < 0) {
        ps_end_utt(ps);
        return MakeError(absl::StatusCode::kInternal, "stt_error",
                         "speech-to-text failed: PocketSphinx could not process the audio");
      }
    }
    if (ps_end_utt(ps) < 0) {
      return MakeError(absl::StatusCode::kInternal, "stt_error",
                       "speech-to-text failed: PocketSphinx could not finish an utterance");
    }
    const double offset = static_cast<double>(begin) / kSpeechSampleRate;
    for (ps_seg_t* seg = ps_seg_iter(ps); seg != nullptr; seg = ps_seg_next(seg)) {
      std::optional<std::string> word = SpokenWord(ps_seg_word(seg));
      if (!word.has_value()) continue;
      int first_frame = 0;
      int last_frame = 0;
      ps_seg_frames(seg, &first_frame, &last_frame);
      transcript.words.push_back({*std::move(word), offset + first_frame * frame_seconds,
                                  offset + (last_frame + 1) * frame_seconds});
    }
  }
  return transcript;
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible endpoint.

namespace {

constexpr absl::string_view kLabel = "speech-to-text failed: ";

void AppendLe(std::string* out, uint32_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}


// Splits `text` at whitespace into words spread evenly over [start, end].
void SpreadWords(absl::string_view text, double start, double end,
                 std::vector<RecognizedWord>* out) {
  std::vector<absl::string_view> words =
      absl::StrSplit(text, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
  if (words.empty()) return;
  end = std::max(start, end);
  const double step = (end - start) / words.size();
  for (size_t i = 0; i < words.size(); ++i) {
    out->push_back({std::string(words[i]), start + i * step, start + (i + 1) * step});
  }
}

std::optional<double> NumberField(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<std::string> StringField(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}


}  // namespace

std::string EncodeWav(absl::Span<const int16_t> samples, int sample_rate) {
  const uint32_t data_bytes = static_cast<uint32_t>(samples.size() * 2);
  std::string wav;
  wav.reserve(44 + data_bytes);
  wav.append("RIFF");
  AppendLe(&wav, 36 + data_bytes, 4);
  wav.append("WAVEfmt ");
  AppendLe(&wav, 16, 4);                                // fmt chunk size
  AppendLe(&wav, 1, 2);                                 // PCM
  AppendLe(&wav, 1, 2);                                 // mono
  AppendLe(&wav, static_cast<uint32_t>(sample_rate), 4);
  AppendLe(&wav, static_cast<uint32_t>(sample_rate) * 2, 4);  // byte rate
  AppendLe(&wav, 2, 2);                                 // block align
  AppendLe(&wav, 16, 2);                                // bits per sample
  wav.append("data");
  AppendLe(&wav, data_bytes, 4);
  for (int16_t s : samples) AppendLe(&wav, static_cast<uint16_t>(s), 2);
  return wav;
}

absl::StatusOr<ChannelTranscript> ParseTranscriptionJson(absl::string_view body,
                                                         double offset_seconds,
                                                         double duration_seconds) {
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  auto bad = [](absl::string_view why) {
    return MakeError(absl::StatusCode::kUnavailable, "stt_bad_response",
                     absl::StrCat(kLabel, "the provider's answer is not a transcription (", why,
                                  ")"));
  };
  if (parsed.is_discarded()) return bad("not JSON");
  if (!parsed.is_object()) return bad("not a JSON object");

  ChannelTranscript transcript;
  auto words = parsed.find("words");
  auto segments = parsed.find("segments");
  if (words != parsed.end() && words->is_array() && !words->empty()) {
    for (const nlohmann::json& w : *words) {
      if (!w.is_object()) return bad("a word is not an object");
      std::optional<std::string> text = StringField(w, "word");
      std::optional<double> start = NumberField(w, "start");
      std::optional<double> end = NumberField(w, "end");
      if (!text || !start || !end) return bad("a word lacks word, start or end");
      // Whisper words may carry leading spaces or be punctuation-only.
      absl::string_view stripped = absl::StripAsciiWhitespace(*text);
      if (stripped.empty()) continue;
      transcript.words.push_back({std::string(stripped), offset_seconds + *start,
                                  offset_seconds + std::max(*start, *end)});
    }
  } else if (segments != parsed.end() && segments->is_array() && !segments->empty()) {
    for (const nlohmann::json& s : *segments) {
      if (!s.is_object()) return bad("a segment is not an object");
      std::optional<std::string> text = StringField(s, "text");
      std::optional<double> start = NumberField(s, "start");
      std::optional<double> end = NumberField(s, "end");
      if (!text || !start || !end) return bad("a segment lacks text, start or end");
      SpreadWords(*text, offset_seconds + *start, offset_seconds + *end, &transcript.words);
    }
  } else {
    std::optional<std::string> text = StringField(parsed, "text");
    if (!text) return bad("no text, words or segments");
    SpreadWords(*text, offset_seconds, offset_seconds + duration_seconds, &transcript.words);
  }
  std::stable_sort(transcript.words.begin(), transcript.words.end(),
                   [](const RecognizedWord& a, const RecognizedWord& b) {
                     return a.start_seconds < b.start_seconds;
                   });
  return transcript;
}

std::vector<size_t> ChunkBoundaries(absl::Span<const int16_t> samples, double chunk_seconds) {
  std::vector<size_t> boundaries;
  const size_t chunk = static_cast<size_t>(std::max(1.0, chunk_seconds) * kSpeechSampleRate);
  if (samples.size() <= chunk) return boundaries;
  // Cut in the quietest 100 ms of the 30 s (at most a quarter chunk) before each nominal
  // boundary, so a cut seldom falls inside a word.
  const size_t search = std::min<size_t>(30 * kSpeechSampleRate, chunk / 4);
  constexpr size_t kWindow = kSpeechSampleRate / 10;
  size_t start = 0;
  while (samples.size() - start > chunk) {
    const size_t nominal = start + chunk;
    size_t best = nominal;
    double best_energy = std::numeric_limits<double>::infinity();
    for (size_t w = nominal - search; w + kWindow <= nominal; w += kWindow) {
      double energy = 0;
      for (size_t i = w; i < w + kWindow; ++i) energy += static_cast<double>(samples[i]) * samples[i];
      if (energy < best_energy) {
        best_energy = energy;
        best = w + kWindow / 2;
      }
    }
    boundaries.push_back(best);
    start = best;
  }
  return boundaries;
}

OpenAiTranscriber::OpenAiTranscriber(OpenAiTranscriberConfig config)
    : config_(std::move(config)),
      url_(absl::StrCat(absl::StripSuffix(config_.base_url, "/"), "/audio/transcriptions")) {
}

absl::StatusOr<ChannelTranscript> OpenAiTranscriber::Transcribe(
    const std::vector<int16_t>& mono_16k_samples) {
  absl::Span<const int16_t> all(mono_16k_samples);
  std::vector<size_t> cuts;
  if (44 + static_cast<int64_t>(all.size()) * 2 > config_.max_upload_bytes) {
    cuts = ChunkBoundaries(all, config_.chunk_seconds);
  }
  cuts.push_back(all.size());
  ChannelTranscript transcript;
  size_t start = 0;
  for (size_t end : cuts) {
    absl::StatusOr<ChannelTranscript> piece = TranscribePiece(
        all.subspan(start, end - start), static_cast<double>(start) / kSpeechSampleRate);
    if (!piece.ok()) return piece.status();
    for (RecognizedWord& w : piece->words) transcript.words.push_back(std::move(w));
    start = end;
  }
  return transcript;
}

absl::StatusOr<ChannelTranscript> OpenAiTranscriber::TranscribePiece(
    absl::Span<const int16_t> samples, double offset_seconds) {
  const double duration = static_cast<double>(samples.size()) / kSpeechSampleRate;
  ProviderPost post;
  post.metrics_provider = "stt";
  post.url = url_;
  post.headers.push_back("Accept: application/json");
  if (!config_.api_key.empty()) {
    post.headers.push_back(absl::StrCat("Authorization: Bearer ", config_.api_key));
  }
  post.multipart = {{"file", EncodeWav(samples), "audio.wav", "audio/wav"},
                    {"model", config_.model, "", ""},
                    {"response_format", "verbose_json", "", ""},
                    {"timestamp_granularities[]", "word", "", ""},
                    {"timestamp_granularities[]", "segment", "", ""}};
  if (!config_.language.empty()) post.multipart.push_back({"language", config_.language, "", ""});
  post.connect_timeout = config_.connect_timeout;
  post.request_timeout = config_.request_timeout;
  post.max_response_bytes = config_.max_response_bytes;
  post.max_attempts = config_.max_attempts;
  post.initial_backoff = config_.initial_backoff;
  post.max_backoff = config_.max_backoff;
  post.cancel = config_.cancel;
  post.label = std::string(kLabel);
  post.error_code = "stt_error";
  post.bad_response_code = "stt_bad_response";
  post.cancelled_code = "stt_cancelled";
  post.requests = &requests_;
  absl::StatusOr<std::string> body = PostToProvider(post);
  if (!body.ok()) return body.status();
  return ParseTranscriptionJson(*body, offset_seconds, duration);
}

// ---------------------------------------------------------------------------------------------
// Merging.

std::vector<calleval::v1::Turn> MergeChannels(const ChannelTranscript& agent,
                                              const ChannelTranscript& user,
                                              const MergeOptions& options) {
  struct Built {
    double start = 0;
    double end = 0;
    bool is_agent = false;
    std::vector<absl::string_view> words;
  };
  std::vector<Built> turns;

  // Midpoints of the other party's words, sorted, to ask "did they speak in this pause?".
  auto midpoints = [](const ChannelTranscript& t) {
    std::vector<double> m;
    m.reserve(t.words.size());
    for (const RecognizedWord& w : t.words) m.push_back((w.start_seconds + w.end_seconds) / 2);
    std::sort(m.begin(), m.end());
    return m;
  };
  auto build = [&](const ChannelTranscript& own, const std::vector<double>& other,
                   bool is_agent) {
    std::vector<const RecognizedWord*> words;
    for (const RecognizedWord& w : own.words) {
      if (!absl::StripAsciiWhitespace(w.text).empty()) words.push_back(&w);
    }
    std::stable_sort(words.begin(), words.end(),
                     [](const RecognizedWord* a, const RecognizedWord* b) {
                       return a->start_seconds < b->start_seconds;
                     });
    Built current;
    for (const RecognizedWord* w : words) {
      bool split = current.words.empty();
      if (!split) {
        const double gap_start = current.end;
        const double gap_end = w->start_seconds;
        split = gap_end - gap_start > options.max_gap_seconds;
        if (!split && gap_end > gap_start) {
          auto it = std::upper_bound(other.begin(), other.end(), gap_start);
          split = it != other.end() && *it < gap_end;
        }
        if (split) turns.push_back(std::move(current));
      }
      if (split) {
        current = Built();
        current.start = w->start_seconds;
        current.end = w->end_seconds;
        current.is_agent = is_agent;
      }
      current.words.push_back(absl::StripAsciiWhitespace(w->text));
      current.end = std::max(current.end, w->end_seconds);
    }
    if (!current.words.empty()) turns.push_back(std::move(current));
  };
  build(agent, midpoints(user), /*is_agent=*/true);
  build(user, midpoints(agent), /*is_agent=*/false);

  std::stable_sort(turns.begin(), turns.end(), [](const Built& a, const Built& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.end != b.end) return a.end < b.end;
    return a.is_agent && !b.is_agent;
  });
  std::vector<calleval::v1::Turn> out;
  out.reserve(turns.size());
  for (const Built& b : turns) {
    calleval::v1::Turn& turn = out.emplace_back();
    turn.set_role(std::string(b.is_agent ? kAgentRole : kUserRole));
    turn.set_content(absl::StrJoin(b.words, " "));
    turn.set_start_time(b.start);
    turn.set_end_time(b.end);
  }
  return out;
}

}  // namespace calleval::scoring

// Transcribes every call of the accuracy corpus with PocketSphinx, both channels, and prints
// per call and in total: audio seconds, processing seconds, real-time factor (processing time
// per second of audio, per channel) and word error rate against <id>.transcript.json.
//
//   stt_bench [--corpus DIR] [--min-pause S] [--max-utterance S] [--padding S] [--ps -name=value]...
//         [ID_SUBSTRING...]
//
// Stereo calls compare each channel with its party's transcript turns (agent and caller per
// the truth file's channel map); mono calls compare the one channel with the whole transcript.
// The pooled WER is total errors over total reference words. Decoding the file is timed apart
// from recognition.
//
// --pipeline runs what the service runs instead (TranscribeRecording: the file decoded in
// blocks, each channel recognized in 5-minute pieces, the words merged into turns) and compares
// each party's turns with its transcript turns; its times include decoding.

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "services/scoring/speech_to_text.h"
#include "services/scoring/transcription_worker.h"
#include "services/scoring/word_error_rate.h"

namespace {

using calleval::scoring::ChannelTranscript;
using calleval::scoring::PocketsphinxOptions;
using calleval::scoring::PocketsphinxRecognizer;

struct Errors {
  int64_t errors = 0;
  int64_t reference_words = 0;
  double wer() const {
    return reference_words == 0 ? (errors == 0 ? 0.0 : 1.0)
                                : static_cast<double>(errors) / reference_words;
  }
};

Errors CountErrors(const std::string& reference, const std::string& hypothesis) {
  calleval::scoring::WordErrorCounts counts =
      calleval::scoring::WordErrorRate(reference, hypothesis);
  return {counts.substitutions + counts.deletions + counts.insertions, counts.reference_words};
}

std::string Join(const ChannelTranscript& t) {
  std::vector<std::string> words;
  for (const auto& w : t.words) words.push_back(w.text);
  return absl::StrJoin(words, " ");
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

bool ParseDouble(const char* text, double* out) { return absl::SimpleAtod(text, out); }

}  // namespace

int main(int argc, char** argv) {
  std::string corpus = CALLEVAL_CORPUS_DIR;
  PocketsphinxOptions options;
  std::vector<std::string> filters;
  bool pipeline = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--corpus" && has_value) {
      corpus = argv[++i];
    } else if (arg == "--min-pause" && has_value && ParseDouble(argv[i + 1], &options.min_pause_seconds)) {
      ++i;
    } else if (arg == "--max-utterance" && has_value &&
               ParseDouble(argv[i + 1], &options.max_utterance_seconds)) {
      ++i;
    } else if (arg == "--padding" && has_value && ParseDouble(argv[i + 1], &options.padding_seconds)) {
      ++i;
    } else if (arg == "--pipeline") {
      pipeline = true;
    } else if (arg == "--ps" && has_value) {
      // --ps -name=value: a PocketSphinx argument.
      const std::string setting = argv[++i];
      const size_t eq = setting.find('=');
      if (eq == std::string::npos) return 2;
      options.extra_arguments.emplace_back(setting.substr(0, eq), setting.substr(eq + 1));
    } else if (absl::StartsWith(arg, "--")) {
      std::fprintf(stderr, "usage: %s [--corpus DIR] [--min-pause S] [--max-utterance S] "
                   "[--padding S] [ID_SUBSTRING...]\n", argv[0]);
      return 2;
    } else {
      filters.push_back(arg);
    }
  }

  std::vector<std::filesystem::path> truths;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".truth.json")) continue;
    if (!filters.empty() && std::none_of(filters.begin(), filters.end(), [&](const std::string& f) {
          return absl::StrContains(name, f);
        })) {
      continue;
    }
    truths.push_back(entry.path());
  }
  std::sort(truths.begin(), truths.end());
  if (truths.empty()) {
    std::fprintf(stderr, "no *.truth.json in %s\n", corpus.c_str());
    return 2;
  }

  const auto load_start = std::chrono::steady_clock::now();
  auto recognizer = PocketsphinxRecognizer::Create(options);
  if (!recognizer.ok()) {
    std::fprintf(stderr, "%s\n", recognizer.status().ToString().c_str());
    return 1;
  }
  std::printf("model load: %.2f s\n", Seconds(std::chrono::steady_clock::now() - load_start));
  std::printf("%-34s %3s %8s %8s %8s %6s %6s %6s %7s\n", "call", "ch", "audio_s", "decode_s",
              "stt_s", "rtf", "words", "errors", "wer");

  double total_audio = 0;  // channel-seconds
  double total_stt = 0;
  double total_decode = 0;
  Errors pooled;
  std::vector<double> call_wers;
  std::vector<double> call_rtfs;
  for (const auto& truth_path : truths) {
    std::ifstream truth_stream(truth_path);
    nlohmann::json truth = nlohmann::json::parse(truth_stream, nullptr, false);
    if (truth.is_discarded()) {
      std::fprintf(stderr, "unreadable %s\n", truth_path.c_str());
      return 2;
    }
    const std::string id = truth.value("id", truth_path.stem().stem().string());
    const auto dir = truth_path.parent_path();
    std::ifstream transcript_stream(dir / truth.value("transcript_file", id + ".transcript.json"));
    nlohmann::json transcript = nlohmann::json::parse(transcript_stream, nullptr, false);
    int agent_channel = 0;
    const nlohmann::json& map = truth["audio"]["channel_map"];
    if (map.is_object()) agent_channel = map.value("agent", 0);

    if (pipeline) {
      const std::string audio_file = (dir / truth.value("audio_file", "")).string();
      calleval::scoring::ChannelMap channel_map{agent_channel, 1 - agent_channel};
      const auto start = std::chrono::steady_clock::now();
      auto turns = calleval::scoring::TranscribeRecording(audio_file, channel_map,
                                                          /*has_provided_transcript=*/true,
                                                          **recognizer);
      const double stt_s = Seconds(std::chrono::steady_clock::now() - start);
      if (!turns.ok()) {
        std::fprintf(stderr, "%s: %s\n", id.c_str(), turns.status().ToString().c_str());
        return 1;
      }
      const bool mono = truth["audio"].value("channels", 2) == 1;
      const double duration = truth.value("duration_seconds", 0.0);
      const double channel_seconds = duration * (mono ? 1 : 2);
      Errors call_errors;
      for (const char* role : {"AI Assistant", "User"}) {
        std::vector<std::string> reference, hypothesis;
        for (const auto& turn : transcript) {
          if (mono || turn.value("role", "") == role) reference.push_back(turn.value("content", ""));
        }
        for (const auto& turn : *turns) {
          if (mono || turn.role() == role) hypothesis.push_back(turn.content());
        }
        const Errors e = CountErrors(absl::StrJoin(reference, " "), absl::StrJoin(hypothesis, " "));
        call_errors.errors += e.errors;
        call_errors.reference_words += e.reference_words;
        if (mono) break;
      }
      std::printf("%-34s %3s %8.1f %8s %8.2f %6.3f %6lld %6lld %7.3f\n", id.c_str(),
                  mono ? "1" : "2", channel_seconds, "-", stt_s, stt_s / channel_seconds,
                  static_cast<long long>(call_errors.reference_words),
                  static_cast<long long>(call_errors.errors), call_errors.wer());
      std::fflush(stdout);
      total_audio += channel_seconds;
      total_stt += stt_s;
      pooled.errors += call_errors.errors;
      pooled.reference_words += call_errors.reference_words;
      call_wers.push_back(call_errors.wer());
      call_rtfs.push_back(stt_s / channel_seconds);
      continue;
    }

    const auto decode_start = std::chrono::steady_clock::now();
    auto audio = calleval::scoring::DecodeChannelsForSpeech(
        (dir / truth.value("audio_file", "")).string());
    const double decode_s = Seconds(std::chrono::steady_clock::now() - decode_start);
    if (!audio.ok()) {
      std::fprintf(stderr, "%s: %s\n", id.c_str(), audio.status().ToString().c_str());
      return 1;
    }
    total_decode += decode_s;

    Errors call_errors;
    double call_audio = 0;
    double call_stt = 0;
    const size_t channels = audio->channels.size();
    for (size_t c = 0; c < channels; ++c) {
      std::vector<std::string> reference;
      for (const auto& turn : transcript) {
        const bool agent = turn.value("role", "") == "AI Assistant";
        if (channels == 1 || agent == (static_cast<int>(c) == agent_channel)) {
          reference.push_back(turn.value("content", ""));
        }
      }
      const auto start = std::chrono::steady_clock::now();
      auto words = (*recognizer)->Transcribe(audio->channels[c]);
      const double stt_s = Seconds(std::chrono::steady_clock::now() - start);
      if (!words.ok()) {
        std::fprintf(stderr, "%s: %s\n", id.c_str(), words.status().ToString().c_str());
        return 1;
      }
      const double audio_s = static_cast<double>(audio->channels[c].size()) /
                             calleval::scoring::kSpeechSampleRate;
      const Errors e = CountErrors(absl::StrJoin(reference, " "), Join(*words));
      std::printf("%-34s %3zu %8.1f %8.2f %8.2f %6.3f %6lld %6lld %7.3f\n", id.c_str(), c,
                  audio_s, c == 0 ? decode_s : 0.0, stt_s, stt_s / audio_s,
                  static_cast<long long>(e.reference_words), static_cast<long long>(e.errors),
                  e.wer());
      if (std::getenv("STT_BENCH_VERBOSE") != nullptr) {
        std::printf("    ref: %s\n    hyp: %s\n", absl::StrJoin(reference, " ").c_str(),
                    Join(*words).c_str());
      }
      call_errors.errors += e.errors;
      call_errors.reference_words += e.reference_words;
      call_audio += audio_s;
      call_stt += stt_s;
    }
    std::fflush(stdout);
    total_audio += call_audio;
    total_stt += call_stt;
    pooled.errors += call_errors.errors;
    pooled.reference_words += call_errors.reference_words;
    call_wers.push_back(call_errors.wer());
    call_rtfs.push_back(call_stt / call_audio);
  }

  const auto [wer_min, wer_max] = std::minmax_element(call_wers.begin(), call_wers.end());
  const auto [rtf_min, rtf_max] = std::minmax_element(call_rtfs.begin(), call_rtfs.end());
  std::printf("\ncalls: %zu, channel audio: %.1f s, recognition: %.1f s, file decoding: %.2f s\n",
              truths.size(), total_audio, total_stt, total_decode);
  std::printf("real-time factor: %.3f (per call %.3f .. %.3f), %.1fx faster than real time\n",
              total_stt / total_audio, *rtf_min, *rtf_max, total_audio / total_stt);
  std::printf("pooled WER: %.3f (%lld errors / %lld reference words), per call %.3f .. %.3f\n",
              pooled.wer(), static_cast<long long>(pooled.errors),
              static_cast<long long>(pooled.reference_words), *wer_min, *wer_max);
  return 0;
}

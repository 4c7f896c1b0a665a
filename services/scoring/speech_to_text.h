#pragma once

// Speech-to-text for voice calls (docs/api.md §7): an embedded offline recognizer (CMU
// PocketSphinx, Debian's libpocketsphinx 0.8+5prealpha with the en-us model) by default, or any
// OpenAI-compatible POST {base_url}/audio/transcriptions endpoint when one is configured.
//
// Both engines transcribe one channel at a time: 16 kHz mono PCM16, which is what the audio
// decoder produces at its working rate (kWorkingSampleRate) once its floats are converted with
// AppendPcm16(). DecodeChannelsForSpeech() does both for a recording file. The per-channel
// transcripts are then merged into one timed, role-labelled transcript with MergeChannels().

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "calleval/v1/calls.pb.h"

namespace calleval::scoring {

// The only rate the recognizers accept (the en-us acoustic model's rate, and the audio pass's
// working rate).
inline constexpr int kSpeechSampleRate = 16000;

struct RecognizedWord {
  std::string text;  // as recognized: no filler tokens, no "(2)" pronunciation suffixes
  double start_seconds = 0;
  double end_seconds = 0;
};

// One channel's words in time order. Words rather than segments: turns are built by MergeChannels
// from word timings, so the two channels can interleave at word granularity.
struct ChannelTranscript {
  std::vector<RecognizedWord> words;
};

class SpeechRecognizer {
 public:
  virtual ~SpeechRecognizer();
  // `mono_16k_samples`: one channel at kSpeechSampleRate. Times in the result are seconds from
  // the first sample. Silence yields an empty transcript, not an error.
  virtual absl::StatusOr<ChannelTranscript> Transcribe(
      const std::vector<int16_t>& mono_16k_samples) = 0;
};

// --- Audio in the recognizers' format ---

// Appends float samples in [-1, 1] (the audio decoder's output) as PCM16, clipping outside.
void AppendPcm16(absl::Span<const float> samples, std::vector<int16_t>* out);

struct SpeechAudio {
  // One entry per decoded channel (1 for mono, 2 for stereo), each at kSpeechSampleRate.
  std::vector<std::vector<int16_t>> channels;
  double duration_seconds = 0;
};

// Decodes a recording with AudioDecoder at kSpeechSampleRate into PCM16 per channel. Errors are
// AudioDecoder::Open's (unsupported_audio, not found). A 60-minute stereo call takes 230 MB.
absl::StatusOr<SpeechAudio> DecodeChannelsForSpeech(const std::string& path);

// --- Offline recognizer ---

struct PocketsphinxOptions {
  // Directory holding en-us/ (acoustic model), en-us.lm.bin and cmudict-en-us.dict
  // (Debian package pocketsphinx-en-us).
  std::string model_dir = "/usr/share/pocketsphinx/model/en-us";
  // Long audio is decoded as a series of utterances cut at pauses, so the decoder's memory and
  // its per-utterance search stay bounded whatever the call length. A pause is at least this
  // long ...
  double min_pause_seconds = 0.3;
  // ... and an utterance never exceeds this (without a pause, it is cut at its quietest 10 ms).
  double max_utterance_seconds = 30;
  // Audio kept around each utterance's speech, so word edges are not clipped.
  double padding_seconds = 0.25;
  // Further PocketSphinx arguments, applied after the defaults: {"-beam", "1e-60"}, ...
  std::vector<std::pair<std::string, std::string>> extra_arguments;
  // When set and it becomes true, Transcribe() stops before the next utterance (at most
  // max_utterance_seconds of audio later) with kCancelled, code stt_cancelled.
  const std::atomic<bool>* cancel = nullptr;
};

// Holds one PocketSphinx decoder: loading the model takes about a second, so a recognizer is
// created once and reused. ps_decoder_t is not thread-safe, so Transcribe() calls on one
// recognizer are serialized by a mutex; for parallel transcription make one recognizer per
// worker thread (about 140 MB each, most of it the language model and dictionary).
class PocketsphinxRecognizer : public SpeechRecognizer {
 public:
  // Loads the model; kFailedPrecondition when its files are missing or unreadable.
  static absl::StatusOr<std::unique_ptr<PocketsphinxRecognizer>> Create(
      PocketsphinxOptions options = {});

  ~PocketsphinxRecognizer() override;
  PocketsphinxRecognizer(const PocketsphinxRecognizer&) = delete;
  PocketsphinxRecognizer& operator=(const PocketsphinxRecognizer&) = delete;

  absl::StatusOr<ChannelTranscript> Transcribe(
      const std::vector<int16_t>& mono_16k_samples) override;

 private:
  struct Decoder;  // PocketSphinx objects, kept out of this header.

  PocketsphinxRecognizer(PocketsphinxOptions options, std::unique_ptr<Decoder> decoder);

  const PocketsphinxOptions options_;
  // std::mutex rather than absl::Mutex, as in tests/support: Debian's Abseil is not built for
  // ThreadSanitizer.
  std::mutex mu_;
  std::unique_ptr<Decoder> decoder_;  // guarded by mu_
  std::vector<int16_t> piece_;        // guarded by mu_; audio on its way to the decoder
};

// Sample ranges [begin, end) of `samples` worth decoding: speech found by a frame-energy
// detector (threshold adapted to the channel's noise floor and peak level), pauses shorter than
// `min_pause_seconds` bridged, `padding_seconds` added, and no range longer than
// `max_utterance_seconds`. Exposed for tests.
std::vector<std::pair<size_t, size_t>> SplitIntoUtterances(absl::Span<const int16_t> samples,
                                                           const PocketsphinxOptions& options);

// --- OpenAI-compatible endpoint ---

struct OpenAiTranscriberConfig {
  std::string base_url;  // "https://api.openai.com/v1"; "/audio/transcriptions" is appended
  std::string api_key;   // sent as "Authorization: Bearer ..." when not empty
  // Must support response_format=verbose_json for timings (OpenAI: whisper-1).
  std::string model = "whisper-1";
  std::string language;  // ISO-639-1 hint ("en"); empty lets the provider detect it
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration request_timeout = absl::Minutes(5);  // one attempt, upload to last byte
  int max_attempts = 3;
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);  // also caps a server's Retry-After
  int64_t max_response_bytes = int64_t{8} << 20;
  // OpenAI refuses uploads over 25 MB. Audio whose WAV would exceed this is sent in pieces of
  // about chunk_seconds (10 minutes = 19.2 MB), cut at the quietest point of the 30 s before
  // each boundary, and the pieces' times are shifted by their offsets.
  int64_t max_upload_bytes = 25'000'000;
  double chunk_seconds = 600;
  // When set and it becomes true, a request or backoff in progress ends within about a
  // second with kCancelled.
  const std::atomic<bool>* cancel = nullptr;
};

// Failures start with "speech-to-text failed: " and carry an ErrorInfo code:
//   stt_error         kFailedPrecondition: the provider refused the request (401, 400, 413 ...),
//                     with its own message; kUnavailable: unreachable, timed out, or 429/5xx
//                     after max_attempts.
//   stt_bad_response  kUnavailable: the answer was not a transcription (not JSON, wrong shape,
//                     over max_response_bytes).
//   stt_cancelled     kCancelled.
// Thread-safe: each call uses its own libcurl handle.
class OpenAiTranscriber : public SpeechRecognizer {
 public:
  explicit OpenAiTranscriber(OpenAiTranscriberConfig config);

  absl::StatusOr<ChannelTranscript> Transcribe(
      const std::vector<int16_t>& mono_16k_samples) override;

  // HTTP requests made so far (retries included).
  int requests() const { return requests_.load(); }

 private:
  // One upload of samples [begin, end); times in the result are shifted by begin.
  absl::StatusOr<ChannelTranscript> TranscribePiece(absl::Span<const int16_t> samples,
                                                    double offset_seconds);

  const OpenAiTranscriberConfig config_;
  const std::string url_;
  std::atomic<int> requests_{0};
};

// Pieces of OpenAiTranscriber, exposed for tests.

// A canonical 44-byte-header WAV file: mono, PCM16, `sample_rate`.
std::string EncodeWav(absl::Span<const int16_t> samples, int sample_rate = kSpeechSampleRate);
// Reads a verbose_json transcription: `words` [{word, start, end}] when present, else
// `segments` [{text, start, end}] with their words spread evenly over each segment, else `text`
// spread evenly over [0, duration_seconds]. Times are shifted by offset_seconds.
absl::StatusOr<ChannelTranscript> ParseTranscriptionJson(absl::string_view body,
                                                         double offset_seconds,
                                                         double duration_seconds);
// Where long audio is cut: sample indices of each piece's start after the first.
std::vector<size_t> ChunkBoundaries(absl::Span<const int16_t> samples, double chunk_seconds);

// --- Merging channels into turns ---

inline constexpr absl::string_view kAgentRole = "AI Assistant";
inline constexpr absl::string_view kUserRole = "User";

struct MergeOptions {
  // A pause longer than this between two words of one party starts a new turn.
  double max_gap_seconds = 1.0;
};

// One transcript in the ingest format (docs/api.md §2, roles "AI Assistant" and "User", content,
// start_time, end_time): each party's words are grouped into turns, broken at pauses over
// max_gap_seconds or where the other party spoke in the pause (a word of the other channel has
// its midpoint between the two words). Speaking over the other party does not break a turn, so
// turns may overlap. Turns are sorted by start (then end, agent first).
std::vector<calleval::v1::Turn> MergeChannels(const ChannelTranscript& agent,
                                              const ChannelTranscript& user,
                                              const MergeOptions& options = {});

}  // namespace calleval::scoring

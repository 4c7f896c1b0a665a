#pragma once

// Streaming audio decoder for the audio pass: any file FFmpeg reads -> planar float blocks at the
// working rate, one vector per channel, never the whole file in memory.
//
// Timing follows the `ffmpeg` command line exactly: default decoder options, so MP3 encoder delay
// and padding and MP4 edit lists (AAC priming) are removed the way libavcodec does by default.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/scoring/timeline.h"

namespace calleval::scoring {

struct AudioInfo {
  std::string format_name;  // "wav", "mp3", "mov,mp4,m4a,3gp,3g2,mj2", ...
  std::string codec_name;   // "pcm_s16le", "mp3", "aac", "pcm_mulaw", ...
  int source_sample_rate = 0;
  int source_channels = 0;
};

class AudioDecoder {
 public:
  // Opens any file FFmpeg can read that has an audio stream. A file that is empty, not a media
  // file, has no audio stream or cannot be decoded fails with kInvalidArgument and ErrorInfo
  // code "unsupported_audio"; a missing file with kNotFound.
  static absl::StatusOr<std::unique_ptr<AudioDecoder>> Open(const std::string& path,
                                                            int target_rate = kWorkingSampleRate);

  ~AudioDecoder();
  AudioDecoder(const AudioDecoder&) = delete;
  AudioDecoder& operator=(const AudioDecoder&) = delete;

  const AudioInfo& info() const { return info_; }
  // Output channels: 1 for mono sources, 2 for stereo; sources with more keep the first two.
  int channels() const { return channels_; }
  int target_rate() const { return target_rate_; }

  // Decodes the next block (a few thousand frames), resampled to target_rate as float in
  // [-1, 1], planar: afterwards out[c] holds exactly the returned number of frames for each
  // output channel c (unused channels are left empty). Vectors keep their capacity, so steady
  // state does not allocate. Returns 0 at the end of the stream, after the decoder and the
  // resampler have been drained. Corrupt packets are skipped, as `ffmpeg` does.
  absl::StatusOr<size_t> Read(std::array<std::vector<float>, 2>* out);

  // Length of the audio decoded so far (after Read returned 0: the whole file) in seconds, on
  // the decoder's output timeline at the source rate, not rounded.
  double decoded_seconds() const;
  // Packets or frames the decoder rejected so far (skipped).
  int64_t skipped_packets() const { return skipped_packets_; }

 private:
  struct Ffmpeg;  // FFmpeg objects, kept out of this header.

  AudioDecoder();

  // Decodes until `out` holds at least `min_frames` frames or the stream ends.
  absl::Status Fill(std::array<std::vector<float>, 2>* out, size_t min_frames);
  // Converts the frame held in ffmpeg_ (or drains the resampler when `drain`) onto `out`.
  absl::Status Convert(std::array<std::vector<float>, 2>* out, bool drain);
  // (Re)creates the resampler for the current frame's rate, layout and format.
  absl::Status SetUpResampler();

  std::unique_ptr<Ffmpeg> ffmpeg_;
  AudioInfo info_;
  int channels_ = 0;
  int target_rate_ = kWorkingSampleRate;
  bool input_done_ = false;      // demuxer exhausted, decoder sent its flush packet
  bool decoder_done_ = false;    // decoder drained
  bool finished_ = false;        // resampler drained too
  bool packet_pending_ = false;  // the decoder refused the packet held in ffmpeg_ (EAGAIN)
  int64_t skipped_packets_ = 0;
  int64_t frames_decoded_ = 0;
  // Source samples decoded at rate_samples_rate_, plus whole seconds of earlier rates (exact
  // unless the rate changes mid-stream).
  int64_t rate_samples_ = 0;
  int rate_samples_rate_ = 0;
  double earlier_seconds_ = 0;
};

}  // namespace calleval::scoring

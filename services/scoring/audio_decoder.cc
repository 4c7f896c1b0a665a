#include "services/scoring/audio_decoder.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/ascii.h"
#include "common/errors.h"
#include "common/log.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/log.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
}

namespace calleval::scoring {
namespace {

// Output frames per Read: large enough to amortise the per-call work, small enough that a block
// of two channels stays in cache.
constexpr size_t kBlockFrames = 4096;
// Decode errors in a row, without a packet fed in between, after which the decoder is treated as
// drained (guards against a decoder that keeps failing on its flush).
constexpr int kMaxErrorsInARow = 1000;

struct FormatCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecFreer {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct PacketFreer {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameFreer {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct SwrFreer {
  void operator()(SwrContext* s) const { swr_free(&s); }
};
struct DictFreer {
  void operator()(AVDictionary* d) const { av_dict_free(&d); }
};
struct LayoutFreer {
  void operator()(AVChannelLayout* l) const {
    av_channel_layout_uninit(l);
    delete l;
  }
};

std::string AvError(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

absl::Status Unsupported(absl::string_view message) {
  return ValidationError("unsupported_audio", message);
}

// FFmpeg's messages as log lines (component=ffmpeg): stderr holds nothing but the log's lines.
void LogFfmpegMessage(void* context, int level, const char* format, va_list args) {
  if (level > av_log_get_level()) return;
  char text[1024];
  int print_prefix = 1;
  av_log_format_line2(context, level, format, args, text, sizeof(text), &print_prefix);
  const absl::string_view message = absl::StripAsciiWhitespace(text);
  if (message.empty()) return;
  Log(level <= AV_LOG_FATAL ? LogLevel::kError : LogLevel::kWarn, message,
      {{"component", "ffmpeg"}});
}

void QuietFfmpegLogs() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Corrupt packets are expected input; only real errors belong in the service log.
    if (av_log_get_level() > AV_LOG_ERROR) av_log_set_level(AV_LOG_ERROR);
    av_log_set_callback(&LogFfmpegMessage);
  });
}

}  // namespace

struct AudioDecoder::Ffmpeg {
  std::unique_ptr<AVFormatContext, FormatCloser> format;
  std::unique_ptr<AVCodecContext, CodecFreer> codec;
  std::unique_ptr<AVPacket, PacketFreer> packet;
  std::unique_ptr<AVFrame, FrameFreer> frame;
  std::unique_ptr<SwrContext, SwrFreer> swr;
  // What the resampler was set up for; a frame that differs rebuilds it.
  std::unique_ptr<AVChannelLayout, LayoutFreer> swr_layout{new AVChannelLayout{}};
  int swr_rate = 0;
  int swr_format = AV_SAMPLE_FMT_NONE;
  int stream_index = -1;
};

AudioDecoder::AudioDecoder() : ffmpeg_(std::make_unique<Ffmpeg>()) {}
AudioDecoder::~AudioDecoder() = default;

absl::StatusOr<std::unique_ptr<AudioDecoder>> AudioDecoder::Open(const std::string& path,
                                                                 int target_rate) {
  QuietFfmpegLogs();
  if (target_rate <= 0) {
    return InternalError(absl::StrCat("invalid target sample rate ", target_rate));
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return NotFoundError(absl::StrCat("audio file '", path, "'"));
    }
    return Unsupported(absl::StrCat("cannot read audio file '", path, "': ", ec.message()));
  }
  if (size == 0) return Unsupported("the audio file is empty");

  std::unique_ptr<AudioDecoder> d(new AudioDecoder());
  d->target_rate_ = target_rate;
  Ffmpeg& f = *d->ffmpeg_;

  // Local files only: a playlist or concat script must not make the decoder fetch URLs. The
  // "file:" prefix keeps a ':' in a relative path from being read as a protocol name.
  AVDictionary* raw_options = nullptr;
  av_dict_set(&raw_options, "protocol_whitelist", "file", 0);
  AVFormatContext* raw_format = nullptr;
  int ret = avformat_open_input(&raw_format, ("file:" + path).c_str(), nullptr, &raw_options);
  std::unique_ptr<AVDictionary, DictFreer> unused_options(raw_options);
  if (ret < 0) {
    return Unsupported(absl::StrCat("not a readable media file: ", AvError(ret)));
  }
  f.format.reset(raw_format);
  ret = avformat_find_stream_info(f.format.get(), nullptr);
  if (ret < 0) {
    return Unsupported(absl::StrCat("cannot read the media file's streams: ", AvError(ret)));
  }
  const AVCodec* codec = nullptr;
  ret = av_find_best_stream(f.format.get(), AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
  if (ret == AVERROR_STREAM_NOT_FOUND) {
    return Unsupported("the file has no audio stream");
  }
  if (ret < 0 || codec == nullptr) {
    const int any = av_find_best_stream(f.format.get(), AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0);
    const AVCodecID id = any >= 0 ? f.format->streams[any]->codecpar->codec_id : AV_CODEC_ID_NONE;
    return Unsupported(
        absl::StrCat("no decoder for the audio stream (codec ", avcodec_get_name(id), ")"));
  }
  f.stream_index = ret;
  AVStream* stream = f.format->streams[f.stream_index];
  // Only the audio stream is demuxed further.
  for (unsigned i = 0; i < f.format->nb_streams; ++i) {
    if (static_cast<int>(i) != f.stream_index) f.format->streams[i]->discard = AVDISCARD_ALL;
  }

  f.codec.reset(avcodec_alloc_context3(codec));
  if (f.codec == nullptr) return InternalError("out of memory allocating the audio decoder");
  ret = avcodec_parameters_to_context(f.codec.get(), stream->codecpar);
  if (ret < 0) {
    return Unsupported(absl::StrCat("cannot set up the audio decoder: ", AvError(ret)));
  }
  f.codec->pkt_timebase = stream->time_base;
  ret = avcodec_open2(f.codec.get(), codec, nullptr);
  if (ret < 0) {
    return Unsupported(
        absl::StrCat("cannot open the ", avcodec_get_name(codec->id), " decoder: ", AvError(ret)));
  }

  d->info_.format_name = f.format->iformat->name;
  d->info_.codec_name = avcodec_get_name(stream->codecpar->codec_id);
  d->info_.source_sample_rate = stream->codecpar->sample_rate;
  d->info_.source_channels = stream->codecpar->ch_layout.nb_channels;
  if (d->info_.source_sample_rate <= 0 || d->info_.source_channels <= 0) {
    return Unsupported(
        absl::StrCat("the ", d->info_.codec_name, " stream has no sample rate or channel count"));
  }
  d->channels_ = std::min(d->info_.source_channels, 2);

  f.packet.reset(av_packet_alloc());
  f.frame.reset(av_frame_alloc());
  if (f.packet == nullptr || f.frame == nullptr) {
    return InternalError("out of memory allocating decoder buffers");
  }
  return d;
}

double AudioDecoder::decoded_seconds() const {
  if (rate_samples_rate_ == 0) return earlier_seconds_;
  return earlier_seconds_ + static_cast<double>(rate_samples_) / rate_samples_rate_;
}

absl::StatusOr<size_t> AudioDecoder::Read(std::array<std::vector<float>, 2>* out) {
  for (auto& v : *out) v.clear();
  if (finished_) return 0;
  if (absl::Status s = Fill(out, kBlockFrames); !s.ok()) return s;
  const size_t n = (*out)[0].size();
  if (n == 0 && frames_decoded_ == 0 && skipped_packets_ > 0) {
    return Unsupported(absl::StrCat("the ", info_.codec_name, " audio cannot be decoded (",
                                    skipped_packets_, " corrupt packets, none decoded)"));
  }
  // Decoders and the resampler's filter can overshoot full scale slightly.
  for (int c = 0; c < channels_; ++c) {
    for (float& x : (*out)[c]) x = std::clamp(x, -1.0f, 1.0f);
  }
  return n;
}

absl::Status AudioDecoder::Fill(std::array<std::vector<float>, 2>* out, size_t min_frames) {
  Ffmpeg& f = *ffmpeg_;
  int errors_in_a_row = 0;
  while ((*out)[0].size() < min_frames) {
    if (decoder_done_) {
      // Drain the resampler's tail once; after that the stream is over.
      if (f.swr != nullptr) {
        if (absl::Status s = Convert(out, /*drain=*/true); !s.ok()) return s;
      }
      finished_ = true;
      return absl::OkStatus();
    }
    int ret = avcodec_receive_frame(f.codec.get(), f.frame.get());
    if (ret >= 0) {
      errors_in_a_row = 0;
      const AVFrame& fr = *f.frame;
      if (fr.nb_samples > 0 && fr.sample_rate > 0) {
        ++frames_decoded_;
        if (fr.sample_rate != rate_samples_rate_) {
          earlier_seconds_ = decoded_seconds();
          rate_samples_ = 0;
          rate_samples_rate_ = fr.sample_rate;
        }
        rate_samples_ += fr.nb_samples;
        if (absl::Status s = Convert(out, /*drain=*/false); !s.ok()) return s;
      }
      av_frame_unref(f.frame.get());
      continue;
    }
    if (ret == AVERROR_EOF) {
      decoder_done_ = true;
      continue;
    }
    if (ret != AVERROR(EAGAIN)) {
      // A corrupt packet surfaced while decoding: skip it like `ffmpeg` does.
      ++skipped_packets_;
      if (++errors_in_a_row >= kMaxErrorsInARow && input_done_) {
        decoder_done_ = true;
        continue;
      }
      if (input_done_) continue;
    }
    if (input_done_) {
      // EAGAIN after the flush packet cannot happen; treat it as drained rather than spin.
      decoder_done_ = true;
      continue;
    }
    // The decoder wants input: feed the next packet of our stream (or the one it refused).
    if (!packet_pending_) {
      ret = av_read_frame(f.format.get(), f.packet.get());
      if (ret == AVERROR(EAGAIN)) continue;
      if (ret < 0) {
        // End of file, or a read error the demuxer cannot get past: `ffmpeg` ends the input
        // there too and keeps what it decoded.
        input_done_ = true;
        ret = avcodec_send_packet(f.codec.get(), nullptr);
        if (ret < 0 && ret != AVERROR_EOF) decoder_done_ = true;
        continue;
      }
      if (f.packet->stream_index != f.stream_index) {
        av_packet_unref(f.packet.get());
        continue;
      }
    }
    ret = avcodec_send_packet(f.codec.get(), f.packet.get());
    if (ret == AVERROR(EAGAIN) && !packet_pending_) {
      // Output is pending after all: take it first, then offer this packet again.
      packet_pending_ = true;
      continue;
    }
    packet_pending_ = false;
    if (ret == AVERROR(ENOMEM)) return InternalError("out of memory while decoding audio");
    if (ret < 0) ++skipped_packets_;
    errors_in_a_row = 0;
    av_packet_unref(f.packet.get());
  }
  return absl::OkStatus();
}

absl::Status AudioDecoder::SetUpResampler() {
  Ffmpeg& f = *ffmpeg_;
  const AVFrame& fr = *f.frame;
  const int in_channels = fr.ch_layout.nb_channels;
  if (in_channels <= 0) return Unsupported("a decoded audio frame has no channels");

  AVChannelLayout in_layout{};
  AVChannelLayout out_layout{};
  if (av_channel_layout_copy(&in_layout, &fr.ch_layout) < 0) {
    return InternalError("out of memory copying a channel layout");
  }
  // Same layout in and out when the channel count matches, so nothing is remixed; otherwise an
  // identity matrix keeps the first channels as they are (no down-mix of surround into stereo).
  const bool same = in_channels == channels_;
  if (same) {
    av_channel_layout_copy(&out_layout, &in_layout);
  } else {
    av_channel_layout_default(&out_layout, channels_);
  }
  SwrContext* raw = nullptr;
  int ret = swr_alloc_set_opts2(&raw, &out_layout, AV_SAMPLE_FMT_FLTP, target_rate_, &in_layout,
                                static_cast<AVSampleFormat>(fr.format), fr.sample_rate, 0, nullptr);
  std::unique_ptr<SwrContext, SwrFreer> swr(raw);
  av_channel_layout_uninit(&out_layout);
  if (ret < 0 || swr == nullptr) {
    av_channel_layout_uninit(&in_layout);
    return Unsupported(absl::StrCat("cannot convert the decoded audio: ", AvError(ret)));
  }
  if (!same) {
    std::vector<double> matrix(static_cast<size_t>(channels_) * in_channels, 0.0);
    for (int c = 0; c < std::min(channels_, in_channels); ++c) matrix[c * in_channels + c] = 1.0;
    ret = swr_set_matrix(swr.get(), matrix.data(), in_channels);
    if (ret < 0) {
      av_channel_layout_uninit(&in_layout);
      return InternalError(absl::StrCat("cannot set the channel matrix: ", AvError(ret)));
    }
  }
  ret = swr_init(swr.get());
  if (ret < 0) {
    av_channel_layout_uninit(&in_layout);
    return Unsupported(absl::StrCat("cannot convert the decoded audio: ", AvError(ret)));
  }
  f.swr = std::move(swr);
  av_channel_layout_uninit(f.swr_layout.get());
  *f.swr_layout = in_layout;  // takes ownership of in_layout's contents
  f.swr_rate = fr.sample_rate;
  f.swr_format = fr.format;
  return absl::OkStatus();
}

absl::Status AudioDecoder::Convert(std::array<std::vector<float>, 2>* out, bool drain) {
  Ffmpeg& f = *ffmpeg_;
  const AVFrame& fr = *f.frame;
  if (!drain) {
    const bool changed = f.swr == nullptr || fr.sample_rate != f.swr_rate ||
                         fr.format != f.swr_format ||
                         av_channel_layout_compare(&fr.ch_layout, f.swr_layout.get()) != 0;
    if (changed) {
      // Keep the old resampler's tail before switching to the new stream parameters.
      if (f.swr != nullptr) {
        if (absl::Status s = Convert(out, /*drain=*/true); !s.ok()) return s;
      }
      if (absl::Status s = SetUpResampler(); !s.ok()) return s;
    }
  }
  const int in_samples = drain ? 0 : fr.nb_samples;
  const int capacity = swr_get_out_samples(f.swr.get(), in_samples);
  if (capacity < 0) return InternalError("resampler error");
  if (capacity == 0) return absl::OkStatus();
  const size_t start = (*out)[0].size();
  uint8_t* dst[2] = {nullptr, nullptr};
  for (int c = 0; c < channels_; ++c) {
    (*out)[c].resize(start + capacity);
    dst[c] = reinterpret_cast<uint8_t*>((*out)[c].data() + start);
  }
  const int got =
      swr_convert(f.swr.get(), dst, capacity,
                  drain ? nullptr : const_cast<const uint8_t**>(fr.extended_data), in_samples);
  if (got < 0) return InternalError(absl::StrCat("resampler error: ", AvError(got)));
  for (int c = 0; c < channels_; ++c) (*out)[c].resize(start + got);
  if (drain) f.swr.reset();
  return absl::OkStatus();
}

}  // namespace calleval::scoring

#include "services/scoring/audio_decoder.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::scoring {
namespace {

namespace fs = std::filesystem;

using ::testing::HasSubstr;

// Everything one full pass over a file yields.
struct Decoded {
  AudioInfo info;
  int channels = 0;
  size_t frames = 0;  // at the target rate
  std::array<double, 2> sum_squares = {0, 0};
  float peak = 0;
  double seconds = 0;
  size_t largest_block = 0;
  bool blocks_consistent = true;
  int64_t skipped_packets = 0;

  double Rms(int c) const { return frames ? std::sqrt(sum_squares[c] / frames) : 0; }
};

absl::StatusOr<Decoded> DecodeAll(const std::string& path, int target_rate = kWorkingSampleRate) {
  absl::StatusOr<std::unique_ptr<AudioDecoder>> decoder = AudioDecoder::Open(path, target_rate);
  if (!decoder.ok()) return decoder.status();
  Decoded d;
  d.info = (*decoder)->info();
  d.channels = (*decoder)->channels();
  std::array<std::vector<float>, 2> block;
  while (true) {
    absl::StatusOr<size_t> n = (*decoder)->Read(&block);
    if (!n.ok()) return n.status();
    for (int c = 0; c < 2; ++c) {
      const size_t want = c < d.channels ? *n : 0;
      if (block[c].size() != want) d.blocks_consistent = false;
    }
    if (*n == 0) break;
    d.largest_block = std::max(d.largest_block, *n);
    d.frames += *n;
    for (int c = 0; c < d.channels; ++c) {
      for (float x : block[c]) {
        d.sum_squares[c] += static_cast<double>(x) * x;
        d.peak = std::max(d.peak, std::fabs(x));
      }
    }
  }
  // A second Read after the end keeps returning 0.
  absl::StatusOr<size_t> again = (*decoder)->Read(&block);
  if (!again.ok() || *again != 0) d.blocks_consistent = false;
  d.seconds = (*decoder)->decoded_seconds();
  d.skipped_packets = (*decoder)->skipped_packets();
  return d;
}

// Samples per channel the `ffmpeg` command line decodes from `path` (at the source rate).
long FfmpegSamples(const std::string& path) {
  const std::string cmd = "ffmpeg -nostdin -v error -i '" + path + "' -f s16le -ac 1 - | wc -c";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  long bytes = -1;
  if (fscanf(p, "%ld", &bytes) != 1) bytes = -1;
  pclose(p);
  return bytes < 0 ? -1 : bytes / 2;
}

bool Ffmpeg(const std::string& args) {
  const std::string cmd = "ffmpeg -nostdin -hide_banner -v error -y " + args;
  return std::system(cmd.c_str()) == 0;
}

std::string ErrorCode(const absl::Status& status) { return ErrorInfoOf(status).code(); }

// A 1 kHz sine (amplitude 0.5) on the left, digital silence on the right, 2 s.
std::string StereoSine(int rate) {
  return "-f lavfi -i \"aevalsrc=exprs=0.5*sin(2*PI*1000*t)|0:s=" + std::to_string(rate) + ":d=2\"";
}

class AudioDecoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("audio_decoder_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    const auto at = [](const char* name) { return (*dir_ / name).string(); };
    ok_ = Ffmpeg(StereoSine(16000) + " -c:a pcm_s16le " + at("s16k.wav")) &&
          Ffmpeg(StereoSine(44100) + " -c:a pcm_s16le " + at("s44k.wav")) &&
          Ffmpeg(StereoSine(48000) + " -c:a pcm_s16le " + at("s48k.wav")) &&
          Ffmpeg(StereoSine(8000) + " -c:a pcm_mulaw " + at("mulaw8k.wav")) &&
          Ffmpeg(StereoSine(44100) + " -c:a libmp3lame -b:a 128k " + at("s44k.mp3")) &&
          Ffmpeg(StereoSine(16000) + " -c:a aac -b:a 64k " + at("s16k.m4a")) &&
          Ffmpeg("-f lavfi -i \"aevalsrc=exprs=0.5*sin(2*PI*1000*t):s=16000:d=2\" -c:a pcm_s16le " +
                 at("mono.wav")) &&
          // Six channels: sine on 0 and 2-5, silence on 1; a down-mix would leak into 1.
          Ffmpeg(
              "-f lavfi -i \"aevalsrc=exprs=0.5*sin(2*PI*1000*t)|0|0.5*sin(2*PI*500*t)|"
              "0.5*sin(2*PI*300*t)|0.5*sin(2*PI*700*t)|0.5*sin(2*PI*900*t):c=5.1:s=48000:d=2\" "
              "-c:a pcm_s16le " +
              at("six.wav")) &&
          Ffmpeg("-f lavfi -i testsrc=d=1:s=64x64:r=5 -c:v mjpeg " + at("video.avi"));
    std::ofstream(at("text.wav")) << "This is not audio.\nJust some text.\n";
    std::ofstream(at("empty.wav"));
    std::ofstream(at("subtitles.srt")) << "1\n00:00:01,000 --> 00:00:02,000\nHello\n\n";
    // The first 40000 bytes of a WAV whose header promises 2 s.
    std::ifstream in(at("s16k.wav"), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() > 40000) bytes.resize(40000);
    std::ofstream(at("truncated.wav"), std::ios::binary).write(bytes.data(), bytes.size());
    // An MP3 with 3000 bytes of garbage in the middle.
    std::ifstream mp3(at("s44k.mp3"), std::ios::binary);
    std::vector<char> frames((std::istreambuf_iterator<char>(mp3)),
                             std::istreambuf_iterator<char>());
    for (size_t i = 0; i < 3000 && frames.size() / 2 + i < frames.size(); ++i) {
      frames[frames.size() / 2 + i] = static_cast<char>((i * 7919) & 0xff);
    }
    std::ofstream(at("corrupt.mp3"), std::ios::binary).write(frames.data(), frames.size());
    std::error_code ec;
    fs::copy_file(at("mono.wav"), at("with:colon.wav"), ec);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << "could not generate fixtures with the ffmpeg CLI"; }
  static std::string Path(const char* name) { return (*dir_ / name).string(); }

  static fs::path* dir_;
  static bool ok_;
};

fs::path* AudioDecoderTest::dir_ = nullptr;
bool AudioDecoderTest::ok_ = false;

TEST_F(AudioDecoderTest, Wav16kStereoKeepsChannelsApart) {
  absl::StatusOr<Decoded> d = DecodeAll(Path("s16k.wav"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->info.format_name, "wav");
  EXPECT_EQ(d->info.codec_name, "pcm_s16le");
  EXPECT_EQ(d->info.source_sample_rate, 16000);
  EXPECT_EQ(d->info.source_channels, 2);
  EXPECT_EQ(d->channels, 2);
  EXPECT_TRUE(d->blocks_consistent);
  EXPECT_EQ(d->frames, 32000u);
  EXPECT_DOUBLE_EQ(d->seconds, 2.0);
  EXPECT_NEAR(d->Rms(0), 0.5 / std::sqrt(2.0), 0.005);
  EXPECT_EQ(d->Rms(1), 0.0);
  EXPECT_LE(d->peak, 1.0f);
  EXPECT_EQ(d->skipped_packets, 0);
  EXPECT_GE(d->largest_block, 1000u);
  EXPECT_LE(d->largest_block, 16384u);
}

struct ResampleCase {
  const char* file;
  const char* codec;
  int rate;
};

class ResampleTest : public AudioDecoderTest, public ::testing::WithParamInterface<ResampleCase> {};

TEST_P(ResampleTest, ResamplesToWorkingRate) {
  const ResampleCase& p = GetParam();
  absl::StatusOr<Decoded> d = DecodeAll(Path(p.file));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->info.codec_name, p.codec);
  EXPECT_EQ(d->info.source_sample_rate, p.rate);
  EXPECT_EQ(d->channels, 2);
  EXPECT_TRUE(d->blocks_consistent);
  const long source = FfmpegSamples(Path(p.file));
  ASSERT_GT(source, 0);
  // Exactly the samples `ffmpeg` decodes (encoder delay, priming and padding handled alike).
  EXPECT_NEAR(d->seconds * p.rate, static_cast<double>(source), 1e-6);
  const double expected = std::round(static_cast<double>(source) * kWorkingSampleRate / p.rate);
  EXPECT_NEAR(static_cast<double>(d->frames), expected, 1.0);
  EXPECT_NEAR(d->Rms(0), 0.5 / std::sqrt(2.0), 0.02);
  EXPECT_LT(d->Rms(1), 0.01);
  EXPECT_LE(d->peak, 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Formats, ResampleTest,
                         ::testing::Values(ResampleCase{"s44k.wav", "pcm_s16le", 44100},
                                           ResampleCase{"s48k.wav", "pcm_s16le", 48000},
                                           ResampleCase{"mulaw8k.wav", "pcm_mulaw", 8000},
                                           ResampleCase{"s44k.mp3", "mp3", 44100},
                                           ResampleCase{"s16k.m4a", "aac", 16000}));

TEST_F(AudioDecoderTest, OtherTargetRate) {
  absl::StatusOr<Decoded> d = DecodeAll(Path("s44k.wav"), 8000);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NEAR(static_cast<double>(d->frames), 16000.0, 1.0);
  EXPECT_DOUBLE_EQ(d->seconds, 2.0);
}

TEST_F(AudioDecoderTest, MonoStaysMono) {
  absl::StatusOr<Decoded> d = DecodeAll(Path("mono.wav"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->info.source_channels, 1);
  EXPECT_EQ(d->channels, 1);
  EXPECT_TRUE(d->blocks_consistent);  // out[1] stays empty
  EXPECT_EQ(d->frames, 32000u);
  EXPECT_NEAR(d->Rms(0), 0.5 / std::sqrt(2.0), 0.005);
}

TEST_F(AudioDecoderTest, SurroundKeepsFirstTwoChannelsUnmixed) {
  absl::StatusOr<Decoded> d = DecodeAll(Path("six.wav"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->info.source_channels, 6);
  EXPECT_EQ(d->channels, 2);
  EXPECT_NEAR(static_cast<double>(d->frames), 32000.0, 1.0);
  EXPECT_NEAR(d->Rms(0), 0.5 / std::sqrt(2.0), 0.01);
  EXPECT_LT(d->Rms(1), 1e-3);
}

TEST_F(AudioDecoderTest, TruncatedWavDecodesWhatIsThere) {
  absl::StatusOr<Decoded> d = DecodeAll(Path("truncated.wav"));
  ASSERT_TRUE(d.ok()) << d.status();
  const long source = FfmpegSamples(Path("truncated.wav"));
  ASSERT_GT(source, 0);
  EXPECT_NEAR(d->seconds * 16000, static_cast<double>(source), 1e-6);
  EXPECT_GT(d->seconds, 0.6);  // 40000 bytes of 16 kHz stereo s16 minus the header
  EXPECT_LT(d->seconds, 0.625);
  EXPECT_EQ(d->frames, static_cast<size_t>(source));
}

TEST_F(AudioDecoderTest, SkipsCorruptPacketsLikeFfmpeg) {
  absl::StatusOr<Decoded> d = DecodeAll(Path("corrupt.mp3"));
  ASSERT_TRUE(d.ok()) << d.status();
  const long source = FfmpegSamples(Path("corrupt.mp3"));
  ASSERT_GT(source, 0);
  EXPECT_NEAR(d->seconds * 44100, static_cast<double>(source), 1e-6);
  EXPECT_GT(d->seconds, 1.5);
  EXPECT_GT(d->skipped_packets, 0);
}

TEST_F(AudioDecoderTest, ColonInFileNameIsNotAProtocol) {
  const fs::path cwd = fs::current_path();
  fs::current_path(*dir_);
  absl::StatusOr<Decoded> d = DecodeAll("with:colon.wav");
  fs::current_path(cwd);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->frames, 32000u);
}

TEST_F(AudioDecoderTest, RejectsTextFile) {
  absl::StatusOr<std::unique_ptr<AudioDecoder>> d = AudioDecoder::Open(Path("text.wav"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorCode(d.status()), "unsupported_audio");
}

TEST_F(AudioDecoderTest, RejectsEmptyFile) {
  absl::StatusOr<std::unique_ptr<AudioDecoder>> d = AudioDecoder::Open(Path("empty.wav"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorCode(d.status()), "unsupported_audio");
  EXPECT_THAT(d.status().message(), HasSubstr("empty"));
}

TEST_F(AudioDecoderTest, RejectsVideoOnlyFile) {
  absl::StatusOr<std::unique_ptr<AudioDecoder>> d = AudioDecoder::Open(Path("video.avi"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorCode(d.status()), "unsupported_audio");
  EXPECT_THAT(d.status().message(), HasSubstr("no audio stream"));
}

TEST_F(AudioDecoderTest, RejectsSubtitleOnlyFile) {
  absl::StatusOr<std::unique_ptr<AudioDecoder>> d = AudioDecoder::Open(Path("subtitles.srt"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(ErrorCode(d.status()), "unsupported_audio");
  EXPECT_THAT(d.status().message(), HasSubstr("no audio stream"));
}

TEST_F(AudioDecoderTest, MissingFileIsNotFound) {
  absl::StatusOr<std::unique_ptr<AudioDecoder>> d = AudioDecoder::Open(Path("missing.wav"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
}

// The accuracy corpus: every recording decodes to the truth's duration, the FFmpeg timeline.
class AudioDecoderCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::is_directory(CALLEVAL_CORPUS_DIR)) << "no test corpus at " << CALLEVAL_CORPUS_DIR;
  }
};

struct Truth {
  std::string audio_file;
  double duration_seconds = 0;
  int channels = 0;
  int sample_rate = 0;
};

Truth ReadTruth(const fs::path& path) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Truth t;
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\"audio_file\":\\s*\"([^\"]+)\""))) {
    t.audio_file = m[1];
  }
  if (std::regex_search(text, m, std::regex("\"duration_seconds\":\\s*([0-9.]+)"))) {
    t.duration_seconds = std::stod(m[1]);
  }
  if (std::regex_search(text, m, std::regex("\"audio\":\\s*\\{[^}]*\"sample_rate\":\\s*(\\d+)"))) {
    t.sample_rate = std::stoi(m[1]);
  }
  if (std::regex_search(text, m, std::regex("\"audio\":\\s*\\{[^}]*\"channels\":\\s*(\\d+)"))) {
    t.channels = std::stoi(m[1]);
  }
  return t;
}

TEST_F(AudioDecoderCorpusTest, DurationsMatchTruth) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(CALLEVAL_CORPUS_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 11 || name.substr(name.size() - 11) != ".truth.json") continue;
    const Truth truth = ReadTruth(entry.path());
    SCOPED_TRACE(name);
    ASSERT_FALSE(truth.audio_file.empty());
    absl::StatusOr<Decoded> d = DecodeAll((entry.path().parent_path() / truth.audio_file).string());
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_NEAR(d->seconds, truth.duration_seconds, 0.001);
    EXPECT_EQ(d->channels, truth.channels);
    EXPECT_EQ(d->info.source_sample_rate, truth.sample_rate);
    EXPECT_TRUE(d->blocks_consistent);
    EXPECT_LE(d->peak, 1.0f);
    const double source = d->seconds * d->info.source_sample_rate;
    const double expected = std::round(source * kWorkingSampleRate / d->info.source_sample_rate);
    EXPECT_NEAR(static_cast<double>(d->frames), expected, 1.0);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_F(AudioDecoderCorpusTest, SampleCountsMatchFfmpeg) {
  for (const char* file : {"stereo_m4a.m4a", "stereo_mp3.mp3", "mono_mp3.mp3",
                           "mulaw_noise.wav", "wav_44k1.wav"}) {
    SCOPED_TRACE(file);
    const std::string path = (fs::path(CALLEVAL_CORPUS_DIR) / file).string();
    absl::StatusOr<Decoded> d = DecodeAll(path);
    ASSERT_TRUE(d.ok()) << d.status();
    const long source = FfmpegSamples(path);
    ASSERT_GT(source, 0);
    EXPECT_NEAR(d->seconds * d->info.source_sample_rate, static_cast<double>(source), 1e-6);
  }
}

// Sample for sample what `ffmpeg` decodes (16 kHz sources: no resampling involved), so encoder
// delay and priming are removed exactly, not just by the right amount.
TEST_F(AudioDecoderCorpusTest, SamplesEqualFfmpegOutput) {
  for (const char* file : {"stereo_mp3.mp3", "stereo_m4a.m4a"}) {
    SCOPED_TRACE(file);
    const std::string path = (fs::path(CALLEVAL_CORPUS_DIR) / file).string();
    absl::StatusOr<std::unique_ptr<AudioDecoder>> decoder = AudioDecoder::Open(path);
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    ASSERT_EQ((*decoder)->channels(), 2);
    const std::string cmd = "ffmpeg -nostdin -v error -i '" + path + "' -f f32le -";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::array<std::vector<float>, 2> block;
    size_t compared = 0;
    size_t mismatches = 0;
    bool ffmpeg_short = false;
    while (true) {
      absl::StatusOr<size_t> n = (*decoder)->Read(&block);
      ASSERT_TRUE(n.ok()) << n.status();
      if (*n == 0) break;
      for (size_t i = 0; i < *n; ++i) {
        float lr[2];
        if (fread(lr, sizeof(float), 2, p) != 2) {
          ffmpeg_short = true;
          break;
        }
        for (int c = 0; c < 2; ++c) {
          if (std::fabs(std::clamp(lr[c], -1.0f, 1.0f) - block[c][i]) > 1e-6f) ++mismatches;
        }
        ++compared;
      }
    }
    float extra;
    const bool ffmpeg_longer = fread(&extra, sizeof(float), 1, p) == 1;
    pclose(p);
    EXPECT_FALSE(ffmpeg_short);
    EXPECT_FALSE(ffmpeg_longer);
    EXPECT_GT(compared, 16000u * 20);
    EXPECT_EQ(mismatches, 0u);
  }
}

TEST_F(AudioDecoderCorpusTest, M4aInfo) {
  const std::string path = (fs::path(CALLEVAL_CORPUS_DIR) / "stereo_m4a.m4a").string();
  absl::StatusOr<Decoded> d = DecodeAll(path);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->info.format_name, "mov,mp4,m4a,3gp,3g2,mj2");
  EXPECT_EQ(d->info.codec_name, "aac");
  // Priming hidden by the edit list, as `ffmpeg` decodes it (a 16 kHz source: no resampling).
  ASSERT_EQ(d->info.source_sample_rate, 16000);
  EXPECT_EQ(static_cast<long>(d->frames), FfmpegSamples(path));
}

}  // namespace
}  // namespace calleval::scoring

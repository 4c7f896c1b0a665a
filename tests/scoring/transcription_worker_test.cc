#include "services/scoring/transcription_worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/blob_store.h"
#include "common/errors.h"

namespace calleval::scoring {
namespace {

constexpr double kPi = 3.14159265358979323846;

// A burst of tone on one channel, at known times.
struct Burst {
  int channel;
  double start, end;
};

// Writes a 16 kHz PCM16 WAV with `channels` channels: silence with the bursts.
void WriteWav(const std::string& path, int channels, double seconds,
              const std::vector<Burst>& bursts) {
  const int rate = kSpeechSampleRate;
  const size_t frames = static_cast<size_t>(seconds * rate);
  std::vector<int16_t> samples(frames * channels, 0);
  for (const Burst& b : bursts) {
    for (size_t i = static_cast<size_t>(b.start * rate); i < b.end * rate && i < frames; ++i) {
      samples[i * channels + b.channel] =
          static_cast<int16_t>(12000 * std::sin(2 * kPi * 440 * i / rate));
    }
  }
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
  const uint32_t data_bytes = static_cast<uint32_t>(samples.size() * 2);
  std::string out = "RIFF" + u32(36 + data_bytes) + "WAVEfmt " + u32(16) + u16(1) +
                    u16(static_cast<uint16_t>(channels)) + u32(rate) + u32(rate * channels * 2) +
                    u16(static_cast<uint16_t>(channels * 2)) + u16(16) + "data" + u32(data_bytes);
  out.append(reinterpret_cast<const char*>(samples.data()), data_bytes);
  std::ofstream(path, std::ios::binary) << out;
}

// "Recognizes" each loud stretch of the audio it is given as one word named after the call
// it came in, with the stretch's times; remembers the longest piece it was handed.
class BurstRecognizer : public SpeechRecognizer {
 public:
  absl::StatusOr<ChannelTranscript> Transcribe(const std::vector<int16_t>& samples) override {
    longest_piece_ = std::max(longest_piece_, samples.size());
    ++calls_;
    ChannelTranscript out;
    std::optional<size_t> start;
    for (size_t i = 0; i <= samples.size(); ++i) {
      // Loud when any sample of the surrounding 10 ms is: a sine crosses zero.
      bool loud = false;
      for (size_t j = i; j < std::min(samples.size(), i + 160) && !loud; ++j) {
        loud = std::abs(samples[j]) > 1000;
      }
      if (loud && !start) start = i;
      if (!loud && start) {
        out.words.push_back({"w", static_cast<double>(*start) / kSpeechSampleRate,
                             static_cast<double>(i + 159) / kSpeechSampleRate});
        start.reset();
      }
    }
    return out;
  }
  size_t longest_piece_ = 0;
  int calls_ = 0;
};

class TranscribeRecordingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/transcribe_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The workers' options with the recordings in dir_ (a local blob store) and a quick poll.
  TranscriptionWorkers::Options WorkerOptions() {
    auto recordings = OpenBlobStore(dir_);
    EXPECT_TRUE(recordings.ok()) << recordings.status();
    if (recordings.ok()) recordings_ = *std::move(recordings);
    TranscriptionWorkers::Options options;
    options.poll_interval = absl::Milliseconds(10);
    options.recordings = recordings_.get();
    options.scratch_dir = dir_;
    return options;
  }

  std::string dir_;
  std::unique_ptr<BlobStore> recordings_;
};

TEST_F(TranscribeRecordingTest, PiecesKeepTheirPlaceInTheCall) {
  // Bursts across several 4 s pieces on both channels, the agent on the right.
  const std::vector<Burst> bursts = {{1, 0.5, 1.5},  {0, 2.0, 2.6},  {1, 4.1, 5.0},
                                     {0, 6.2, 7.9},  {1, 9.0, 9.4},  {0, 11.5, 12.5},
                                     {1, 14.0, 14.8}, {0, 17.3, 18.0}};
  const std::string path = dir_ + "/stereo.wav";
  WriteWav(path, 2, 20, bursts);
  BurstRecognizer recognizer;
  absl::StatusOr<std::vector<v1::Turn>> turns =
      TranscribeRecording(path, ChannelMap{1, 0}, false, recognizer, /*piece_seconds=*/4);
  ASSERT_TRUE(turns.ok()) << turns.status();
  // Every piece is at most 4 s, so the channels went in several pieces each.
  EXPECT_LE(recognizer.longest_piece_, 4u * kSpeechSampleRate);
  EXPECT_GE(recognizer.calls_, 10);
  // One turn per burst (more than 1 s apart), with the burst's times and party.
  ASSERT_EQ(turns->size(), bursts.size());
  for (size_t i = 0; i < bursts.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ((*turns)[i].role(), bursts[i].channel == 1 ? "AI Assistant" : "User");
    EXPECT_NEAR((*turns)[i].start_time(), bursts[i].start, 0.02);
    EXPECT_NEAR((*turns)[i].end_time(), bursts[i].end, 0.02);
  }
}

TEST_F(TranscribeRecordingTest, MonoNeedsAProvidedTranscript) {
  const std::string path = dir_ + "/mono.wav";
  WriteWav(path, 1, 3, {{0, 1.0, 2.0}});
  BurstRecognizer recognizer;
  absl::StatusOr<std::vector<v1::Turn>> refused =
      TranscribeRecording(path, ChannelMap{}, false, recognizer);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorInfoOf(refused.status()).code(), "mono_recording");
  EXPECT_EQ(recognizer.calls_, 0);

  absl::StatusOr<std::vector<v1::Turn>> turns =
      TranscribeRecording(path, ChannelMap{}, true, recognizer);
  ASSERT_TRUE(turns.ok()) << turns.status();
  ASSERT_EQ(turns->size(), 1u);
  EXPECT_NEAR((*turns)[0].start_time(), 1.0, 0.02);
}

TEST_F(TranscribeRecordingTest, UndecodableFileIsAnError) {
  const std::string path = dir_ + "/junk.wav";
  std::ofstream(path) << "not audio at all";
  BurstRecognizer recognizer;
  EXPECT_FALSE(TranscribeRecording(path, ChannelMap{}, true, recognizer).ok());
}

// --- The workers -----------------------------------------------------------------------------

// A queue holding one job, recording what the worker reported.
class OneJobQueue : public TranscriptionQueue {
 public:
  explicit OneJobQueue(std::string recording_key) {
    job_.call_id = 42;
    job_.token = "token";
    job_.recording_key = std::move(recording_key);
  }
  absl::StatusOr<std::optional<calls::TranscriptionJob>> Lease() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (leased_) return std::nullopt;
    leased_ = true;
    return std::optional<calls::TranscriptionJob>(job_);
  }
  absl::Status Record(const calls::TranscriptionJob&, const std::vector<v1::Turn>& t) override {
    return Report("record", t.size());
  }
  absl::Status Fail(const calls::TranscriptionJob&, absl::string_view message) override {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = std::string(message);
    reports_.push_back("fail");
    return absl::OkStatus();
  }
  absl::Status Release(const calls::TranscriptionJob&) override { return Report("release", 0); }

  std::vector<std::string> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }
  std::string failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  size_t turns() {
    std::lock_guard<std::mutex> lock(mu_);
    return turns_;
  }

 private:
  absl::Status Report(const char* what, size_t turns) {
    std::lock_guard<std::mutex> lock(mu_);
    reports_.push_back(what);
    turns_ = turns;
    return absl::OkStatus();
  }
  calls::TranscriptionJob job_;
  std::mutex mu_;
  bool leased_ = false;
  std::vector<std::string> reports_;
  std::string failure_;
  size_t turns_ = 0;
};

// Transcribes nothing until the workers stop, then reports cancellation, as both engines do.
class UntilCancelledRecognizer : public SpeechRecognizer {
 public:
  explicit UntilCancelledRecognizer(const std::atomic<bool>* cancel) : cancel_(cancel) {}
  absl::StatusOr<ChannelTranscript> Transcribe(const std::vector<int16_t>&) override {
    started = true;
    while (!cancel_->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return MakeError(absl::StatusCode::kCancelled, "stt_cancelled", "cancelled");
  }
  static inline std::atomic<bool> started{false};

 private:
  const std::atomic<bool>* cancel_;
};

template <typename Predicate>
bool WaitFor(Predicate done) {
  for (int i = 0; i < 1000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

TEST_F(TranscribeRecordingTest, WorkersRecordTheTranscriptAndWakeTheScoring) {
  const std::string path = dir_ + "/stereo.wav";
  WriteWav(path, 2, 3, {{0, 0.5, 1.0}, {1, 1.5, 2.0}});
  OneJobQueue queue("stereo.wav");
  std::atomic<int> reported{0};
  TranscriptionWorkers::Options options = WorkerOptions();
  options.make_recognizer = [](const std::atomic<bool>*) {
    return absl::StatusOr<std::unique_ptr<SpeechRecognizer>>(
        std::make_unique<BurstRecognizer>());
  };
  options.on_reported = [&] { ++reported; };
  TranscriptionWorkers workers(&queue, options);
  workers.Start();
  ASSERT_TRUE(WaitFor([&] { return reported.load() == 1; }));
  workers.Stop();
  EXPECT_EQ(queue.reports(), std::vector<std::string>{"record"});
  EXPECT_EQ(queue.turns(), 2u);
}

TEST_F(TranscribeRecordingTest, ARecognizerThatCannotStartFailsTheJob) {
  const std::string path = dir_ + "/stereo.wav";
  WriteWav(path, 2, 1, {});
  OneJobQueue queue("stereo.wav");
  TranscriptionWorkers::Options options = WorkerOptions();
  options.make_recognizer = [](const std::atomic<bool>*) {
    return absl::StatusOr<std::unique_ptr<SpeechRecognizer>>(
        absl::FailedPreconditionError("speech-to-text model not found"));
  };
  TranscriptionWorkers workers(&queue, options);
  workers.Start();
  ASSERT_TRUE(WaitFor([&] { return !queue.reports().empty(); }));
  workers.Stop();
  EXPECT_EQ(queue.reports(), std::vector<std::string>{"fail"});
  EXPECT_EQ(queue.failure(), "speech-to-text model not found");
}

// The recording is read through the blob store: one missing from it fails the job with the
// store's reason, and the recognizer never runs.
TEST_F(TranscribeRecordingTest, ARecordingMissingFromTheStoreFailsTheJob) {
  OneJobQueue queue("never-stored.wav");
  TranscriptionWorkers::Options options = WorkerOptions();
  options.make_recognizer = [](const std::atomic<bool>*) {
    return absl::StatusOr<std::unique_ptr<SpeechRecognizer>>(
        std::make_unique<BurstRecognizer>());
  };
  TranscriptionWorkers workers(&queue, options);
  workers.Start();
  ASSERT_TRUE(WaitFor([&] { return !queue.reports().empty(); }));
  workers.Stop();
  EXPECT_EQ(queue.reports(), std::vector<std::string>{"fail"});
  EXPECT_THAT(queue.failure(), ::testing::HasSubstr("never-stored.wav is missing"));
}

TEST_F(TranscribeRecordingTest, StopCancelsATranscriptionAndGivesTheRecordingBack) {
  const std::string path = dir_ + "/stereo.wav";
  WriteWav(path, 2, 2, {{0, 0.5, 1.0}});
  OneJobQueue queue("stereo.wav");
  TranscriptionWorkers::Options options = WorkerOptions();
  options.make_recognizer = [](const std::atomic<bool>* cancel) {
    return absl::StatusOr<std::unique_ptr<SpeechRecognizer>>(
        std::make_unique<UntilCancelledRecognizer>(cancel));
  };
  TranscriptionWorkers workers(&queue, options);
  workers.Start();
  ASSERT_TRUE(WaitFor([&] { return UntilCancelledRecognizer::started.load(); }));
  const auto stop_start = std::chrono::steady_clock::now();
  workers.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, std::chrono::seconds(2));
  EXPECT_EQ(queue.reports(), std::vector<std::string>{"release"});
}

}  // namespace
}  // namespace calleval::scoring

// Decode throughput of the audio pass's first stage (services/scoring/audio_decoder) on the
// 10-minute corpus call as MP3 (the corpus file), WAV and M4A (made from it at start with the
// ffmpeg CLI). Compare with `ffmpeg -threads 1 -i FILE -f s16le -y /dev/null` (the budget in
// docs/architecture.md).
//
//   audio_decode_bench [--benchmark_filter=...]     source: $CALLEVAL_BENCH_AUDIO or the corpus
//   audio_decode_bench --decode-only FILE           one pass over FILE, for /usr/bin/time -v

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/scoring/audio_decoder.h"

namespace {

namespace fs = std::filesystem;
using calleval::scoring::AudioDecoder;


// Decodes `path` to the end; returns output frames, or -1 on error (printed).
long long DecodeFile(const std::string& path, double* seconds) {
  auto decoder = AudioDecoder::Open(path);
  if (!decoder.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), decoder.status().ToString().c_str());
    return -1;
  }
  std::array<std::vector<float>, 2> block;
  long long frames = 0;
  while (true) {
    auto n = (*decoder)->Read(&block);
    if (!n.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), n.status().ToString().c_str());
      return -1;
    }
    if (*n == 0) break;
    benchmark::DoNotOptimize(block[0].data());
    frames += static_cast<long long>(*n);
  }
  *seconds = (*decoder)->decoded_seconds();
  return frames;
}

void BM_Decode(benchmark::State& state, std::string path) {
  double seconds = 0;
  for (auto _ : state) {
    if (DecodeFile(path, &seconds) < 0) {
      state.SkipWithError("decode failed");
      return;
    }
  }
  state.counters["audio_s"] = seconds;
  state.counters["x_realtime"] = benchmark::Counter(
      seconds * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

bool Run(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--decode-only") == 0) {
    double seconds = 0;
    const long long frames = DecodeFile(argv[2], &seconds);
    if (frames < 0) return 1;
    std::printf("%lld frames at 16 kHz, %.6f s decoded\n", frames, seconds);
    return 0;
  }
  const char* env = std::getenv("CALLEVAL_BENCH_AUDIO");
  const std::string source =
      env != nullptr ? env : std::string(CALLEVAL_CORPUS_DIR) + "/ten_minutes.mp3";
  if (!fs::exists(source)) {
    std::fprintf(stderr, "no input audio at %s (set CALLEVAL_BENCH_AUDIO)\n", source.c_str());
    return 1;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("audio_decode_bench_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string wav = (dir / "call.wav").string();
  const std::string m4a = (dir / "call.m4a").string();
  const std::string ffmpeg = "ffmpeg -nostdin -hide_banner -v error -y -i '" + source + "' ";
  if (!Run(ffmpeg + "-c:a pcm_s16le '" + wav + "'") ||
      !Run(ffmpeg + "-c:a aac -b:a 48k '" + m4a + "'")) {
    std::fprintf(stderr, "could not make the WAV and M4A versions with the ffmpeg CLI\n");
    fs::remove_all(dir);
    return 1;
  }
  benchmark::RegisterBenchmark("Decode/mp3", BM_Decode, source)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Decode/wav", BM_Decode, wav)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Decode/m4a", BM_Decode, m4a)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}

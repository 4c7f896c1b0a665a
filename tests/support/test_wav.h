#pragma once

// A 16-bit PCM WAV made in memory, each channel a function of time in seconds returning a
// sample in [-1, 1]: recordings with a known signal for the tests that ingest them.

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace calleval::testing {

inline std::string TestWav(int rate, double seconds,
                           const std::vector<std::function<double(double)>>& channels) {
  const uint32_t frames = static_cast<uint32_t>(rate * seconds);
  const uint16_t count = static_cast<uint16_t>(channels.size());
  std::string data;
  data.reserve(static_cast<size_t>(frames) * count * 2);
  for (uint32_t i = 0; i < frames; ++i) {
    for (const auto& channel : channels) {
      const int16_t v =
          static_cast<int16_t>(std::lround(channel(static_cast<double>(i) / rate) * 32767));
      data.append(reinterpret_cast<const char*>(&v), 2);
    }
  }
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
  return "RIFF" + u32(36 + static_cast<uint32_t>(data.size())) + "WAVEfmt " + u32(16) + u16(1) +
         u16(count) + u32(static_cast<uint32_t>(rate)) +
         u32(static_cast<uint32_t>(rate) * count * 2) + u16(static_cast<uint16_t>(count * 2)) +
         u16(16) + "data" + u32(static_cast<uint32_t>(data.size())) + data;
}

// A sine of `hz` at `level` of full scale between `from` and `to` seconds, silence (exact zeros)
// elsewhere.
inline std::function<double(double)> ToneBetween(double from, double to, double level,
                                                 double hz = 1000) {
  return [=](double t) {
    constexpr double kPi = 3.14159265358979323846;
    return t >= from && t < to ? level * std::sin(2 * kPi * hz * t) : 0.0;
  };
}

}  // namespace calleval::testing

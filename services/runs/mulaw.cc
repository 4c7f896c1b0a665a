#include "services/runs/mulaw.h"

#include <algorithm>

namespace calleval::runs {
namespace {

constexpr int kBias = 0x84;
constexpr int kClip = 32635;

}  // namespace

// ITU-T G.711 (the Sun reference implementation's arithmetic).
uint8_t MuLawEncode(int16_t sample) {
  int value = sample;
  const int sign = value < 0 ? 0x80 : 0;
  if (value < 0) value = -value;
  value = std::min(value, kClip) + kBias;
  int exponent = 7;
  for (int mask = 0x4000; (value & mask) == 0 && exponent > 0; mask >>= 1) --exponent;
  const int mantissa = (value >> (exponent + 3)) & 0x0F;
  return static_cast<uint8_t>(~(sign | (exponent << 4) | mantissa));
}

int16_t MuLawDecode(uint8_t byte) {
  const int u = ~byte & 0xFF;
  const int exponent = (u >> 4) & 0x07;
  const int mantissa = u & 0x0F;
  const int magnitude = (((mantissa << 3) + kBias) << exponent) - kBias;
  return static_cast<int16_t>((u & 0x80) != 0 ? -magnitude : magnitude);
}

std::string MuLawEncode(absl::Span<const int16_t> samples) {
  std::string out(samples.size(), '\0');
  for (size_t i = 0; i < samples.size(); ++i) out[i] = static_cast<char>(MuLawEncode(samples[i]));
  return out;
}

std::vector<int16_t> MuLawDecode(absl::string_view bytes) {
  std::vector<int16_t> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = MuLawDecode(static_cast<uint8_t>(bytes[i]));
  return out;
}

}  // namespace calleval::runs

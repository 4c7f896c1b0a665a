#include "common/request_id.h"

#include <cstdint>
#include <random>

#include "absl/strings/ascii.h"

namespace calleval {

bool IsUsableRequestId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (char c : id) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) continue;
    switch (c) {
      case '-':
      case '_':
      case '.':
      case ':':
      case '/':
      case '+':
      case '=':
      case '@':
        continue;
      default:
        return false;
    }
  }
  return true;
}

std::string NewRequestId() {
  thread_local std::mt19937_64 rng([] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }());
  static constexpr char kHex[] = "0123456789abcdef";
  const uint64_t a = rng();
  const uint64_t b = rng();
  std::string out(24, '0');
  for (int i = 0; i < 16; ++i) out[i] = kHex[(a >> (i * 4)) & 0xf];
  for (int i = 0; i < 8; ++i) out[16 + i] = kHex[(b >> (i * 4)) & 0xf];
  return out;
}

}  // namespace calleval
